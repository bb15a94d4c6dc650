"""Tracing through the in-memory twin and the pure store (issue 20): a traced tree's hops
and parents, with and without an acker; a named stream and a direct grouping; who held a
failed or timed-out tree; tracing switched on and off live; untraced frames unchanged;
the store's bound; bad ``trace=`` values. The multiprocess cases are in
``test_tracing_mp.py``."""

from __future__ import annotations

import dataclasses
import gc
import random

import pytest

from runtime import BasicBolt, Bolt, FailedException, Spout, Topology, wire
from runtime.engine.tracing import RUN
from runtime.model.errors import TopologyError
from runtime.observe.traces import HOP_OUTCOMES, TRANSIT, trace_from_plain, trace_to_plain
from runtime.observe.tracestore import TraceStore
from runtime.testing import FakeClock, InMemoryCluster


class Sentences(Spout):
    """``n`` sentences "s<i> a b c", msg_id i (sentence ``odd`` says "hold" or "bad")."""

    outputs = ["sentence"]

    def __init__(self, n: int = 6, odd: dict | None = None) -> None:
        self.total, self.odd = n, odd or {}

    def open(self, config, context):
        self.i = 0

    def next_tuple(self):
        if self.i < self.total:
            self.emit([f"s{self.i} {self.odd.get(self.i, 'a b c')}"], msg_id=self.i)
            self.i += 1


