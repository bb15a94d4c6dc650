"""The Prometheus export on real processes: a topology submitted with ``metrics_port=0``
serves its metrics over HTTP on loopback; the text parses with prometheus_client's own
parser and carries a built-in metric and a user metric. Waits are bounded polls."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime import Bolt, Topology
from runtime.testing import PacedSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

FAST = {"stats_interval": 0.05}


class CountingBolt(Bolt):
    """Counts what it sees in a user counter, and its last value in a gauge."""

    def prepare(self, config, context):
        self.seen = context.register_metric("numbers_seen", "counter")
        self.last = context.register_metric("last_number", "gauge")
        self.sizes = context.register_metric("number_size", "histogram", buckets=[10, 1000])

    def process(self, tup):
        self.seen.inc()
        self.last.set(tup.values[0])
        self.sizes.observe(tup.values[0])


def scrape(url: str) -> dict[str, dict]:
    """name -> {(component, task) or (component, task, le/quantile): value} of every sample."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.labels["component"], s.labels["task"],
                   s.labels.get("le") or s.labels.get("quantile"))
            samples.setdefault(s.name, {})[key] = s.value
    return samples


def counted(url: str) -> dict | None:
    """The samples once the spout has reported what it emitted and every bolt task its
    user counter (each task reports on its own clock), else None."""
    samples = scrape(url)
    seen = samples.get("tupleflow_user_numbers_seen_total", {})
    emitted = [v for (c, _, _), v in samples.get("tupleflow_emitted_total", {}).items()
               if c == "numbers"]
    return samples if len(seen) == 2 and min(seen.values()) > 0 and emitted else None


def test_a_running_topology_serves_builtin_and_user_metrics():
    topo = Topology("exported", **FAST)
    topo.spout("numbers", PacedSpout(rate=500))
    topo.bolt("count", CountingBolt, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(metrics_port=0) as running:
        url = running.metrics_url
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        samples = wait_for(lambda: counted(url), timeout=40, what="user counters exported")
        stats = {s.task: s for s in running.statistics()}
    executed = samples["tupleflow_executed_total"]
    assert {c for c, _, _ in executed} == {"numbers", "count"}
    assert sum(v for (c, _, _), v in executed.items() if c == "count") > 0
    assert all(v == 1.0 for v in samples["tupleflow_up"].values())
    seen = samples["tupleflow_user_numbers_seen_total"]
    assert {t for _, t, _ in seen} == {str(t) for t, s in stats.items() if s.component == "count"}
    # a histogram: cumulative buckets ending at +Inf, which equals its count
    sizes = samples["tupleflow_user_number_size_bucket"]
    counts = samples["tupleflow_user_number_size_count"]
    for (c, t, le), v in sizes.items():
        assert v <= counts[(c, t, None)]
        if le == "+Inf":
            assert v == counts[(c, t, None)]
    assert "tupleflow_user_last_number" in samples
    assert samples["tupleflow_execute_latency_seconds"]  # summaries, per bolt task


def test_without_metrics_port_nothing_is_served():
    topo = Topology("unexported", **FAST)
    topo.spout("numbers", PacedSpout(rate=50))
    with topo.submit() as running:
        assert running.metrics_url is None


def test_a_port_in_use_is_an_error_the_handle_raises_and_the_topology_runs_on():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    topo = Topology("clash", **FAST)
    topo.spout("numbers", PacedSpout(rate=50))
    with taken, topo.submit(metrics_port=taken.getsockname()[1]) as running:
        with pytest.raises(RuntimeError, match="cannot serve metrics on 127.0.0.1"):
            running.metrics_url  # noqa: B018 (the property asks the master)
        running.wait_active(timeout=30)
        assert running.status()["state"] == "running"


def test_a_bad_metrics_port_fails_at_definition():
    from runtime import TopologyError

    topo = Topology("bad")
    topo.spout("numbers", PacedSpout(rate=50))
    with pytest.raises(TopologyError, match="metrics_port.*a port number"):
        topo.submit(metrics_port=-1)
