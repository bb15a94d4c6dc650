"""Traced spout tuples sampled in runs (issue 20; docs/internals/tracing.md, "How the mark
travels"): each tuple of a run its own trace, a run's frames caught once, and the
fall-backs to one tuple a window where a frame would not hold a run's tuples in order."""

from __future__ import annotations

import random

import pytest

from runtime import Bolt, Spout, Topology, wire
from runtime.engine.trace_ids import ACKS_HELD
from runtime.engine.tracing import RUN
from runtime.observe.tracestore import TraceStore
from runtime.testing import InMemoryCluster

from .test_tracing import Count, Numbers, Sentences, Sink, Split, check_tree


class Counted(Count):
    """:class:`Count`, counting what it heard (``seen``)."""

    def prepare(self, config, context):
        super().prepare(config, context)
        self.seen = 0

    def process(self, tup):
        self.seen += 1
        super().process(tup)


def line(split_tasks: int = 1, count_tasks: int = 1, batch_size: int | None = None,
         spout: Spout | None = None, count=Counted) -> Topology:
    topo = Topology("runs", **({"batch_size": batch_size} if batch_size else {}))
    topo.spout("sentences", spout or Sentences(20))
    topo.bolt("split", Split, parallelism=split_tasks).shuffle_grouping("sentences")
    topo.bolt("count", count, parallelism=count_tasks).fields_grouping("split", ["word"])
    return topo


@pytest.fixture
def filed(monkeypatch) -> list[tuple[int, tuple]]:
    """Every record the twin's store files, with the task that reported it."""
    records: list[tuple[int, tuple]] = []
    add = TraceStore.add
    monkeypatch.setattr(TraceStore, "add", lambda self, task, inc, recs, now: (
        records.extend((task, r) for r in recs), add(self, task, inc, recs, now))[1])
    return records


def sent_by(cluster: InMemoryCluster, filed: list, comp: str) -> list[tuple]:
    tasks = set(cluster.plan.component_tasks()[comp])
    return [r for task, r in filed if task in tasks and r[0] == "sent"]


def run_whole(topo: Topology, filed: list, ackers: int) -> tuple[list, list, list]:
    """Run ``topo`` to its end with every tuple traced: its traces, and the spout's and
    the split's ``sent`` records."""
    with InMemoryCluster(topo, ackers=ackers, trace=1.0) as cluster:
        cluster.run_until_idle()
        traces = cluster.traces()
        return (traces, sent_by(cluster, filed, "sentences"),
                sent_by(cluster, filed, "split"))


def traces_of(record: tuple) -> int:
    """How many traces a ``sent`` record covers (a run's: one a span)."""
    return len(record[10]) // 2 if len(record) == 11 else 1


@pytest.mark.parametrize("ackers", [1, 0])
def test_each_tuple_of_a_run_is_its_own_trace_with_its_parents_and_hops(ackers, filed):
    # (max_spout_pending: the tuner's first limit, 8 in flight, would cut each run of
    # 16 at the turn's end, as the next test does on purpose)
    with InMemoryCluster(line(), ackers=ackers, trace=1.0, max_spout_pending=100) as cluster:
        cluster.run_until_idle()
        traces = cluster.traces()
        assert sorted(t.msg_id for t in traces) == list(range(20))
        for t in traces:
            check_tree(t, 4)  # 1 + words hops, each word's parent the sentence
            assert t.values == (f"s{t.msg_id} a b c",)
            assert t.hops[0].values == t.values and t.status == "acked"
            assert t.hops[1].values == (f"s{t.msg_id}",)
        spout, split = sent_by(cluster, filed, "sentences"), sent_by(cluster, filed, "split")
    # the runs shared their frames: a spout's record (and the split's) for several trees
    assert max(map(traces_of, spout)) == RUN and sum(map(traces_of, spout)) == 20
    assert len(spout) < 20 and len(split) < 20 and sum(map(traces_of, split)) == 20
    for r in spout + split:
        if len(r) == 11:
            assert sum(r[10][1::2]) == len(wire.batch_values(r[9], r[6]))
    # a run's starts are one record (its tuples' msg_ids and times), a run's entry's
    # hops one record at each task (its spans fourth): not one a tuple, or a span
    starts = [r for _, r in filed if r[0] in ("start", "starts")]
    assert {r[0] for r in starts} == {"starts"} and len(starts) == len(spout)
    assert sorted(m for r in starts for m in r[3]) == list(range(20))
    hops = [r for _, r in filed if r[0] == "hops"]
    assert len(hops) == len(spout) + len(split) and all(type(r[3]) is list for r in hops)


