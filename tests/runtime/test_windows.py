"""The window manager alone (pure: no clock, no engine) and the window definitions:
Storm's worked example, count and time windows, tumbling and sliding, time gaps, late
tuples, and the definition-time checks."""

from __future__ import annotations

import warnings

import pytest

from runtime import Bolt, Count, Duration, Topology, TopologyError, Window, WindowedBolt
from runtime.model.constants import WINDOW
from runtime.testing import ListSpout
from runtime.windows import WindowManager

S = ("events", "default")


def hms(h: int, m: int, s: int) -> int:
    """A time of day in ms."""
    return ((h * 60 + m) * 60 + s) * 1000


def bounds(view):
    return view.start, view.end


def names(items):
    return [name for name, _ in items]


# -- Storm's worked example ---------------------------------------------------------------

def test_storms_worked_example_reproduces_exactly():
    """Storm's windowing docs ("Watermarks"): window 20 s, slide 10 s, lag 5 s, a
    watermark each second. e1..e6 arrive before the first watermark, e7..e10 before the
    second: exactly these six windows, and e10 is not evaluated yet."""
    window = Window.sliding(Duration(20), Duration(10), timestamp_field="ts",
                            lag=Duration(5), watermark_interval=Duration(1))
    m = WindowManager(window, inputs=[S])
    first = {"e1": hms(6, 0, 3), "e2": hms(6, 0, 5), "e3": hms(6, 0, 7),
             "e4": hms(6, 0, 18), "e5": hms(6, 0, 26), "e6": hms(6, 0, 36)}
    second = {"e7": hms(8, 0, 25), "e8": hms(8, 0, 26), "e9": hms(8, 0, 27),
              "e10": hms(8, 0, 39)}
    now = hms(9, 0, 0)

    def arrive(events):
        for name, ts in events.items():
            assert m.add((name, ts), S, ts, now) == []

    arrive(first)
    w1 = m.tick(now + 1000)
    assert m.watermark == hms(6, 0, 31)
    arrive(second)
    w2 = m.tick(now + 2000)
    assert m.watermark == hms(8, 0, 34)

    got = [(bounds(v), names(v.tuples)) for v in w1 + w2]
    assert got == [
        ((hms(5, 59, 50), hms(6, 0, 10)), ["e1", "e2", "e3"]),
        ((hms(6, 0, 0), hms(6, 0, 20)), ["e1", "e2", "e3", "e4"]),
        ((hms(6, 0, 10), hms(6, 0, 30)), ["e4", "e5"]),
        ((hms(6, 0, 20), hms(6, 0, 40)), ["e5", "e6"]),
        ((hms(6, 0, 30), hms(6, 0, 50)), ["e6"]),
        ((hms(8, 0, 10), hms(8, 0, 30)), ["e7", "e8", "e9"]),
    ]
    assert len(w1) == 3
    assert m.queued == 4 and "e10" not in {n for v in w1 + w2 for n in names(v.tuples)}
    # every tuple but e7..e10 has left every window, and is handed back to be acked once
    assert sorted(names(m.take_expired())) == sorted(["e1", "e2", "e3", "e4", "e5", "e6"])
    assert m.take_expired() == []


def test_new_and_expired_since_the_last_evaluation():
    window = Window.sliding(Duration(20), Duration(10), timestamp_field="ts")
    m = WindowManager(window, inputs=[S])
    for name, s in [("a", 3), ("b", 13), ("c", 23)]:
        m.add(name, S, s * 1000, 0)
    v1, v2 = m.tick(0)  # watermark 23 s: windows ending 10 s and 20 s
    assert (v1.tuples, v1.new, v1.expired) == (["a"], ["a"], [])
    assert (v2.tuples, v2.new, v2.expired) == (["a", "b"], ["b"], [])
    m.add("d", S, 40_000, 0)
    v3, v4 = m.tick(0)  # watermark 40 s: windows ending 30 s and 40 s
    assert (v3.tuples, v3.new, v3.expired) == (["b", "c"], ["c"], ["a"])
    assert (v4.tuples, v4.new, v4.expired) == (["c", "d"], ["d"], ["b"])


# -- event time: watermarks, gaps, late tuples ----------------------------------------------

def test_the_watermark_is_the_minimum_over_input_streams_minus_the_lag():
    a, b = ("a", "default"), ("b", "default")
    m = WindowManager(Window.tumbling(Duration(10), timestamp_field="ts", lag=Duration(2)),
                      inputs=[a, b])
    m.add("x", a, 50_000, 0)
    assert m.tick(0) == [] and m.watermark is None  # b has sent nothing: no watermark
    m.add("y", b, 30_000, 0)
    m.tick(0)
    assert m.watermark == 28_000  # min(50, 30) - 2 s
    m.add("z", b, 20_000, 0)  # older than b's latest: b's latest stays 30 s
    m.tick(0)
    assert m.watermark == 28_000


