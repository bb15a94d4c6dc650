"""Windowed bolts in the engine: the in-memory twin (a fake clock drives the ticks) and
real processes. What is checked: the windows each task evaluates, late tuples on their
stream, and at least once (inputs acked only when they leave their windows, a failed
output replays the window's inputs)."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from runtime import Bolt, Count, Duration, Spout, Topology, Window, WindowedBolt
from runtime.groupings import field_hash, key_task
from runtime.testing import FakeClock, InMemoryCluster, ListSink, ListSpout, read_sink, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # reach the instances by value


class Summary(WindowedBolt):
    """One output per window: its bounds, key, the events' names, and how many are new."""

    outputs = ["start", "end", "key", "names", "new"]

    def process_window(self, window):
        names = [t["name"] for t in window.tuples]
        self.emit([window.start, window.end, window.tuples[0]["key"], names, len(window.new)])


def event(name: str, key: str, seconds: float) -> list:
    return [name, key, int(seconds * 1000)]


FIELDS = ["name", "key", "ts"]


def keyed_topology(events, sink=ListSink, **window_options) -> Topology:
    topo = Topology("windows", ackers=1, message_timeout=300)
    topo.spout("events", ListSpout(events, fields=FIELDS))
    window = Window.tumbling(Duration(10), timestamp_field="ts", **window_options)
    topo.bolt("win", Summary, parallelism=2, window=window).fields_grouping("events", ["key"])
    topo.bolt("sink", sink).shuffle_grouping("win")
    if window.late_stream:
        topo.bolt("late", ListSink).shuffle_grouping("win", stream=window.late_stream)
    return topo


def acked(cluster) -> set:
    return {i for t in cluster.plan.component_tasks()["events"]
            for i in cluster.user_object(t).acked}


# keys "a" and "d" go to different tasks of two (the test below checks it)
EVENTS = [event("a1", "a", 1), event("d1", "d", 2), event("a2", "a", 12),
          event("d2", "d", 15), event("a3", "a", 31), event("d3", "d", 33)]


def test_in_memory_event_time_windows_per_key_and_acks_when_they_leave():
    with InMemoryCluster(keyed_topology(EVENTS)) as cluster:
        cluster.run_until_idle()
        assert cluster.sink("sink") == [] and acked(cluster) == set()  # no watermark yet
        cluster.advance(1.0)  # a tick: each task's watermark is its key's latest timestamp
        assert key_task(field_hash("a"), 2) != key_task(field_hash("d"), 2)  # key groups
        got = sorted(tuple(v[:4]) for v in cluster.sink("sink"))
        assert got == [(0, 10_000, "a", ["a1"]), (0, 10_000, "d", ["d1"]),
                       (10_000, 20_000, "a", ["a2"]), (10_000, 20_000, "d", ["d2"])]
        # the tuples of evaluated windows were acked; a3 and d3 still wait in theirs
        assert acked(cluster) == {0, 1, 2, 3}
        cluster.advance(1.0)  # no newer timestamp: the watermark stays, nothing more
        assert len(cluster.sink("sink")) == 4 and acked(cluster) == {0, 1, 2, 3}


def test_in_memory_late_tuples_go_to_the_late_stream_and_are_acked():
    events = [event("a1", "a", 21)]
    topo = keyed_topology(events, late_stream="late")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        cluster.advance(1.0)  # watermark 21 s on a's task
        spout = cluster.user_object(cluster.plan.component_tasks()["events"][0])
        spout.tuples += [event("a0", "a", 5), event("a2", "a", 25)]
        spout.todo.extend([1, 2])
        cluster.run_until_idle()
        assert cluster.sink("late") == [[5000, ["a0", "a", 5000]]]
        assert acked(cluster) == {1}  # the late one; a1 and a2 wait for their window
        wins = [t for t in cluster.plan.component_tasks()["win"]
                if cluster.user_object(t).late_tuples]
        assert len(wins) == 1 and cluster.user_object(wins[0]).watermark == 21_000


