"""A windowed bolt's windows, live, on real processes: what its task reports reaches
``running.statistics()``, ``running.metrics()`` (per task and for the component) and the
dashboard's task view (``workbench._windows_panel``, drawn by ``Dashboard.refresh``)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from runtime import Duration, Spout, Topology, Window, WindowedBolt
from runtime.testing import ListSink, wait_for
from workbench import _windows_panel
from workbench._dashboard import Dashboard, collect

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # reach the instances by value


class Names(WindowedBolt):
    outputs = ["end", "names"]

    def process_window(self, window):
        self.emit([window.end, [t["name"] for t in window.tuples]])


class Events(Spout):
    """Events n = 0..39 at n s + 0.5 s of event time, then one at 5.5 s once event 25
    is acked: its window (20, 30] was evaluated, so the watermark is past 5.5 s and the
    last one is late, however the processes are scheduled."""

    outputs = ["name", "ts"]

    def open(self, config, context):
        self.n, self.acked, self.late_sent = 0, set(), False

    def next_tuple(self):
        if self.n < 40:
            self.emit([f"e{self.n}", self.n * 1000 + 500], msg_id=self.n)
            self.n += 1
        elif 25 in self.acked and not self.late_sent:
            self.late_sent = True
            self.emit(["late", 5_500], msg_id="late")

    def ack(self, msg_id):
        self.acked.add(msg_id)


# the last watermark is 39.5 - 2 s; windows (0, 10] .. (20, 30] evaluated, (30, 40] holds
# e30..e39; the late one was counted
FINAL = {"watermark": 37_500, "open_windows": 1, "oldest_window_start": 30_000,
         "open_tuples": 10, "late_tuples": 1, "evaluated": 3}
# a task also reports its last evaluated window, (20, 30] with e20..e29 (not summed over
# the component's tasks)
LAST = {"last_window_start": 20_000, "last_window_end": 30_000, "last_window_tuples": 10}


def finished(running) -> dict | None:
    reports = [s.window for s in running.statistics() if s.component == "win"]
    return reports[0] if reports and reports[0] == {**FINAL, **LAST} else None


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_windowed_bolts_windows_reach_statistics_metrics_and_the_dashboard():
    topo = Topology("windows-live", ackers=1, message_timeout=120, stats_interval=0.2)
    topo.spout("events", Events)
    window = Window.tumbling(Duration(10), timestamp_field="ts", lag=Duration(2),
                             watermark_interval=Duration(0.05), late_stream="late")
    topo.bolt("win", Names, window=window).shuffle_grouping("events")
    topo.bolt("sink", ListSink).shuffle_grouping("win")
    topo.bolt("late", ListSink).shuffle_grouping("win", stream="late")
    with topo.submit(containers=2) as running:
        wait_for(lambda: finished(running), 150, f"the windows' last state {FINAL}")
        stats = running.statistics()
        metrics = wait_for(lambda: _metrics_window(running), 30, "metrics with the windows")
        board = Dashboard(running, topology=topo, start=False)
        try:
            board._parts.component.value = "win"
            board.refresh()
            shown = board._parts.tasks.value
        finally:
            board.close()
        snap = collect(running)
    assert all(s.window is None for s in stats if s.component != "win")
    task = next(s.task for s in stats if s.component == "win")
    assert metrics["components"]["win"]["window"] == FINAL
    assert metrics["instances"][task]["window"] == {**FINAL, **LAST}
    assert "window" not in metrics["components"]["sink"]
    assert f'<tr data-task="{task}">' in shown and 'data-value="37500"' in shown
    assert "37.5 s" in shown and "30 s" in shown and "(20 s, 30 s]" in shown
    assert _windows_panel.windows_html(snap, "sink") == ""


def _metrics_window(running) -> dict | None:
    metrics = running.metrics("1m")
    return metrics if metrics["components"].get("win", {}).get("window") == FINAL else None
