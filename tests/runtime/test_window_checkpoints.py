"""A windowed bolt's open windows in the checkpointed state (issue 21): the manager's
snapshot → msgpack → restore round trip, field by field, and the in-memory twin of a
checkpointed topology whose windowed tasks are restarted at random moments.

The topology and its batch computation are shared with the multiprocess test
(``test_window_checkpoints_mp.py``): a log of ``[id, key, ts, v]`` records, read by one
log spout task, into an event-time tumbling window (fields-grouped by key, two tasks), an
event-time sliding window and a count window (one task each), all into one sink. Each
window is keyed by its bounds; the last emission of each must equal the batch."""

from __future__ import annotations

import dataclasses
import random
import sys
import warnings

import cloudpickle
import pytest

from runtime import Count, Duration, Topology, Window, WindowedBolt, wire
from runtime.model.api import Tuple, TupleSource
from runtime.model.constants import CHECKPOINTER
from runtime.sources import EmbeddedLog, LogSpout
from runtime.testing import InMemoryCluster, ListSink, ListSpout
from runtime.windows import WindowManager

from .test_checkpoints import chaos

cloudpickle.register_pickle_by_value(sys.modules[__name__])

S, T = ("events", "default"), ("other", "default")


# -- the manager's snapshot, field by field ----------------------------------------------

def trip(m: WindowManager) -> WindowManager:
    """Snapshot, through msgpack as the stores save it, and restore."""
    saved = wire.unpack(wire.pack(m.snapshot()))
    return WindowManager.restored(m.window, m.inputs, saved)


def fields_of(m: WindowManager) -> dict:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}


def event_time_sliding() -> WindowManager:
    m = WindowManager(Window.sliding(Duration(20), Duration(10), timestamp_field="ts",
                                     lag=Duration(5)), inputs=[S, T])
    for i, ts in enumerate((1_000, 4_000, 12_000, 18_000, 26_000, 33_000)):
        m.add(f"e{i}", S, ts, 0)
    m.add("t0", T, 40_000, 0)
    m.tick(0)  # watermark 28 s: windows ending 10 s and 20 s
    m.add("late", S, 2_000, 0)  # counted late
    m.add("e6", S, 30_000, 0)
    return m  # take_expired not called: _to_ack holds the evicted tuples


def event_time_count() -> WindowManager:
    m = WindowManager(Window.sliding(Count(3), Count(2), timestamp_field="ts"), inputs=[S])
    for i in range(5):
        m.add(f"c{i}", S, 1_000 * i, 0)
    m.tick(0)
    m.add("c5", S, 9_000, 0)
    return m


def processing_time_duration() -> WindowManager:
    m = WindowManager(Window.sliding(Duration(2), Duration(1)), inputs=[S])
    for i in range(4):
        m.add(f"p{i}", S, None, 500 * i)
    m.tick(1_000)
    m.tick(2_100)
    m.add("p4", S, None, 2_200)
    return m


def processing_time_count() -> WindowManager:
    m = WindowManager(Window.sliding(Count(4), Count(3)), inputs=[S])
    for i in range(8):
        m.add(f"q{i}", S, None, i)
    return m


def event_time_split() -> WindowManager:
    """Two event-time tasks with different watermarks merged by a rebalance's split: its
    tuples carry their old task's watermark (``_done``)."""
    from runtime.windows import split_windows

    a, b = event_time_sliding(), event_time_sliding()
    b.add("e7", S, 45_000, 0)
    b.add("t1", T, 60_000, 0)
    b.tick(0)  # watermark 40 s, a's 28 s
    sources = [[c, 1, st, ["x"]] for c, st in (S, T)]
    deal = [[*S, "first", []], [*T, "first", []]]
    (part,), _ = split_windows([{"sources": sources, "deal": deal, "windows": m.snapshot(
        lambda item: [int(item.startswith("t")), [item]])} for m in (a, b)], 1, 128)
    return WindowManager.restored(a.window, a.inputs, wire.unpack(wire.pack(part["windows"])),
                                  lambda saved: saved[1][0])


SCENARIOS = [event_time_sliding, event_time_count, processing_time_duration,
             processing_time_count, event_time_split]


@pytest.mark.parametrize("make", SCENARIOS)
def test_a_restored_manager_has_every_field_of_the_saved_one(make):
    m = make()
    assert fields_of(trip(m)) == fields_of(m)


def test_the_scenarios_set_every_field_away_from_its_default():
    """So the round trip above checks each field: a field added to the manager and not to
    its snapshot fails it."""
    fresh = fields_of(WindowManager(Window.tumbling(Count(1)), inputs=[S]))
    unset = {name for name in fresh if name not in ("window", "inputs")}
    for make in SCENARIOS:
        got = fields_of(make())
        unset -= {name for name in unset if got[name] != fresh[name]}
    assert unset == set()


