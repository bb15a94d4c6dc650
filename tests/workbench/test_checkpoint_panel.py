"""The dashboard's checkpoint view, drawn from a real checkpointed topology's snapshot."""

from __future__ import annotations

import re
import sys

import cloudpickle
import pytest

from runtime import Duration, Topology, Window, WindowedBolt
from runtime.sources import EmbeddedLog, LogSpout
from runtime.testing import ListSink, StatefulWordCount, wait_for
from workbench import _dashboard
from workbench._checkpoint_panel import checkpoint_html


class Ids(WindowedBolt):
    """A window's ids."""

    outputs = ["ids"]

    def process_window(self, window):
        self.emit([[t["id"] for t in window.tuples]])

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_stateful_bolt_shows_its_last_committed_checkpoint(tmp_path):
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("words", 1)
        log.append_many("words", [b'"a"', b'"b"', b'"a"'])
    topo = Topology("ckpt-panel", stats_interval=0.05)
    topo.spout("words", LogSpout("words", root=str(tmp_path), fields=["word"]))
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("words", ["word"])
    with topo.submit(checkpoint_interval=0.2) as running:
        wait_for(lambda: running.state("count") == {"a": 2, "b": 1}, 60, "a committed count")

        def drawn():  # a commit, and a row for each counter task: each task's report
            # of its first save comes on its own, a report interval apart at most (CI
            # once drew the commit with one row, under load 13)
            shown = checkpoint_html(_dashboard.collect(running, slow=False), "count")
            rows = re.findall(r'<tr data-task="(\d+)">', shown)
            return shown if 'data-key="checkpoint_id"' in shown and len(rows) == 2 else None

        shown = wait_for(drawn, 30, "the commit, and a row for each of both counter tasks")
        tasks = running.plan.component_tasks()["count"]
        assert re.findall(r'<tr data-task="(\d+)">', shown) == [str(t) for t in sorted(tasks)]
        assert checkpoint_html(_dashboard.collect(running, slow=False), "words") == ""


def test_a_windowed_bolt_shows_the_tuples_and_bytes_of_its_saved_open_windows(tmp_path):
    """Nine records of three keys within one window that never closes (no later
    timestamp): every one is held, and each of the two windowed tasks shows what its last
    saved snapshot held and weighed; the sink, neither stateful nor windowed, shows none."""
    rows = [f'[{i}, "{"abc"[i % 3]}", {1000 + i}, {i}]'.encode() for i in range(9)]
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("events", 1)
        log.append_many("events", rows)
    topo = Topology("ckpt-window-panel", stats_interval=0.05, checkpoint_interval=0.2)
    topo.spout("events", LogSpout("events", root=str(tmp_path), fields=["id", "k", "ts", "v"]))
    topo.bolt("avg", Ids, parallelism=2, window=Window.tumbling(
        Duration(60), timestamp_field="ts")).fields_grouping("events", ["k"])
    topo.bolt("sink", ListSink).shuffle_grouping("avg")
    with topo.submit() as running:

        def drawn():
            shown = checkpoint_html(_dashboard.collect(running, slow=False), "avg")
            held = re.findall(r'data-key="window_tuples" data-value="(\d+)"', shown)
            sizes = re.findall(r'data-key="window_bytes" data-value="(\d+)"', shown)
            ok = len(held) == len(sizes) == 2 and sum(map(int, held)) == len(rows)
            return shown if ok else None

        shown = wait_for(drawn, 60, "both windowed tasks' saved snapshots, all nine held")
        assert "<th>held tuples</th><th>snapshot</th>" in shown
        sizes = [int(b) for b in re.findall(r'data-key="window_bytes" data-value="(\d+)"',
                                            shown)]
        assert all(size > 0 for size in sizes)
        assert checkpoint_html(_dashboard.collect(running, slow=False), "sink") == ""