def test_a_watermark_evaluates_only_windows_ending_at_or_before_it():
    m = WindowManager(Window.tumbling(Duration(10), timestamp_field="ts"), inputs=[S])
    m.add("a", S, 5_000, 0)
    m.add("b", S, 10_000, 0)  # the end of the first window belongs to it: (0, 10]
    m.add("c", S, 19_999, 0)
    (v,) = m.tick(0)  # watermark 19.999 s: the window ending at 20 s is still open
    assert (v.start, v.end, v.tuples) == (0, 10_000, ["a", "b"])
    m.add("d", S, 20_000, 0)
    (v,) = m.tick(0)
    assert (v.start, v.end, v.tuples) == (10_000, 20_000, ["c", "d"])


def test_time_gaps_are_skipped_not_evaluated_as_empty_windows():
    m = WindowManager(Window.tumbling(Duration(10), timestamp_field="ts"), inputs=[S])
    for name, s in [("a", 1), ("b", 1001), ("c", 2001)]:
        m.add(name, S, s * 1000, 0)
    views = m.tick(0)  # watermark 2001 s: windows ending 10 s and 1010 s; 2010 s is open
    assert [(v.end, v.tuples) for v in views] == [(10_000, ["a"]), (1_010_000, ["b"])]
    assert m.evaluated == 2


def test_late_tuples_are_counted_and_not_kept():
    m = WindowManager(Window.tumbling(Duration(10), timestamp_field="ts"), inputs=[S])
    m.add("a", S, 30_000, 0)
    (v,) = m.tick(0)
    assert m.watermark == 30_000 and v.tuples == ["a"]
    assert m.is_late(29_999) and not m.is_late(30_000)  # Storm: before the watermark
    assert m.add("late", S, 12_000, 0) == []
    # a's tumbling window is over: a is handed back at once; the late tuple is not kept
    assert (m.late, m.queued, m.take_expired()) == (1, 0, ["a"])


def test_event_time_with_a_count_slide_triggers_every_n_tuples_up_to_the_watermark():
    m = WindowManager(Window.sliding(Count(2), Count(2), timestamp_field="ts"), inputs=[S])
    for name, s in [("c", 3), ("a", 1), ("b", 2), ("d", 9)]:
        m.add(name, S, s * 1000, 0)
    views = m.tick(0)  # watermark 9 s: in timestamp order a b | c d
    assert [(v.end, v.tuples) for v in views] == [(2000, ["a", "b"]), (9000, ["c", "d"])]


# -- processing time -------------------------------------------------------------------------

