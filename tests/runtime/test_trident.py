"""Trident-style persistent aggregation: the transactional core alone, the backing maps,
the batch spouts alone, and whole topologies in the in-memory twin (with an acker, crashes
injected into the state, and replays by timeout). Multiprocess runs: test_trident_mp.py."""

from __future__ import annotations

import json
import multiprocessing
import pickle
from collections import Counter

import pytest

from runtime import (
    BatchLogSpout,
    Count,
    ListBatchSpout,
    MemoryMap,
    RedisMap,
    ReducerAggregator,
    SQLiteMap,
    Sum,
    Topology,
    TopologyError,
)
from runtime.sources import EmbeddedLog
from runtime.testing import InMemoryCluster, ListSink, ListSpout, open_routed
from runtime.trident._agg import BatchAggregation
from runtime.trident._spout import BatchLedger
from runtime.trident._state import TxValue

# -- the transactional core ------------------------------------------------------------------


def feed(agg: BatchAggregation, attempt: int, words) -> None:
    for w in words:
        agg.add(attempt, (w,), None)


def test_a_batch_is_combined_then_written_with_its_txid():
    state = MemoryMap()
    agg = BatchAggregation(Count(), state)
    feed(agg, 11, "abcab")
    end = agg.end(txid=1, attempt=11, expected=5)
    assert end.ok and sorted(end.updated) == [(("a",), 2), (("b",), 2), (("c",), 1)]
    assert state.transactions() == {("a",): 1, ("b",): 1, ("c",): 1}
    feed(agg, 12, "ad")
    assert agg.end(txid=2, attempt=12, expected=2).ok
    assert state.snapshot() == {"a": 3, "b": 2, "c": 1, "d": 1}
    assert state.transactions()[("a",)] == 2 and state.transactions()[("b",)] == 1


def test_a_replay_of_a_committed_batch_is_skipped():
    state = MemoryMap()
    agg = BatchAggregation(Count(), state)
    feed(agg, 11, "aab")
    agg.end(1, 11, 3)
    feed(agg, 12, "aab")  # the same batch again, under a new attempt
    end = agg.end(1, 12, 3)
    assert end.ok and end.updated == [] and end.skipped == 2
    assert state.snapshot() == {"a": 2, "b": 1}


def test_partial_commit_across_tasks_then_replay_is_exact():
    """Task A commits batch 1; task B loses a tuple (restart), so its marker fails; the
    replay is applied by B and skipped by A: every count is exact."""
    state = MemoryMap()
    a, b = BatchAggregation(Count(), state), BatchAggregation(Count(), state)
    feed(a, 5, "xx")
    feed(b, 5, "y")  # B should have had two y's; one was lost
    assert a.end(1, 5, expected=2).ok
    lost = b.end(1, 5, expected=2)
    assert not lost.ok and "1 of 2" in lost.reason
    assert state.snapshot() == {"x": 2}
    feed(a, 6, "xx")
    feed(b, 6, "yy")
    assert a.end(1, 6, 2).ok and b.end(1, 6, 2).ok
    assert state.snapshot() == {"x": 2, "y": 2}


def test_a_new_attempt_drops_the_old_partial_and_late_tuples_are_ignored():
    state = MemoryMap()
    agg = BatchAggregation(Count(), state)
    feed(agg, 1, "aa")
    feed(agg, 2, "aaa")  # attempt 2 began: attempt 1's partial is gone
    assert not agg.end(1, 1, expected=2).ok  # its marker finds nothing of attempt 1
    feed(agg, 1, "a")  # a straggler of attempt 1, which is over: ignored
    assert agg.end(1, 2, expected=3).ok
    assert state.snapshot() == {"a": 3} and agg.statistics()["ignored"] == 1


def test_a_stale_batch_never_overwrites_a_newer_one():
    state = MemoryMap()
    state.multi_put([("a",)], [TxValue(5, 10)])
    agg = BatchAggregation(Count(), state)
    feed(agg, 9, "a")
    assert agg.end(txid=4, attempt=9, expected=1).skipped == 1
    assert state.snapshot() == {"a": 10}


