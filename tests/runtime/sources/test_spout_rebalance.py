"""A partitioned spout's parallelism changes (issue 22, part 3), the spouts alone: the
embedded-log spout's tasks, driven by hand as the engine drives them in a rebalance
(``rebalanced`` while paused, then ``next_tuple`` again), hand their partitions over at
the committed offsets; the partition assignment covers every partition once; a
checkpoint's spout positions move with their partitions.

The multiprocess runs (log, Kafka, Redis) are in tests/runtime/test_mp_spout_rebalance.py."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime import state as _state
from runtime.model.api import Context, Spout, fixed_parallelism
from runtime.sources import LogSpout, QueueSpout
from runtime.sources._offsets import OffsetTracker, task_partitions
from runtime.testing import ListSpout

PARTITIONS, PER_PARTITION = 4, 60


@pytest.fixture
def root(events_log):
    """Topic "events": record {"p": p, "o": o} at offset o of partition p."""
    return events_log(PARTITIONS, PER_PARTITION)


def context(index: int, parallelism: int) -> Context:
    return Context("t", "logs", index + 1, index, parallelism, {}, 0, ".")


class Task:
    """One spout task: its spout, what it emitted (msg ids), and what it acked."""

    def __init__(self, root, index: int, parallelism: int) -> None:
        self.spout = LogSpout("events", root, batch_size=7, commit_interval=3600)
        self.emitted: list = []
        self.spout.emit = lambda values, msg_id=None, **_: self.emitted.append(msg_id)
        self.spout.open({}, context(index, parallelism))
        self.acked = 0

    def read(self, n: int) -> None:
        """next_tuple until ``n`` more tuples came out (or nothing comes)."""
        goal = len(self.emitted) + n
        while len(self.emitted) < goal:
            before = len(self.emitted)
            self.spout.next_tuple()
            if len(self.emitted) == before:
                return

    def ack_all_but(self, keep: int) -> list:
        """Ack what was emitted, but the last ``keep`` (in flight); returns those."""
        done = self.emitted[self.acked:len(self.emitted) - keep]
        for msg_id in done:
            self.spout.ack(msg_id)
        self.acked += len(done)
        return self.emitted[len(self.emitted) - keep:]


@pytest.mark.parametrize("count", [1, 3, 4, 7])
@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 8])
def test_every_partition_has_exactly_one_task(count, parallelism):
    owners = Counter(p for i in range(parallelism) for p in task_partitions(count, i, parallelism))
    assert owners == dict.fromkeys(range(count), 1)


def test_log_spout_2_to_4_to_1_hands_partitions_over_at_the_committed_offsets(root):
    """2 -> 4 -> 1 with tuples in flight at each switch: every record comes out, and a
    record comes out twice only if it was in flight at a switch."""
    tasks = [Task(root, i, 2) for i in range(2)]
    in_flight: list = []
    for t in tasks:
        t.read(40)
        in_flight += t.ack_all_but(5)
    # 2 -> 4: the added tasks open on the new plan (paused), then everyone switches
    tasks += [Task(root, i, 4) for i in (2, 3)]
    for i, t in enumerate(tasks):
        t.spout.rebalanced(context(i, 4), fresh=i >= 2)
    assert [t.spout.assigned for t in tasks] == [[0], [1], [], []]  # 2, 3 taken on resume
    for t in tasks:
        t.read(30)
        in_flight += t.ack_all_but(3)
    assert [t.spout.assigned for t in tasks] == [[0], [1], [2], [3]]
    for t in tasks[1:]:  # 4 -> 1: three tasks removed, task 0 takes everything
        t.spout.rebalanced(None, fresh=False)
        t.spout.close()
        assert t.spout.assigned == []
    tasks[0].spout.rebalanced(context(0, 1), fresh=False)
    for _ in range(100):
        tasks[0].read(50)
        tasks[0].ack_all_but(0)
    assert tasks[0].spout.assigned == [0, 1, 2, 3]
    got = Counter(m for t in tasks for m in t.emitted)
    assert set(got) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    twice = {m for m, n in got.items() if n > 1}
    assert twice and twice <= set(in_flight)  # the in-flight ones only, read again
    assert all(n == 2 for n in got.values() if n > 1)


def test_late_acks_of_a_partition_given_up_are_ignored_and_progress_never_goes_back(root):
    t = Task(root, 0, 1)
    t.read(20)
    late = t.ack_all_but(4)
    before = t.spout.progress()
    t.spout.rebalanced(context(0, 2), fresh=False)  # keeps 0 and 2, gives up 1 and 3
    for msg_id in late:
        t.spout.ack(msg_id)
        t.spout.fail(msg_id)
    stats = t.spout.statistics()
    assert t.spout.progress() >= before
    assert stats.unknown_acks + stats.acks >= len(late) and stats.partitions == 2


def test_a_removed_task_commits_what_it_acked_for_the_next_owner(root):
    leaving, staying = Task(root, 1, 2), Task(root, 0, 2)
    leaving.read(30)
    leaving.ack_all_but(0)
    committed = dict(leaving.spout.tracker.committed_offsets())
    leaving.spout.rebalanced(None, fresh=False)
    staying.spout.rebalanced(context(0, 1), fresh=False)
    staying.read(100)
    first = {p: min(o for q, o in staying.emitted if q == p) for p in committed}
    assert first == committed  # resumed exactly where the old owner's acks ended


def test_tracker_unassign_forgets_the_partition_and_keeps_the_progress():
    t = OffsetTracker()
    t.assign(0, 5)
    t.emitted_many(0, 5, 3)
    t.ack(0, 5)
    t.unassign(0)
    assert t.partitions() == [] and t.progress() == 1
    assert not t.ack(0, 6) and t.statistics().unknown_acks == 1


def test_which_spouts_may_change_their_parallelism():
    assert fixed_parallelism(LogSpout("events")) is None
    assert fixed_parallelism(QueueSpout("jobs")) is None
    assert "ListSpout cannot change its parallelism" in fixed_parallelism(
        ListSpout([], fields=["x"]))
    assert "Spout cannot" in fixed_parallelism(Spout())


def test_checkpointed_positions_move_with_their_partitions(tmp_path):
    """repartition: a spout's per-task positions merged, each new task given the map (it
    restores the partitions it owns now); another spout's copied unchanged."""
    store = _state.open_store("sqlite", str(tmp_path))
    old = store.next("checkpoint")
    store.save(old, "source/logs/0", {0: 10, 2: 30})
    store.save(old, "source/logs/1", {1: 20, 3: 40})
    store.save(old, "source/other/0", {0: 5})
    store.commit(old, {"epoch": 1})
    assert _state.repartition(store, {"logs": 3}) == {}
    cid = store.committed()[0]
    positions = store.load_prefix(cid, "source/")
    merged = {0: 10, 1: 20, 2: 30, 3: 40}
    assert positions == {"source/logs/0": merged, "source/logs/1": merged,
                         "source/logs/2": merged, "source/other/0": {0: 5}}
    store.close()


