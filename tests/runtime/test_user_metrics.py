"""User-defined metrics (``context.register_metric``): the registry, and their values
travelling with a task's statistics through the in-memory twin."""

from __future__ import annotations

import pytest

from runtime import Bolt, Topology
from runtime.observe.user_metrics import UserMetrics, check_metric
from runtime.testing import InMemoryCluster, ListSpout


class Measuring(Bolt):
    """Counts words, keeps the last length as a gauge, and a histogram of lengths."""

    def prepare(self, config, context):
        self.words = context.register_metric("words_seen", "counter")
        self.last = context.register_metric("last_length", "gauge")
        self.lengths = context.register_metric("word_length", "histogram", buckets=[3, 5])

    def process(self, tup):
        word = tup["word"]
        self.words.inc()
        self.last.set(len(word))
        self.lengths.observe(len(word))


def topology() -> Topology:
    topo = Topology("um")
    topo.spout("words", ListSpout([["a"], ["four"], ["sixsix"], ["bb"]], fields=["word"]))
    topo.bolt("measure", Measuring()).shuffle_grouping("words")
    return topo


def test_user_metrics_travel_with_the_statistics():
    with InMemoryCluster(topology()) as cluster:
        cluster.run_until_idle()
        by = {s.component: s for s in cluster.statistics()}
    um = by["measure"].user_metrics
    assert um["counters"] == {"words_seen": 4}
    assert um["gauges"] == {"last_length": 2}
    hist = um["histograms"]["word_length"]
    assert hist["bounds"] == [3.0, 5.0]
    assert hist["counts"] == [2, 1, 1]  # a, bb <= 3; four <= 5; sixsix past the last bound
    assert (hist["sum"], hist["count"]) == (13, 4)
    assert by["words"].user_metrics is None  # registered nothing: reports nothing extra


def test_the_same_name_gives_the_same_metric_and_kinds_do_not_mix():
    m = UserMetrics()
    assert m.register("n", "counter") is m.register("n", "counter")
    with pytest.raises(ValueError, match="already a counter"):
        m.register("n", "gauge")


@pytest.mark.parametrize("name, kind, says", [
    ("9lives", "counter", "letters, digits"), ("has space", "gauge", "letters, digits"),
    (3, "gauge", "letters, digits"), ("ok", "timer", "kind must be one of"),
])
def test_bad_names_and_kinds_are_refused(name, kind, says):
    assert says in check_metric(name, kind)
    with pytest.raises(ValueError, match=says):
        UserMetrics().register(name, kind)


def test_a_counter_never_goes_down_and_buckets_must_increase():
    m = UserMetrics()
    with pytest.raises(ValueError, match="would go down"):
        m.register("c", "counter").inc(-1)
    with pytest.raises(ValueError, match="increasing"):
        m.register("h", "histogram", buckets=[5, 1])
    gauge = m.register("g", "gauge")
    gauge.inc(3)
    gauge.dec()
    assert m.report()["gauges"] == {"g": 2}


def test_a_context_outside_a_task_says_so():
    from runtime.model.api import Context

    with pytest.raises(RuntimeError, match="no running task"):
        Context("t", "c", 1, 0, 1, {}, 0, "").register_metric("x", "counter")
