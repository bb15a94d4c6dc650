"""Water marks and the backpressure state, driven with explicit times."""

import pytest

from runtime.processes.backpressure import START, STOP, Backpressure, WaterMarks


def test_crossing_the_high_mark_starts_once_and_the_low_mark_stops_once():
    marks = WaterMarks(high=100, low=40)
    assert [marks.add("t", 50), marks.add("t", 50), marks.add("t", 50)] == [None, START, None]
    assert [marks.remove("t", 100), marks.remove("t", 10), marks.remove("t", 10)] == [
        None, STOP, None]


def test_destinations_are_counted_apart():
    marks = WaterMarks(high=10, low=0)
    assert marks.add(1, 9) is None and marks.add(2, 9) is None
    assert marks.total() == 18
    assert marks.add(1, 1) == START and marks.over == {1}


def test_clearing_a_destination_stops_its_backpressure():
    marks = WaterMarks(high=10, low=5)
    marks.add(3, 20)
    assert marks.clear(3) == STOP and marks.queued[3] == 0


@pytest.mark.parametrize(("high", "low"), [(10, 10), (10, 20), (10, -1)])
def test_marks_must_be_ordered(high, low):
    with pytest.raises(ValueError, match="low < high"):
        WaterMarks(high=high, low=low)


def test_a_peer_announcement_holds_until_it_expires_or_stops():
    bp = Backpressure(announce_ttl=3.0)
    bp.announced(7, START, now=10.0)
    assert bp.active(12.9)
    assert not bp.active(13.0)  # not repeated: expired
    bp.announced(7, START, now=20.0)
    bp.announced(7, STOP, now=21.0)
    assert not bp.active(21.0)


def test_episodes_and_time_under_backpressure_are_accounted():
    bp = Backpressure(announce_ttl=3.0)
    bp.local.add(4)
    assert bp.active(100.0)
    bp.local.discard(4)
    assert not bp.active(102.5)
    bp.local.add(4)
    stats = bp.statistics(104.0)
    assert (stats.active, stats.episodes, stats.seconds) == (True, 2, 2.5)
    assert stats.local_causes == ("4",)


def test_under_local_pressure_only_the_causes_are_read():
    bp = Backpressure(announce_ttl=3.0)
    assert not bp.holds(1) and not bp.holds_spouts()
    bp.local.add(7)
    assert bp.holds(1) and not bp.holds(7) and bp.holds_spouts()
    bp.local.clear()
    bp.announced(9, START, now=0.0)  # a peer's cause holds the spouts and bolts here
    assert bp.holds_spouts() and bp.holds(1)
    bp.announced(9, STOP, now=1.0)
    assert not bp.holds_spouts() and not bp.holds(1)


# -- an executor whose output waits: spouts stop, bolts set their input aside ---------------

def test_a_held_spout_stops_calling_next_tuple_and_a_held_bolt_sets_input_aside():
    from runtime import Topology, wire
    from runtime.testing import InMemoryCluster, ListSink, ListSpout

    topo = Topology("held", batch_size=1)
    topo.spout("numbers", ListSpout([[i] for i in range(100)], fields=["n"]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with InMemoryCluster(topo) as cluster:
        spout_task = cluster.plan.component_tasks()["numbers"][0]
        spout = cluster.executors[spout_task]
        spout.output_waiting = ["a frame its stream manager would not take"]
        spout.step(100)
        assert spout.queued_or_sent() == 0  # held before its first call
        spout.output_waiting = []
        assert spout.step(20) == 20
        sink_task = cluster.plan.component_tasks()["sink"][0]
        sink = cluster.executors[sink_task]
        stream = cluster.plan.stream_ids()[("numbers", "default")]
        header = wire.data_header(wire.DATA, stream, sink_task, spout_task)
        sink.output_waiting = ["held"]
        before = sink.executed
        sink.on_frame(header, wire.encode_batch([1, 2, 3]))  # one field: bare values
        assert sink.executed == before + 1 and sink.leftover[0] == [2, 3]  # the entries
        sink.output_waiting = []
        sink.run_leftover()
        assert sink.executed == before + 3 and not sink.leftover
