"""Taps (``running.sample``): the buffer, the copy at send time, the executor's switch, and
the master's forwarding. No process is started."""

from __future__ import annotations

import pytest

from runtime import Topology, wire
from runtime.engine.outbound import StreamOut, Tap
from runtime.model.controls import check_keep, check_tap
from runtime.testing import FakeClock, InMemoryCluster, ListSink, ListSpout

# -- the buffer and the copy (pure) -------------------------------------------------------


def test_a_tap_keeps_the_last_n_entries_with_ids_destinations_and_time():
    clock = FakeClock(7.0)
    tap = Tap(3, until=10.0, clock=clock)
    tap.saw([[1], [2]], (4,), tracked=False)
    clock.advance(1.0)
    # a tracked part is flat, values then ids; an int is a root that is its own edge id
    tap.saw([[3], {11: 12}, [4], 13], (5, 6), tracked=True)
    assert list(tap.samples) == [([2], None, (4,), 7.0), ([3], {11: 12}, (5, 6), 8.0),
                                 ([4], {13: 13}, (5, 6), 8.0)]


def test_resizing_a_tap_keeps_what_it_holds_and_extending_it_keeps_the_object():
    tap = Tap(2, until=1.0, clock=lambda: 0.0)
    tap.saw([[1], [2]], (4,), tracked=False)
    assert tap.resized(2, until=5.0) is tap and tap.until == 5.0
    bigger = tap.resized(5, until=6.0)
    assert bigger.n == 5 and [s[0] for s in bigger.samples] == [[1], [2]]


def stream_out(sent):
    """A one-field stream's outlet: its batches hold bare values."""
    out = StreamOut("default", 1, lambda h, b: sent.append((h, b)),
                    on_bad=lambda *a: None)
    return out


def test_an_untapped_stream_copies_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(Tap, "saw", lambda *a: calls.append(a))
    sent = []
    out = stream_out(sent)
    out.ship(wire.data_header(wire.DATA, 1, 4, 2), [1, 2, 3])
    out.ship_to_all([wire.data_header(wire.DATA, 1, t, 2) for t in (4, 5)], [1])
    assert len(sent) == 3 and calls == [] and out.tap is None


def test_a_tapped_stream_copies_once_per_frame_not_per_tuple():
    sent = []
    out = stream_out(sent)
    out.tap = Tap(10, until=1.0, clock=lambda: 3.0, bare=True)  # samples are value lists
    out.ship(wire.data_header(wire.DATA, 1, 4, 2), [1, 2])
    out.ship_to_all([wire.data_header(wire.DATA, 1, t, 2) for t in (5, 6)], [3])
    out.ship(wire.data_header(wire.TRACKED, 1, 4, 2), [4, {9: 8}], tracked=True)
    assert list(out.tap.samples) == [([1], None, (4,), 3.0), ([2], None, (4,), 3.0),
                                     ([3], None, (5, 6), 3.0), ([4], {9: 8}, (4,), 3.0)]


def test_a_tuple_that_could_not_be_sent_is_not_sampled():
    out = StreamOut("default", 1, lambda h, b: None, on_bad=lambda *a: None)
    out.tap = Tap(10, until=1.0, clock=lambda: 0.0, bare=True)
    out.ship(wire.data_header(wire.DATA, 1, 4, 2), [object(), 2])
    assert [s[0] for s in out.tap.samples] == [[2]]


# -- validation (pure) ----------------------------------------------------------------------

STREAMS = [("__system", "__tick"), ("numbers", "default"), ("numbers", "odd"),
           ("sink", "default")]


@pytest.mark.parametrize(("component", "stream", "n", "message"), [
    ("number", "default", 5, r"no component 'number' to sample \(did you mean 'numbers'\?\)"),
    ("__system", "__tick", 5, "no component '__system'"),
    ("numbers", "od", 5, r"'numbers' has no stream 'od' \(did you mean 'odd'\?\); it declares "
                         "default, odd"),
    ("numbers", "default", 0, "n must be an int from 1 to 10000"),
    ("numbers", "default", 2.5, "n must be an int"),
])
def test_bad_sample_requests_are_refused_with_clear_errors(component, stream, n, message):
    with pytest.raises(ValueError, match=message):
        check_tap(STREAMS, component, stream, n)


@pytest.mark.parametrize("keep", [0, -1, 601, "10", None])
def test_a_bad_keep_is_refused(keep):
    with pytest.raises(ValueError, match="keep must be"):
        check_keep(keep)


# -- the executor (in memory, fake clock) ---------------------------------------------------

def cluster(values, **config):
    topo = Topology("tapped")
    topo.spout("numbers", ListSpout([[v] for v in values], fields=["n"]))
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return InMemoryCluster(topo, **config)


def spout_executor(c):
    (task,) = c.plan.component_tasks()["numbers"]
    return c.executors[task]