@pytest.mark.parametrize("make", SCENARIOS)
def test_a_restored_manager_goes_on_exactly_as_the_saved_one(make):
    """The same input after the restore gives the same windows, expired tuples and acks."""
    m = make()
    r = trip(m)
    for a in (m, r):
        a.out = [(v.tuples, v.new, v.expired, v.start, v.end) for v in
                 a.add("x", S, 50_000, 3_000) + a.tick(4_000) + a.add("y", S, 60_000, 5_000)
                 + a.add("z", S, 61_000, 5_100) + a.tick(7_000)]
        a.out.append(a.take_expired())
    assert r.out == m.out
    assert fields_of(r) == fields_of(m)


def test_nothing_saved_restores_empty_windows():
    m = event_time_sliding()
    r = WindowManager.restored(m.window, m.inputs, None)
    assert fields_of(r) == fields_of(WindowManager(m.window, m.inputs))


def test_a_snapshot_of_another_layout_is_refused():
    m = processing_time_count()
    saved = m.snapshot()
    saved["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        WindowManager.restored(m.window, m.inputs, saved)


class Holder(WindowedBolt):
    outputs = ["n"]

    def process_window(self, window):
        self.emit([len(window.tuples)])


def test_a_windowed_bolt_saves_its_tuples_with_their_sources_and_fields():
    """What the bolt hands the store: msgpack only, each source once, and the tuples come
    back readable by field name, from the same component, task and stream."""
    bolt = Holder()
    window = Window.tumbling(Duration(10), timestamp_field="ts")
    bolt._windows = WindowManager(window, [S])
    a = TupleSource.of("events", 4, "default", ["k", "ts"])
    b = TupleSource.of("events", 5, "default", ["k", "ts"])
    for src, k, ts in ((a, "x", 1_000), (b, "y", 2_000), (a, "z", 3_000)):
        bolt.process(Tuple([k, ts], src))
    saved = wire.unpack(wire.pack(bolt.snapshot_windows()))
    assert saved["sources"] == [["events", 4, "default", ["k", "ts"]],
                                ["events", 5, "default", ["k", "ts"]]]
    other = Holder()
    other._windows = WindowManager(window, [S])
    other.restore_windows(saved)
    held = [t for _, _, t in other._windows._queue]
    assert [(t["k"], t["ts"], t.task, t.component, t.stream) for t in held] == [
        ("x", 1_000, 4, "events", "default"), ("y", 2_000, 5, "events", "default"),
        ("z", 3_000, 4, "events", "default")]
    other.restore_windows(None)
    assert other.open_tuples == 0


# -- the topology shared with the multiprocess test ----------------------------------------

RECORDS = 3000
KEYS = ("a", "b", "c")
STEP_MS = 10  # event time: record i at i * STEP_MS ms
FLUSH_MS = 10_000_500  # the flush records' timestamp: far ahead, mid-slide (never evaluated)
TUMBLE, SLIDE_LENGTH, SLIDE, COUNT_LENGTH, COUNT_SLIDE = 1_000, 2_000, 1_000, 7, 3
FIELDS = ["id", "k", "ts", "v"]


def records(n: int = RECORDS) -> list[list]:
    """``n`` records in event-time order, then one flush record per key, whose timestamp
    moves every task's watermark past every real window (and whose own windows stay open)."""
    real = [[i, KEYS[(i * 7) % 3], i * STEP_MS, i % 13] for i in range(n)]
    return real + [[n + j, k, FLUSH_MS, 0] for j, k in enumerate(KEYS)]


def fill_log(root, rows: list[list]) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic("events", 1)  # one partition, one spout task: one order
        for i in range(0, len(rows), 500):
            log.append_many("events", [wire_json(r) for r in rows[i:i + 500]], partition=0)


def wire_json(row: list) -> bytes:
    return ("[" + ",".join(f'"{x}"' if isinstance(x, str) else str(x) for x in row)
            + "]").encode()


class ByKey(WindowedBolt):
    """An event-time window's ids, one output per key in it: ``[start, end, key, ids]``."""

    outputs = ["start", "end", "key", "ids"]

    def process_window(self, window):
        ids: dict = {}
        for t in window.tuples:
            ids.setdefault(t["k"], []).append(t["id"])
        for k, got in sorted(ids.items()):
            self.emit([window.start, window.end, k, got])


class ByCount(WindowedBolt):
    """A count window's ids, in arrival order: ``[first id, last id, key, ids]``."""

    outputs = ["start", "end", "key", "ids"]

    def process_window(self, window):
        ids = [t["id"] for t in window.tuples]
        self.emit([ids[0], ids[-1], "", ids])


def windows_topology(name: str, spout) -> Topology:
    topo = Topology(name)
    topo.spout("events", spout)
    topo.bolt("tumble", ByKey, parallelism=2, window=Window.tumbling(
        Duration(TUMBLE / 1000), timestamp_field="ts", watermark_interval=Duration(0.2),
    )).fields_grouping("events", ["k"])
    topo.bolt("slide", ByKey, window=Window.sliding(
        Duration(SLIDE_LENGTH / 1000), Duration(SLIDE / 1000), timestamp_field="ts",
        watermark_interval=Duration(0.2))).shuffle_grouping("events")
    topo.bolt("count", ByCount, window=Window.sliding(
        Count(COUNT_LENGTH), Count(COUNT_SLIDE))).shuffle_grouping("events")
    topo.bolt("sink", ListSink).shuffle_grouping("tumble").shuffle_grouping(
        "slide").shuffle_grouping("count")
    return topo


def batch(rows: list[list]) -> dict:
    """What the windows must hold, computed over the whole log at once: component ->
    {(start, end, key): ids}."""
    real = [r for r in rows if r[2] != FLUSH_MS]
    return {"tumble": time_windows(real, TUMBLE, TUMBLE),
            "slide": time_windows(real, SLIDE_LENGTH, SLIDE),
            "count": count_windows(rows)}


def time_windows(rows, length: int, slide: int) -> dict:
    """Every window ``(end - length, end]``, ``end`` a multiple of ``slide``, per key."""
    out: dict = {}
    for i, k, ts, _ in rows:
        end = -(-ts // slide) * slide
        while end - length < ts:
            out.setdefault((end - length, end, k), []).append(i)
            end += slide
    return out


def count_windows(rows) -> dict:
    """A window at every ``COUNT_SLIDE``-th tuple: the last ``COUNT_LENGTH`` up to it."""
    out = {}
    for n in range(COUNT_SLIDE, len(rows) + 1, COUNT_SLIDE):
        ids = [r[0] for r in rows[max(0, n - COUNT_LENGTH):n]]
        out[(ids[0], ids[-1], "")] = ids
    return out


def last_emissions(emitted) -> dict:
    """component -> {(start, end, key): ids} from ``(values, component, ...)`` rows in
    the order they were recorded: the last emission of a window wins (at least once)."""
    out: dict = {}
    for values, component, *_ in emitted:
        start, end, key, ids = values
        out.setdefault(component, {})[(start, end, key)] = ids
    return out


def test_the_batch_windows_are_what_storms_rules_give():
    rows = [[0, "a", 500, 0], [1, "a", 1_000, 0], [2, "b", 1_001, 0], [3, "a", 2_500, 0]]
    assert time_windows(rows, 2_000, 1_000) == {
        (-1_000, 1_000, "a"): [0, 1], (0, 2_000, "a"): [0, 1], (0, 2_000, "b"): [2],
        (1_000, 3_000, "b"): [2], (1_000, 3_000, "a"): [3], (2_000, 4_000, "a"): [3]}
    assert count_windows([[i] for i in range(8)]) == {(0, 2, ""): [0, 1, 2],
                                                      (0, 5, ""): [0, 1, 2, 3, 4, 5]}


# -- the in-memory twin ----------------------------------------------------------------------

INTERVAL = 0.5


def drain(c: InMemoryCluster, rounds: int = 100) -> None:
    for _ in range(rounds):
        c.step(5)
        c.advance(INTERVAL / 2)
    c.run_until_idle()
    for _ in range(4):  # the last ticks and a checkpoint after them
        c.advance(INTERVAL)


def run_in_memory(tmp_path, seed: int | None, rows: list[list]) -> tuple[dict, int]:
    """The twin, with windowed tasks and the checkpoint spout restarted from scratch at
    random moments (none when ``seed`` is None); the last emissions and the kills."""
    fill_log(tmp_path, rows)
    spout = LogSpout("events", root=str(tmp_path), fields=FIELDS, batch_size=40)
    topo = windows_topology("win-ckpt", spout)
    with InMemoryCluster(topo, checkpoint_interval=INTERVAL, state_store="memory") as c:
        kills = chaos(c, random.Random(seed), ("tumble", "slide", "count", CHECKPOINTER),
                      150 if seed is not None else 0, odds=0.08, steps=3, pause=1.0)
        drain(c)
        return last_emissions(c.sink("sink", with_source=True)), kills


def test_in_memory_the_windows_equal_the_batch_without_faults(tmp_path):
    rows = records(600)
    got, _ = run_in_memory(tmp_path, None, rows)
    assert got == batch(rows)


@pytest.mark.parametrize("seed", range(4))
def test_in_memory_restarted_windowed_tasks_keep_their_open_windows(tmp_path, seed):
    rows = records(1200)
    got, kills = run_in_memory(tmp_path, seed, rows)
    assert kills >= 3
    assert got == batch(rows)


def test_a_checkpointed_topology_is_not_warned_about_message_timeout():
    """Acking is off with checkpoints (the windows are in the checkpoint instead): the
    warning, which says so, is for topologies that may ack."""
    window = Window.sliding(Duration(15), Duration(10))
    with pytest.warns(UserWarning, match=r"with acking on \(ackers > 0\).*checkpoint_interval"):
        topo = Topology("w", message_timeout=20)
        topo.spout("s", ListSpout([[1]], fields=["v"]))
        topo.bolt("win", Holder, window=window)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        topo = Topology("w", message_timeout=20, checkpoint_interval=1.0)
        topo.spout("s", ListSpout([[1]], fields=["v"]))
        topo.bolt("win", Holder, window=window)


# A rebalance of a windowed component under checkpoints was refused here until its open
# windows could be split; the split, what is still refused (count windows, keyless custom
# groupings) and the guard are tested in test_window_rebalance.py.