def test_one_multi_get_and_one_multi_put_per_batch():
    state = MemoryMap()
    agg = BatchAggregation(Count(), state)
    for txid in range(1, 6):
        feed(agg, 100 + txid, "abcdefg"[:txid])
        agg.end(txid, 100 + txid, txid)
    feed(agg, 200, "abcde")  # batch 5 replayed: read once, nothing to write
    agg.end(5, 200, 5)
    agg.end(6, 201, 0)  # no tuples here: no call at all
    stats = state.statistics()
    assert (stats.multi_gets, stats.multi_puts) == (6, 5)
    assert stats.puts_by_txid == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    assert stats.keys_written == 1 + 2 + 3 + 4 + 5


class Presence(ReducerAggregator):
    """The minutes a room was occupied, as a sorted list (seed 004, in miniature)."""

    def init(self):
        return []

    def reduce(self, value, tup):
        return sorted(set(value) | set(range(tup[1], tup[2])))


def test_a_reducer_folds_the_batch_into_the_stored_value():
    state = MemoryMap()
    agg = BatchAggregation(Presence(), state)
    agg.add(1, ("hall",), ["hall", 0, 3])
    agg.add(1, ("hall",), ["hall", 2, 5])
    agg.end(1, 1, 2)
    agg.add(2, ("hall",), ["hall", 8, 9])
    agg.end(2, 2, 1)
    assert state.query(["hall"]) == [[0, 1, 2, 3, 4, 8]]


def test_sum_and_a_bad_aggregator():
    state = MemoryMap()
    agg = BatchAggregation(Sum("n"), state)
    agg.add(1, ("k",), {"n": 4})
    agg.add(1, ("k",), {"n": 5})
    agg.end(1, 1, 2)
    assert state.snapshot() == {"k": 9}
    with pytest.raises(TypeError, match="CombinerAggregator"):
        BatchAggregation(lambda a, b: a + b, state)


# -- the backing maps --------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backing(request, tmp_path):
    if request.param == "memory":
        return MemoryMap()
    if request.param == "sqlite":
        return SQLiteMap(tmp_path / "state.db", "counts")
    return RedisMap(request.getfixturevalue("redis_url"), "test:counts")


def test_maps_get_what_was_put_and_none_for_the_rest(backing):
    keys = [("a",), ("b", 2), (None,)]
    backing.multi_put(keys, [TxValue(1, 3), TxValue(1, [1, 2]), TxValue(2, {"x": 1})])
    got = backing.multi_get([("b", 2), ("zz",), ("a",), (None,)])
    assert got == [TxValue(1, [1, 2]), None, TxValue(1, 3), TxValue(2, {"x": 1})]
    assert backing.query(["a", ("b", 2), "nope"]) == [3, [1, 2], None]
    assert backing.snapshot() == {"a": 3, ("b", 2): [1, 2], None: {"x": 1}}
    backing.multi_put([("a",)], [TxValue(3, 4)])
    assert backing.multi_get([("a",)]) == [TxValue(3, 4)]
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        backing.multi_put([("a",), ("b",)], [TxValue(1, 1)])


def test_a_map_travels_without_its_connection_and_reads_the_same_data(backing):
    backing.multi_put([("a",)], [TxValue(1, 7)])
    copy = pickle.loads(pickle.dumps(backing))
    assert copy.query(["a"]) == [7]
    copy.multi_put([("b",)], [TxValue(1, 8)])
    assert backing.snapshot() == {"a": 7, "b": 8}


def _first_use(path, barrier, results) -> None:
    state = SQLiteMap(path)
    barrier.wait()  # every process opens the fresh database at the same moment
    try:
        results.put("ok" if state.multi_get(["k"]) == [None] else "a value from nowhere")
    except Exception as exc:  # reported to the test, not lost in a child's stderr
        results.put(repr(exc))