def test_an_executor_samples_what_its_stream_sent_until_the_tap_expires():
    c = cluster(range(50))
    try:
        ex = spout_executor(c)
        assert ex.tap_samples() == {} and ex.report()["tapped"] == []
        ex.tap("default", 5, seconds=2.0)
        c.run_until_idle()
        samples = ex.tap_samples()["default"]
        # the last frames sent (one per sink task), in the order they were sent
        assert len(samples) == 5 and all(s["values"][0] in range(40, 50) for s in samples)
        sinks = set(c.plan.component_tasks()["sink"])
        for s in samples:
            assert s["fields"] == ["n"] and s["task"] == ex.task and s["stream"] == "default"
            assert s["ids"] is None and set(s["to"]) <= sinks and s["time"] == c.clock()
        assert ex.report()["tapped"] == ["default"]
        c.clock.advance(2.5)
        assert ex.tap_samples() == {}  # expired: switched off
        assert ex.streams["default"].tap is None and ex.report()["tapped"] == []
    finally:
        c.close()


def test_tracked_tuples_are_sampled_with_their_root_and_edge_ids():
    c = cluster(range(10), ackers=1)
    try:
        ex = spout_executor(c)
        ex.tap("default", 100, seconds=5.0)
        c.run_until_idle()
        samples = ex.tap_samples()["default"]
        assert sorted(s["values"][0] for s in samples) == list(range(10))
        assert all(len(s["ids"]) == 1 and all(s["ids"].values()) for s in samples)
    finally:
        c.close()


def test_a_tap_of_an_unknown_stream_is_ignored_and_a_new_request_extends_it():
    c = cluster(range(3))
    try:
        ex = spout_executor(c)
        ex.tap("nope", 5, seconds=1.0)
        assert all(o.tap is None for o in ex.streams.values())
        ex.tap("default", 5, seconds=1.0)
        c.clock.advance(0.8)
        ex.tap("default", 5, seconds=1.0)
        c.clock.advance(0.8)
        assert "default" in ex.tap_samples()
    finally:
        c.close()


def test_the_untapped_executor_path_never_touches_a_tap(monkeypatch):
    monkeypatch.setattr(Tap, "saw", lambda *a: pytest.fail("copied while untapped"))
    c = cluster(range(200))
    try:
        c.run_until_idle()
        assert sum(len(r) for r in [c.sink("sink")]) == 200
    finally:
        c.close()


def test_samples_messages_round_trip_on_the_wire():
    msg = wire.control("samples", task=3, incarnation=0, stream="default", samples=[
                       {"values": [1], "fields": ["n"], "task": 3, "stream": "default",
                       "ids": {2**63 + 5: 2**64 - 1}, "to": [4], "time": 1.5}])
    assert wire.unseal(b"k" * 32, wire.seal(b"k" * 32, msg)) == msg


# -- the master -----------------------------------------------------------------------------

@pytest.fixture
def master(offline_master):
    """Two spout tasks and a bolt task; sends are recorded, the clock is fake."""
    topo = Topology("taps")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    tm = offline_master(topo, 1, heartbeat_timeout=None)
    for task in tm.tasks:
        tm.handle(b"i%d.0" % task, wire.control("hello", role="instance", id=task,
                                                incarnation=0, pid=100 + task))
        tm.handle(b"", wire.control("ready", task=task, incarnation=0))
    tm.sent.clear()
    return tm


def sample(tm, t, n, time, stream="default"):
    return {"values": [n], "fields": ["n"], "task": t, "stream": stream, "ids": None,
            "to": [9], "time": time}


def report(tm, task, samples, incarnation=0, stream="default"):
    tm.handle(b"", wire.control("samples", task=task, incarnation=incarnation,
                                stream=stream, samples=samples))


def ask(tm, n=3, component="numbers", stream="default", **extra):
    return tm.answer_sample(wire.AskSample(id=1, component=component, stream=stream, n=n,
                                           **extra))


def test_the_master_forwards_a_tap_to_each_instance_of_the_component(master):
    spouts = master.component_tasks["numbers"]
    assert ask(master) == []  # warming up
    assert [(i, k) for i, k, _ in master.sent] == [(b"i%d.0" % t, "tap") for t in spouts]
    assert all(f == {"stream": "default", "n": 3, "seconds": 10.0} for _, _, f in master.sent)


def test_the_master_answers_the_newest_n_across_instances_newest_last(master):
    a, b = master.component_tasks["numbers"]
    ask(master)
    report(master, a, [sample(master, a, 1, 1.0), sample(master, a, 3, 3.0)])
    report(master, b, [sample(master, b, 2, 2.0), sample(master, b, 4, 4.0)])
    assert [s["values"] for s in ask(master, n=3)] == [[2], [3], [4]]


def test_samples_after_the_tap_expired_are_dropped_and_a_new_tap_starts_empty(master):
    a, _ = master.component_tasks["numbers"]
    ask(master, keep=1.0)
    report(master, a, [sample(master, a, 1, 1.0)])
    master.clock.advance(2.0)
    report(master, a, [sample(master, a, 2, 2.0)])  # late: nobody is asking any more
    assert ask(master) == []  # and what was kept before is stale
    report(master, a, [sample(master, a, 3, 3.0)])
    assert [s["values"] for s in ask(master)] == [[3]]


def test_samples_from_a_replaced_incarnation_are_ignored(master):
    a, _ = master.component_tasks["numbers"]
    ask(master)
    report(master, a, [sample(master, a, 1, 1.0)], incarnation=5)
    assert ask(master) == []


def test_a_bad_sample_request_is_refused_by_the_master(master):
    with pytest.raises(ValueError, match="did you mean 'numbers'"):
        ask(master, component="number")
    with pytest.raises(ValueError, match="keep must be"):
        ask(master, keep=0)
    assert master.sent == []
