"""The spout's hot path, made cheap in docs/internals/performance.md, keeps its behaviour:
exact call counts, a look at held output every STEP_CHUNK calls, every emit checked."""

from __future__ import annotations

import pytest

from runtime import BasicBolt, Bolt, Spout, Topology, wire
from runtime.engine.errors import UserCodeError
from runtime.engine.spout_side import STEP_CHUNK, _marked_steps, _untracked_steps
from runtime.testing import InMemoryCluster, ListSink, ListSpout

# each test runs with the C closures and with the Python ones (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("closures")


@pytest.mark.parametrize("calls", [0, 1, STEP_CHUNK - 1, STEP_CHUNK, STEP_CHUNK + 1, 500])
def test_untracked_steps_make_exactly_the_calls_asked_for(calls):
    made = []
    _untracked_steps(lambda: made.append(1), calls, [])
    assert len(made) == calls


@pytest.mark.parametrize("held_after", [1, 5, STEP_CHUNK, STEP_CHUNK + 3])
def test_untracked_steps_stop_at_the_next_look_once_output_waits(held_after):
    waiting, made = [], []

    def next_tuple():
        made.append(1)
        if len(made) == held_after:
            waiting.append("a frame its stream manager would not take")

    _untracked_steps(next_tuple, 100, waiting)
    looks = -(-held_after // STEP_CHUNK)  # the chunk in which it became held is finished
    assert len(made) == looks * STEP_CHUNK


@pytest.mark.parametrize("calls", [0, 1, STEP_CHUNK - 1, STEP_CHUNK, STEP_CHUNK + 1, 500])
def test_marked_steps_mark_before_every_chunk_and_make_the_calls_asked_for(calls):
    log = []
    _marked_steps(lambda: log.append("call"), calls, [], lambda: log.append("mark"))
    assert log.count("call") == calls
    expected = []
    for start in range(0, calls, STEP_CHUNK):
        expected += ["mark"] + ["call"] * min(STEP_CHUNK, calls - start)
    assert log == expected


def test_marked_steps_stop_at_the_next_look_once_output_waits():
    waiting, log = [], []

    def next_tuple():
        log.append("call")
        if log.count("call") == 3:
            waiting.append("held")

    _marked_steps(next_tuple, 100, waiting, lambda: log.append("mark"))
    assert log == ["mark"] + ["call"] * STEP_CHUNK


def test_nothing_is_called_while_output_waits():
    made = []
    _untracked_steps(lambda: made.append(1), 5, ["held"])
    _untracked_steps(lambda: made.append(1), 50, ["held"])
    assert made == []


class Emitter(Spout):
    """Emits what the test put in ``plan``, one entry per next_tuple."""

    outputs = {"default": ["word"], "other": ["a", "b"]}
    plan: list = []

    def open(self, config, context):
        self.acked = []

    def next_tuple(self):
        if self.plan:
            self.emit(*self.plan.pop(0))

    def ack(self, msg_id):
        self.acked.append(msg_id)


def _cluster(**config):
    topo = Topology("hot", **config)
    topo.spout("words", Emitter)
    topo.bolt("sink", ListSink).shuffle_grouping("words")
    topo.bolt("other", ListSink).shuffle_grouping("words", "other")
    return InMemoryCluster(topo, eager_flush=False)


def _spout(cluster):
    return cluster.executors[cluster.plan.component_tasks()["words"][0]]


def test_a_full_batch_leaves_at_once_and_the_rest_waits():
    with _cluster(batch_size=3) as cluster:
        spout = _spout(cluster)
        for i in range(7):
            spout.user.emit([f"w{i}"])
        assert len(cluster.frames) == 2
        assert [wire.decode_batch(b) for _, b in cluster.frames] == [  # one field: bare
            ["w0", "w1", "w2"], ["w3", "w4", "w5"]]
        assert spout.streams["default"].queued() == 1 and spout.queued_or_sent() == 7


def test_every_kind_of_emit_still_works_beside_the_fast_one():
    with _cluster(batch_size=100) as cluster:
        spout = _spout(cluster)
        emit = spout.user.emit
        emit(("a tuple",))  # any sized sequence of the right length, as before
        emit(["by name"], "".join(["def", "ault"]))  # equal, not identical, stream name
        emit(["with id"], msg_id=7)  # at most once: acked when emitted
        emit(["x", 1], stream="other")
        spout.step(1)
        assert spout.user.acked == [7]
        spout.flush()
        cluster.deliver()
        assert cluster.sink("sink") == [["a tuple"], ["by name"], ["with id"]]
        assert cluster.sink("other") == [["x", 1]]


@pytest.mark.parametrize("values, message", [
    (["one", "two"], "emitted 2 values but the stream declares 1"),
    (5, "emitted a int"),
    ([], "emitted 0 values"),
    ({"w"}, "emitted a set"),  # one value, but no positions: refused, never unpacked
])
def test_a_wrong_emit_on_the_default_stream_names_the_component(values, message):
    with _cluster() as cluster:
        spout = _spout(cluster)
        with pytest.raises(ValueError, match=message) as err:
            spout.user.emit(values)
        assert "'words'" in str(err.value)


def test_an_undeclared_stream_is_still_refused():
    with _cluster() as cluster:
        spout = _spout(cluster)
        spout.user.plan = [(["w"], "nowhere")]
        with pytest.raises(UserCodeError, match="undeclared stream 'nowhere'"):
            spout.step(1)


class NoDefault(Spout):
    outputs = {"other": ["a"]}

    def next_tuple(self):
        self.emit(["x"])


def test_a_spout_without_a_default_stream_is_told_so():
    topo = Topology("no-default")
    topo.spout("words", NoDefault)
    topo.bolt("sink", ListSink).shuffle_grouping("words", "other")
    with InMemoryCluster(topo, eager_flush=False) as cluster:
        spout = _spout(cluster)
        with pytest.raises(ValueError, match="undeclared stream 'default'"):
            spout.user.emit(["x"])
        spout.user.emit(["y"], "other")
        spout.flush()
        cluster.deliver()
        assert cluster.sink("sink") == [["y"]]


# -- the bolt side: a frame made into Tuples ------------------------------------------------
class Fragile(Bolt):
    """A sink that counts what it processed and raises on the value -1."""

    outputs = []
    seen: list = []

    def process(self, tup):
        if tup.values[0] == -1:
            raise ValueError("minus one")
        self.seen.append((tup["n"], tup.component, tup.stream))


def _bolt(bolt_class, **config):
    topo = Topology("sink")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]))
    topo.bolt("b", bolt_class).shuffle_grouping("numbers")
    cluster = InMemoryCluster(topo, **config)
    tasks, streams = cluster.plan.component_tasks(), cluster.plan.stream_ids()
    header = wire.data_header(wire.DATA, streams[("numbers", "default")], tasks["b"][0],
                              tasks["numbers"][0])
    return cluster, cluster.executors[tasks["b"][0]], header