class Split(BasicBolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class Count(Bolt):
    """Acks each word, but keeps "hold" for ever and fails "bad"."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.kept = []

    def process(self, tup):
        word = tup.values[0]
        if word == "hold":
            self.kept.append(tup)
        elif word == "bad":
            self.fail(tup)
        else:
            self.ack(tup)


def sentences(spout: Spout | None = None, count=Count, count_tasks: int = 2) -> Topology:
    topo = Topology("traced")
    topo.spout("sentences", spout or Sentences())
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("count", count, parallelism=count_tasks).fields_grouping("split", ["word"])
    return topo


def check_tree(t, words: int) -> None:
    assert len(t.hops) == 1 + words
    assert t.hops[0].component == "split" and t.hops[0].parent is None
    assert [h.parent for h in t.hops[1:]] == [0] * words
    assert sorted(h.values[0] for h in t.hops[1:]) == sorted(t.values[0].split())
    assert all(h.component == "count" and h.stream == "default" for h in t.hops[1:])
    assert all(h.executed_ms is not None and h.queued_ms is not None for h in t.hops)


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_sentence_has_one_hop_per_delivery_with_its_parent(ackers):
    with InMemoryCluster(sentences(), ackers=ackers, trace=1.0) as cluster:
        cluster.run_until_idle()
        traces = cluster.traces()
        assert [t.msg_id for t in traces] == [5, 4, 3, 2, 1, 0]  # newest first
        for t in traces:
            check_tree(t, 4)
            assert t.status == "acked" and t.held_by is None and t.complete_ms is not None
            assert (t.component, t.task) == ("sentences", 1)
            assert t.hops[0].outcome == "acked"  # a BasicBolt's input
            assert {h.outcome for h in t.hops[1:]} == ({"acked"} if ackers else {None})
        assert cluster.lineage(2).values == ("s2 a b c",)
        assert cluster.lineage(99) is None


def test_a_bolt_that_never_acks_one_word_holds_a_timed_out_tree():
    topo = sentences(Sentences(odd={3: "a hold c"}))
    with InMemoryCluster(topo, ackers=1, trace=1.0, message_timeout=5.0) as cluster:
        cluster.run_until_idle()
        assert cluster.lineage(3).status == "pending"
        cluster.advance(10.0)  # past the timeout
        t = cluster.lineage(3)
        assert t.status == "timed_out"
        hold = next(h for h in t.hops if h.values == ("hold",))
        assert hold.outcome is None and t.held_by == ("count", hold.task)
        assert [x.msg_id for x in cluster.traces(status="timed_out")] == [3]
        assert len(cluster.traces(status="acked")) == 5


def test_a_failed_word_names_the_task_that_failed_it():
    with InMemoryCluster(sentences(Sentences(odd={1: "a bad c"})), ackers=1,
                         trace=1.0) as cluster:
        cluster.run_until_idle()
        t = cluster.lineage(1)
        bad = next(h for h in t.hops if h.values == ("bad",))
        assert t.status == "failed" and bad.outcome == "failed"
        assert t.held_by == ("count", bad.task)


class BasicCount(BasicBolt):
    """A BasicBolt sink: "bad" raises FailedException (failed), any other word is acked
    as ``process`` returns."""

    outputs: list[str] = []

    def process(self, tup):
        if tup.values[0] == "bad":
            raise FailedException("a bad word")


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_basic_sinks_hops_are_acked_or_failed_as_its_process_returned_or_raised(ackers):
    # a sink's wrapper of its own (2026-11-28): its tuples' outcome is "acked" unless
    # noted, and a raise is noted by the word's place in its entry. At a rate below 1
    # the traced entries ride untraced frames (at 1.0, acking on, a run's entry is
    # processed alone, by the wrapper that sends acks between its trees)
    random.seed(7)
    odd = {i: "a bad c" for i in range(1, 300, 3)}
    topo = sentences(Sentences(n=300, odd=odd), count=BasicCount)
    with InMemoryCluster(topo, ackers=ackers, trace=0.3) as cluster:
        cluster.run_until_idle()
        traces = cluster.traces(limit=300)
    assert sum(t.msg_id in odd for t in traces) > 10
    for t in traces:
        check_tree(t, 4)
        outcomes = {h.values[0]: h.outcome for h in t.hops[1:]}
        expected = {word: "acked" for word in outcomes} | {"bad": "failed"}
        assert outcomes == {word: expected[word] for word in outcomes}
        if ackers:
            assert t.status == ("failed" if "bad" in outcomes else "acked")


def test_a_sinks_failed_and_held_words_are_told_apart_from_its_acked_ones():
    # the plain bolt's side of the same: "bad" failed inside process, "hold" kept past
    # it (watched: the tree times out in its hands), every other word acked by its call
    random.seed(7)
    odd = {i: "a bad c" for i in range(1, 300, 3)} | {i: "a hold c" for i in range(5, 300, 20)}
    topo = sentences(Sentences(n=300, odd=odd))  # (held trees stay pending: no limit)
    with InMemoryCluster(topo, ackers=1, trace=0.3, message_timeout=5.0,
                         max_spout_pending=100_000) as cluster:
        cluster.run_until_idle()
        cluster.advance(10.0)  # past the timeout: the held trees time out
        traces = cluster.traces(limit=300)
    assert sum("bad" in odd.get(t.msg_id, "") for t in traces) > 5
    assert sum("hold" in odd.get(t.msg_id, "") for t in traces) > 2
    for t in traces:
        check_tree(t, 4)
        hops = {h.values[0]: h for h in t.hops[1:]}
        expected = {word: "acked" for word in hops} | {"bad": "failed", "hold": None}
        assert {w: h.outcome for w, h in hops.items()} == {w: expected[w] for w in hops}
        if "bad" in hops:
            assert (t.status, t.held_by) == ("failed", ("count", hops["bad"].task))
        elif "hold" in hops:
            assert (t.status, t.held_by) == ("timed_out", ("count", hops["hold"].task))
        else:
            assert (t.status, t.held_by) == ("acked", None)


class LateAcker(Bolt):
    """Keeps every word and acks them all on its next tick: the traced tuple's outcome
    comes after its process call."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.kept = []

    def process(self, tup):
        self.kept.append(tup)

    def process_tick(self, tup):
        for kept in self.kept:
            self.ack(kept)
        self.kept = []


def test_a_traced_input_acked_after_its_process_call_is_seen_acked():
    topo = Topology("late")
    topo.spout("sentences", Sentences(n=2))
    topo.bolt("split", Split).shuffle_grouping("sentences")
    topo.bolt("count", LateAcker, tick_freq_secs=1.0).shuffle_grouping("split")
    with InMemoryCluster(topo, ackers=1, trace=1.0) as cluster:
        cluster.run_until_idle()
        assert {h.outcome for h in cluster.lineage(0).hops[1:]} == {None}
        cluster.advance(1.5)
        t = cluster.lineage(0)
        assert t.status == "acked" and {h.outcome for h in t.hops[1:]} == {"acked"}


class Router(Bolt):
    """Words on a named stream "long" (anchored) and, with emit_direct, to a chosen task."""

    outputs = {"long": ["word"], "dealt": ["word"]}

    def prepare(self, config, context):
        self.dealt = list(context.component_tasks["deal"])

    def process(self, tup):
        for i, word in enumerate(tup.values[0].split()):
            self.emit([word], stream="long", anchors=tup)
            self.emit_direct(self.dealt[i % len(self.dealt)], [word], stream="dealt",
                             anchors=tup)
        self.ack(tup)


class Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        self.ack(tup)


def test_a_traced_tuple_through_a_named_stream_and_a_direct_grouping():
    topo = Topology("routed")
    topo.spout("sentences", Sentences(n=3))
    topo.bolt("route", Router).shuffle_grouping("sentences")
    topo.bolt("long", Sink).shuffle_grouping("route", "long")
    topo.bolt("deal", Sink, parallelism=2).direct_grouping("route", "dealt")
    with InMemoryCluster(topo, ackers=1, trace=1.0) as cluster:
        cluster.run_until_idle()
        t = cluster.lineage(1)
        assert t.status == "acked" and len(t.hops) == 1 + 2 * 4
        children = t.hops[1:]
        assert all(h.parent == 0 for h in children)
        assert sorted(h.stream for h in children) == ["dealt"] * 4 + ["long"] * 4
        deal = cluster.plan.component_tasks()["deal"]
        dealt = {h.values[0]: h.task for h in children if h.stream == "dealt"}
        assert dealt == {w: deal[i % 2] for i, w in enumerate(t.values[0].split())}
        assert all(h.component == "long" for h in children if h.stream == "long")


class Numbers(Spout):
    """One number a call, msg_id the number, up to ``n``."""

    outputs = ["n"]

    def __init__(self, n: int) -> None:
        self.total = n

    def open(self, config, context):
        self.i = 0

    def next_tuple(self):
        if self.i < self.total:
            self.emit([self.i], msg_id=self.i)
            self.i += 1


class Kinds(InMemoryCluster):
    """The twin, noting the kind of every frame sent."""

    def _send(self, header: bytes, body: bytes) -> None:
        self.kinds.add(wire.parse_header(header).kind)
        super()._send(header, body)


def numbers(n: int) -> Topology:
    topo = Topology("numbers")
    topo.spout("numbers", Numbers(n))
    topo.bolt("sink", Sink, parallelism=2).shuffle_grouping("numbers")
    return topo


def test_tracing_switched_on_and_off_live_and_off_sends_no_traced_frame():
    Kinds.kinds = set()
    with Kinds(numbers(10_000), ackers=1, target_latency=None) as cluster:  # trace: 0.0
        for _ in range(10):
            cluster.step(100)
        assert cluster.traces() == [] and wire.TRACED not in Kinds.kinds
        cluster.set_trace(1.0)
        cluster.step(100)
        on = cluster.traces(limit=1000)
        assert len(on) >= 90 and wire.TRACED in Kinds.kinds  # all but the armed turn's
        assert all(t.status == "acked" and len(t.hops) == 1 for t in on)
        cluster.set_trace("0")
        for _ in range(5):
            cluster.step(100)
        assert len(cluster.traces(limit=1000)) == len(on)  # nothing new


def test_a_rate_traces_about_that_fraction():
    random.seed(20)  # the gaps are drawn from random: one fixed draw
    with InMemoryCluster(numbers(5_000), ackers=1, trace=0.05, target_latency=None) as cluster:
        cluster.run_until_idle()
        traced = len(cluster.traces(limit=5_000))
        assert 150 <= traced <= 350  # 250 expected


@pytest.mark.parametrize(("rate", "n"), [(0.5, 4_000), (0.2, 8_000), (0.05, 20_000)])
def test_the_fraction_traced_is_the_rate_within_a_few_standard_deviations(rate, n):
    # the gap after a traced tuple is the number of untraced tuples let pass: until
    # 2026-11-28 one fewer passed, and a rate p traced p / (1 - p) of the tuples' worth
    # of gaps (0.5 traced 0.67, 0.2 traced 0.25, 0.05 traced 0.0526: each far outside)
    random.seed(28)
    with InMemoryCluster(numbers(n), trace=rate, target_latency=None,
                         trace_store=n) as cluster:
        cluster.run_until_idle()
        traced = len(cluster.traces(limit=n))
    # four standard deviations, at most: of runs of RUN tuples (their count is about
    # binomial, each RUN tuples: RUN times the variance of single draws)
    spread = 4 * (RUN * n * rate * (1 - rate)) ** 0.5
    assert abs(traced - n * rate) <= spread, (traced, n * rate)


@pytest.mark.parametrize("bad", [1.5, -0.1, "0.5", True, None])
def test_bad_trace_values_fail_at_definition_time(bad):
    topo = numbers(1)
    with pytest.raises((TopologyError, ValueError), match="trace.*fraction 0.0..1.0"):
        topo.submit(trace=bad)
    with pytest.raises((TopologyError, ValueError), match="trace.*fraction 0.0..1.0"):
        InMemoryCluster(topo, trace=bad)


def test_a_malformed_traced_frame_is_refused():
    with InMemoryCluster(numbers(1), ackers=1) as cluster:
        ex = cluster.executors[2]
        header = wire.data_header(wire.TRACED, 1, 2, 1)
        with pytest.raises(wire.WireError, match="a traced frame must hold"):
            ex.on_frame(header, wire.encode_batch([wire.ACKS, b"", 1, 2, 0.0]))


# -- the store, pure ------------------------------------------------------------------------

def started(trace: int, msg_id, tracked: bool = True, at: float = 0.0,
            values: list | None = None) -> tuple:
    """A spout's start record (its values only when no frame of the tuple was caught)."""
    record = ("start", trace, msg_id, at, tracked)
    return record if values is None else (*record, values)


def sent(trace: int, first: int, parent: int, dest: int, copies: list | None,
         emitted: float = 0.0, *, bare: bool = False, body: bytes | None = None) -> tuple:
    """A frame's sent record: ``copies`` (lists of fields, or bare values) as its DATA
    body (or ``body`` as it is), their hop ids ``first``, ``first + 1``, ..."""
    body = wire.encode_batch(copies) if body is None else body
    return ("sent", trace, first, parent, dest, "default", body, bare, emitted, wire.DATA)


def ran(trace: int, first: int, *copies: tuple) -> tuple:
    """A traced frame's hops record: per copy ``(queued_ms, executed_ms, outcome)``, from
    hop ``first`` on, flat, in µs and outcome codes as a task reports them."""
    flat = []
    for queued, executed, outcome in copies:
        flat += [round(queued * 1e3), round(executed * 1e3), HOP_OUTCOMES.index(outcome)]
    return ("hops", trace, first, *flat)


def test_the_store_keeps_the_newest_and_counts_what_it_dropped():
    store = TraceStore({1: "spout", 2: "bolt"}, capacity=100)
    for i in range(1, 251):
        store.add(1, 0, [started(i, f"m{i}"), sent(i, 10 * i, 0, 2, [[i]]),
                         ["done", i, "acked", 1.0]], now=0.0)
    assert len(store) == 100 and store.dropped == 150
    assert [t.msg_id for t in store.traces(limit=3, now=1.0)] == ["m250", "m249", "m248"]
    assert store.lineage("m150", now=1.0) is None and store.lineage("m151", now=1.0)
    assert store.traces(status="failed", now=1.0) == []
    with pytest.raises(ValueError, match="status must be one of"):
        store.traces(status="lost", now=1.0)


def test_a_dropped_trace_leaves_the_msg_id_index_too():
    # the oldest trace dropped takes its msg_id's entry with it, and only its own: not a
    # replayed msg_id's newer trace, nor a msg_id equal to its spout's task id (the store
    # popped the task's); the index stays within the store's bound
    store = TraceStore({1: "spout", 2: "bolt"}, capacity=3)

    def traced(trace, msg_id):
        store.add(1, 0, [started(trace, msg_id), ["done", trace, "acked", 1.0]], now=0.0)

    for trace, msg_id in ((1, "a"), (2, "a"), (3, 1), (4, "c")):  # 1 is dropped
        traced(trace, msg_id)
    assert store.lineage("a", now=1.0) is not None and store.lineage(1, now=1.0) is not None
    for trace in range(5, 30):
        traced(trace, f"m{trace}")
    assert len(store._by_msg) == len(store) == 3


def test_a_late_record_of_a_dropped_trace_does_not_bring_it_back_headless():
    # a full store drops its oldest tree while its copies are still being processed
    # elsewhere; their records, filed later, must not make a tree without a start: it
    # would take a real tree's place and never be shown (at trace=1.0, acking off, 20,000
    # sentences into a store of 10,000: traces() answered 0 of 10,000 stored, and
    # "dropped" counted 22,607, more than were traced)
    store = TraceStore({1: "spout", 2: "bolt"}, capacity=3)
    for trace in range(1, 6):  # 1 and 2 dropped
        store.add(1, 0, [started(trace, f"m{trace}", tracked=False),
                         sent(trace, 10 * trace, 0, 2, [["w"]])], now=0.0)
    store.add(2, 0, [ran(trace, 10 * trace, (1.0, 1.0, None)) for trace in (1, 2)], now=0.5)
    assert [t.msg_id for t in store.traces(now=1.0)] == ["m5", "m4", "m3"]
    assert len(store) == 3 and store.dropped == 2 and store.late == 2
    store.add(2, 0, [ran(6, 60, (1.0, 1.0, None))], now=1.5)  # before its start
    store.add(1, 0, [started(6, "m6", tracked=False), sent(6, 60, 0, 2, [["w"]])], now=1.5)
    assert [t.msg_id for t in store.traces(now=2.0)] == ["m6", "m5", "m4"]
    assert store.lineage("m6", now=2.0).status == "acked"


def test_a_copy_lost_with_a_restarted_task_is_in_transit_else_queued_at_its_task():
    store = TraceStore({1: "spout", 2: "split", 3: "count"}, timeout=5.0)
    store.add(1, 0, [started(7, "m", at=100.0), sent(7, 70, 0, 2, [["s"]], 100.0)],
              now=100.0)
    store.add(2, 0, [sent(7, 71, 70, 3, [["w"]], 100.5), ran(7, 70, (1.0, 2.0, "acked"))],
              now=101.0)
    store.add(1, 0, [["done", 7, "timed_out", 5000.0]], now=105.0)
    assert store.lineage("m", now=106.0).held_by == ("count", 3)  # waits in its queue
    store.restarted(3, at=101.0)
    t = store.lineage("m", now=106.0)
    assert t.held_by == (TRANSIT, None) and t.hops[1].parent == 0
    assert trace_from_plain(trace_to_plain(t)) == t


def test_a_trace_made_plain_is_what_asdict_makes_and_a_copy_as_deep():
    store = TraceStore({1: "spout", 2: "split", 3: "count"}, timeout=5.0)
    msg_id, nested = ["m", [1, 2]], [["a", "b"], {"x": 1}]
    store.add(1, 0, [started(7, msg_id, at=100.0), sent(7, 70, 0, 2, [[nested, "s"]], 100.0),
                     ["done", 7, "failed", 3.0]], now=100.0)
    store.add(2, 0, [sent(7, 71, 70, 3, ["w", ["v", 1]], 100.5, bare=True),
                     ran(7, 70, (1.0, 2.0, "failed"))], now=101.0)
    for t in (store.lineage(msg_id, now=102.0), store.traces(now=102.0)[0]):
        plain = trace_to_plain(t)
        assert plain == dataclasses.asdict(t) and list(plain) == list(dataclasses.asdict(t))
        assert [list(h) for h in plain["hops"]] == [list(dataclasses.asdict(h)) for h in t.hops]
        assert trace_from_plain(plain) == t
        plain["msg_id"][1].append(3)  # a deep copy: the store's trees are untouched
        plain["values"][0][0].append("c")
        plain["hops"][2]["values"][0].append(2)
        assert store.lineage(msg_id, now=102.0) == t


def test_the_finished_traces_are_the_newest_but_pending_and_only_they_are_assembled(
        monkeypatch):
    store = TraceStore({1: "spout", 2: "bolt"})
    for i in range(1, 11):
        done = [["done", i, "acked", 1.0]] if i % 3 else []
        store.add(1, 0, [started(i, f"m{i}"), sent(i, 10 * i, 0, 2, [[i]]), *done], now=0.0)
    newest = [t for t in store.traces(None, 6, now=1.0) if t.status != "pending"]
    assembled = []
    assemble = store._assemble
    monkeypatch.setattr(store, "_assemble", lambda tree, st: assembled.append(st) or
                        assemble(tree, st))
    assert store.finished(6, now=1.0) == newest
    assert [t.msg_id for t in newest] == ["m10", "m8", "m7", "m5"]
    assert assembled == ["acked"] * 4  # m9 and m6, pending, were not assembled


def test_a_stored_trees_hops_are_left_to_the_collector_untracked():
    # the master keeps up to 10,000 trees: each hop's record a list was a container that
    # every full collection traversed (~40 a sentence's tree); tuples of atoms are not
    store = TraceStore({1: "spout", 2: "split", 3: "count"})
    store.add(1, 0, [started(7, "m"), sent(7, 70, 0, 2, [["a b"]], 100.0)], now=100.0)
    store.add(2, 0, [sent(7, 71, 70, 3, ["a", "b"], 100.5, bare=True),
                     ran(7, 70, (1.0, 2.0, "acked"))], now=101.0)
    store.add(3, 0, [ran(7, 71, (1.0, 2.0, "acked"), (1.0, 2.0, None))], now=101.0)
    gc.collect()  # the values' tuples are let go first, the records' at the next passes
    gc.collect()
    gc.collect()
    tree = store._trees[7]
    records = [*tree.frames, *tree.runs]  # as filed: one a frame sent or processed
    assert len(records) == 4 and not any(map(gc.is_tracked, records))
    assert [h.values for h in store.lineage("m", now=102.0).hops] == [("a b",), ("a",), ("b",)]


def test_an_untracked_tree_is_acked_when_every_hop_ran_else_it_times_out():
    store = TraceStore({1: "spout", 2: "bolt"}, timeout=5.0)
    store.add(1, 0, [started(1, None, tracked=False, at=10.0),
                     sent(1, 11, 0, 2, [["x"]], 10.0),
                     started(2, None, tracked=False, at=10.0),
                     sent(2, 21, 0, 2, [["y"]], 10.0)], now=10.0)
    store.add(2, 0, [ran(1, 11, (1.0, 1.0, None))], now=10.5)
    first, second = store.traces(now=11.0)[::-1]
    assert (first.status, second.status) == ("acked", "pending")
    assert first.complete_ms == pytest.approx(2.0)
    assert store.traces(now=20.0)[0].status == "timed_out"
    assert store.traces(now=20.0)[0].held_by == ("bolt", 2)


def test_malformed_records_are_counted_not_raised():
    store = TraceStore({1: "spout"})
    store.add(1, 0, [["start"], ["what", 1], ["done", 1, "lost", 1.0], "x"], now=0.0)
    assert store.malformed == 4


def test_a_hops_record_with_a_text_for_a_number_is_refused_whole_when_filed():
    # the store checks a hops record's types once, as it files it, so that reading a
    # tree never meets one: the copy before the text is not half filed either
    store = TraceStore({1: "spout", 2: "bolt"})
    store.add(1, 0, [started(1, "m"), sent(1, 11, 0, 2, [["x"], ["y"]], 10.0)], now=10.0)
    good = ran(1, 11, (1.0, 1.0, "acked"))
    store.add(2, 0, [(*good, 2000, "2000", 1)], now=10.5)
    assert store.malformed == 1
    assert [h.outcome for h in store.lineage("m", now=11.0).hops] == [None, None]
    store.add(2, 0, [good], now=10.6)
    assert [h.outcome for h in store.lineage("m", now=11.0).hops] == ["acked", None]


def test_a_copy_processed_after_its_tree_timed_out_names_the_late_task():
    store = TraceStore({1: "spout", 2: "slow"}, timeout=5.0)
    store.add(1, 0, [started(7, "m", at=100.0), sent(7, 70, 0, 2, [["s"]], 100.0),
                     ["done", 7, "timed_out", 5000.0]], now=105.0)
    assert store.lineage("m", now=105.0).held_by == ("slow", 2)  # still in its queue
    store.add(2, 0, [ran(7, 70, (6000.0, 500.0, "acked"))], now=106.5)  # done at 106.5
    assert store.lineage("m", now=107.0).held_by == ("slow", 2)


class Counted(InMemoryCluster):
    """The twin, counting the frames sent of each kind; an untraced frame that rode in a
    TRACED frame is counted as its own kind too, and under ``"riders"``."""

    def _send(self, header: bytes, body: bytes) -> None:
        kind = wire.parse_header(header).kind
        self.count(kind)
        if kind == wire.TRACED:
            for inner, _, trace, *_ in wire.decode_traced(body):
                if not trace:
                    self.count(inner)
                    self.count("riders")
        super()._send(header, body)

    def count(self, key) -> None:
        self.counted[key] = self.counted.get(key, 0) + 1


class Drained(Counted):
    """:class:`Counted` whose executors hold a frame's acks to the end of a drain, as an
    instance's do (``drains``): every task's acks of the frames one delivery handed it
    go once that delivery is done (``drained``), one frame for all of them."""

    def _executor(self, task: int):
        ex = super()._executor(task)
        if hasattr(ex, "drains"):
            ex.drains = True
        return ex

    def deliver(self) -> int:
        delivered = 0
        while True:
            delivered += super().deliver()
            for ex in self.executors.values():
                ex.drained()
            if not self.frames:
                return delivered


def frames_of(trace: float, ackers: int, twin: type[Counted] = Counted) -> tuple[dict, list]:
    """Frames per kind, and the traces, for 800 sentences to one counter task, driven as
    the instances are: the spout's turns, then the flush timer."""
    Counted.counted = {}
    random.seed(7)
    with twin(sentences(Sentences(800), count_tasks=1), ackers=ackers, trace=trace,
              eager_flush=False, target_latency=None) as cluster:
        for _ in range(80):
            cluster.step(25)
            cluster.advance(0.01)
        traces = cluster.traces(limit=1000)
    return Counted.counted, traces


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_call_cuts_no_batch_and_its_tree_never_reaches_the_acker(ackers):
    # what waits in the batches stays for the usual flush: the untraced frames are the
    # very frames of an untraced run (some riding in TRACED frames), and the traced
    # tuples ride them: one TRACED frame instead of the frame it carries, none more;
    # under acking the split's ack rides on its last traced word, so each tree is found
    # whole at the counter (no ACKS to the acker, as without tracing), and the counter's
    # COMPLETED for a traced tree goes with the acks of the frame it rode (none more)
    untraced, _ = frames_of(0.0, ackers)
    traced, traces = frames_of(0.1, ackers)
    assert len(traces) >= 10 and all(t.status == "acked" for t in traces)
    assert all(len(t.hops) == 5 for t in traces)  # the sentence and its four words
    assert traced.pop(wire.TRACED) == traced.pop("riders") > 0  # every one rode a frame
    kinds = (wire.DATA, wire.RUN, wire.ANCHORED, wire.TRACKED, wire.ACKS, wire.ACKED,
             wire.COMPLETED)
    assert {k: traced.get(k, 0) for k in kinds} == {k: untraced.get(k, 0) for k in kinds}
    assert wire.ACKS not in traced


def test_a_traced_frames_acks_wait_for_the_drain_as_the_frame_it_carries_would():
    # an instance sends the acks of the frames one drain read together, at its end: the
    # acks of a TRACED frame and of the frame it carries go with them, not at once
    # (at once, each TRACED frame cost the counter a COMPLETED frame of its own, and the
    # spout a wake-up: tracing-log.md, "2026-11-28, late morning")
    untraced, _ = frames_of(0.0, 1, Drained)
    traced, traces = frames_of(0.1, 1, Drained)
    assert len(traces) >= 10 and all(t.status == "acked" for t in traces)
    assert traced.pop(wire.TRACED) == traced.pop("riders") > 0
    assert traced.get(wire.COMPLETED, 0) == untraced.get(wire.COMPLETED, 0) > 0


class Watched:
    """Records what the runtime does to the user's object once it runs: the attributes
    set on it and the reads of its ``__dict__`` (either makes CPython 3.11 give up the
    object's inline attribute loads, and its own code then runs slower for good)."""

    def watch(self) -> None:
        object.__setattr__(self, "touched", [])

    def __setattr__(self, name, value):
        if "touched" in self.__dict__ and name not in ("kept", "i"):
            self.touched.append(f"set {name}")
        object.__setattr__(self, name, value)

    def __getattribute__(self, name):
        if name == "__dict__" and "touched" in object.__getattribute__(self, "__dict__"):
            object.__getattribute__(self, "touched").append("read __dict__")
        return object.__getattribute__(self, name)


class WatchedSplit(Watched, Split):
    def prepare(self, config, context):
        self.watch()


class WatchedCount(Watched, Count):
    def prepare(self, config, context):
        super().prepare(config, context)
        self.watch()


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_call_leaves_the_bolts_objects_untouched(ackers):
    # the traced process is handed to the frame's execute, not set on the user's object
    topo = Topology("watched")
    topo.spout("sentences", Sentences(20))
    topo.bolt("split", WatchedSplit).shuffle_grouping("sentences")
    topo.bolt("count", WatchedCount).fields_grouping("split", ["word"])
    with InMemoryCluster(topo, ackers=ackers, trace=1.0) as cluster:
        cluster.run_until_idle()
        assert len(cluster.traces()) == 20
        assert all(len(t.hops) == 5 for t in cluster.traces())
        for comp in ("split", "count"):
            user = cluster.user_object(cluster.plan.component_tasks()[comp][0])
            assert object.__getattribute__(user, "touched") == [], comp


def test_a_traced_frame_is_one_sent_record_the_store_splits(monkeypatch):
    # a task records a frame's copies once (hop ids consecutive, the frame's kind and
    # body untouched, not decoded by the task); the store reads the values and splits
    # them into one hop each, as before
    filed: list = []
    add = TraceStore.add
    monkeypatch.setattr(TraceStore, "add", lambda self, task, inc, records, now: (
        filed.extend(records), add(self, task, inc, records, now))[1])
    with InMemoryCluster(sentences(Sentences(3), count_tasks=1), ackers=1,
                         trace=1.0) as cluster:
        cluster.run_until_idle()
        for t in cluster.traces():
            check_tree(t, 4)
    records = [r for r in filed if r[0] == "sent"]
    # per frame, not per sentence: the spout's run of three sentences is one frame to
    # each split task it reached, the split's window over one entry's sentences one
    assert len(records) < 3 * 2
    for r in records:  # the first hop id alone (the others follow it), the body as sent
        assert type(r[2]) is int and type(r[6]) is bytes and wire.batch_values(r[9], r[6])
        if len(r) == 11:  # a run's: its spans cover its frame, a parent a span
            assert sum(r[10][1::2]) == len(wire.batch_values(r[9], r[6]))
            assert len(r[3]) == len(r[10]) // 2
    assert all(type(r) is tuple for r in filed)
    store = TraceStore({2: "split"})
    body = wire.encode_batch(["c", "d"])
    store.add(1, 0, [started(8, "n"), sent(8, 80, 0, 2, None, 1.0, bare=True, body=body),
                     sent(8, 82, 0, 2, None, 1.0, bare=True, body=b"\xc1")], now=1.0)
    assert [h.values for h in store.lineage("n", now=1.0).hops] == [("c",), ("d",)]
    assert store.malformed == 1  # an undecodable body: that record alone is dropped


def test_the_store_reads_a_sent_frames_body_when_its_tree_is_first_read(monkeypatch):
    # filing keeps a frame's body as sent: most trees are never asked for (the master
    # decoded two bodies a traced sentence and made a tuple a copy, ~35 k instructions
    # of ~157 k); a tree is read once, and a body that is no batch (here: cut short) is
    # counted then
    read = []
    values = wire.batch_values
    monkeypatch.setattr(wire, "batch_values", lambda kind, body: read.append(body) or
                        values(kind, body))
    store = TraceStore({2: "split"}, timeout=5.0)
    body = wire.encode_batch(["c", "d"])
    store.add(1, 0, [started(8, "n", tracked=False),
                     sent(8, 80, 0, 2, None, 1.0, bare=True, body=body),
                     sent(8, 82, 0, 2, None, 1.0, bare=True, body=b"\x92\xa1e")], now=1.0)
    store.add(2, 0, [ran(8, 80, (1.0, 1.0, None), (1.0, 1.0, None))], now=1.0)
    assert read == [] and store.malformed == 0
    assert store.traces(now=2.0)[0].status == "acked"  # the bad frame is no copy sent
    assert len(read) == 2 and store.malformed == 1
    assert [h.values for h in store.lineage("n", now=2.0).hops] == [("c",), ("d",)]
    assert len(read) == 2 and store.malformed == 1  # read once


def test_a_sent_frame_whose_first_hop_is_no_int_or_body_no_bytes_is_counted_when_filed():
    store = TraceStore({2: "split"})
    body = wire.encode_batch(["c", "d"])
    good = sent(8, 82, 0, 2, None, 1.0, bare=True, body=body)
    store.add(1, 0, [started(8, "n"), (*good[:2], [80], *good[3:]),
                     (*good[:6], ["c", "d"], *good[7:]), good[:-1], good], now=1.0)
    assert [h.values for h in store.lineage("n", now=1.0).hops] == [("c",), ("d",)]
    assert store.malformed == 3 and [h.task for h in store.lineage("n", now=1.0).hops] == [2, 2]


def test_a_traced_frames_processed_tuples_are_one_hops_record(monkeypatch):
    # one record per traced frame a task processes, not one per tuple: the trace id
    # once, and the master files one record (docs/internals/tracing.md, wt-trace5)
    filed: list = []
    add = TraceStore.add
    monkeypatch.setattr(TraceStore, "add", lambda self, task, inc, records, now: (
        filed.extend((task, r) for r in records), add(self, task, inc, records, now))[1])
    with InMemoryCluster(sentences(Sentences(3), count_tasks=1), ackers=1,
                         trace=1.0) as cluster:
        cluster.run_until_idle()
        counter = cluster.plan.component_tasks()["count"][0]
        for t in cluster.traces():
            check_tree(t, 4)
    kinds = [r[0] for _, r in filed]
    # one record a traced frame processed: a run's entry's (its spans fourth, since
    # 2026-11-28, midday) covers the traces of all its tuples
    hops = [(task, r) for task, r in filed if r[0] == "hops"]
    assert "hop" not in kinds and len(hops) <= 3 * 2  # at most a trace's at each hop
    words = {}
    for task, r in hops:
        spans, times = (r[3], r[4:]) if len(r) % 3 == 1 else ([0, len(r[3:]) // 3], r[3:])
        assert type(r[2]) is int and len(times) == 3 * sum(spans[1::2])
        words[task] = words.get(task, 0) + sum(spans[1::2])
        if task == counter:  # first hop, then (queued, executed, outcome) a word, flat
            assert set(times[2::3]) == {HOP_OUTCOMES.index("acked")}
            assert all(type(v) is int and v >= 0 for v in times)  # whole µs
    assert words.pop(counter) == 3 * 4 and sum(words.values()) == 3  # and the splits'
    store = TraceStore({2: "split"})
    store.add(2, 0, [started(7, "m"), sent(7, 70, 0, 2, ["a", "b"], 1.0, bare=True),
                     ran(7, 70, (1.0, 2.0, "acked")), ("hops", 7, 71, 1000)], now=1.0)
    assert [h.executed_ms for h in store.lineage("m", now=1.0).hops] == [2.0, None]
    assert store.malformed == 1  # a malformed record: counted, the ones before it filed


def test_a_run_of_traced_spout_tuples_cuts_its_turn_once():
    # the turn is cut where a run of traced tuples is due; the piece it starts runs on
    # over the run and the gap after it (drawn when the run is armed), not one a tuple
    random.seed(5)
    with InMemoryCluster(numbers(40_000), ackers=1, trace=0.01, target_latency=None) as cluster:
        spout = cluster.executors[cluster.plan.component_tasks()["numbers"][0]].spout
        pieces, step = [], spout.step
        spout.step = lambda calls, waiting: pieces.append(calls) or step(calls, waiting)
        for _ in range(400):  # 100 calls a turn, 40,000 tuples
            cluster.step(100)
            pieces.append(None)  # a turn's end
        cluster.run_until_idle()
        traced = len(cluster.traces(limit=1000))
    assert 260 <= traced <= 540  # ~400, in runs of 16 (about 25 of them)
    cut = len(pieces) - 2 * 400  # pieces beyond one a turn
    # one a run (it was one a traced tuple, and two before), and one more for a run
    # a turn's end cut short (its rest is a run of its own)
    assert traced // RUN - 3 <= cut <= traced // RUN + 8, (cut, traced)


# -- the records' format: as an instance seals them, as the master reads them -------------

class Sealed(InMemoryCluster):
    """The twin, whose trace records reach its store as an instance's reach the master's:
    packed and sealed in a ``TraceReport``, unsealed (msgpack makes tuples lists). Each
    report's bytes are counted (``reported``)."""

    reported = 0  # this cluster's report bytes (an instance's own count, from the first)

    def _collect_traces(self, task, ex) -> None:
        tracer = getattr(ex, "tracer", None)
        if tracer is not None and tracer.records:
            frames = wire.seal(b"k" * 32, wire.TraceReport(
                task=task, incarnation=self.restarts[task], records=tracer.drain()))
            self.reported += len(frames[0])
            report = wire.unseal(b"k" * 32, frames)
            self.trace_store.add(report.task, report.incarnation, report.records, self.clock())


def ticking(clock, step: float):
    """A wall clock for one task's tracer: the twin's, ``step`` seconds on at each read
    (a traced call reads it as it starts and as it ends: each call lasts ``step``)."""
    reads = [0]

    def wall() -> float:
        reads[0] += 1
        return clock() + reads[0] * step

    return wall


@pytest.mark.parametrize("ackers", [1, 0])
def test_the_records_round_trip_a_sealed_report_into_hops_times_and_holders(ackers):
    # hop ids go as a frame's first, times as whole µs, outcomes as codes, the spout's
    # values in its frame's body: what the master reads back must be every hop, its
    # parent, its times and outcome, and who held a tree (a broken decode fails here)
    odd = {2: "a bad c", 3: "a hold c"} if ackers else {}
    with Sealed(sentences(Sentences(n=6, odd=odd)), ackers=ackers, trace=1.0,
                clock=FakeClock(100.0), message_timeout=5.0) as cluster:
        for task in cluster.plan.component_tasks()["count"]:  # each word's call: 3 ms
            cluster.executors[task].tracer.wall = ticking(cluster.clock, 0.003)
        cluster.run_until_idle()
        cluster.advance(10.0)  # past the timeout: the held tree times out
        traces = {t.msg_id: t for t in cluster.traces()}
        reported = cluster.reported
    assert sorted(traces) == [0, 1, 2, 3, 4, 5]
    for msg_id, t in traces.items():
        check_tree(t, 4)
        assert t.values == (f"s{msg_id} {odd.get(msg_id, 'a b c')}",)  # from the frame
        assert (t.component, t.task, t.started) == ("sentences", 1, 100.0)
        assert (t.hops[0].executed_ms, t.hops[0].queued_ms) == (0.0, 0.0)  # the split's
        assert {h.executed_ms for h in t.hops[1:]} == {3.0}  # the counters'
        assert all(h.queued_ms > 0.0 for h in t.hops[1:])
        assert t.hops[0].outcome == "acked"  # a BasicBolt's input
    if ackers:
        bad = next(h for h in traces[2].hops if h.values == ("bad",))
        hold = next(h for h in traces[3].hops if h.values == ("hold",))
        assert (traces[2].status, bad.outcome, traces[2].held_by) == (
            "failed", "failed", ("count", bad.task))
        assert (traces[3].status, hold.outcome, traces[3].held_by) == (
            "timed_out", None, ("count", hold.task))
        assert [h.outcome for h in traces[0].hops] == ["acked"] * 5
    else:
        assert {t.status for t in traces.values()} == {"acked"}
        assert {h.outcome for t in traces.values() for h in t.hops[1:]} == {None}
    # the reports' bytes a traced sentence of four words: 431 with an acker, 316 without
    # (2026-11-28); the records before wt-trace8's format took ~75 % and ~110 % more
    assert 0 < reported < (460 if ackers else 350) * 6, reported


def test_the_sealed_records_keep_the_store_bounded_and_its_trees_untracked():
    with Sealed(numbers(300), ackers=1, trace=1.0, trace_store=100,
                target_latency=None) as cluster:
        for _ in range(60):  # reports as the tuples go, as an instance's heartbeat sends
            cluster.step(10)
            cluster.traces(limit=1)
        cluster.run_until_idle()
        store = cluster.trace_store
        assert len(cluster.traces(limit=1000)) == 100
        assert store.dropped == 200 and store.malformed == 0
        assert all(t.status == "acked" and len(t.hops) == 1 for t in cluster.traces())
        for _ in range(3):  # a pass lets go of one level of nested tuples of atoms
            gc.collect()
        tree = store._trees[next(reversed(store._trees))]
        assert not any(map(gc.is_tracked, [*tree.frames, *tree.runs]))
