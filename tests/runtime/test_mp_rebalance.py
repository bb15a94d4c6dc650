"""Live rebalance with real processes (issue 22): a stateful word count from the embedded
log, checkpointed, rebalanced in place 2 -> 8 -> 3 counter tasks while it runs, must commit
exactly a batch count of the log; a stateless pipeline under at least once, rebalanced in
place 2 -> 4 -> 1, loses nothing; the guard refuses what cannot be done, naming the
component; a new number of containers restarts them and still counts exactly.

Waits poll the store, the sinks and the master's statistics with deadlines."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter

import cloudpickle
import pytest

from runtime import Topology
from runtime import state as _state
from runtime.processes.client import RunningTopology
from runtime.sources import EmbeddedLog
from runtime.testing import (
    ListSink,
    PacedLogSpout,
    PassOn,
    StatefulWordCount,
    read_sink,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORDS = [f"w{(i * 7) % 101}" for i in range(20_000)]
RATE = 1500  # records a second per spout task


def fill_log(root, topic: str, records: list[str], create: bool = True) -> None:
    """Append ``records`` to the log (a third before the submit, a third after each
    rebalance: tuples flow after every switch, however long the machine takes to start
    the added tasks)."""
    with EmbeddedLog(root) as log:
        if create:
            log.create_topic(topic, 4)
        for i in range(0, len(records), 1000):
            log.append_many(topic, [f'"{w}"'.encode() for w in records[i:i + 1000]],
                            partition=(i // 1000) % 4)


def thirds(records: list[str]) -> list[list[str]]:
    n = len(records) // 3
    return [records[:n], records[n:2 * n], records[2 * n:]]


def three_steps(root, topic: str, last: str, bolt, **sizes) -> Topology:
    """The log's ``topic`` (2 spout tasks) -> ``mid`` (2 tasks, shuffled) -> ``last`` (2
    tasks, fields grouped on ``word``; ``sizes``: its ``max_parallelism``, say)."""
    topo = Topology(f"rebal-{last}")
    topo.spout(topic, PacedLogSpout(topic, root=str(root), fields=["word"], batch_size=50,
                                    rate=RATE), parallelism=2)
    topo.bolt("mid", PassOn, parallelism=2).shuffle_grouping(topic)
    topo.bolt(last, bolt, parallelism=2, **sizes).fields_grouping("mid", ["word"])
    return topo


def word_count(root) -> Topology:
    return three_steps(root, "words", "count", StatefulWordCount)


def tasks_of(running, component: str) -> list[int]:
    return [s.task for s in running.statistics()
            if s.component == component and s.state == "running"]


def counted(running) -> int:
    return sum(running.state("count").values())


def per_task_keys(running) -> list[set]:
    """The keys each counter task holds in the committed checkpoint, by task index."""
    with contextlib.closing(running._state_store()) as store:
        cid = store.committed()[0]
        saved = store.load_prefix(cid, "state/count/")
    return [{k for k, _ in saved[name] or ()}
            for name in sorted(saved, key=lambda name: int(name.rsplit("/", 1)[1]))]


def test_stateful_count_rebalanced_2_8_3_commits_exactly_a_batch_count(tmp_path):
    first, second, third = thirds(WORDS)
    fill_log(tmp_path, "words", first)
    with word_count(tmp_path).submit(checkpoint_interval=0.3) as running:
        running.wait_active(60)
        wait_for(lambda: counted(running) > 0, 60, "a first committed count")
        pids = running.status()["containers"]
        grown = running.rebalance({"count": 8})
        fill_log(tmp_path, "words", second, create=False)
        assert len(running.plan().component_tasks()["count"]) == 8
        assert len(tasks_of(running, "count")) == 8
        wait_for(lambda: counted(running) > len(first), 60, "counts on eight tasks")
        shrunk = running.rebalance({"count": 3})
        fill_log(tmp_path, "words", third, create=False)
        assert len(tasks_of(running, "count")) == 3
        assert running.status()["containers"] == pids  # in place: no container restarted
        wait_for(lambda: counted(running) >= len(WORDS), 180, "the whole log to be committed")
        state = running.state("count")
        keys = per_task_keys(running)
        events = [e for e in running.events() if e["kind"] == "rebalanced"]
    print(f"\n[rebalance] 2->8: {grown}\n[rebalance] 8->3: {shrunk}")
    assert state == dict(Counter(WORDS))
    assert len(keys) == 3 and sum(map(len, keys)) == len(set().union(*keys)) == 101
    assert [e["parallelism"] for e in events] == [{"count": 8}, {"count": 3}]
    assert grown["keys_moved"]["count"] > 0 and grown["in_place"] and shrunk["in_place"]
    assert len(grown["tasks_added"]) == 6 and len(shrunk["tasks_removed"]) == 5


def test_a_non_default_maximum_splits_state_by_its_own_key_groups_and_refuses_above_it(
        tmp_path):
    """``max_parallelism=6``: six key groups. Rebalanced 2 -> 5 (groups dealt 2, 1, 1, 1,
    1) while it runs; 7 is refused naming the component and its maximum; the committed
    counts equal a batch count, and each task holds the keys of its own key groups."""
    from runtime.groupings import field_hash, key_task

    first, second, third = thirds(WORDS)
    fill_log(tmp_path, "words", first)
    topo = three_steps(tmp_path, "words", "count", StatefulWordCount, max_parallelism=6)
    with topo.submit(checkpoint_interval=0.3) as running:
        running.wait_active(60)
        wait_for(lambda: counted(running) > 0, 60, "a first committed count")
        grown = running.rebalance({"count": 5})
        fill_log(tmp_path, "words", second, create=False)
        with pytest.raises(ValueError, match="component 'count': parallelism 7 is above its "
                                             "maximum parallelism 6"):
            running.rebalance({"count": 7})
        assert len(tasks_of(running, "count")) == 5
        fill_log(tmp_path, "words", third, create=False)
        wait_for(lambda: counted(running) >= len(WORDS), 180, "the whole log to be committed")
        state = running.state("count")
        keys = per_task_keys(running)
    print(f"\n[rebalance] max_parallelism=6, 2->5: {grown}")
    assert state == dict(Counter(WORDS))
    assert len(keys) == 5 and sum(map(len, keys)) == len(set().union(*keys)) == 101
    assert all(key_task(field_hash(k), 5, 6) == i for i, ks in enumerate(keys) for k in ks)
    assert grown["keys_moved"]["count"] > 0 and len(grown["tasks_added"]) == 3


def pipeline(root) -> Topology:
    return three_steps(root, "ids", "sink", ListSink)


def test_stateless_pipeline_under_at_least_once_rebalanced_2_4_1_loses_nothing(tmp_path):
    ids = [f"r{i}" for i in range(15_000)]
    first, second, third = thirds(ids)
    pending = 200  # max_spout_pending per spout task: the most in flight at a pause
    fill_log(tmp_path, "ids", first)
    with pipeline(tmp_path).submit(ackers=1, max_spout_pending=pending) as running:
        running.wait_active(60)
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) > 500, 60, "first tuples")
        pids = running.status()["containers"]
        up = running.rebalance({"mid": 4, "sink": 4})
        fill_log(tmp_path, "ids", second, create=False)
        wait_for(lambda: {v[0] for v in read_sink(running.run_dir, "sink")} & set(second), 60,
                 "tuples through four tasks")
        down = running.rebalance({"mid": 1, "sink": 1})
        fill_log(tmp_path, "ids", third, create=False)
        assert running.status()["containers"] == pids
        assert len(tasks_of(running, "sink")) == len(tasks_of(running, "mid")) == 1
        wait_for(lambda: {v[0] for v in read_sink(running.run_dir, "sink")} >= set(ids), 180,
                 "every id at the sink")
        got = Counter(v[0] for v in read_sink(running.run_dir, "sink"))
    duplicates = sum(n - 1 for n in got.values())
    print(f"\n[rebalance] 2->4: {up}\n[rebalance] 4->1: {down}\nduplicates: {duplicates}")
    assert set(got) == set(ids)
    assert duplicates <= 2 * 2 * pending  # two rebalances, two spout tasks
    assert up["in_place"] and down["in_place"]


def test_guard_refuses_what_cannot_be_done_naming_the_component(tmp_path):
    fill_log(tmp_path, "ids", [f"r{i}" for i in range(3000)])
    with pipeline(tmp_path).submit(ackers=1, max_spout_pending=100) as running:
        running.wait_active(60)
        for request, words in [({"nope": 2}, "'nope': no such component"),
                               ({"ids": 129}, "'ids': parallelism 129 is above its maximum"),
                               ({"mid": 0}, "'mid': parallelism must be an int >= 1"),
                               ({"mid": 129}, "'mid': parallelism 129 is above its maximum "
                                              "parallelism 128"),
                               ({"__acker": 2}, "'__acker': a system component")]:
            with pytest.raises(ValueError, match=words.replace("(", r"\(")):
                running.rebalance(request)
        answers: list = []
        first = threading.Thread(target=lambda: answers.append(running.rebalance({"mid": 3})))
        with second_handle(running) as other:  # the first handle waits for its answer
            first.start()
            # it lasts over a second (the drain waits for reports after the pause), so the
            # question below arrives while it runs
            wait_for(lambda: other.status()["rebalancing"], 30, "the first rebalance to start")
            with pytest.raises(ValueError, match="another rebalance is running"):
                other.rebalance({"mid": 1})
            first.join(120)
        assert answers and answers[0]["parallelism"] == {"mid": 3}
        assert len(running.plan().component_tasks()["mid"]) == 3
        # a new number of containers restarts them (the handle keeps working)
        moved = running.rebalance({"mid": 2}, containers=2)
        assert not moved["in_place"] and running.plan().containers == 2
        assert len(running.status()["containers"]) == 2
        assert len(tasks_of(running, "mid")) == 2
        assert {s.container for s in running.statistics()} == {0, 1}


@contextlib.contextmanager
def second_handle(running):
    """Another client of the same master (a second notebook's handle, say); leaving closes
    only its socket."""
    other = RunningTopology(running.name, running.plan, running.run_dir, running._secret,
                            running.endpoint, running._link.process, running.submitted)
    try:
        yield other
    finally:
        other._link.sock.close(linger=0)
        other._link.zctx.term()


def test_repartition_splits_committed_state_by_key_group(tmp_path):
    store = _state.open_store("sqlite", str(tmp_path))
    pairs = [[f"k{i}", i] for i in range(500)]
    old = store.next("checkpoint")
    store.save(old, "state/c/0", pairs[:250])
    store.save(old, "state/c/1", pairs[250:])
    store.save(old, "source/s/0", {"0": 7})
    store.commit(old, {"epoch": 1})
    moved = _state.repartition(store, {"c": 5})
    cid = store.committed()[0]
    parts = store.load_prefix(cid, "state/c/")
    assert cid > old and sorted(parts) == [f"state/c/{i}" for i in range(5)]
    assert sorted(p for ps in parts.values() for p in ps) == sorted(pairs)
    assert store.load(cid, "source/s/0") == {"0": 7} and 0 < moved["c"] < 500
    store.close()