class Keeper(Bolt):
    """Keeps every third tuple it is given (as a bolt that acks later, or windows, does)."""

    outputs = []

    def prepare(self, config, context):
        self.kept, self.seen, self.objects, self.same = [], [], set(), []

    def process(self, tup):
        self.seen.append((list(tup.values), tup.ids, tup.ack_val))
        self.same.append(tup.ids is tup.ack_val)  # a RUN's: one int (the ack reads it)
        self.objects.add(id(tup))
        if tup.values[0] % 3 == 0:
            self.kept.append(tup)


@pytest.mark.parametrize("kind", [wire.DATA, wire.RUN, wire.TRACKED, wire.ANCHORED])
def test_a_tuple_a_bolt_kept_is_never_changed_and_the_others_are_made_anew(kind):
    # metrics off: the frame in one stride (with them on, its first tuples are each
    # sampled, each stride making a Tuple of its own)
    cluster, bolt, header = _bolt(Keeper, metrics=False)
    with cluster:
        header = wire.data_header(kind, *wire.parse_header(header)[1:])
        first = 1 << 63 | 5
        body = {wire.DATA: list(range(12)), wire.RUN: [first, list(range(12))],
                wire.TRACKED: [x for n in range(12) for x in (n, {first: n + 1})],
                wire.ANCHORED: [x for n in range(12) for x in (n, first, n + 1)]}[kind]
        bolt.on_frame(header, wire.encode_batch(body))
        ids = {wire.DATA: [None] * 12, wire.RUN: [first + n for n in range(12)],
               wire.TRACKED: [{first: n + 1} for n in range(12)],
               wire.ANCHORED: [first] * 12}[kind]
        # ack_val as sent; a spout tuple's only copy starts with its root (its own edge)
        vals = [n + 1 if kind == wire.ANCHORED else ids[n] if kind == wire.RUN else 0
                for n in range(12)]
        assert bolt.user.seen == [([n], ids[n], vals[n]) for n in range(12)]
        assert [(t.values, t.ids) for t in bolt.user.kept] == [
            ([n], ids[n]) for n in (0, 3, 6, 9)]  # as they were given, after the batch
        assert len({id(t) for t in bolt.user.kept}) == 4
        assert len(bolt.user.objects) <= 5  # the others were made again in place


