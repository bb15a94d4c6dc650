"""What a windowed bolt's task reports with its statistics (``InstanceStats.window``):
watermark, open windows and the oldest one's start, held and late tuples, windows
evaluated. The in-memory twin here; real processes in tests/workbench/test_windows_panel.py.
"""

from __future__ import annotations

import random

from runtime import Bolt, Count, Duration, Topology, Window
from runtime.engine.stats import window_report
from runtime.testing import InMemoryCluster, ListSink, ListSpout
from runtime.windows import WindowManager

from .test_windows_engine import FIELDS, Summary, event


def one_task(events, window) -> Topology:
    topo = Topology("windows-live", ackers=1, message_timeout=300)
    topo.spout("events", ListSpout(events, fields=FIELDS))
    topo.bolt("win", Summary, window=window).shuffle_grouping("events")
    topo.bolt("sink", ListSink).shuffle_grouping("win")
    return topo


def window_of(cluster, component: str = "win") -> dict | None:
    reports = [s.window for s in cluster.statistics() if s.component == component]
    assert len(reports) == 1
    return reports[0]


def test_a_windowed_task_reports_its_watermark_open_windows_and_late_tuples():
    # sliding 20 s by 10 s, lag 5 s: events at 3, 5, 18 and 36 s
    events = [event("e1", "k", 3), event("e2", "k", 5), event("e3", "k", 18),
              event("e4", "k", 36)]
    window = Window.sliding(Duration(20), Duration(10), timestamp_field="ts", lag=Duration(5))
    with InMemoryCluster(one_task(events, window)) as cluster:
        cluster.run_until_idle()
        # no watermark yet: every window holding a tuple is open, ends 10 s .. 50 s
        assert window_of(cluster) == {"watermark": None, "open_windows": 5,
                                      "oldest_window_start": -10_000, "open_tuples": 4,
                                      "late_tuples": 0, "evaluated": 0}
        cluster.advance(1.0)  # watermark 31 s: ends 10, 20, 30 s evaluated
        spout = cluster.user_object(cluster.plan.component_tasks()["events"][0])
        spout.tuples.append(event("late", "k", 12))
        spout.todo.append(4)
        cluster.run_until_idle()
        # ends 40 and 50 s hold e4; e3 (18 s) left with the window ending 30 s
        assert window_of(cluster) == {"watermark": 31_000, "open_windows": 2,
                                      "oldest_window_start": 20_000, "open_tuples": 1,
                                      "late_tuples": 1, "evaluated": 3}
        assert window_of(cluster, "sink") is None and window_of(cluster, "events") is None


def test_count_and_processing_time_windows_report_no_open_window_count():
    events = [event(f"e{i}", "k", i) for i in range(5)]
    for window in (Window.sliding(Count(4), Count(2), timestamp_field="ts"),
                   Window.tumbling(Duration(10))):
        with InMemoryCluster(one_task(events, window)) as cluster:
            cluster.run_until_idle()
            report = window_of(cluster)
            assert report["open_windows"] is None and report["oldest_window_start"] is None
            assert report["open_tuples"] >= 1 and report["late_tuples"] == 0


def test_open_windows_skip_the_evaluated_ones_and_count_each_end_once():
    m = WindowManager(Window.sliding(Duration(20), Duration(10), timestamp_field="ts"),
                      inputs=["s"])
    for ts in (1_000, 2_000, 45_000):
        m.add(ts, "s", ts, 0)
    assert m.open_windows() == (4, -10_000)  # ends 10, 20 (1 s, 2 s), 50, 60 (45 s)
    m.add(40_000, "s", 40_000, 0)
    m.watermark = 40_000
    assert m.open_windows() == (2, 30_000)  # ends 50 and 60 s hold 45 s (and not 40 s)


def test_open_windows_match_a_count_of_every_end_by_hand():
    rng = random.Random(21)
    for _ in range(300):
        length, slide = rng.choice([(20_000, 10_000), (10_000, 10_000), (30_000, 7_000)])
        m = WindowManager(Window.sliding(Duration(length / 1000), Duration(slide / 1000),
                                         timestamp_field="ts"), inputs=["s"])
        stamps = sorted(rng.randrange(-50, 200) * 1000 for _ in range(rng.randrange(0, 12)))
        for ts in stamps:
            m.add(ts, "s", ts, 0)
        m.watermark = rng.choice([None, rng.randrange(-60, 200) * 1000])
        after = -10**9 if m.watermark is None else m.watermark
        ends = sorted({e for ts in stamps for e in range(-(10**6 // slide) * slide, 10**6, slide)
                       if e - length < ts <= e and e > after})
        oldest = ends[0] - length if ends else None
        assert m.open_windows() == (len(ends), oldest), (stamps, m.watermark)


class Reporting(Bolt):
    """A bolt of one's own that reports windows through the protocol, not a WindowedBolt."""

    def window_report(self) -> dict | None:
        return {"open_windows": 3}


def test_window_report_is_a_bolt_method_the_engine_calls():
    assert Bolt().window_report() is None
    assert window_report(Bolt()) == {}  # a bolt without windows adds no key
    assert window_report(Reporting()) == {"window": {"open_windows": 3}}
    assert window_report(Summary()) == {}  # a windowed bolt before prepare: no windows yet
