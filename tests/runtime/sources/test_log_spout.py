"""The embedded-log spout: alone with a recording emit, then in the in-memory twin with an
acker, over a log of a few hundred JSON records in 3 partitions read by 2 spout tasks."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from runtime import Bolt, Topology
from runtime.model.api import Context
from runtime.sources import EmbeddedLog, LogSpout
from runtime.sources._log_spout import read_checkpoints
from runtime.testing import InMemoryCluster, ListSink

PARTITIONS, PER_PARTITION = 3, 100


@pytest.fixture
def root(events_log):
    """Topic "events": record {"p": p, "o": o} at offset o of partition p."""
    return events_log(PARTITIONS, PER_PARTITION)


def everything() -> set[tuple[int, int]]:
    return {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}


def keys(values_list) -> list[tuple[int, int]]:
    return [(v["p"], v["o"]) for (v,) in values_list]


def opened(spout: LogSpout, task_index: int = 0, parallelism: int = 1,
           config: dict | None = None) -> list:
    """Open `spout` as task `task_index` with a recording emit; returns the record list."""
    emitted: list = []
    spout.emit = lambda values, msg_id=None, **_: emitted.append((values, msg_id))
    spout.open(config or {}, Context("t", "logs", task_index + 1, task_index, parallelism, {},
                                     0, "."))
    return emitted


def drain(spout: LogSpout, emitted: list) -> list:
    """next_tuple until a call emits nothing; returns what was emitted meanwhile."""
    start = len(emitted)
    while True:
        before = len(emitted)
        spout.next_tuple()
        if len(emitted) == before:
            return emitted[start:]


# -- the spout alone -------------------------------------------------------------------------

def test_tasks_split_the_partitions_and_batches_are_bounded(root, tmp_path):
    spouts = [LogSpout("events", root, checkpoint_dir=tmp_path / "ck", batch_size=7)
              for _ in range(2)]
    records = [opened(s, i, 2) for i, s in enumerate(spouts)]
    assert [s.assigned for s in spouts] == [[0, 2], [1]]
    spouts[0].next_tuple()
    assert len(records[0]) == 7
    got = drain(spouts[0], records[0]) + records[0][:7]
    assert {m for _, m in got} == {(p, o) for p in (0, 2) for o in range(PER_PARTITION)}
    assert all(values == [{"p": p, "o": o}] for values, (p, o) in got)
    assert drain(spouts[1], records[1])[-1][1] == (1, PER_PARTITION - 1)


def test_a_restarted_spout_rereads_only_offsets_from_the_committed_ones(root, tmp_path):
    """Crash without committing the last acks: 0 lost, duplicates <= max_uncommitted."""
    held = {(p, o) for p in range(PARTITIONS) for o in (10 + p, 30)}
    window = 25
    first = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", max_uncommitted=window,
                     commit_interval=0)
    out = opened(first)
    acked = set()
    while batch := drain(first, out):
        for _, msg_id in batch:
            if msg_id not in held:
                first.ack(msg_id)
                acked.add(msg_id)
    committed = read_checkpoints(tmp_path / "ck", "events")
    assert committed == {p: 10 + p for p in range(PARTITIONS)}
    first.commit_interval = float("inf")  # the last acks are never committed: a crash
    for msg_id in sorted(held):
        first.ack(msg_id)
    assert read_checkpoints(tmp_path / "ck", "events") == committed

    second = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", max_uncommitted=window,
                      commit_interval=0)
    out2 = opened(second)
    reread = set()
    while batch := drain(second, out2):
        for _, msg_id in batch:
            second.ack(msg_id)
            reread.add(msg_id)
    assert all(o >= committed[p] for p, o in reread)
    assert acked | held | reread == everything()  # nothing lost
    dups = Counter(p for p, o in reread & (acked | held))
    assert all(n <= window for n in dups.values()) and sum(dups.values()) > 0
    second.close()
    assert read_checkpoints(tmp_path / "ck", "events") == dict.fromkeys(
        range(PARTITIONS), PER_PARTITION)


def test_failed_offsets_are_replayed_before_new_records(root, tmp_path):
    spout = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", batch_size=5,
                     retry_delay=0)
    out = opened(spout)
    spout.next_tuple()
    first = [m for _, m in out]
    spout.fail(first[3])
    spout.fail(first[1])
    spout.next_tuple()
    assert [m for _, m in out[5:7]] == [first[1], first[3]]  # lowest first, then new ones
    assert out[5][0] == [{"p": first[1][0], "o": first[1][1]}]
    assert {m for _, m in out[7:]}.isdisjoint(first)
    s = spout.statistics()
    assert (s.fails, s.replayed, s.emitted) == (2, 2, 8)


def test_a_malformed_record_is_dead_lettered_with_a_clear_error(tmp_path):
    with EmbeddedLog(tmp_path / "log") as log:
        log.create_topic("t", 1)
        log.append_many("t", [b'{"a": 1, "b": 2}', b"not json", b"[3, 4]", b"5"])
    spout = LogSpout("t", tmp_path / "log", fields=("a", "b"), commit_interval=0)
    out = opened(spout)
    spout.next_tuple()
    assert out == [([1, 2], (0, 0)), ([3, 4], (0, 2))]
    assert spout.statistics().dead_lettered == 2
    for _, m in out:
        spout.ack(m)
    assert spout.tracker.committed(0) == 4 and spout.progress() == 4
    with EmbeddedLog(tmp_path / "log") as log:
        letters = [json.loads(b) for _, b in log.read("t.dlq", 0, 0)]
    assert [(d["offset"], d["payload"]) for d in letters] == [(1, "not json"), (3, "5")]
    assert letters[0]["error"].startswith("cannot decode: invalid JSON")
    assert "must be a JSON object or an array of 2 items, not int" in letters[1]["error"]


def test_a_message_failing_max_retries_times_is_dead_lettered(root, tmp_path):
    spout = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", batch_size=1,
                     max_retries=3, commit_interval=0, retry_delay=0)
    out = opened(spout, 0, 3)  # partition 0 only
    spout.next_tuple()
    for _ in range(3):
        assert out[-1][1] == (0, 0)
        spout.fail((0, 0))
        spout.next_tuple()
    assert out[-1][1] == (0, 1) and len(out) == 4  # 3 attempts of offset 0, then offset 1
    spout.ack((0, 1))
    assert spout.tracker.committed(0) == 2
    s = spout.statistics()
    assert (s.dead_lettered, s.fails, s.replayed) == (1, 2, 2)
    with EmbeddedLog(root) as log:
        (_, letter), = log.read_json("events.dlq", 0, 0)
    assert letter["error"] == "failed 3 times (a bolt failed it or it timed out)"
    assert json.loads(letter["payload"]) == {"p": 0, "o": 0} and letter["failures"] == 3


def test_double_and_unknown_acks_are_ignored_and_counted(root, tmp_path):
    spout = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", batch_size=3)
    out = opened(spout)
    spout.next_tuple()
    (p, o) = first = out[0][1]
    spout.ack(first)
    spout.ack(first)  # double
    spout.ack((p, 77))  # never emitted
    spout.ack((9, 0))  # no such partition
    spout.fail(first)  # already done
    s = spout.statistics()
    assert (s.acks, s.duplicate_acks, s.unknown_acks, s.ignored_fails) == (1, 1, 2, 1)
    assert spout.progress() == 1


def test_bytes_decode_and_the_default_checkpoint_dir(root):
    spout = LogSpout("events", root, decode="bytes", commit_interval=0)
    out = opened(spout)
    drain(spout, out)
    assert ([b'{"p": 0, "o": 0}'], (0, 0)) in out
    spout.ack((0, 0))
    spout.close()
    assert read_checkpoints(root / ".consumers" / "t.logs" / "events", "events") == {
        0: 1, 1: 0, 2: 0}


def test_bad_arguments_are_rejected_when_defined():
    with pytest.raises(ValueError, match="decode"):
        LogSpout("t", decode="xml")
    with pytest.raises(ValueError, match="max_uncommitted"):
        LogSpout("t", max_uncommitted=0)
    with pytest.raises(ValueError, match=r"LogSpout\('t'\): max_retries"):
        LogSpout("t", max_retries=0)


# -- in the in-memory twin -------------------------------------------------------------------

class FailOnce(Bolt):
    """Fails the first delivery of every record with o % 10 == 3; passes the rest on."""

    outputs = ["value"]

    def prepare(self, config, context):
        self.failed: set = set()

    def process(self, tup):
        key = (tup[0]["p"], tup[0]["o"])
        if key[1] % 10 == 3 and key not in self.failed:
            self.failed.add(key)
            self.fail(tup)
            return
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


class HoldSome(Bolt):
    """Acks every record except those with o in `hold`, which it keeps forever."""

    outputs = ["value"]

    def __init__(self, hold) -> None:
        self.hold = set(hold)

    def process(self, tup):
        if tup[0]["o"] not in self.hold:
            self.emit(list(tup.values), anchors=[tup])
            self.ack(tup)


def topology(root, ck, middle, **spout_options) -> Topology:
    topo = Topology("logs")
    topo.spout("logs", LogSpout("events", root, checkpoint_dir=ck, **spout_options),
               parallelism=2)
    topo.bolt("mid", middle).shuffle_grouping("logs")
    topo.bolt("sink", ListSink).shuffle_grouping("mid")
    return topo


def spouts(cluster) -> list[LogSpout]:
    return [cluster.user_object(t) for t in cluster.plan.component_tasks()["logs"]]


def test_every_record_reaches_the_sink_and_the_checkpoint_reaches_the_end(root, tmp_path):
    ck = tmp_path / "ck"
    with InMemoryCluster(topology(root, ck, FailOnce, commit_interval=0, retry_delay=0),
                         ackers=1) as cluster:  # retry at once: the twin goes idle, not waits
        cluster.run_until_idle()
        assert sorted(keys(cluster.sink("sink"))) == sorted(everything())
        assert read_checkpoints(ck, "events") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        stats = [s.statistics() for s in spouts(cluster)]
        replayed = PARTITIONS * PER_PARTITION // 10
        assert sum(s.fails for s in stats) == sum(s.replayed for s in stats) == replayed
        assert sum(s.progress for s in stats) == PARTITIONS * PER_PARTITION
        assert sum(s.progress() for s in spouts(cluster)) == PARTITIONS * PER_PARTITION
        assert all(s.in_flight == s.replay_queued == 0 for s in stats)


def test_a_restarted_topology_resumes_from_the_checkpoint(root, tmp_path):
    ck, window = tmp_path / "ck", 40
    topo = topology(root, ck, HoldSome([5, 42]), max_uncommitted=window, commit_interval=3600)
    with InMemoryCluster(topo, ackers=1) as cluster:
        cluster.run_until_idle()
        before = set(keys(cluster.sink("sink")))
        # the interval has not passed, and the acks moved the full windows on by 5 only,
        # under a quarter of them: nothing is committed early either
        assert read_checkpoints(ck, "events") == {}
    committed = read_checkpoints(ck, "events")  # written by close()
    assert committed == dict.fromkeys(range(PARTITIONS), 5)

    with InMemoryCluster(topology(root, ck, HoldSome([])), ackers=1) as cluster:
        cluster.run_until_idle()
        after = keys(cluster.sink("sink"))
        assert Counter(after).most_common(1)[0][1] == 1
        assert all(o >= committed[p] for p, o in after)
        assert before | set(after) == everything()  # nothing lost
        dups = Counter(p for p, _ in set(after) & before)
        assert all(n <= window for n in dups.values())
    assert read_checkpoints(ck, "events") == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


def test_the_window_counts_from_the_stored_commit_so_a_crash_rereads_at_most_it(root, tmp_path):
    """With a commit interval that never passes, reading on past a full window commits first:
    the stored checkpoint is never more than max_uncommitted behind what was read."""
    spout = LogSpout("events", root, checkpoint_dir=tmp_path / "ck", max_uncommitted=10,
                     commit_interval=float("inf"), batch_size=4)
    out = opened(spout, 0, 3)  # partition 0 only
    for _ in range(30):
        spout.next_tuple()
        for _, msg_id in out:
            spout.ack(msg_id)
        stored = read_checkpoints(tmp_path / "ck", "events").get(0, 0)
        assert spout.tracker.next_offset(0) - stored <= 10
    assert spout.tracker.next_offset(0) >= 100  # it kept reading


def test_at_most_once_emits_untracked_and_commits_each_batch(tmp_path):
    """ackers=0: no msg_id (no ack callback per tuple); the batch counts as acked at once,
    so the committed offset follows the reads, and a malformed record is still
    dead-lettered."""
    with EmbeddedLog(tmp_path / "log") as log:
        log.create_topic("t", 1)
        log.append_many("t", [b'"a"', b"not json", b'"c"', b'"d"'])
    spout = LogSpout("t", tmp_path / "log", batch_size=3, commit_interval=0)
    out = opened(spout, config={"ackers": 0})
    spout.next_tuple()
    assert out == [(["a"], None), (["c"], None)]
    assert spout.tracker.committed(0) == 3 and spout.statistics().dead_lettered == 1
    spout.next_tuple()
    assert out[-1] == (["d"], None) and spout.progress() == 4
    with EmbeddedLog(tmp_path / "log") as log:
        (letter,) = [json.loads(b) for _, b in log.read("t.dlq", 0, 0)]
    assert (letter["offset"], letter["payload"]) == (1, "not json")
