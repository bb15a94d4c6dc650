"""Water marks and the backpressure state, driven with explicit times."""

import pytest

from runtime._backpressure import START, STOP, Backpressure, WaterMarks


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
