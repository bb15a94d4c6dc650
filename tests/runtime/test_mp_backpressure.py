"""Spout backpressure across processes: a slow bolt behind a fast spout.

Memory bounds are checked on every process of the topology (master, stream managers,
instances) with ``benchmarks.rss_slow_bolt.RssWatch``, sampled from outside with psutil
while tuples flow.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from benchmarks.rss_slow_bolt import MB, RssWatch, started_paused
from runtime import Topology
from runtime.testing import ListSink, ListSpout, SlowBolt, read_sink, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TUPLES = 6000
PAYLOAD = "x" * 1000  # so that bytes, not just tuples, pile up behind the slow bolt


def slow_topology() -> Topology:
    topo = Topology("pressure")
    topo.spout("numbers", ListSpout([[i, PAYLOAD] for i in range(TUPLES)],
                                            fields=["n", "payload"]))
    topo.bolt("slow", SlowBolt(0.0005, fields=["n", "payload"])).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("slow")
    return topo


def test_a_slow_bolt_engages_backpressure_names_itself_and_nothing_is_lost():
    options = {"backpressure_high": 16 * 1024, "backpressure_low": 8 * 1024, "batch_size": 100}
    with slow_topology().submit(containers=2, **options) as running:
        running.wait_until(lambda s: sum(r.executed for r in s if r.component == "sink")
                           == TUPLES, timeout=60)
        events = running.events()
    # the only instance ever named as a cause is the slow bolt (a congested link to another
    # container may be named too: it has no component)
    causes = {e["component"] for e in events if e["kind"] == "backpressure_on"}
    assert causes - {None} == {"slow"}
    assert any(e["kind"] == "backpressure_off" for e in events)
    received = sorted(v[0] for v in read_sink(running.run_dir, "sink"))
    assert received == list(range(TUPLES))  # at most once, and no failure: each exactly once


# -- a 10 ms bolt, acking on, big tuples: memory must stay bounded -------------------------

BIG = 250 * 1024  # bytes per tuple: 400 of them push 100 MB through the slow bolt
BIG_TUPLES = 400
BIG_OPTIONS = {"ackers": 1, "batch_size": 1, "backpressure_high": MB,
               "backpressure_low": MB // 2, "spout_wait": 0.005, "stats_interval": 0.1,
               "message_timeout": 120.0,
               "target_latency": None}  # no latency bound: only backpressure holds the spout
# What may legitimately wait in one process, at 250 KB a frame: a zmq pipe of 16 frames
# each way per hop (8 MB), the high water mark (1 MB), a held spout's last 8 next_tuple
# calls (2 MB), and a decoded frame or two. 48 MB above idle is well clear of that and
# half the 100 MB the run pushes through, which a process that hoarded would hold.
RSS_MARGIN = 48 * MB


def big_topology(max_spout_pending=None) -> Topology:
    payload = "y" * BIG  # one string shared by every tuple: the spout holds it once
    topo = Topology("pressure-big", **BIG_OPTIONS)
    spout = ListSpout([[i, payload] for i in range(BIG_TUPLES)], fields=["n", "payload"])
    topo.spout("numbers", spout, max_spout_pending=max_spout_pending)
    topo.bolt("slow", SlowBolt(0.01, fields=["n", "payload"])).shuffle_grouping("numbers")
    return topo


def all_acked(running, n: int):
    """The "all" metrics once the spout's acks and the bolt's executions are reported."""
    m = running.metrics("all")
    c = m["components"]
    return m if c["numbers"]["acked"] == n and c["slow"]["executed"] == n else None


def run_big(max_spout_pending=None):
    """Run the big topology to the end; its final metrics, events, pending seen while it
    ran, and RSS per process."""
    running = started_paused(big_topology(max_spout_pending), containers=1)
    with running:
        watch = RssWatch(running.status()["pid"]).start()
        running.resume()
        pending_seen = []

        def finished():
            m = all_acked(running, BIG_TUPLES)
            if m is None:
                spout = running.metrics("1m")["components"]["numbers"]
                pending_seen.append(spout.get("pending") or 0)
            return m

        m = wait_for(finished, timeout=90, what=f"{BIG_TUPLES} big tuples acked")
        rss = watch.stop()
        events = running.events()
        stats = running.statistics()
    return m, events, pending_seen, rss, stats


def assert_bounded(rss: dict) -> None:
    assert {role for role, _, _ in rss.values()} >= {"tmaster", "stmgr", "instance"}
    for pid, (role, base, peak) in rss.items():
        assert peak - base < RSS_MARGIN, (
            f"{role} {pid}: RSS grew {(peak - base) / MB:.1f} MB (from {base / MB:.1f} MB)")


def test_a_10ms_bolt_holds_the_spout_names_the_cause_bounds_memory_and_loses_nothing():
    m, events, _, rss, stats = run_big()
    spout = m["components"]["numbers"]
    assert (spout["acked"], spout["failed"], spout["timed_out"]) == (BIG_TUPLES, 0, 0)
    assert m["components"]["slow"]["executed"] == BIG_TUPLES
    slow_task = next(s.task for s in stats if s.component == "slow")
    causes = {e["cause"] for e in events if e["kind"] == "backpressure_on"}
    assert causes == {slow_task}, events
    # time in backpressure is measured: where the spout was held, and per container
    assert spout["held_seconds"] > 0
    assert sum(c["backpressure_seconds"] for c in m["containers"].values()) > 0
    assert sum(c["backpressure_episodes"] for c in m["containers"].values()) >= 1
    assert_bounded(rss)


def test_d_backpressure_and_max_spout_pending_together():
    m, events, pending_seen, rss, _ = run_big(max_spout_pending=40)
    spout = m["components"]["numbers"]
    assert (spout["acked"], spout["failed"], spout["timed_out"]) == (BIG_TUPLES, 0, 0)
    assert spout["max_spout_pending"] == 40
    assert pending_seen and max(pending_seen) <= 40  # the limit held throughout
    # 40 tuples of 250 KB (10 MB) exceed the high mark: backpressure still engages
    assert any(e["kind"] == "backpressure_on" for e in events)
    assert spout["pending"] == 0
    assert_bounded(rss)
