"""Whole topologies through the in-memory twin (``runtime.testing.InMemoryCluster``): the
same executors, groupings and wire encoding as the processes, in one thread, on a fake
clock."""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from runtime import (
    BasicBolt,
    Bolt,
    FailedException,
    Grouping,
    Spout,
    Topology,
    TopologyError,
    wire,
)
from runtime.testing import InMemoryCluster, ListSink, ListSpout

TEXT = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "the"] * 5


def numbers(n: int = 6, parallelism: int = 1) -> Topology:
    topo = Topology("t")
    topo.spout("nums", ListSpout([[i] for i in range(n)], fields=["n"]), parallelism=parallelism)
    return topo


def tasks(cluster: InMemoryCluster, component: str) -> tuple[int, ...]:
    return cluster.plan.component_tasks()[component]


def objects(cluster: InMemoryCluster, component: str) -> list:
    return [cluster.user_object(t) for t in tasks(cluster, component)]


def stats(cluster: InMemoryCluster, component: str) -> list:
    return [s for s in cluster.statistics() if s.component == component]


def received_by_task(cluster: InMemoryCluster, sink: str = "sink") -> dict[int, list]:
    out: dict[int, list] = {}
    for values, _src, _src_task, _stream, task in cluster.sink(sink, with_source=True):
        out.setdefault(task, []).append(values)
    return out


def drain(cluster: InMemoryCluster, spout_calls: int = 1) -> None:
    while cluster.step(spout_calls):
        pass


# -- word count and the groupings -----------------------------------------------------------

class WordCount(Bolt):
    outputs = ["word", "count"]

    def prepare(self, config, context):
        self.counts = Counter()

    def process(self, tup):
        word = tup["word"]
        self.counts[word] += 1
        self.emit([word, self.counts[word]], anchors=[tup])
        self.ack(tup)


def test_word_count_with_fields_grouping():
    topo = Topology("wc")
    topo.spout("words", ListSpout([[w] for w in TEXT], fields=["word"]), parallelism=2)
    topo.bolt("count", WordCount, parallelism=3).fields_grouping("words", ["word"])
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        per_task = [bolt.counts for bolt in objects(cluster, "count")]
        assert sum(s.emitted for s in stats(cluster, "words")) == len(TEXT)
        assert sum(s.executed for s in stats(cluster, "count")) == len(TEXT)
    assert sum(per_task, Counter()) == Counter(TEXT)
    assert sum(len(c) for c in per_task) == len(set(TEXT))  # each word on one task only
    assert all(per_task)


def test_all_grouping_replicates_to_every_task():
    topo = numbers(4)
    topo.bolt("sink", ListSink, parallelism=3).all_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = received_by_task(cluster)
    assert got == {t: [[0], [1], [2], [3]] for t in (2, 3, 4)}


def test_global_grouping_sends_everything_to_the_lowest_task():
    topo = numbers(5, parallelism=2)
    topo.bolt("sink", ListSink, parallelism=3).global_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = received_by_task(cluster)
    assert list(got) == [3] and sorted(got[3]) == [[i] for i in range(5)]


def test_shuffle_grouping_balances():
    topo = numbers(9)
    topo.bolt("sink", ListSink, parallelism=3).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = received_by_task(cluster)
    assert sorted(map(len, got.values())) == [3, 3, 3]


class Numbered(Spout):
    outputs = {"default": ["n"], "other": ["n", "why"]}

    def open(self, config, context):
        self.n = 0

    def next_tuple(self):
        if self.n < 6:
            if self.n % 3:
                self.emit([self.n])
            else:
                self.emit([self.n, "div3"], stream="other")
            self.n += 1


def test_a_bolt_subscribed_to_a_named_stream_gets_only_that_stream():
    topo = Topology("t")
    topo.spout("src", Numbered)
    topo.bolt("sink", ListSink).shuffle_grouping("src", stream="other")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = cluster.sink("sink", with_source=True)
    assert [(values, stream) for values, _, _, stream, _ in got] == [
        ([0, "div3"], "other"), ([3, "div3"], "other")]


class Evens:
    """A duck-typed custom grouping: even numbers to every task, odd ones to the first."""

    def choose_tasks(self, values):
        return self.target_tasks if values[0] % 2 == 0 else self.target_tasks[:1]


def test_custom_grouping():
    topo = numbers(4)
    topo.bolt("sink", ListSink, parallelism=2).custom_grouping("nums", Evens())
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = received_by_task(cluster)
    assert got == {2: [[0], [1], [2], [3]], 3: [[0], [2]]}


class Stray(Grouping):
    def choose_tasks(self, values):
        return [99]