class BasicKeeper(BasicBolt):
    """:class:`Keeper` as a BasicBolt (acked by the runtime), sending each input on."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.kept, self.seen = [], []

    def process(self, tup):
        self.seen.append((list(tup.values), tup.ids, tup.ack_val))
        if tup.values[0] % 3 == 0:
            self.kept.append(tup)
        self.emit([tup.values[0] * 10])


@pytest.mark.parametrize("bolt_class", [Keeper, BasicKeeper])
@pytest.mark.parametrize("kind", [wire.DATA, wire.RUN, wire.TRACKED, wire.ANCHORED])
def test_input_set_aside_while_output_waits_is_taken_up_with_its_values_and_ids(
        bolt_class, kind):
    cluster, bolt, header = _bolt(bolt_class)
    with cluster:
        header = wire.data_header(kind, *wire.parse_header(header)[1:])
        first = 1 << 63 | 5
        body = {wire.DATA: [3, 4, 5, 6], wire.RUN: [first, [3, 4, 5, 6]],
                wire.TRACKED: [x for n in (3, 4, 5, 6) for x in (n, {first: n})],
                wire.ANCHORED: [x for n in (3, 4, 5, 6) for x in (n, first + n, 7 * n)]}[kind]
        ids = {wire.DATA: [None] * 4, wire.RUN: [first + i for i in range(4)],
               wire.TRACKED: [{first: n} for n in (3, 4, 5, 6)],
               wire.ANCHORED: [first + n for n in (3, 4, 5, 6)]}[kind]
        vals = [7 * n if kind == wire.ANCHORED else i if kind == wire.RUN else 0
                for n, i in zip((3, 4, 5, 6), ids)]  # as sent; a RUN tuple's: its root
        bolt.output_waiting = ["held"]
        bolt.on_frame(header, wire.encode_batch(body))
        assert bolt.executed == 1 and bolt.user.seen == [([3], ids[0], vals[0])]
        bolt.output_waiting = []
        bolt.run_leftover()
        assert bolt.executed == 4 and not bolt.leftover
        assert bolt.user.seen == [([n], i, v) for n, i, v in zip((3, 4, 5, 6), ids, vals)]
        if kind == wire.RUN and bolt_class is Keeper:  # set aside with the same ints
            assert bolt.user.same == [True] * 4
        assert bolt.acked == (4 if bolt_class is BasicKeeper else 0)  # acked on return
        assert [t.values for t in bolt.user.kept] == [[3], [6]]


def test_a_sink_counts_what_it_processed_and_reports_what_raised():
    cluster, sink, header = _bolt(Fragile)
    with cluster:
        sink.user.seen = []
        sink.on_frame(header, wire.encode_batch([1, 2]))  # one field: bare values
        assert sink.executed == 2
        assert sink.user.seen == [(1, "numbers", "default"), (2, "numbers", "default")]
        with pytest.raises(UserCodeError, match="Fragile.process"):
            sink.on_frame(header, wire.encode_batch([3, -1, 4]))
        assert sink.executed == 3  # the one before the raise, not the one that raised
        assert [n for n, _, _ in sink.user.seen] == [1, 2, 3]


class AckingSink(Bolt):
    """A sink that acks what it counts, and fails the value -1."""

    outputs = []

    def prepare(self, config, context):
        self.counted = 0

    def process(self, tup):
        if tup.values[0] == -1:
            self.fail(tup)
            return
        self.counted += 1
        self.ack(tup)


def test_tracked_input_to_a_sink_is_acked_and_failed_once_each():
    topo = Topology("tracked-sink", ackers=1)
    topo.spout("numbers", ListSpout([[i] for i in range(50)] + [[-1]], fields=["n"]))
    topo.bolt("b", AckingSink, parallelism=2).shuffle_grouping("numbers")
    with InMemoryCluster(topo) as cluster:
        sinks = [cluster.executors[t] for t in cluster.plan.component_tasks()["b"]]
        cluster.run_until_idle()
        spout = next(s for s in cluster.statistics() if s.component == "numbers")
        assert (spout.acked, spout.failed) == (50, 1)  # the spout's ack and fail, once each
        assert sum(ex.user.counted for ex in sinks) == 50
        assert sum(ex.executed for ex in sinks) == 51


class Pairs(Bolt):
    """A sink of a two-field stream that keeps what it was given, as values."""

    outputs = []

    def prepare(self, config, context):
        self.seen = []

    def process(self, tup):
        self.seen.append((tup["a"], tup[1]))


@pytest.mark.parametrize("metrics", [True, False])
def test_an_untracked_frame_counts_and_times_every_tuple_across_its_samples(metrics):
    # execute_data runs from one sampled tuple to the next without counting each: a
    # frame of many samples (one in at most MAX_STRIDE) still counts every tuple, in
    # the statistics and in the latency histograms, and processes them in order
    topo = Topology("pairs")
    topo.spout("pairs", ListSpout([[1, 2]], fields=["a", "b"]))
    topo.bolt("b", Pairs).shuffle_grouping("pairs")
    with InMemoryCluster(topo, metrics=metrics) as cluster:
        tasks, streams = cluster.plan.component_tasks(), cluster.plan.stream_ids()
        header = wire.data_header(wire.DATA, streams[("pairs", "default")], tasks["b"][0],
                                  tasks["pairs"][0])
        bolt = cluster.executors[tasks["b"][0]]
        for start in (0, 5000):
            bolt.on_frame(header, wire.encode_batch([[n, -n] for n in range(start,
                                                                              start + 5000)]))
        assert bolt.executed == 10_000
        assert bolt.user.seen == [(n, -n) for n in range(10_000)]
        histogram = bolt.counts.execute_latency
        assert histogram is None if not metrics else histogram.count == 10_000