@pytest.mark.parametrize("trial", range(10))
def test_processes_opening_a_fresh_sqlite_map_at_once_all_get_in(tmp_path, trial):
    """The tasks of one aggregation open the database together on their first batch; its
    switch to WAL must not fail any of them with "database is locked" (before the set-up
    retried, it failed 12 of 30 such trials outside pytest, and 1 to 5 of these 10)."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_first_use, args=(tmp_path / "s.db", barrier, results))
             for _ in range(8)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(10)
    assert outcomes == ["ok"] * 8


def test_sqlite_multi_put_is_all_or_nothing(tmp_path):
    state = SQLiteMap(tmp_path / "s.db")
    state.multi_put([("a",)], [TxValue(1, 1)])
    with pytest.raises(TypeError):  # the second value cannot be stored: nothing is
        state.multi_put([("a",), ("b",)], [TxValue(2, 2), TxValue(2, object())])
    assert state.snapshot() == {"a": 1}
    with pytest.raises(ValueError, match="table"):
        SQLiteMap(tmp_path / "s.db", "no; drop table")


# -- the spouts alone ----------------------------------------------------------------------



def batches(emitted):
    """{msg_id of each marker: the data tuples its task got}, from a recording."""
    got, out = {}, {}
    for task, values, msg_id in emitted:
        if msg_id is None:
            got.setdefault(task, []).append(values[:-1])
        else:
            txid, attempt, n = values[-1]
            out[msg_id] = got.pop(task)
            assert len(out[msg_id]) == n and msg_id == (txid, attempt, task)
    return out


def test_a_restarted_spout_replays_its_unfinished_batch_identically(tmp_path):
    words = [[w] for w in "abcdefghij"]
    spout = ListBatchSpout(words, fields=["word"], batch_size=4).with_route("count", ["word"])
    first = open_routed(spout, tmp_path)
    spout.next_tuple()
    spout.next_tuple()  # batch 1 is in flight: nothing more
    one = batches(first)
    assert {m[0] for m in one} == {1} and sum(map(len, one.values())) == 4
    for msg_id in one:
        spout.ack(msg_id)
    spout.next_tuple()
    two = batches(first[len(one) + 4:])
    spout.close()  # the spout "crashes" with batch 2 unfinished
    again = ListBatchSpout(words, fields=["word"], batch_size=4).with_route("count", ["word"])
    emitted = open_routed(again, tmp_path)
    again.next_tuple()
    replayed = batches(emitted)
    assert {m[0] for m in replayed} == {2}
    assert {m[2]: v for m, v in replayed.items()} == {m[2]: v for m, v in two.items()}
    assert {m[1] for m in replayed}.isdisjoint({m[1] for m in two})  # a new attempt
    for msg_id in replayed:
        again.ack(msg_id)
    mark = len(emitted)
    again.next_tuple()
    assert {m[0] for m in batches(emitted[mark:])} == {3}
    assert again.statistics()["completed_txid"] == 2


def test_a_failed_marker_makes_the_spout_emit_the_batch_again(tmp_path):
    spout = ListBatchSpout([[w] for w in "abcabc"], fields=["word"], batch_size=6)
    spout = spout.with_route("count", ["word"])
    emitted = open_routed(spout, tmp_path)
    spout.next_tuple()
    first = batches(emitted)
    spout.fail(next(iter(first)))
    for msg_id in first:
        spout.ack(msg_id)  # outcomes of the failed attempt no longer count
    assert spout.statistics()["completed_txid"] == 0
    mark = len(emitted)
    spout.next_tuple()
    second = batches(emitted[mark:])
    assert {m[0] for m in second} == {1}
    assert sorted(map(sorted, second.values())) == sorted(map(sorted, first.values()))


def test_the_ledger_survives_reopening(tmp_path):
    ledger = BatchLedger(tmp_path / "l.sqlite")
    ledger.record(1, [0, 5])
    ledger.record(2, [5, 9])
    ledger.complete(1)
    ledger.close()
    again = BatchLedger(tmp_path / "l.sqlite")
    assert (again.last(), again.completed(), again.meta(1)) == ((2, [5, 9]), 1, [0, 5])


@pytest.fixture
def log_root(tmp_path):
    with EmbeddedLog(tmp_path / "log") as log:
        log.create_topic("sentences", 2)
        for i in range(30):
            log.append("sentences", json.dumps(f"w{i % 4} w{i % 5}").encode(),
                       partition=i % 2)
        log.append("sentences", b"{not json", partition=0)
    return tmp_path / "log"


def test_the_log_spout_records_ranges_and_skips_bad_records_the_same_way(log_root, tmp_path):
    def spout():
        return BatchLogSpout("sentences", log_root, fields=["word"], batch_size=8,
                             each=lambda v: [[w] for w in v[0].split()],
                             ledger=tmp_path / "ledger.sqlite").with_route("count", ["word"])

    s = spout()
    emitted = open_routed(s, tmp_path)
    words = Counter()
    while True:
        before = len(emitted)
        s.next_tuple()
        done = batches(emitted[before:])
        if not done:
            break
        for msg_id, tuples in done.items():
            words.update(w for (w,) in tuples)
            s.ack(msg_id)
    truth = Counter(w for i in range(30) for w in (f"w{i % 4}", f"w{i % 5}"))
    assert words == truth and s.skipped == 1
    meta = s.ledger.meta(1)
    assert meta == [[0, 0, 4], [1, 0, 4]]  # an even share of 8 over 2 partitions
    assert s.ledger.completed() == s.ledger.last()[0]
    s.close()
    again = spout()  # resumes after the last completed batch: nothing new
    emitted = open_routed(again, tmp_path)
    again.next_tuple()
    assert emitted == []


# -- definition-time checks ----------------------------------------------------------------


def test_persistent_aggregate_checks_what_it_is_given(tmp_path):
    topo = Topology("checks")
    topo.spout("words", ListBatchSpout([["a", 1]], fields=["word", "n"]))
    topo.spout("plain", ListSpoutLike)
    state = MemoryMap()
    with pytest.raises(TopologyError, match="transactional batch spout"):
        topo.persistent_aggregate("c", "plain", ["word"], Count(), state)
    with pytest.raises(TopologyError, match="fields are"):
        topo.persistent_aggregate("c", "words", ["wrod"], Count(), state)
    with pytest.raises(TopologyError, match="CombinerAggregator"):
        topo.persistent_aggregate("c", "words", ["word"], len, state)
    with pytest.raises(TopologyError, match="multi_get"):
        topo.persistent_aggregate("c", "words", ["word"], Count(), {})
    with pytest.raises(TopologyError, match="value_field"):
        topo.persistent_aggregate("c", "words", ["word"], Count(), state, value_field="word")
    assert "c" not in topo.components
    topo.persistent_aggregate("c", "words", "word", Count(), state, parallelism=2)
    assert topo.components["c"].streams == {"default": ("word", "value")}
    with pytest.raises(ValueError, match="reserved"):
        ListBatchSpout([], fields=["_batch"])


ListSpoutLike = ListSpout([["a"]], fields=["word"])


# -- whole topologies in the in-memory twin -----------------------------------------------

SENTENCES = [f"w{i % 7} w{i % 11} w{i % 3}" for i in range(300)]
TRUTH = Counter(w for s in SENTENCES for w in s.split())


def split(values):
    return [[w] for w in values[0].split()]


def word_count(state, name="wc", parallelism=3, batch_size=50, **options):
    topo = Topology(name, ackers=1, message_timeout=5.0, **options)
    topo.spout("sentences", ListBatchSpout([[s] for s in SENTENCES], fields=["word"],
                                           batch_size=batch_size, each=split))
    topo.persistent_aggregate("count", "sentences", ["word"], Count(), state,
                              parallelism=parallelism)
    return topo


def test_word_count_is_exact_and_each_task_writes_once_per_batch():
    state = MemoryMap()
    with InMemoryCluster(word_count(state)) as cluster:
        cluster.run_until_idle()
        tasks = cluster.plan.component_tasks()["count"]
        stats = [cluster.user_object(t).state.statistics() for t in tasks]
        spout = cluster.user_object(cluster.plan.component_tasks()["sentences"][0])
        assert spout.statistics() == {"batches_emitted": 6, "replays": 0, "skipped": 0,
                                      "completed_txid": 6}
    assert Counter(state.snapshot()) == TRUTH
    for s in stats:
        assert set(s.puts_by_txid.values()) == {1} and s.multi_gets == s.multi_puts
    assert sorted({t for s in stats for t in s.puts_by_txid}) == [1, 2, 3, 4, 5, 6]


CRASHED: set = set()


class CrashingMap(MemoryMap):
    """Raises once per (txid, when): before writing, or after writing (the commit is in
    the map but the marker is never acked) — an instance dying at the worst moments."""

    def __init__(self, when: str, txids) -> None:
        super().__init__()
        self.when, self.txids = when, set(txids)

    def multi_put(self, keys, values):
        txid = values[0].txid
        key = (self.name, txid, keys[0])
        crash = txid in self.txids and key not in CRASHED
        if crash and self.when == "before":
            CRASHED.add(key)
            raise RuntimeError(f"killed before writing batch {txid}")
        super().multi_put(keys, values)
        if crash:
            CRASHED.add(key)
            raise RuntimeError(f"killed after writing batch {txid}")


@pytest.mark.parametrize("when", ["before", "after"])
def test_crashes_around_the_write_are_replayed_exactly(when):
    state = CrashingMap(when, txids={2, 4})
    with InMemoryCluster(word_count(state, name=f"crash-{when}")) as cluster:
        for _ in range(20):  # each round: run, then let the lost markers time out
            cluster.run_until_idle()
            spout = cluster.user_object(cluster.plan.component_tasks()["sentences"][0])
            if spout.statistics()["completed_txid"] == 6:
                break
            cluster.advance(8.0)
        crashes = [e for e in cluster.exceptions if "killed" in e["error"]]
        assert spout.statistics()["completed_txid"] == 6
    assert len(crashes) >= 2 and spout.replays >= 1
    assert Counter(state.snapshot()) == TRUTH


def test_new_values_flow_downstream_and_two_aggregations_share_a_spout():
    counts, sums = MemoryMap(), MemoryMap()
    topo = Topology("two", ackers=1)
    rows = [[f"k{i % 5}", i] for i in range(100)]
    topo.spout("rows", ListBatchSpout(rows, fields=["key", "n"], batch_size=30))
    topo.persistent_aggregate("count", "rows", ["key"], Count(), counts, parallelism=2)
    topo.persistent_aggregate("sum", "rows", ["key"], Sum("n"), sums, parallelism=3,
                              value_field="total")
    topo.bolt("sink", ListSink).shuffle_grouping("sum")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        latest = {}
        for key, total in cluster.sink("sink"):
            latest[key] = max(total, latest.get(key, 0))
    assert counts.snapshot() == {f"k{j}": 20 for j in range(5)}
    truth = {f"k{j}": sum(i for i in range(100) if i % 5 == j) for j in range(5)}
    assert sums.snapshot() == truth and latest == truth


def test_at_most_once_still_commits_in_order():
    state = MemoryMap()
    topo = word_count(state, name="amo")
    topo.config["ackers"] = 0
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
    assert Counter(state.snapshot()) == TRUTH


def test_batches_split_over_many_frames_keep_their_markers_last():
    """Small frames, flushed on the clock as instances do: a batch's tuples leave in
    several frames, and its markers still arrive after all of them."""
    state = MemoryMap()
    topo = word_count(state, name="frames", batch_size=40)
    topo.config.update(batch_size=7, flush_interval=0.01)
    with InMemoryCluster(topo, eager_flush=False) as cluster:
        for _ in range(200):
            cluster.run_until_idle()
            cluster.advance(0.01)
        tasks = cluster.plan.component_tasks()["count"]
        failed = [cluster.user_object(t).core.failed for t in tasks]
    assert Counter(state.snapshot()) == TRUTH and failed == [0, 0, 0]


def test_tuples_that_cannot_travel_are_skipped_the_same_way_every_time(tmp_path):
    rows = [["a"], ["b", 2], [{1, 2}], [object()], ["a"]]
    spout = ListBatchSpout(rows, fields=["word"], batch_size=10,
                           each=lambda v: [v]).with_route("count", ["word"])
    emitted = open_routed(spout, tmp_path)
    spout.next_tuple()
    sent = batches(emitted)
    assert sorted(v for vs in sent.values() for v in vs) == [["a"], ["a"]]
    assert spout.statistics()["skipped"] == 3


def test_a_batch_spout_must_run_as_one_task():
    topo = Topology("par")
    topo.spout("words", ListBatchSpout([["a"]], fields=["word"]), parallelism=2)
    with pytest.raises(TopologyError, match="parallelism=1"):
        topo.persistent_aggregate("c", "words", ["word"], Count(), MemoryMap())


def test_keys_may_be_lists_or_dicts():
    state = MemoryMap()
    topo = Topology("nested", ackers=1)
    rows = [[["hall", 9], {"floor": 1}], [("hall", 9), {"floor": 1}], [["conf", 10], {}]]
    topo.spout("rows", ListBatchSpout(rows, fields=["slot", "where"], batch_size=2))
    topo.persistent_aggregate("count", "rows", ["slot", "where"], Count(), state,
                              parallelism=2)
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert cluster.exceptions == []
    assert state.snapshot() == {(("hall", 9), (("floor", 1),)): 2, (("conf", 10), ()): 1}
    assert state.query([(["hall", 9], {"floor": 1}), (["conf", 10], {})]) == [2, 1]


class CountCrashingOnce(Count):
    """Count, but the aggregator task dies on the first tuple of word ``w5`` it ever sees
    (once per test run): an instance lost in the middle of a batch's tuples."""

    def __init__(self, token: str) -> None:
        self.token = token

    def init(self, tup):
        if tup["word"] == "w5" and self.token not in CRASHED:
            CRASHED.add(self.token)
            raise RuntimeError("killed in the middle of a batch")
        return 1


