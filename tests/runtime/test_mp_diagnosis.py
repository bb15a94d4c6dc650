"""Issue 19 on real processes: a 10 ms bolt's rate shows in the metrics while its first
big batch is still being worked through, and ``explain()`` names the slow bolt among
fast ones. Waits are bounded polls on conditions."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from runtime import Bolt, Spout, Topology
from runtime.testing import PacedSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"stats_interval": 0.1}
BURST = 300  # tuples in the one frame: 3 s of work at 10 ms each


class Burst(Spout):
    """Emits ``BURST`` tuples in its first ``next_tuple``: they leave as one frame."""

    outputs = ["n"]

    def open(self, config, context):
        self.done = False

    def next_tuple(self):
        if not self.done:
            self.done = True
            for n in range(BURST):
                self.emit([n])


class Sleepy(Bolt):
    """``ms`` milliseconds a tuple, sleeping (time, not CPU), then passes it on."""

    outputs = ["n"]

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def process(self, tup):
        if self.ms:
            time.sleep(self.ms / 1000)
        self.emit(tup.values)


def test_a_10ms_bolt_shows_its_rate_in_the_middle_of_its_first_batch():
    topo = Topology("moving", **FAST)
    topo.spout("burst", Burst())
    topo.bolt("slow", Sleepy(10)).shuffle_grouping("burst")
    with topo.submit() as running:
        running.wait_active(timeout=60)

        def moving():
            m = running.metrics("1m")["components"]["slow"]
            return m if m["executed_per_s"] > 0 else None

        seen = wait_for(moving, timeout=60, what="a non-zero rate for the slow bolt")
        # the frame holds all BURST tuples: before this change, nothing showed until
        # the whole batch (3 s) was done
        assert 0 < seen["executed"] < BURST
        assert seen["busy_seconds"] > 0
        done = wait_for(lambda: running.metrics("all")["components"]["slow"]["executed"] ==
                        BURST or None, timeout=60, what="the whole batch")
        assert done
        latency = running.metrics("all")["components"]["slow"]["latency_ms"]["execute"]
    assert latency["count"] == BURST and 9 < latency["p50"] < 30


def test_explain_names_the_slow_bolt_among_fast_ones():
    topo = Topology("why", **FAST)
    topo.spout("numbers", PacedSpout(rate=2000))  # ten times what the slow bolt takes
    topo.bolt("parse", Sleepy(0)).shuffle_grouping("numbers")
    topo.bolt("enrich", Sleepy(5)).shuffle_grouping("parse")
    topo.bolt("store", Sleepy(0)).shuffle_grouping("enrich")
    with topo.submit() as running:
        running.wait_active(timeout=60)

        def named():
            found = running.explain()
            return found if found and found[0].kind == "slow_bolt" else None

        found = wait_for(named, timeout=60, what="a slow_bolt finding")
    top = found[0]
    assert (top.component, top.kind) == ("enrich", "slow_bolt")
    assert top.task is not None and top.evidence["capacity"] >= 0.5
    assert top.evidence["execute_p50_ms"] >= 4  # the sampled tuples' own time