def test_a_custom_grouping_that_chooses_a_stranger_fails_the_sender():
    topo = numbers(2)
    topo.bolt("sink", ListSink).custom_grouping("nums", Stray())
    with InMemoryCluster(topo) as cluster:
        cluster.step()  # (a restarted ListSpout starts over, so this would never go idle)
        assert cluster.restarts == {1: 1, 2: 0} and cluster.sink("sink") == []
    assert cluster.exceptions[0]["error"].startswith(
        "ListSpout grouping raised ValueError: grouping")
    assert "chose task 99" in cluster.exceptions[0]["error"]


# -- direct grouping ------------------------------------------------------------------------

class Dealer(Spout):
    outputs = ["n"]

    def open(self, config, context):
        self.targets, self.n = context.get_component_tasks("sink"), 0

    def next_tuple(self):
        if self.n < 6:
            self.emit_direct(self.targets[self.n % 2], [self.n])
            self.n += 1


def dealt() -> Topology:
    topo = Topology("t")
    topo.spout("deal", Dealer)
    topo.bolt("sink", ListSink, parallelism=2).direct_grouping("deal")
    return topo


def test_emit_direct_reaches_the_named_task():
    with InMemoryCluster(dealt()) as cluster:
        cluster.run_until_idle()
        assert received_by_task(cluster) == {2: [[0], [2], [4]], 3: [[1], [3], [5]]}


def test_emit_direct_to_a_task_that_does_not_subscribe():
    with InMemoryCluster(dealt()) as cluster, pytest.raises(
            ValueError, match="component 'deal': emit_direct to task 1, which does not "
                              "subscribe to stream 'default' with a direct grouping"):
        cluster.user_object(1).emit_direct(1, [0])


def test_a_plain_emit_skips_direct_subscribers():
    with InMemoryCluster(dealt()) as cluster:
        cluster.user_object(1).emit([7])
        cluster.run_until_idle()
        assert [7] not in cluster.sink("sink")


# -- emit errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("emit, message", [
    (lambda s: s.emit(["x"], stream="other"),
     r"component 'nums': emit on undeclared stream 'other'; it declares \['default'\]"),
    (lambda s: s.emit(["x", "y"]),
     r"component 'nums' stream 'default': emitted 2 values but the stream declares 1 field"),
    (lambda s: s.emit(5), "component 'nums' stream 'default': emitted a int but"),
    (lambda s: s.emit_direct(2, ["x"], stream="other"), "emit on undeclared stream 'other'"),
])
def test_bad_emits_name_the_component(emit, message):
    topo = numbers()
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster, pytest.raises(ValueError, match=message):
        emit(cluster.user_object(1))


