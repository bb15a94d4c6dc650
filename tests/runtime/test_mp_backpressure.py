"""Spout backpressure across processes: a slow bolt behind a fast spout."""


import pytest

from runtime import Topology
from runtime.testing import ListSink, ListSpout, SlowBolt, read_sink

pytestmark = pytest.mark.slow

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