class FailAll(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        self.fail(tup)


def test_in_memory_a_failed_window_output_fails_every_input_of_the_window():
    with InMemoryCluster(keyed_topology(EVENTS, sink=FailAll)) as cluster:
        cluster.run_until_idle()
        cluster.advance(1.0)
        spout = cluster.user_object(cluster.plan.component_tasks()["events"][0])
        assert sorted(spout.failed) == [0, 1, 2, 3] and spout.acked == set()


def test_in_memory_processing_time_windows_follow_the_bolts_clock():
    topo = Topology("ptime", ackers=1)
    topo.spout("events", ListSpout([event(f"e{i}", "k", 0) for i in range(3)], fields=FIELDS))
    topo.bolt("win", Summary, window=Window.sliding(Duration(4), Duration(2))
              ).shuffle_grouping("events")
    topo.bolt("sink", ListSink).shuffle_grouping("win")
    with InMemoryCluster(topo) as cluster:
        (task,) = cluster.plan.component_tasks()["win"]
        cluster.user_object(task).clock = PROCESSING = FakeClock(1000.0)
        cluster.run_until_idle()  # the three arrive at 1000 s of the bolt's clock
        PROCESSING.advance(1)
        cluster.advance(2.0)  # a slide: the window (997, 1001]
        assert cluster.sink("sink") == [[None, None, "k", ["e0", "e1", "e2"], 3]]
        PROCESSING.advance(2)
        cluster.advance(2.0)  # (999, 1003] still holds them; none is new
        assert cluster.sink("sink")[1] == [None, None, "k", ["e0", "e1", "e2"], 0]
        assert acked(cluster) == set()
        PROCESSING.advance(2)
        cluster.advance(2.0)  # (1001, 1005]: empty, not evaluated; all three leave
        assert len(cluster.sink("sink")) == 2 and acked(cluster) == {0, 1, 2}


def test_in_memory_count_windows_over_two_input_streams():
    topo = Topology("counts", ackers=1)
    topo.spout("left", ListSpout([event(f"l{i}", "k", i) for i in range(4)], fields=FIELDS))
    topo.spout("right", ListSpout([event(f"r{i}", "k", i) for i in range(2)], fields=FIELDS))
    topo.bolt("win", Summary, window=Window.tumbling(Count(3))).shuffle_grouping(
        "left").shuffle_grouping("right")
    topo.bolt("sink", ListSink).shuffle_grouping("win")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        windows = [v[3] for v in cluster.sink("sink")]
        assert [len(w) for w in windows] == [3, 3]
        assert sorted(n for w in windows for n in w) == ["l0", "l1", "l2", "l3", "r0", "r1"]


# -- real processes ------------------------------------------------------------------------

class Events(Spout):
    """Per key, events n = 0..399 at n s + 0.5 s of event time; and for every n = 49, 99,
    ..., 399 one 30 s behind, sent once the key's event n - 20 has been acked: its window
    is over, so the watermark has passed the late one's timestamp and it is late for sure,
    however the processes are scheduled."""

    outputs = FIELDS
    KEYS = ("a", "b", "d")  # on both tasks of two

    def open(self, config, context):
        self.n, self.done = 0, {key: -1 for key in self.KEYS}
        self.late = [(key, n) for n in range(49, 400, 50) for key in self.KEYS]

    def next_tuple(self):
        if self.n < 400:
            for key in self.KEYS:
                self.emit([f"{key}{self.n}", key, self.n * 1000 + 500], msg_id=(key, self.n))
            self.n += 1
        for key, n in [(k, n) for k, n in self.late if self.done[k] >= n - 20]:
            self.late.remove((key, n))
            ts = (n - 30) * 1000 + 500
            self.emit([f"late-{key}{n}", key, ts], msg_id=("late", key, n))

    def ack(self, msg_id):
        if msg_id[0] != "late":
            key, n = msg_id
            self.done[key] = max(self.done[key], n)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_multiprocess_event_time_windows_late_tuples_and_acks():
    topo = Topology("mp-windows", ackers=1, message_timeout=120)
    topo.spout("events", Events)
    window = Window.tumbling(Duration(10), timestamp_field="ts", lag=Duration(2),
                             watermark_interval=Duration(0.05), late_stream="late")
    topo.bolt("win", Summary, parallelism=2, window=window).fields_grouping("events", ["key"])
    topo.bolt("sink", ListSink).shuffle_grouping("win")
    topo.bolt("late", ListSink).shuffle_grouping("win", stream="late")
    with topo.submit(containers=2) as running:
        # Windows are per task (as in Storm): each task's hold the events of its keys.
        # The last watermark is 399.5 - 2 s: windows (0, 10], ..., (380, 390] close, 39 a
        # task; (390, 400] stays open, so its 9 events a key are never acked.
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) >= 2 * 39, 150,
                 "39 windows per task")
        wait_for(lambda: len(read_sink(running.run_dir, "late")) >= 3 * 8, 90,
                 "the late events")
        wait_for(lambda: _spout_acked(running, 3 * (390 + 8)), 90,
                 "the acks of every tuple that left its window, and of the late ones")
        windows = read_sink(running.run_dir, "sink", with_source=True)
        late = read_sink(running.run_dir, "late")
        acked = _spout_acked(running, 0)
    by_task: dict = {}
    for (start, end, _key, names, new), _, task, _, _ in windows:
        by_task.setdefault(task, []).append((start, end, sorted(names), new))
    assert len(by_task) == 2
    keys_of = {task: {name[0] for _, _, names, _ in got for name in names}
               for task, got in by_task.items()}
    assert sorted(k for keys in keys_of.values() for k in keys) == sorted(Events.KEYS)
    for task, got in by_task.items():
        got.sort()
        assert [(s, e) for s, e, _, _ in got] == [(k * 10_000, k * 10_000 + 10_000)
                                                  for k in range(39)]
        # a tumbling window holds its 10 s of events of the task's keys, all new, and no
        # late one
        assert [names for _, _, names, _ in got] == [
            sorted(f"{key}{n}" for key in keys_of[task] for n in range(10 * k, 10 * k + 10))
            for k in range(39)]
        assert all(new == len(names) for _, _, names, new in got)
    assert sorted(values[0] for _, values in late) == sorted(
        f"late-{key}{n}" for key in Events.KEYS for n in range(49, 400, 50))
    assert all(ts == values[2] for ts, values in late)
    assert acked == 3 * (390 + 8)