def test_count_windows_sliding_and_tumbling():
    sliding = WindowManager(Window.sliding(Count(3), Count(1)))
    got = [v.tuples for i in range(5) for v in sliding.add(i, S, None, i)]
    assert got == [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    # acked as soon as no later window can hold them: 2 is not in the next one, [3, 4, 5]
    assert sliding.take_expired() == [0, 1, 2]
    tumbling = WindowManager(Window.tumbling(Count(2)))
    got = [v.tuples for i in range(5) for v in tumbling.add(i, S, None, i)]
    assert got == [[0, 1], [2, 3]]
    assert (tumbling.take_expired(), tumbling.queued) == ([0, 1, 2, 3], 1)


def test_processing_time_windows_follow_the_clock_and_have_no_bounds():
    m = WindowManager(Window.sliding(Duration(10), Duration(5)))
    m.add("a", S, None, 1_000)
    m.add("b", S, None, 4_000)
    (v,) = m.tick(5_000)
    assert (v.tuples, v.start, v.end) == (["a", "b"], None, None)
    m.add("c", S, None, 7_000)
    (v,) = m.tick(10_000)  # holds (0 s, 10 s]
    assert (v.tuples, v.expired) == (["a", "b", "c"], [])
    (v,) = m.tick(15_000)  # holds (5 s, 15 s]: a and b are out
    assert (v.tuples, v.expired) == (["c"], ["a", "b"])
    # a tick 10 s late reaches 10 s further back: (10 s, 30 s] holds nothing
    assert m.tick(30_000) == [] and m.take_expired() == ["a", "b", "c"]


def test_processing_time_windows_stretch_over_a_late_tick_and_lose_no_tuple():
    # Storm's TimeEvictionPolicy: a window reaches back by how late its tick is, so a
    # tumbling window is exactly the arrivals since the last tick, whatever the timer does
    m = WindowManager(Window.tumbling(Duration(2)))
    m.add("x", S, None, 100)
    got = [v.tuples for v in m.tick(2_000)]
    m.add("y", S, None, 2_010)  # just after a tick ...
    got += [v.tuples for v in m.tick(4_050)]  # ... and the next one 50 ms late
    m.add("z", S, None, 4_060)
    got += [v.tuples for v in m.tick(6_000)]  # 50 ms early: y is not counted twice
    assert got == [["x"], ["y"], ["z"]]


def test_count_length_with_a_time_slide():
    m = WindowManager(Window.sliding(Count(2), Duration(1)))
    for i in range(5):
        m.add(i, S, None, i)
    (v,) = m.tick(1_000)
    assert v.tuples == [3, 4] and m.take_expired() == [0, 1, 2]


# -- definitions --------------------------------------------------------------------------

class Avg(WindowedBolt):
    outputs = ["start", "end", "avg"]

    def process_window(self, window):
        vals = [t["v"] for t in window.tuples]
        self.emit([window.start, window.end, sum(vals) / len(vals)])


def events_topology(**config):
    topo = Topology("win", **config)
    topo.spout("events", ListSpout([[1, 0]], fields=["v", "ts"]))
    return topo


def test_a_window_adds_its_late_stream_and_its_ticks():
    topo = events_topology()
    w = Window.sliding(Duration(20), Duration(10), timestamp_field="ts", lag=Duration(5),
                       late_stream="late")
    topo.bolt("avg", Avg, window=w).shuffle_grouping("events")
    spec = topo.components["avg"]
    assert spec.streams == {"default": ("start", "end", "avg"), "late": ("ts", "values")}
    assert spec.config[WINDOW] is w and spec.config["tick_freq_secs"] == 1
    topo.bolt("count", Avg, window=Window.tumbling(Count(5))).shuffle_grouping("events")
    assert topo.components["count"].config["tick_freq_secs"] is None


@pytest.mark.parametrize("declare, problem", [
    (lambda t: t.bolt("b", Avg), "needs window="),
    (lambda t: t.bolt("b", Bolt, window=Window.tumbling(Count(2))), "needs a WindowedBolt"),
    (lambda t: t.bolt("b", Avg, window=Count(2)), "must be a Window"),
    (lambda t: t.bolt("b", Avg, window=Window.tumbling(Count(2)), tick_freq_secs=1),
     "drop tick_freq_secs"),
    (lambda t: t.spout("s", ListSpout([[1]], fields=["v"]), window=Window.tumbling(Count(2))),
     "only bolts take a window"),
    (lambda t: t.bolt("b", Avg, window=Window.tumbling(
        Duration(5), timestamp_field="ts", late_stream="default")), "already one of"),
])
def test_wrong_windows_fail_at_definition_naming_the_component(declare, problem):
    with pytest.raises(TopologyError, match=problem):
        declare(events_topology())


@pytest.mark.parametrize("make, problem", [
    (lambda: Window.sliding(Duration(10), 3), "slide must be Duration"),
    (lambda: Window.tumbling(Count()), "length must be"),
    (lambda: Window.tumbling(Duration(5), late_stream="late"), "needs a timestamp_field"),
    (lambda: Window.tumbling(Duration(5), watermark_interval=Duration(1)), "needs a timestamp"),
    (lambda: Window.tumbling(Duration(5), timestamp_field="ts", lag=5), "lag must be"),
    (lambda: Duration(0), "> 0"),
    (lambda: Count(0), ">= 1"),
])
def test_wrong_window_options_fail(make, problem):
    with pytest.raises(TopologyError, match=problem):
        make()


def test_a_message_timeout_shorter_than_length_plus_slide_warns():
    topo = events_topology(message_timeout=20)
    with pytest.warns(UserWarning, match="message_timeout .20.* shorter than"):
        topo.bolt("avg", Avg, window=Window.sliding(Duration(15), Duration(10)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        topo.bolt("ok", Avg, window=Window.sliding(Duration(5), Duration(5)))
        topo.bolt("counts", Avg, window=Window.sliding(Count(500), Count(1)))


def test_a_tuple_at_the_watermark_after_its_window_ended_is_not_late_but_in_no_window():
    m = WindowManager(Window.tumbling(Duration(10), timestamp_field="ts"), inputs=[S])
    m.add("a", S, 30_000, 0)
    (v,) = m.tick(0)  # watermark 30 s: (20, 30] is evaluated
    assert v.tuples == ["a"] and m.take_expired() == ["a"]
    m.add("b", S, 30_000, 0)  # at the watermark: not late (Storm), but (20, 30] is done
    m.add("c", S, 40_000, 0)
    (v,) = m.tick(0)
    assert (v.tuples, v.expired, m.late) == (["c"], ["a", "b"], 0)  # a: left after (20, 30]
    assert m.take_expired() == ["b", "c"]