def test_a_task_restarted_mid_batch_fails_the_batch_instead_of_committing_its_tail():
    state = MemoryMap()
    topo = Topology("midbatch", ackers=1, message_timeout=5.0, batch_size=5)
    topo.spout("sentences", ListBatchSpout([[s] for s in SENTENCES], fields=["word"],
                                           batch_size=50, each=split))
    topo.persistent_aggregate("count", "sentences", ["word"], CountCrashingOnce("mid"),
                              state, parallelism=2)
    with InMemoryCluster(topo, eager_flush=False) as cluster:
        spout = cluster.user_object(cluster.plan.component_tasks()["sentences"][0])
        for _ in range(400):
            cluster.run_until_idle()
            cluster.advance(0.01)
            if spout.statistics()["completed_txid"] == 6:
                break
        failed = sum(cluster.user_object(t).core.failed
                     for t in cluster.plan.component_tasks()["count"])
        assert spout.statistics()["completed_txid"] == 6
    fatal = [e["error"] for e in cluster.exceptions if e["fatal"]]
    assert len(fatal) == 1 and "killed in the middle of a batch" in fatal[0]
    assert failed == 1 and spout.replays == 1
    assert Counter(state.snapshot()) == TRUTH


class Occupancy(ReducerAggregator):
    """Seed 004 in miniature: per (room, hour), how many people were in at each minute."""

    def init(self):
        return [0] * 60

    def reduce(self, minutes, tup):
        start, end = tup["start"], tup["end"]
        return [n + (start <= m < end) for m, n in enumerate(minutes)]


def test_room_occupancy_with_a_reducer_and_two_group_by_fields():
    periods = [["hall", 9, 0, 30], ["hall", 9, 10, 20], ["cafe", 9, 5, 6],
               ["hall", 10, 0, 60], ["hall", 9, 15, 16]]
    state = MemoryMap()
    topo = Topology("rooms", ackers=1)
    topo.spout("periods", ListBatchSpout(periods, fields=["room", "hour", "start", "end"],
                                         batch_size=2))
    topo.persistent_aggregate("timeline", "periods", ["room", "hour"], Occupancy(), state,
                              parallelism=2, value_field="minutes")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
    hall9 = state.query([("hall", 9)])[0]
    assert hall9[:10] == [1] * 10 and hall9[10:20] == [2] * 5 + [3] + [2] * 4
    assert hall9[20:30] == [1] * 10 and hall9[30:] == [0] * 30
    assert state.query([("cafe", 9), ("hall", 10), ("cafe", 10)]) == [
        [0] * 5 + [1] + [0] * 54, [1] * 60, None]