def test_a_restored_position_takes_the_partitions_gained_at_once(root):
    t = Task(root, 0, 2)
    t.read(10)
    t.spout.rebalanced(context(0, 1), fresh=False)
    t.spout.restore_position({0: 3, 1: 4, 2: 5, 3: 6})  # the rollback after the switch
    assert t.spout.assigned == [0, 1, 2, 3]
    assert t.spout.checkpoint_position() == {0: 3, 1: 4, 2: 5, 3: 6}


def test_a_task_that_gave_partitions_up_keeps_their_commit_for_the_next_owner(root):
    """2 -> 1 -> 2: task 1's file holds what it committed when it was removed; task 0
    later gives those partitions up and goes on committing its own. The new task 1 must
    resume where task 0 stopped, not at its predecessor's older commit in the same file."""
    t0, t1 = Task(root, 0, 2), Task(root, 1, 2)
    for t in (t0, t1):
        t.read(20)
        t.ack_all_but(0)
    t1.spout.rebalanced(None, fresh=False)  # 2 -> 1
    t0.spout.rebalanced(context(0, 1), fresh=False)
    t0.read(60)
    t0.ack_all_but(0)
    moved = {p: o for p, o in t0.spout.tracker.committed_offsets().items() if p in (1, 3)}
    again = Task(root, 1, 2)  # 1 -> 2: the new task 1 opens on the new plan
    t0.spout.rebalanced(context(0, 2), fresh=False)
    again.spout.rebalanced(context(1, 2), fresh=True)
    t0.read(20)
    t0.ack_all_but(0)
    t0.spout.commit()  # its own partitions only from now on
    again.read(500)
    first = {p: min(o for q, o in again.emitted if q == p) for p in moved}
    assert first == moved and all(o < PER_PARTITION for o in moved.values())
