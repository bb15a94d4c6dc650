"""A bolt's loop in its instance process (``runtime/processes/instance.py``): a bolt that
has read all its input flushes what it made at once, and with nothing to send it is woken
by its input, not by its flush timer. Before, an idle bolt was put on a CPU at every
flush interval (2 ms: ~500 times a second, for nothing), and at a moderate rate each frame
it read cost it a second wake-up, its timer's, to send what the frame made (issue 17's
half-rate tail)."""

from __future__ import annotations

import time

import pytest

from runtime import Bolt, Topology
from runtime.testing import ListSpout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TUPLES = 200
# Times an idle bolt's main thread may be put on a CPU in a second: its timer's check for
# an emit made outside ``process`` (every 20 ms), a control message now and then. The old
# loop woke every 2 ms flush interval: ~500, and 300-500 under load.
IDLE_WAKEUPS = 100


class Relay(Bolt):
    outputs = ["value"]

    def process(self, tup):
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


class Count(Bolt):
    outputs = []

    def prepare(self, config, context):
        self.seen = context.register_metric("seen", "counter")

    def process(self, tup):
        self.seen.inc()
        self.ack(tup)


def wakeups(pid: int) -> int:
    """Times the process's main thread was put on a CPU so far (``/proc/PID/schedstat``)."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[2])


def test_an_idle_bolt_is_not_woken_by_its_flush_timer():
    topo = Topology("idle-bolt-loop")
    topo.spout("feed", ListSpout([[n] for n in range(TUPLES)]))
    topo.bolt("relay", Relay).shuffle_grouping("feed")
    topo.bolt("count", Count).shuffle_grouping("relay")

    def done(stats):
        feed = [s for s in stats if s.component == "feed"][0]
        count = [s for s in stats if s.component == "count"][0]
        return (feed.acked >= TUPLES and count.user_metrics is not None
                and count.user_metrics["counters"]["seen"] >= TUPLES)

    with topo.submit(ackers=1) as running:
        stats = running.wait_until(done, timeout=90)
        pids = {s.component: s.pid for s in stats if s.component in ("relay", "count")}
        before, start = {c: wakeups(p) for c, p in pids.items()}, time.monotonic()
        time.sleep(2.0)  # the span measured, not a wait for anything
        rates = {c: (wakeups(p) - before[c]) / (time.monotonic() - start)
                 for c, p in pids.items()}
    assert all(rate < IDLE_WAKEUPS for rate in rates.values()), rates
