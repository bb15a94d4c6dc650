"""Metrics on real processes: a finite run's counts in ``metrics("all")`` equal the true
counts, and busy time, CPU and RSS are measured. Waits are bounded polls."""

from __future__ import annotations

import pytest

from runtime import Topology
from runtime.model.topology import TopologyError
from runtime.testing import Doubler, ListSink, ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

N = 3000
FAST = {"spout_wait": 0.005, "stats_interval": 0.05, "ackers": 1}


def done(running, containers: int = 2):
    """The "all" metrics once every tuple went through and every instance has reported
    since with nothing left queued, else None. (A report between a batch's execution and
    its flush counts the batch executed and its emits and acks not yet: the ones the test
    checks are those read once nothing waits.)"""
    m = rested(lambda: running.metrics("all"), containers)
    if m is None:
        return None
    c = m["components"]
    finished = (c["numbers"]["acked"] == N and c["double"]["executed"] == N
                and c["sink"]["executed"] == N)
    return m if finished else None


def test_a_finite_runs_metrics_equal_the_true_counts():
    topo = Topology("metered", **FAST)
    topo.spout("numbers", ListSpout([[i] for i in range(N)], fields=["n"]), parallelism=2)
    topo.bolt("double", Doubler, parallelism=2).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("double")
    with topo.submit(containers=2) as running:
        m = wait_for(lambda: done(running), timeout=30, what=f"{N} tuples through")
        series = running.metrics("10m")["series"]
        at_rest = m
        with pytest.raises(ValueError, match="1m, 10m, 1h, 3h, all"):
            running.metrics("5m")
    c = m["components"]
    assert m["window"] == "all"
    assert (c["numbers"]["emitted"], c["numbers"]["acked"], c["numbers"]["failed"]) == (N, N, 0)
    assert (c["double"]["executed"], c["double"]["emitted"], c["double"]["acked"]) == (N, N, N)
    assert c["sink"]["executed"] == N and c["numbers"]["instances"] == 2
    assert c["numbers"]["complete_latency_ms"]["count"] == N
    assert c["numbers"]["pending"] == 0
    for task, inst in m["instances"].items():
        assert 0.0 <= inst["capacity"] <= 1.0, (task, inst)
        assert inst["rss_bytes"] > 0 and inst["cpu_seconds"] > 0, (task, inst)
        assert inst["restarts"] == 0
    assert c["double"]["busy_seconds"] > 0 and c["double"]["execute_latency_ms"] > 0
    assert sum(x for _, x, _ in series["sink"]) == N  # one point a second: rate x 1 s
    assert all(isinstance(p, tuple) and len(p) == 3 for p in series["double"])
    # issue 5: latency histograms count every tuple; queues are empty at rest
    for name in ("double", "sink"):
        latency = c[name]["latency_ms"]
        assert latency["execute"]["count"] == N and latency["process"]["count"] == N
        assert 0 < latency["execute"]["p50"] <= latency["execute"]["p99"]
        assert latency["process"]["p50"] >= latency["execute"]["p50"]  # waits, then runs
    assert c["numbers"]["latency_ms"]["complete"]["count"] == N
    for task, inst in at_rest["instances"].items():
        for gauge in ("pending_emits", "queued_tuples", "sm_queued_bytes", "sm_queued_frames"):
            assert inst[gauge] == 0, (task, gauge, inst)
        assert inst["held_seconds"] >= 0
    assert set(at_rest["containers"]) == {0, 1}
    assert all(x["backpressure_seconds"] == 0 for x in at_rest["containers"].values())


def rested(metrics, containers: int):
    """The metrics once no queue holds anything (every report after the run), else None."""
    m = metrics()
    gauges = ("pending_emits", "queued_tuples", "sm_queued_bytes", "sm_queued_frames")
    idle = all(i[g] == 0 for i in m["instances"].values() for g in gauges)
    return m if idle and len(m["containers"]) == containers else None


def test_with_metrics_off_only_the_counters_are_kept():
    topo = Topology("unmetered", metrics=False, **FAST)
    topo.spout("numbers", ListSpout([[i] for i in range(N)], fields=["n"]))
    topo.bolt("double", Doubler).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("double")
    with topo.submit() as running:
        m = wait_for(lambda: done(running, containers=1), timeout=30,
                     what=f"{N} tuples through")
        stats = running.statistics()
    c = m["components"]
    assert (c["numbers"]["acked"], c["double"]["executed"], c["sink"]["executed"]) == (N, N, N)
    assert c["double"]["latency_ms"] == {"execute": None, "process": None, "complete": None}
    assert all(s.latency_ms is None and s.rss_bytes == 0 for s in stats)


def test_the_metrics_option_must_be_a_bool():
    """Refused where it is given (docs/reliability.md, "Checked before anything starts")."""
    with pytest.raises(TopologyError, match="metrics must be True or False, not 'yes'"):
        Topology("bad", metrics="yes")
