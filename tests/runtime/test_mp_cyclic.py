"""A cycle under backpressure: tuples go round ``forward -> back -> forward`` a number of
hops (a counter in the tuple ends it), with acking on, big enough to cross the high
water mark. The stream managers keep reading bolts while the spouts are held, so the
cycle and the acker cycle (spout -> bolts -> acker -> spout) keep making progress."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from runtime import Bolt, Topology
from runtime.testing import ListSink, ListSpout, read_sink, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

TUPLES = 300
HOPS = 4  # times each tuple goes round the cycle
PAYLOAD = 8 * 1024  # bytes per tuple: a few frames cross the 64 KB high mark
OPTIONS = {"ackers": 1, "batch_size": 4, "backpressure_high": 64 * 1024,
           "backpressure_low": 32 * 1024, "spout_wait": 0.005, "stats_interval": 0.1,
           "message_timeout": 120.0,
           "target_latency": None}  # no latency bound: backpressure must engage (below)


def busy(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class Forward(Bolt):
    """Passes ``[n, hops, payload]`` on round the cycle, a little slowly."""

    outputs = ["n", "hops", "payload"]

    def process(self, tup):
        busy(0.0005)
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


class Back(Bolt):
    """Counts a hop: sends the tuple back to ``forward`` until it has gone round
    ``HOPS`` times, then out on ``done``."""

    outputs = {"default": ["n", "hops", "payload"], "done": ["n", "hops"]}

    def process(self, tup):
        n, hops, payload = tup.values
        if hops + 1 < HOPS:
            self.emit([n, hops + 1, payload], anchors=[tup])
        else:
            self.emit([n, hops + 1], stream="done", anchors=[tup])
        self.ack(tup)


def cyclic_topology() -> Topology:
    topo = Topology("cyclic", **OPTIONS)
    payload = "z" * PAYLOAD
    topo.spout("numbers", ListSpout([[i, 0, payload] for i in range(TUPLES)],
                                    fields=["n", "hops", "payload"]))
    forward = topo.bolt("forward", Forward, parallelism=2).shuffle_grouping("numbers")
    topo.bolt("back", Back).shuffle_grouping("forward")
    forward.shuffle_grouping("back")  # the cycle
    topo.bolt("sink", ListSink).shuffle_grouping("back", "done")
    return topo


def finished(running):
    m = running.metrics("all")
    c = m["components"]
    reported = (c["numbers"]["acked"] == TUPLES and c["sink"]["executed"] == TUPLES
                and c["forward"]["executed"] == TUPLES * HOPS)
    return m if reported else None


def test_a_cycle_and_the_acker_keep_making_progress_under_backpressure():
    with cyclic_topology().submit(containers=2) as running:
        m = wait_for(lambda: finished(running), timeout=90,
                     what=f"{TUPLES} trees through a cycle of {HOPS} hops")
        events = running.events()
    c = m["components"]
    assert (c["numbers"]["acked"], c["numbers"]["failed"]) == (TUPLES, 0)
    assert c["forward"]["executed"] == TUPLES * HOPS  # each tuple went round HOPS times
    assert any(e["kind"] == "backpressure_on" for e in events)  # it did engage
    done = sorted(read_sink(running.run_dir, "sink"))
    assert done == [[n, HOPS] for n in range(TUPLES)]  # every tree completed, once
