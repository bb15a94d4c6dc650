"""A tap on real processes: ``running.sample`` returns tuples that actually crossed the
edge, and a tap nobody asks for any more switches itself off. Every wait has a deadline."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from runtime import BasicBolt, Topology
from runtime.testing import ListSpout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"spout_wait": 0.005, "stats_interval": 0.05}
VALUES = [[n * 7] for n in range(100_000)]  # known values, more than the test will emit


class Swallow(BasicBolt):
    outputs: list[str] = []

    def process(self, tup):
        pass


def tapped(running, component):
    """The streams each instance of ``component`` reports as tapped."""
    return [s.tapped for s in running.statistics() if s.component == component]


def test_sample_returns_tuples_that_crossed_the_edge_and_the_tap_expires():
    topo = Topology("tapping", **FAST)
    topo.spout("numbers", ListSpout(VALUES, fields=["n"], rate=500), parallelism=2)
    topo.bolt("sink", Swallow, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(containers=2, ackers=1) as running:
        running.wait_active(timeout=20)
        with pytest.raises(ValueError, match="did you mean 'numbers'"):
            running.sample("number")
        with pytest.raises(ValueError, match="no stream 'odd'"):
            running.sample("numbers", "odd")
        first = running.sample("numbers", n=20, wait=True, timeout=15, keep=1.0)
        assert first, "no tuple sampled in 15 s"
        time.sleep(0.3)  # let more batches cross the edge
        samples = running.sample("numbers", n=50, wait=True, timeout=15, keep=1.0)
        known = {v[0] for v in VALUES}
        spouts = set(running.plan.component_tasks()["numbers"])
        sinks = set(running.plan.component_tasks()["sink"])
        assert 0 < len(samples) <= 50
        for s in samples:
            assert s["values"][0] in known and s["fields"] == ["n"]
            assert s["task"] in spouts and s["stream"] == "default"
            assert set(s["to"]) <= sinks and len(s["ids"]) == 1  # tracked: {root: edge}
        times = [s["time"] for s in samples]
        assert times == sorted(times) and times[-1] <= time.time()
        # nobody asks any more: after `keep` the instances switch their taps off
        deadline = time.monotonic() + 15
        while any(tapped(running, "numbers")):
            assert time.monotonic() < deadline, "the taps did not switch themselves off"
            time.sleep(0.05)
        assert tapped(running, "numbers") == [[], []]
        assert tapped(running, "sink") == [[], []]  # never tapped
