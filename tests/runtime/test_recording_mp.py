"""Recording on real processes: the kill writes the last segment, and a running topology
starts and stops recording on request. Every wait polls a condition with a deadline."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter

import cloudpickle
import psutil
import pytest

from runtime import Topology
from runtime.recording import read_table, segments
from runtime.testing import ListSink, ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"spout_wait": 0.005, "stats_interval": 0.05}


def total(running, component, field):
    return sum(getattr(s, field) for s in running.statistics() if s.component == component)


def converters(run_root: str) -> list[psutil.Process]:
    """This test's live recording converters (they inherit the run root's variable)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if ("runtime.recording._convert" in " ".join(proc.cmdline())
                    and proc.status() != psutil.STATUS_ZOMBIE
                    and proc.environ().get("TUPLEFLOW_RUN_ROOT") == run_root):
                found.append(proc)
    return found


def test_kill_writes_the_open_segment_and_nothing_is_lost(topology_guard):
    values = [[f"w{i % 11}", i] for i in range(3000)]
    topo = Topology("rec-kill", **FAST)
    topo.spout("words", ListSpout(values, fields=["word", "n: int"]), parallelism=2,
               record_segment_seconds=600.0).record()
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("words")
    with topo.submit(ackers=1) as running:
        wait_for(lambda: total(running, "words", "acked") == len(values), 60, "all acked")
        assert segments(running, "words") == []  # a 600 s segment is still open
        assert len(converters(topology_guard)) == 2  # one per recording task
    wait_for(lambda: not converters(topology_guard), 10, "the converters to be gone")
    rows = read_table(running, "words").to_pylist()
    assert Counter((r["word"], r["n"]) for r in rows) == Counter(map(tuple, values))
    tasks = running.plan.component_tasks()["words"]
    assert all(r["_task"] == tasks[r["n"] % 2] for r in rows)
    assert all(r["_root_id"] is not None for r in rows)


def test_record_and_stop_recording_on_a_running_topology():
    values = [[n] for n in range(100_000)]
    topo = Topology("rec-live", **FAST)
    topo.spout("numbers", ListSpout(values, fields=["n"], rate=400), record_segment_seconds=0.2)
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit() as running:
        running.wait_active(timeout=30)
        with pytest.raises(ValueError, match="did you mean 'numbers'"):
            running.record("number")
        assert running.record("numbers") == list(running.plan.component_tasks()["numbers"])
        wait_for(lambda: read_table(running, "numbers").num_rows >= 100, 30, "recorded rows")
        running.stop_recording("numbers")
        wait_for(lambda: all(s.component != "numbers" or not recording(running, s.task)
                             for s in running.statistics()), 30, "recording stopped")
        recorded = read_table(running, "numbers").num_rows
        emitted = total(running, "numbers", "emitted")
        wait_for(lambda: total(running, "numbers", "emitted") > emitted + 200, 30,
                 "more tuples emitted after the recording stopped")
        assert read_table(running, "numbers").num_rows == recorded
        kinds = [e["kind"] for e in running.events()]
        assert "recording_started" in kinds and "recording_stopped" in kinds
    rows = read_table(running, "numbers").to_pylist()
    ns = sorted(r["n"] for r in rows)
    assert ns == list(range(ns[0], ns[0] + len(ns)))  # one unbroken run of the stream
    assert all(r["_root_id"] is None for r in rows)  # acking off: nothing tracked


def recording(running, task):
    return next(s.recording for s in running.statistics() if s.task == task)


class CrashOnce(ListSpout):
    """Raises once, in its first incarnation, after ``after`` tuples (a marker file in the
    run directory remembers that it did)."""

    def __init__(self, tuples, fields, after: int) -> None:
        super().__init__(tuples, fields, rate=400)
        self.after = after

    def open(self, config, context):
        super().open(config, context)
        self.marker = os.path.join(context.run_dir, f"crashed-{context.task_id}")

    def next_tuple(self):
        if self.sent >= self.after and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("crash once")
        super().next_tuple()


def test_a_restarted_instance_keeps_recording_what_was_started_live():
    topo = Topology("rec-restart", **FAST)
    topo.spout("numbers", CrashOnce([[n] for n in range(100_000)], fields=["n"], after=300),
               record_segment_seconds=0.2)
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit() as running:
        running.wait_active(timeout=30)
        running.record("numbers")
        running.wait_until(lambda stats: any(s.component == "numbers" and s.restarts >= 1
                                             and s.state == "running" for s in stats), 60)
        task = running.plan.component_tasks()["numbers"][0]
        wait_for(lambda: recording(running, task) == ["default"], 30,
                 "the new incarnation to record")
        files = set(segments(running, "numbers"))
        wait_for(lambda: len(set(segments(running, "numbers")) - files) >= 2, 30,
                 "segments written by the new incarnation")
    names = {os.path.basename(f).split("-")[2] for f in segments(running, "numbers")}
    assert len(names) == 2  # two incarnations, each its own files (none overwritten)


def test_a_record_dir_takes_the_recordings_in_a_folder_of_this_run(tmp_path):
    values = [[f"w{i % 7}", i] for i in range(500)]
    topo = Topology("rec-dir", **FAST, record_dir=str(tmp_path))
    topo.spout("words", ListSpout(values, fields=["word", "n: int"])).record()
    topo.bolt("sink", ListSink).shuffle_grouping("words")
    with topo.submit() as running:
        wait_for(lambda: total(running, "sink", "executed") == len(values), 60, "all sunk")
    run = os.path.basename(running.run_dir)
    assert running.record_base == str(tmp_path / run)
    assert running.recording_dir("words").startswith(str(tmp_path / run / "recordings"))
    rows = read_table(running, "words").to_pylist()
    assert sorted((r["word"], r["n"]) for r in rows) == sorted(map(tuple, values))
    assert not os.path.exists(os.path.join(running.run_dir, "recordings"))
    assert os.listdir(tmp_path) == [run]  # another run gets a folder of its own


def test_a_record_dir_must_be_an_absolute_path():
    from runtime import TopologyError

    with pytest.raises(TopologyError, match="record_dir.*absolute path"):
        Topology("rec-dir", record_dir="recordings")


def test_a_recording_goes_on_across_a_rebalance_and_the_added_task_records_too():
    """Issue 22: recordings continue across a rebalance. A recorded bolt goes 2 -> 3 tasks
    in place mid-stream, under at least once: every input's doubled value is in the
    recording, and the added task's rows are there with its own task id."""
    from runtime.testing import Doubler

    values = [[n] for n in range(6000)]
    topo = Topology("rec-rebalance", **FAST)
    topo.spout("numbers", ListSpout(values, fields=["n"], rate=1500, replay=True))
    topo.bolt("double", Doubler, parallelism=2, record_segment_seconds=0.2) \
        .shuffle_grouping("numbers").record()
    with topo.submit(ackers=1) as running:
        wait_for(lambda: total(running, "numbers", "acked") > 1000, 60, "a sixth acked")
        event = running.rebalance({"double": 3})
        (added,) = event["tasks_added"]
        wait_for(lambda: total(running, "numbers", "acked") == len(values), 90, "all acked")
    rows = read_table(running, "double").to_pylist()
    assert {r["n"] for r in rows} == {2 * n for n in range(len(values))}
    assert any(r["_task"] == added for r in rows)