def test_a_run_cut_short_by_the_turns_end_goes_on_in_a_run_of_its_own(filed):
    random.seed(4)
    with InMemoryCluster(line(spout=Sentences(40)), ackers=1, trace=1.0,
                         target_latency=None) as cluster:
        for _ in range(20):
            cluster.step(3)  # three calls a turn: a run is cut at every turn's end
        cluster.run_until_idle()
        traces = cluster.traces(limit=100)
        spout = sent_by(cluster, filed, "sentences")
    assert sorted(t.msg_id for t in traces) == list(range(40))
    for t in traces:
        check_tree(t, 4)
        assert t.status == "acked"
    assert max(map(traces_of, spout)) == 3 and sum(map(traces_of, spout)) == 40


@pytest.mark.parametrize("turn", [3, 100])
def test_runs_cut_short_still_trace_the_rate(turn):
    # the rest of a run a turn's end cut is owed, not forgotten: the fraction stays the
    # rate (a run and its gap hold RUN / rate tuples)
    random.seed(turn)
    topo = Topology("numbers")
    topo.spout("numbers", Numbers(40_000))
    topo.bolt("drop", Sink).shuffle_grouping("numbers")
    with InMemoryCluster(topo, ackers=0, trace=0.25, target_latency=None,
                         trace_store=40_000) as cluster:
        for _ in range(40_000 // turn + 1):
            cluster.step(turn)
        traced = len(cluster.traces(limit=40_000))
    # ~625 runs of 16: the fraction's sd is ~0.009 (sqrt(RUN n p (1 - p)) / n); a run's
    # rest forgotten at turns of 3 would trace ~0.05
    assert 0.22 <= traced / 40_000 <= 0.28, traced


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_batch_filled_inside_a_run_cuts_it_and_every_tree_stays_whole(ackers, filed):
    # batches of 5 tuples: the spout's runs of 16 fill one, and the split's ten-word
    # windows fill several; the run is cut where the batch filled, the frames caught
    # numbered by the pending lists' lengths
    with InMemoryCluster(line(batch_size=5, spout=Sentences(40)), ackers=ackers,
                         trace=1.0) as cluster:
        cluster.run_until_idle()
        for _ in range(3):
            cluster.advance(0.01)
        traces = cluster.traces(limit=100)
        spout, split = sent_by(cluster, filed, "sentences"), sent_by(cluster, filed, "split")
        heard = sum(cluster.user_object(t).seen
                    for t in cluster.plan.component_tasks()["count"])
    assert sorted(t.msg_id for t in traces) == list(range(40))
    for t in traces:
        check_tree(t, 4)
        assert t.values == (f"s{t.msg_id} a b c",) and t.status == "acked"
    assert heard == 40 * 4
    assert max(map(traces_of, spout)) <= 5 and max(map(traces_of, split)) > 1


def test_a_fields_grouping_over_two_tasks_falls_back_to_one_input_a_window(filed):
    # acking off, the split's batch is split by value among the counters: which tuples
    # of a frame a traced input emitted is known only per input, so each has its window
    traces, spout, split = run_whole(line(count_tasks=2), filed, ackers=0)
    assert len(traces) == 20
    for t in traces:
        check_tree(t, 4)
    assert max(map(traces_of, spout)) == RUN  # the spout's subscriber takes it whole
    assert all(len(r) == 10 for r in split)  # one input, one trace a record


def test_a_spout_stream_split_by_value_falls_back_to_one_tuple_a_window(filed):
    # acking off, a shuffle over two split tasks deals the spout's batch: its traced
    # tuples go one a window, each a record
    traces, spout, _ = run_whole(line(split_tasks=2), filed, ackers=0)
    assert len(traces) == 20 and all(len(r) == 10 for r in spout)
    for t in traces:
        check_tree(t, 4)


class Dealer(Spout):
    """Sentences on the default stream; a "dealt" stream (direct) it never emits on."""

    outputs = {"default": ["sentence"], "dealt": ["sentence"]}

    def open(self, config, context):
        self.i = 0

    def next_tuple(self):
        if self.i < 12:
            self.emit([f"s{self.i} a b c"], msg_id=self.i)
            self.i += 1


def test_a_spout_with_a_direct_stream_traces_one_tuple_a_window(filed):
    # its emit_direct is never traced and could fall into a run's window: no runs
    topo = line(spout=Dealer())
    topo.bolt("deal", Sink, parallelism=2).direct_grouping("sentences", "dealt")
    traces, spout, _ = run_whole(topo, filed, ackers=1)
    assert len(traces) == 12 and all(len(r) == 10 for r in spout)
    for t in traces:
        check_tree(t, 4)
        assert t.status == "acked"


def test_a_held_word_inside_a_run_names_its_holder_and_the_runs_others_are_acked(filed):
    spout = Sentences(12, odd={3: "a hold c", 5: "hold b c"})
    with InMemoryCluster(line(spout=spout), ackers=1, trace=1.0,
                         message_timeout=5.0) as cluster:
        cluster.run_until_idle()
        cluster.advance(10.0)  # past the timeout
        counter = cluster.plan.component_tasks()["count"][0]
        for msg_id in (3, 5):
            t = cluster.lineage(msg_id)
            hold = next(h for h in t.hops if h.values == ("hold",))
            assert t.status == "timed_out" and hold.outcome is None
            assert t.held_by == ("count", counter)
            check_tree(t, 4)
        acked = cluster.traces(status="acked")
        assert sorted(t.msg_id for t in acked) == [0, 1, 2, 4, 6, 7, 8, 9, 10, 11]
        assert all(t.held_by is None for t in acked)
        runs = [r for r in sent_by(cluster, filed, "sentences") if traces_of(r) > 1]
    assert runs  # the held trees were traced in a run with others


def run_filed() -> tuple[TraceStore, bytes]:
    """A store with a run of two untracked traces sent: "a" (trace 10) one copy, "x",
    and "b" (11) two, "y" and "z", in one frame (its body returned too)."""
    store = TraceStore({1: "spout", 2: "bolt"})
    body = wire.encode_batch(["x", "y", "z"])
    store.add(1, 0, [("start", 10, "a", 1.0, False), ("start", 11, "b", 1.0, False),
                     ("sent", 10, 100, [0, 0], 2, "default", body, True, 1.0, wire.DATA,
                      [0, 1, 1, 2])], now=1.0)
    return store, body


def test_the_store_files_each_span_of_a_runs_frame_in_its_own_tree():
    store, body = run_filed()
    store.add(2, 0, [("hops", 11, 101, 5, 5, 0, 5, 5, 0), ("hops", 10, 100, 5, 5, 0)],
              now=1.0)
    a, b = store.lineage("a", now=1.0), store.lineage("b", now=1.0)
    assert [h.values for h in a.hops] == [("x",)] and a.status == "acked"
    assert [h.values for h in b.hops] == [("y",), ("z",)] and b.status == "acked"
    assert a.values == ("x",) and b.values == ("y",)
    # a run's record whose parents do not match its spans is refused, counted
    store.add(1, 0, [("sent", 10, 100, [0], 2, "default", body, True, 1.0, wire.DATA,
                      [0, 1, 1, 2])], now=1.0)
    assert store.malformed == 1



def test_a_runs_entry_is_one_hops_record_filed_a_span_to_each_trace():
    # the receiver's record of a run's entry (its spans fourth) is filed once, each
    # span in its own tree: hops, statuses, and the copy kept for a next master
    store, body = run_filed()
    store.add(2, 0, [("hops", 10, 100, [0, 1, 1, 1], 5, 5, 0, 6, 6, 0)], now=1.0)
    assert [t.status for t in store.traces(now=1.5)] == ["pending", "acked"]
    store.add(2, 0, [("hops", 11, 102, [0, 1], 7, 7, 0)], now=1.0)
    a, b = store.lineage("a", now=2.0), store.lineage("b", now=2.0)
    assert [(h.values, h.executed_ms) for h in a.hops] == [(("x",), 0.005)]
    assert [(h.values, h.executed_ms) for h in b.hops] == [(("y",), 0.006), (("z",), 0.007)]
    assert (a.status, b.status, store.malformed) == ("acked", "acked", 0)
    again = TraceStore({1: "spout", 2: "bolt"})
    again.refile(store.kept(10, now=2.0))  # each tree's span as a record of its own
    assert [(h.values, h.executed_ms) for h in again.lineage("b", now=2.0).hops] == [
        (("y",), 0.006), (("z",), 0.007)]
    # spans that do not add up to its times, or a text among them: refused whole, as
    # are starts whose times are not one a msg_id
    store.add(2, 0, [("hops", 10, 100, [0, 2], 5, 5, 0), ("hops", 10, 100, [0, 1], 5, "x", 0),
                     ("hops", 10, 100, [0, "1"], 5, 5, 0),
                     ("starts", 20, False, ["c", "d"], [1.0]),
                     ("starts", 20, False, ["c"], ["1.0"])], now=2.0)
    assert store.malformed == 5 and store.lineage("c", now=2.0) is None
    store.add(1, 0, [("starts", 20, False, ["c", "d"], [3.0, 3.5])], now=3.0)
    assert [(t.msg_id, t.started) for t in store.traces(now=3.0)[:2]] == [("d", 3.5),
                                                                          ("c", 3.0)]


def test_an_untracked_tree_is_acked_once_its_processed_hops_cover_every_copy_sent():
    # hops compared as ranges (a frame's, a record's): a gap leaves it pending, however
    # the records that cover it overlap or come
    store, body = run_filed()  # "b": hops 101 and 102, in one frame of the run
    store.add(2, 0, [("hops", 11, 102, 5, 5, 0)], now=1.0)
    assert store.lineage("b", now=1.0).status == "pending"  # 101 not processed
    store.add(2, 0, [("hops", 11, 100, 5, 5, 0, 5, 5, 0)], now=1.0)  # 100-101: 100 is a's
    assert store.lineage("b", now=1.0).status == "acked"
    assert store.lineage("a", now=1.0).status == "pending"  # a's copy is in b's tree
    store.add(2, 0, [("hops", 10, 100, 5, 5, 0)], now=1.0)
    assert [t.status for t in store.traces(now=1.0)] == ["acked", "acked"]
    # read (traces() read them), carried to a next master: the same; a carried hop id
    # that is no int is no kept tree
    kept = store.kept(10, now=2.0)
    assert all(len(frame) == 6 for tree in kept for frame in tree[3])  # read frames
    again = TraceStore({1: "spout", 2: "bolt"})
    assert again.refile(kept) == 2
    assert [t.status for t in again.traces(now=40.0)] == ["acked", "acked"]
    texts = [[*tree[:3], [[["101"], *frame[1:]] for frame in tree[3]], *tree[4:]]
             for tree in kept]
    assert TraceStore({1: "spout", 2: "bolt"}).refile(texts) == 0


def test_a_runs_spans_that_are_not_ints_are_refused_whole():
    # a run's spans are checked by their sum's type (a float among them makes it a
    # float): a float, a text or None refuses the record, a bool is its number
    store, body = run_filed()
    for spans in ([0, 1.0], [0.5, 0.5], [0, None], [0, "1"]):
        store.add(2, 0, [("hops", 10, 100, spans, 5, 5, 0)], now=1.0)
    store.add(1, 0, [("sent", 12, 200, [0, 0], 2, "default", body, True, 1.0, wire.DATA,
                      [0, 1.5, 1, 1.5])], now=1.0)
    # (the record's own tree, 12, is made before its fields are read: no 12.0, 10.5...)
    assert store.malformed == 5 and len(store) == 3
    store.add(2, 0, [("hops", 10, 100, [False, True], 5, 5, 0)], now=1.0)
    assert store.malformed == 5
    assert [h.executed_ms for h in store.lineage("a", now=1.0).hops] == [0.005]


def test_a_query_decodes_a_runs_shared_body_once_for_all_its_trees(monkeypatch):
    # a run's trees share their frames' bodies: traces() reads each body once (it read
    # it once a trace of the run), and a malformed one still counts once a frame
    store, body = run_filed()
    store.add(1, 0, [("start", 12, "c", 2.0, False), ("start", 13, "d", 2.0, False),
                     ("sent", 12, 200, [0, 0], 2, "default", b"\xc1", True, 2.0, wire.DATA,
                      [0, 1, 1, 1])], now=2.0)
    read = []
    values = wire.batch_values
    monkeypatch.setattr(wire, "batch_values", lambda *a: read.append(a) or values(*a))
    found = {t.msg_id: [h.values for h in t.hops] for t in store.traces(now=2.0)}
    assert found == {"a": [("x",)], "b": [("y",), ("z",)], "c": [], "d": []}
    assert [a[1] for a in read] == [b"\xc1", body] and store.malformed == 2
    assert [h.values for h in store.lineage("b", now=2.0).hops] == [("y",), ("z",)]
    assert len(read) == 2  # each tree read once


def test_an_untracked_runs_status_is_told_without_reading_its_frames(monkeypatch):
    # the master's saves ask every couple of seconds for the status of its newest
    # trees: acking off, a run's frames are counted by their spans, not decoded (the
    # shared bodies were decoded once a trace, each save, for trees never asked for)
    store, body = run_filed()
    store.add(2, 0, [("hops", 10, 100, [0, 1, 1, 2], 5, 5, 0, 5, 5, 0, 5, 5, 0)], now=1.0)
    read = []
    values = wire.batch_values
    monkeypatch.setattr(wire, "batch_values", lambda *a: read.append(a) or values(*a))
    assert len(store.kept(10, now=1.0)) == 2 and read == []
    assert [t.status for t in store.traces(now=1.0)] == ["acked", "acked"]
    assert read  # asked for, the trees are read

class Replaying(Spout):
    """Numbers 0-9, msg_id the number; a failed one is emitted again from ``fail`` (on
    the ACKED frame, outside the spout's turn), noting whether a traced run's window was
    left open by that emit (``tracer``: the task's, set by the test)."""

    outputs = ["n"]
    tracer = None

    def open(self, config, context):
        self.i, self.left_open = 0, []

    def next_tuple(self):
        if self.i < 10:
            self.emit([self.i], msg_id=self.i)
            self.i += 1

    def fail(self, msg_id):
        self.emit([msg_id], msg_id=msg_id)
        self.left_open.append(type(self).tracer.run is not None)


class FailOnce(Bolt):
    """Fails the first delivery of 2, acks everything else."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.failed = False

    def process(self, tup):
        if tup.values[0] == 2 and not self.failed:
            self.failed = True
            self.fail(tup)
        else:
            self.ack(tup)


def test_an_emit_outside_the_spouts_turn_never_leaves_a_runs_window_open():
    # a spout's fail() replays from an ACKED frame, between its turns, while a run is
    # armed: that tuple is traced in a window of its own, closed before fail() returns
    # (left open, it would hold every batch the timer sends until the next turn, which a
    # held spout may never take)
    topo = Topology("replay")
    topo.spout("numbers", Replaying())
    topo.bolt("sink", FailOnce).shuffle_grouping("numbers")
    with InMemoryCluster(topo, ackers=1, trace=1.0, target_latency=None) as cluster:
        task = cluster.plan.component_tasks()["numbers"][0]
        Replaying.tracer = cluster.executors[task].tracer
        cluster.step(10)
        cluster.run_until_idle()
        spout = cluster.user_object(task)
        assert spout.left_open == [False]
        assert cluster.lineage(2).status == "acked"  # the replay's own trace
        assert len(cluster.traces(status="failed")) == 1
        assert sorted(t.msg_id for t in cluster.traces(status="acked")) == list(range(10))


class Logged(Count):
    """:class:`Count`, logging each word it processes in ``EVENTS``; a slow one (``SLOW``
    holds the twin's clock) takes ``ACKS_HELD`` of it a word."""

    def process(self, tup):
        EVENTS.append(("word", tup.values[0]))
        if SLOW:
            SLOW[0].advance(ACKS_HELD)
        super().process(tup)


EVENTS: list[tuple[str, str | None]] = []
SLOW: list = []


def logged_run(monkeypatch, slow: bool) -> tuple[list[int], list[int]]:
    """Every tuple traced (so no untraced frame rides: each entry is processed alone) to
    a :class:`Logged` counter: the places in ``EVENTS`` of its words, and of each
    sentence's first word (the flushes of its acks are logged between them)."""
    from runtime.engine.acks import AckOut

    flush = AckOut.flush
    monkeypatch.setattr(AckOut, "flush", lambda self: (EVENTS.append(("flush", None)),
                                                       flush(self))[1])
    EVENTS.clear()
    SLOW.clear()
    with InMemoryCluster(line(count=Logged), ackers=1, trace=1.0) as cluster:
        if slow:
            SLOW.append(cluster.clock)
        cluster.run_until_idle()
        SLOW.clear()
        assert {t.status for t in cluster.traces()} == {"acked"}
    words = [i for i, (kind, _) in enumerate(EVENTS) if kind == "word"]
    assert len(words) == 80  # 20 sentences of 4 words
    return words, [i for i in words if EVENTS[i][1].startswith("s")]


def test_a_slow_runs_entry_lets_each_trees_acks_go_once_its_words_are_done(monkeypatch):
    """A counter's entry holds a run's words, several sentences': a slow counter's acks of
    each sentence's words go before the next sentence's first word is processed, as they
    did when each tree had an entry of its own. Held for the whole entry, a slow counter's
    acks of its first trees left seconds late and those trees timed out with every hop
    acked (test_tracing_mp.py::test_a_slow_bolt_is_named_as_the_holder failed 5 runs of
    6)."""
    words, firsts = logged_run(monkeypatch, slow=True)
    # the counter's words of one entry run without another task's turn in between, so a
    # flush between two of its words is its own
    back_to_back = [(a, b) for a, b in zip(words, words[1:]) if b == a + 1]
    sentence_starts = [b for a, b in back_to_back if b in firsts]
    assert not sentence_starts, "a sentence's first word came right after the last one's"
    for prev, first in zip(words, words[1:]):
        if first in firsts:
            assert any(EVENTS[i][0] == "flush" for i in range(prev + 1, first))


def test_a_fast_runs_entry_sends_its_trees_acks_together(monkeypatch):
    """A counter that gets through an entry within ``ACKS_HELD`` sends its trees' acks
    together, at the entry's end: one COMPLETED frame, not one of a single root a tree
    (each a wake-up of the spout; tracing-log.md, "2026-11-28, late morning")."""
    words, firsts = logged_run(monkeypatch, slow=False)
    back_to_back = [(a, b) for a, b in zip(words, words[1:]) if b == a + 1]
    assert [b for a, b in back_to_back if b in firsts], "every tree's acks went alone"


def test_tuples_emitted_without_a_msg_id_are_listed_but_not_found_by_none():
    # acking off a spout may emit without msg_ids: their traces are listed, and
    # lineage(None) is None rather than whichever of them came last (the dashboard's
    # lineage tab then draws the trace chosen, not the newest; tracing.md)
    store = TraceStore({1: "spout", 2: "bolt"})
    body = wire.encode_batch(["x", "y", "z"])
    store.add(1, 0, [("start", 10, None, 1.0, False), ("start", 11, None, 1.5, False),
                     ("sent", 10, 100, [0, 0], 2, "default", body, True, 1.0, wire.DATA,
                      [0, 1, 1, 2]),
                     ("starts", 20, False, [None, None], [2.0, 2.5])], now=2.5)
    store.add(2, 0, [("hops", 10, 100, [0, 1, 1, 1], 5, 5, 0, 6, 6, 0),
                     ("hops", 11, 102, [0, 1], 7, 7, 0)], now=2.5)
    assert [(t.msg_id, t.started, t.status) for t in store.traces(now=2.5)] == [
        (None, 2.5, "pending"), (None, 2.0, "pending"), (None, 1.5, "acked"),
        (None, 1.0, "acked")]
    assert store.lineage(None, now=2.5) is None
    again = TraceStore({1: "spout", 2: "bolt"})
    assert again.refile(store.kept(10, now=2.5)) == 2  # the two finished ones
    assert [t.values for t in again.traces(now=2.5)] == [("y",), ("x",)]
    assert again.lineage(None, now=2.5) is None
