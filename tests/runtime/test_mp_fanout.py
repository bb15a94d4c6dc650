"""A bolt that emits 10,000 tuples per input, behind a fast spout and in front of a
slower counter: backpressure holds the spout, memory stays bounded in every process,
and every tree completes (acking on)."""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from benchmarks.rss_slow_bolt import MB, RssWatch, started_paused
from runtime import Bolt, Topology
from runtime.testing import ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

INPUTS = 20
FANOUT = 10_000
PAYLOAD = 300  # bytes per emitted tuple: 3 MB per input, 60 MB through the counter
COUNT_SECONDS = 0.00002  # CPU per counted tuple: slower than the fan-out, so queues grow
OPTIONS = {"ackers": 1, "backpressure_high": MB, "backpressure_low": MB // 2,
           "spout_wait": 0.005, "stats_interval": 0.1, "message_timeout": 120.0}
# What may wait in one process: one input's output (3 MB: the fan-out bolt processes no
# more input until it is sent), a zmq pipe of 16 frames of 1000 tuples (5 MB) each way,
# and the high mark (1 MB). The worst is the counter's stream manager with 2 containers:
# a stream manager always reads its peers, so besides the pipe towards the counter (5 MB)
# and the mark (1 MB) it may take in both halves of the pipe from the other container
# (2 x 5 MB) once backpressure has started: about 16 MB of frames, and the allocator
# keeps some of what it freed. 32 MB above idle is that with room for the interpreter's
# own growth, and well under the 60 MB the run pushes through, which the stream manager
# held most of before it stopped reading the bolts that feed a congested one (53 MB
# measured) and the fan-out bolt before it set aside the rest of an input frame once its
# output waited (48 MB).
RSS_MARGIN = 32 * MB


class Fanout(Bolt):
    """Emits ``FANOUT`` tuples ``[n, i, payload]`` per input, anchored to it."""

    outputs = ["n", "i", "payload"]

    def prepare(self, config, context):
        self.payload = "p" * PAYLOAD

    def process(self, tup):
        n, payload = tup.values[0], self.payload
        for i in range(FANOUT):
            self.emit([n, i, payload], anchors=[tup])
        self.ack(tup)


class Counter(Bolt):
    """Acks everything; ``executed`` (in the metrics) is the count."""

    outputs = []

    def process(self, tup):
        deadline = time.perf_counter() + COUNT_SECONDS
        while time.perf_counter() < deadline:
            pass
        self.ack(tup)


def fanout_topology() -> Topology:
    topo = Topology("fanout", **OPTIONS)
    topo.spout("inputs", ListSpout([[n] for n in range(INPUTS)], fields=["n"]))
    topo.bolt("fanout", Fanout).shuffle_grouping("inputs")
    topo.bolt("count", Counter).shuffle_grouping("fanout")
    return topo


def finished(running):
    m = running.metrics("all")
    c = m["components"]
    done = (c["inputs"]["acked"] == INPUTS and c["count"]["executed"] == INPUTS * FANOUT
            and c["fanout"]["emitted"] == INPUTS * FANOUT)
    return m if done else None


@pytest.mark.parametrize("containers", [1, 2])  # 2: the fan-out and the counter apart
def test_a_10000_fold_fanout_under_backpressure_completes_with_bounded_memory(containers):
    running = started_paused(fanout_topology(), containers=containers)
    with running:
        watch = RssWatch(running.status()["pid"]).start()
        running.resume()
        m = wait_for(lambda: finished(running), timeout=90,
                     what=f"{INPUTS} inputs x {FANOUT} tuples")
        rss = watch.stop()
        events = running.events()
    c = m["components"]
    assert (c["inputs"]["acked"], c["inputs"]["failed"]) == (INPUTS, 0)
    assert c["fanout"]["emitted"] == INPUTS * FANOUT
    assert any(e["kind"] == "backpressure_on" for e in events)
    grown = {f"{role} {pid}": round((peak - base) / MB, 1)
             for pid, (role, base, peak) in rss.items()}
    assert all(g < RSS_MARGIN / MB for g in grown.values()), grown
