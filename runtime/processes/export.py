"""The master's metrics in Prometheus's text format, on a loopback port
(``submit(metrics_port=0)``; ``running.metrics_url``).

A custom collector of the official ``prometheus_client`` library turns the latest
statistics record of every task (the master's task table) into metric families at each
scrape; nothing is kept twice. The HTTP server is the library's, in its own thread,
bound to 127.0.0.1 only: the master's socket loop never waits on a scraper. Names and
labels are in ``docs/internals/metrics.md``, "Prometheus export".

``prometheus_client`` (the ``notebook`` extra) is imported inside the functions that use
it: a master of a topology that exports nothing never loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

log = logging.getLogger("tupleflow.tmaster")

PREFIX = "tupleflow_"
LABELS = ("topology", "component", "task")
# record field -> (exported name, help); counters get Prometheus's "_total" suffix
COUNTERS = {
    "emitted": "tuples emitted (once per emit call)",
    "transferred": "tuple copies sent to tasks",
    "executed": "tuples given to process()",
    "acked": "tuples acked",
    "failed": "tuples failed (timeouts included)",
    "timed_out": "spout tuples failed by timeout",
    "dropped": "tuples dropped (unencodable, or malformed frames)",
    "errors": "exceptions raised by user code",
    "restarts": "restarts of the task",
    "busy_seconds": "seconds inside process() or next_tuple()",
    "cpu_seconds": "CPU seconds (user + system) of the task's process",
}
GAUGES = {
    "pending": "spout tuples in flight",
    "max_spout_pending": "the current limit on spout tuples in flight",
    "rss_bytes": "resident memory of the task's process",
    "queued_tuples": "tuples in the task's batches, not yet sent",
    "pending_emits": "frames its stream manager would not take yet",
    "sm_queued_bytes": "bytes its stream manager holds for it",
    "incarnation": "the task's current incarnation (0: the first)",
}
STAGES = ("execute", "process", "complete")  # the latency summaries (record "latency_ms")
QUANTILES = ("p50", "p95", "p99")

Snapshot = Callable[[], list[dict]]


class TopologyCollector:
    """A ``prometheus_client`` collector over a snapshot of the task records (copies,
    taken under the master's lock by ``snapshot``)."""

    def __init__(self, topology: str, snapshot: Snapshot) -> None:
        self.topology, self.snapshot = topology, snapshot

    def collect(self) -> Iterator:
        records = self.snapshot()
        yield from builtin_families(self.topology, records)
        yield from user_families(self.topology, records)

    def describe(self) -> list:
        return []  # the families depend on what the tasks report: nothing checked up front


def _labels(topology: str, record: dict) -> list[str]:
    return [topology, record["component"], str(record["task"])]


def builtin_families(topology: str, records: list[dict]) -> Iterator:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    up = GaugeMetricFamily(PREFIX + "up", "1 while the task's current incarnation runs",
                           labels=LABELS)
    for r in records:
        up.add_metric(_labels(topology, r), 1.0 if r.get("state") == "running" else 0.0)
    yield up
    for field, text in COUNTERS.items():
        family = CounterMetricFamily(PREFIX + field, text, labels=LABELS)
        _fill(family, topology, records, field)
        yield family
    for field, text in GAUGES.items():
        family = GaugeMetricFamily(PREFIX + field, text, labels=LABELS)
        _fill(family, topology, records, field)
        yield family
    yield from _latencies(topology, records)


def _fill(family, topology: str, records: list[dict], field: str) -> None:
    """One sample per task that reported a number for ``field`` (None: not reported)."""
    for r in records:
        value = r.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            family.add_metric(_labels(topology, r), value)


def _latencies(topology: str, records: list[dict]) -> Iterator:
    """Each latency stage as a summary in seconds: quantiles, count and sum since the
    task's incarnation started (the record's ``latency_ms``)."""
    from prometheus_client.core import Metric

    for stage in STAGES:
        name = f"{PREFIX}{stage}_latency_seconds"
        family = Metric(name, f"{stage} latency of tuples, since the incarnation started",
                        "summary")
        for r in records:
            summary = (r.get("latency_ms") or {}).get(stage)
            if summary:
                _summary(family, name, dict(zip(LABELS, _labels(topology, r))), summary)
        yield family


def _summary(family, name: str, labels: dict, summary: dict) -> None:
    for q in QUANTILES:
        quantile = str(int(q[1:]) / 100)
        family.add_sample(name, {**labels, "quantile": quantile}, summary[q] / 1000)
    family.add_sample(name + "_count", labels, summary["count"])
    family.add_sample(name + "_sum", labels, summary["mean"] * summary["count"] / 1000)


def user_families(topology: str, records: list[dict]) -> Iterator:
    """``tupleflow_user_<name>`` for each metric a task registered; a name registered as
    two kinds by different components is exported as the kind seen first (logged)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    made = {"counters": CounterMetricFamily, "gauges": GaugeMetricFamily,
            "histograms": HistogramMetricFamily}
    families: dict[str, tuple[str, object]] = {}
    for r in records:
        for kind, metrics in (r.get("user_metrics") or {}).items():
            for name, value in metrics.items():
                known = families.get(name)
                if known is None:
                    known = families[name] = (kind, made[kind](
                        PREFIX + "user_" + name, f"user metric {name}", labels=LABELS))
                if known[0] != kind:
                    log.warning("user metric %r is a %s in %s, already a %s: not exported",
                                name, kind, r["component"], known[0])
                    continue
                _user_sample(known[1], kind, _labels(topology, r), value)
    for _, family in families.values():
        yield family


def _user_sample(family, kind: str, labels: list[str], value) -> None:
    if kind != "histograms":
        family.add_metric(labels, value)
        return
    cumulative, buckets = 0, []
    for bound, n in zip([*value["bounds"], "+Inf"], value["counts"]):
        cumulative += n
        buckets.append((str(float(bound)) if bound != "+Inf" else bound, cumulative))
    family.add_metric(labels, buckets, value["sum"])


class MetricsServer:
    """The HTTP endpoint: ``prometheus_client``'s server, on 127.0.0.1 only."""

    def __init__(self, topology: str, port: int, snapshot: Snapshot) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(TopologyCollector(topology, snapshot))
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