class Misrouter(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit([tup["n"]], stream="nowhere")


def test_a_bad_emit_in_process_restarts_the_task():
    topo = numbers(1)
    topo.bolt("bad", Misrouter).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert cluster.restarts == {1: 0, 2: 1}
    assert cluster.exceptions[0]["task"] == 2
    assert "Misrouter.process raised ValueError: component 'bad': emit on undeclared stream " \
           "'nowhere'" in cluster.exceptions[0]["error"]


# -- failures and restarts ------------------------------------------------------------------

class Picky(Bolt):
    """Relays numbers, but raises on 3."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.seen = 0

    def process(self, tup):
        if tup["n"] == 3:
            raise ZeroDivisionError("three")
        self.seen += 1
        self.emit([tup["n"]])


def picky() -> Topology:
    topo = numbers(6)
    topo.bolt("picky", Picky).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("picky")
    topo.bolt("all", ListSink).shuffle_grouping("nums")
    return topo


def test_a_raising_bolt_is_restarted_fresh_and_the_rest_keeps_running():
    with InMemoryCluster(picky()) as cluster:
        before = cluster.user_object(2)
        drain(cluster, spout_calls=1)  # one tuple per frame
        after = cluster.user_object(2)
        assert after is not before and (before.seen, after.seen) == (3, 2)
        assert cluster.restarts == {1: 0, 2: 1, 3: 0, 4: 0}
        assert sorted(cluster.sink("sink")) == [[0], [1], [2], [4], [5]]
        assert sorted(cluster.sink("all")) == [[i] for i in range(6)]
        assert [s.restarts for s in stats(cluster, "picky")] == [1]


def test_the_exception_is_recorded_with_its_traceback():
    with InMemoryCluster(picky()) as cluster:
        cluster.run_until_idle()
    (exc,) = cluster.exceptions
    assert exc["task"] == 2 and exc["error"] == "Picky.process raised ZeroDivisionError: three"
    assert 'raise ZeroDivisionError("three")' in exc["traceback"]
    assert exc["traceback"].rstrip().endswith("ZeroDivisionError: three")


def test_what_a_crashing_bolt_emitted_before_it_raised_is_sent():
    with InMemoryCluster(picky()) as cluster:
        cluster.run_until_idle()  # all six in one frame: 0, 1, 2 relayed, then 3 raises
        assert sorted(cluster.sink("sink")) == [[0], [1], [2]]


class FailsToStartOnce(Bolt):
    def prepare(self, config, context):
        flag = os.path.join(context.run_dir, "failed-once")
        if not os.path.exists(flag):
            open(flag, "w").close()
            raise OSError("not yet")

    def process(self, tup):
        self.ack(tup)


def test_a_bolt_whose_prepare_fails_is_restarted_until_it_starts():
    topo = numbers(3)
    topo.bolt("late", FailsToStartOnce).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert cluster.restarts[2] == 1
        assert [s.executed for s in stats(cluster, "late")] == [3]
    assert "FailsToStartOnce.prepare raised OSError: not yet" in cluster.exceptions[0]["error"]


class NeverStarts(Bolt):
    def prepare(self, config, context):
        raise OSError("never")


def test_a_bolt_that_never_starts_stops_the_twin_instead_of_looping():
    topo = numbers(1)
    topo.bolt("dead", NeverStarts).shuffle_grouping("nums")
    with pytest.raises(RuntimeError, match=r"task 2 \('dead'\): failed to start .* times in a "
                                           "row.*NeverStarts.prepare raised OSError: never"):
        InMemoryCluster(topo)


# -- values that cannot travel --------------------------------------------------------------

@pytest.mark.parametrize("subscribe, copies", [
    (lambda sink: sink.shuffle_grouping("words"), 1),
    (lambda sink: sink.all_grouping("words"), 2),
    (lambda sink: sink.fields_grouping("words", ["word"]), 1),  # one key cannot be hashed
])
def test_an_unencodable_value_is_dropped_and_named(subscribe, copies):
    topo = Topology("t")
    tuples = [["a", 1], ["b", object()], ["c", 3], [object(), 4], ["d", 5]]
    topo.spout("words", ListSpout(tuples, fields=["word", "n"]))
    subscribe(topo.bolt("sink", ListSink, parallelism=2))
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert cluster.restarts == {1: 0, 2: 0, 3: 0}
        assert sorted(cluster.sink("sink")) == sorted([["a", 1], ["c", 3], ["d", 5]] * copies)
        assert [(s.dropped, s.errors) for s in stats(cluster, "words")] == [(2, 2)]
    errors = sorted(e["error"] for e in cluster.exceptions)
    assert [e.split(": values must")[0] for e in errors] == [
        "ListSpout.emit: component 'words' stream 'default': cannot send field(s) n (object)",
        "ListSpout.emit: component 'words' stream 'default': cannot send field(s) word (object)"]


# -- BasicBolt ------------------------------------------------------------------------------

class Halve(BasicBolt):
    outputs = ["n"]

    def process(self, tup):
        if tup["n"] % 2:
            raise FailedException("odd")
        self.emit([tup["n"] // 2])


def test_basic_bolt_acks_on_return_and_fails_on_failed_exception():
    topo = numbers(6)
    topo.bolt("halve", Halve).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("halve")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        (halve,) = stats(cluster, "halve")
        assert (halve.executed, halve.acked, halve.failed) == (6, 3, 3)
        assert sorted(cluster.sink("sink")) == [[0], [1], [2]]
        assert cluster.restarts[2] == 0 and cluster.exceptions == []


def test_failed_exception_in_a_plain_bolt_is_an_error():
    class Plain(Bolt):
        def process(self, tup):
            raise FailedException("plain bolts fail with self.fail(tup)")

    topo = numbers(1)
    topo.bolt("plain", Plain).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert cluster.restarts[2] == 1


# -- ticks, batching and the clock ----------------------------------------------------------

class Ticker(Bolt):
    def prepare(self, config, context):
        self.ticks = []

    def process_tick(self, tup):
        self.ticks.append((tup.is_tick, tup.component, tup.values))


def ticking() -> InMemoryCluster:
    topo = numbers(1)
    topo.bolt("ticker", Ticker, tick_freq_secs=2).shuffle_grouping("nums")
    return InMemoryCluster(topo)


def test_ticks_arrive_every_tick_freq_secs_and_not_before():
    with ticking() as cluster:
        ticker = cluster.user_object(2)
        counts = []
        for dt in (1.5, 0.5, 1.0, 1.0, 1.75, 0.25):
            cluster.advance(dt)
            counts.append(len(ticker.ticks))
        assert counts == [0, 1, 1, 2, 2, 3]
        assert ticker.ticks[0] == (True, "__system", [2])


def test_ticks_are_not_counted_as_executed():
    with ticking() as cluster:
        cluster.advance(2)
        assert [s.executed for s in stats(cluster, "ticker")] == [0]


def batching(**config) -> InMemoryCluster:
    topo = numbers(25)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    return InMemoryCluster(topo, eager_flush=False, batch_size=10, flush_interval=1.0, **config)


def test_a_full_batch_is_sent_at_once():
    with batching() as cluster:
        cluster.step(spout_calls=25)
        assert len(cluster.sink("sink")) == 20
        cluster.run_until_idle()
        assert len(cluster.sink("sink")) == 20


def test_a_partial_batch_is_sent_when_the_flush_interval_passes():
    with batching() as cluster:
        cluster.step(spout_calls=5)
        cluster.advance(0.75)
        assert cluster.sink("sink") == []
        cluster.advance(0.25)
        assert len(cluster.sink("sink")) == 5


def test_eager_flush_sends_everything_each_round():
    topo = numbers(5)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo, batch_size=10, flush_interval=1.0) as cluster:
        cluster.step(spout_calls=5)
        assert len(cluster.sink("sink")) == 5


def test_a_component_may_have_its_own_batch_size():
    topo = Topology("t")
    topo.spout("nums", ListSpout([[i] for i in range(10)], fields=["n"]), batch_size=3)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo, eager_flush=False, batch_size=100) as cluster:
        cluster.step(spout_calls=10)
        assert len(cluster.sink("sink")) == 9


# -- ListSpout's pace ----------------------------------------------------------------------

def test_a_list_spout_is_paced_until_its_rate_until_file_appears():
    """``rate_until``: the rate holds (a rate this low lets each task emit its first tuple
    and no more) until the named file is in the run directory, then the list runs out."""
    topo = Topology("paced")
    spout = ListSpout([[i] for i in range(40)], fields=["n"], rate=1e-9, rate_until="go")
    topo.spout("nums", spout, parallelism=2)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        for _ in range(20):
            cluster.step()
        assert sorted(cluster.sink("sink")) == [[0], [1]]  # one each: held by the rate
        open(os.path.join(cluster.run_dir, "go"), "w").close()
        cluster.run_until_idle()
        assert sorted(cluster.sink("sink")) == [[i] for i in range(40)]
        assert [s.rate for s in objects(cluster, "nums")] == [None, None]


# -- at most once ---------------------------------------------------------------------------

def test_spouts_are_acked_at_emit():
    topo = numbers(7, parallelism=2)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert [s.acked for s in objects(cluster, "nums")] == [{0, 2, 4, 6}, {1, 3, 5}]
        assert [s.acked for s in stats(cluster, "nums")] == [4, 3]


# -- user code travels by value -------------------------------------------------------------

def test_user_code_is_shipped_with_cloudpickle():
    """A class defined in a function, holding a lambda: plain pickle could carry neither."""
    scale = 10

    class Local(Bolt):
        outputs = ["n"]
        times = staticmethod(lambda n: n * scale)

        def process(self, tup):
            self.emit([self.times(tup["n"])])

    topo = numbers(3)
    topo.bolt("local", Local).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("local")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        assert sorted(cluster.sink("sink")) == [[0], [10], [20]]


def test_a_component_that_cannot_be_shipped_is_named():
    topo = numbers(1)
    spout = topo.components["nums"].impl
    spout.lock = threading.Lock()
    with pytest.raises(TopologyError, match="component 'nums': ListSpout cannot be shipped to "
                                            "its instances: cannot pickle '_thread.lock'"):
        InMemoryCluster(topo)


# -- malformed frames -----------------------------------------------------------------------

@pytest.mark.parametrize("header, problem", [
    (wire.data_header(wire.DATA, 1, 2, 0), "frame from unknown task 0"),
    (wire.data_header(wire.DATA, 9, 2, 1), "frame from unknown task 1 or stream 9"),
    (wire.data_header(wire.DATA, 0, 2, 1), "task 1 does not belong to '__system'"),
    (wire.data_header(wire.DATA, 1, 3, 1), "frame for task 3 reached task 2"),
    (wire.data_header(wire.HELLO, 1, 2, 1), "frame kind 9 is not for a bolt"),
])
def test_a_malformed_frame_is_refused(header, problem):
    topo = numbers(1)
    topo.bolt("sink", ListSink).shuffle_grouping("nums")
    with InMemoryCluster(topo) as cluster, pytest.raises(wire.WireError, match=problem):
        cluster.executors[2].on_frame(header, wire.encode_batch([1]))