def _spout_acked(running, at_least: int) -> int | None:
    acked = sum(s.acked for s in running.statistics() if s.component == "events")
    return acked if acked >= at_least else None


# -- user mistakes ---------------------------------------------------------------------------

class ForgotSuper(Summary):
    def prepare(self, config, context):
        self.ready = True  # no super().prepare: the window was never set up


def test_a_prepare_without_super_is_reported_by_name_and_the_task_restarted():
    topo = Topology("nosuper", ackers=1)
    topo.spout("events", ListSpout(EVENTS[:1], fields=FIELDS))
    topo.bolt("win", ForgotSuper, window=Window.tumbling(Count(2))).shuffle_grouping("events")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        (err,) = cluster.exceptions
        assert "ForgotSuper.prepare must call super().prepare(config, context)" in err["error"]


def test_a_tuple_without_its_timestamp_is_an_error_naming_the_field():
    topo = Topology("nots", ackers=1)
    topo.spout("events", ListSpout([["x", "k", "soon"]], fields=FIELDS))
    topo.bolt("win", Summary, window=Window.tumbling(Duration(5), timestamp_field="ts")
              ).shuffle_grouping("events")
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        (err,) = cluster.exceptions
        assert "no timestamp in field 'ts' (int ms), got 'soon'" in err["error"]
