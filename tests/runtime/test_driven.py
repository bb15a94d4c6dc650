"""Every executor a driver may hold (a spout's, a bolt's, the acker's) provides the whole
driver interface, ``runtime.engine.driven.TaskExecutor``: the instance process and the
in-memory twin call it without asking what an executor can do."""

from __future__ import annotations

from runtime import Topology
from runtime.engine.driven import TaskExecutor
from runtime.testing import InMemoryCluster, ListSink, ListSpout


def test_spout_bolt_and_acker_executors_provide_the_whole_driver_interface():
    topo = Topology("driven")
    topo.spout("words", ListSpout([["a"], ["b"]], fields=["word"]))
    topo.bolt("sink", ListSink).shuffle_grouping("words")
    with InMemoryCluster(topo, ackers=1) as cluster:
        kinds = {ex.kind: ex for ex in cluster.executors.values()}
        assert set(kinds) == {"spout", "bolt", "acker"}
        for ex in kinds.values():
            assert isinstance(ex, TaskExecutor), ex.kind
        cluster.run_until_idle()
        acker = kinds["acker"]  # what only spouts and bolts do, it does as nothing
        assert (acker.step(10), acker.leftover, acker.tap_samples()) == (0, (), {})
        assert acker.set_recording("default", True) is False
        assert kinds["bolt"].step(10) == 0
        assert sorted(cluster.sink("sink")) == [["a"], ["b"]]
