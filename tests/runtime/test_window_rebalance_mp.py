"""A windowed component under checkpoints rebalanced in place while it runs, with real
processes (issue 21): an embedded log of ``[id, key, ts, v]`` records into an event-time
tumbling and an event-time sliding window (each fields-grouped on the key, two tasks),
both rebalanced 2 -> 3 -> 2 mid-stream with a checkpoint every 0.5 s; the last emission of
every window equals a batch computation over the log. Before issue 21's split the guard
refused these rebalances (the open windows could not be split).

The spout reads the log at 300 records a second until the rebalances are over, so both
come while it is read (the test checks that windows were still to come), then unpaced;
waits poll the sink and the committed checkpoint with deadlines, never sleep."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from runtime import Duration, Topology, Window
from runtime.sources import EmbeddedLog
from runtime.testing import ListSink, PacedLogSpout, read_sink, wait_for

from .test_checkpoints_mp import GO, committed_id, go
from .test_window_checkpoints import ByKey, last_emissions, time_windows, wire_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FIELDS = ["id", "k", "ts", "v"]
KEYS = [f"k{i}" for i in range(12)]
ROWS = 6000
STEP_MS = 10  # event time: record i at i * STEP_MS ms
FLUSH_MS = 10_000_500  # a last record per key: every watermark past every real window
RATE = 300  # records a second, until the rebalances are over
TUMBLE, SLIDE_LENGTH, SLIDE = 1_000, 2_000, 1_000
WINDOWED = ("tumble", "slide")


def records() -> list[list]:
    return [[i, KEYS[(i * 5) % len(KEYS)], i * STEP_MS, i % 13] for i in range(ROWS)]


def flush() -> list[list]:
    return [[ROWS + j, k, FLUSH_MS, 0] for j, k in enumerate(KEYS)]


def append(root, rows: list[list], create: bool = False) -> None:
    with EmbeddedLog(root) as log:
        if create:
            log.create_topic("events", 1)  # one partition, one spout task: one order
        for i in range(0, len(rows), 500):
            log.append_many("events", [wire_json(r) for r in rows[i:i + 500]], partition=0)


def topology(root) -> Topology:
    topo = Topology("win-rebal")
    topo.spout("events", PacedLogSpout("events", root=str(root), fields=FIELDS, batch_size=50,
                                       rate=RATE, rate_until=GO))
    every = {"timestamp_field": "ts", "watermark_interval": Duration(0.2)}
    topo.bolt("tumble", ByKey, parallelism=2, window=Window.tumbling(
        Duration(TUMBLE / 1000), **every)).fields_grouping("events", ["k"])
    topo.bolt("slide", ByKey, parallelism=2, window=Window.sliding(
        Duration(SLIDE_LENGTH / 1000), Duration(SLIDE / 1000), **every)
    ).fields_grouping("events", ["k"])
    topo.bolt("sink", ListSink).shuffle_grouping("tumble").shuffle_grouping("slide")
    return topo


def emitted(running) -> dict:
    return last_emissions(read_sink(running.run_dir, "sink", with_source=True))


def last_end(running, component: str) -> int:
    return max((end for _, end, _ in emitted(running).get(component, {})), default=0)


def running_tasks(running, component: str) -> int:
    return sum(s.component == component and s.state == "running"
               for s in running.statistics())


def expected(rows: list[list]) -> dict:
    return {"tumble": time_windows(rows, TUMBLE, TUMBLE),
            "slide": time_windows(rows, SLIDE_LENGTH, SLIDE)}


def exact(running, rows: list[list]) -> None:
    """Wait for the last emission of every window to equal the batch; on a timeout, say
    which windows differ and how."""
    want = expected(rows)
    try:
        wait_for(lambda: {c: emitted(running).get(c) for c in WINDOWED} == want, 180,
                 "every window, exact")
    except TimeoutError:
        raise AssertionError(differences(emitted(running), want)) from None


def differences(got: dict, want: dict) -> str:
    """The windows missing, extra or unequal per component, with the ids each way."""
    lines = []
    for c in WINDOWED:
        have, need = got.get(c, {}), want[c]
        lines.append(f"{c}: {len(have)} windows emitted, {len(need)} expected; missing "
                     f"{sorted(set(need) - set(have))[:10]}, extra "
                     f"{sorted(set(have) - set(need))[:10]}")
        for w in sorted(set(need) & set(have)):
            if have[w] != need[w]:
                a, b = set(have[w]), set(need[w])
                lines.append(f"  {w}: {len(have[w])} ids, expected {len(need[w])}; lacking "
                             f"{sorted(b - a)[:20]}, surplus {sorted(a - b)[:20]}, "
                             f"same set: {a == b}, got {have[w][:30]}")
    return "\n".join(lines)


def started(running) -> None:
    running.wait_active(60)
    wait_for(lambda: committed_id(running) > 0 and last_end(running, "slide") > 0, 120,
             "a committed checkpoint and a first window")


def test_windowed_components_rebalanced_2_3_2_in_place_keep_every_window_exact(tmp_path):
    rows = records()
    append(tmp_path, rows + flush(), create=True)  # read at RATE: about 20 s, if never go()
    with topology(tmp_path).submit(checkpoint_interval=0.5) as running:
        started(running)
        reached = [last_end(running, "slide")]
        grown = running.rebalance({"tumble": 3, "slide": 3})
        assert [running_tasks(running, c) for c in WINDOWED] == [3, 3]
        wait_for(lambda: last_end(running, "slide") > reached[0] + 3 * SLIDE, 120,
                 "windows from three tasks")
        reached.append(last_end(running, "slide"))
        shrunk = running.rebalance({"tumble": 2, "slide": 2})
        assert [running_tasks(running, c) for c in WINDOWED] == [2, 2]
        go(running)  # the rest of the log, unpaced
        exact(running, rows)
        events = [e for e in running.events() if e["kind"] == "rebalanced"]
    print(f"\n[window rebalance] slide windows emitted up to {reached} ms of "
          f"{rows[-1][2]}\n2->3: {grown}\n3->2: {shrunk}")
    assert all(end < rows[-1][2] - 3 * SLIDE for end in reached)  # both mid-stream
    assert [e["parallelism"] for e in events] == [{"tumble": 3, "slide": 3},
                                                  {"tumble": 2, "slide": 2}]
    assert grown["in_place"] and shrunk["in_place"]
    assert grown["keys_moved"]["slide"] > 0  # held tuples went to the added task


def test_a_windowed_component_rebalanced_with_its_containers_restarted_stays_exact(tmp_path):
    """``containers=2``: every container restarts, and the master (not the checkpoint
    task) splits the windows from the plan's data alone, before they start."""
    rows = records()
    append(tmp_path, rows + flush(), create=True)
    with topology(tmp_path).submit(checkpoint_interval=0.5) as running:
        started(running)
        reached = last_end(running, "slide")
        moved = running.rebalance({"slide": 3}, containers=2)
        assert not moved["in_place"] and running.plan().containers == 2
        go(running)
        exact(running, rows)
    print(f"\n[window rebalance, containers 1 -> 2, at {reached} ms] {moved}")
    assert reached < rows[-1][2] - 3 * SLIDE
    assert moved["keys_moved"]["slide"] > 0
