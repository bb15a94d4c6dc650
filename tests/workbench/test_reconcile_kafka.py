"""One definition, two backends, over a Kafka topic (librdkafka's mock cluster): a
persistent aggregation fed by a ``KafkaBatchSpout`` in real processes, the same aggregation
run by a real local Spark session over the same topic, through the offsets the stream
completed, and ``workbench.reconcile`` finding exactly the keys a test corrupts (one task's
share of a batch applied twice, as a counter without txids would on a replay)."""

from __future__ import annotations

import json
import sys
from collections import Counter

import cloudpickle
import pytest

from runtime import Count, KafkaBatchSpout, SQLiteMap, Topology
from runtime.groupings import stable_hash
from runtime.testing import wait_for
from runtime.trident import TxValue
from runtime.trident._spout import BatchLedger
from workbench import batch_aggregate, reconcile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # Spark on a loaded 2-core machine

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EVENTS = [{"kind": f"k{i % 7}", "user": f"u{i % 5}", "ms": i % 100} for i in range(3000)]
LATE = [{"kind": "k1", "user": "u0", "ms": 1}, {"kind": "late", "user": "u0", "ms": 2}]


def produce(producer, events: list[dict], first: int = 0) -> None:
    """Event n to partition n % 4 (the mock cluster's topic has 4)."""
    for n, e in enumerate(events, first):
        producer.produce("events", json.dumps(e).encode(), partition=n % 4)
    assert producer.flush(10) == 0


def as_dict(frame, key: str, value: str) -> dict:
    return {r[key]: r[value] for r in frame.collect()}


def test_reconcile_over_kafka_reads_what_the_stream_completed_and_finds_each_corruption(
        spark, kafka_cluster, tmp_path):
    producer, brokers = kafka_cluster
    produce(producer, EVENTS)
    state, ledger = SQLiteMap(tmp_path / "counts.sqlite"), tmp_path / "ledger.sqlite"
    topo = Topology("reconcile-kafka", ackers=1, message_timeout=5.0)
    topo.spout("events", KafkaBatchSpout("events", brokers, fields=["kind", "user", "ms"],
                                         batch_size=400, ledger=ledger))
    topo.persistent_aggregate("counts", "events", ["kind"], Count(), state, parallelism=2)
    book = BatchLedger(ledger)
    with topo.submit() as running:
        # 750 events a partition, 100 a partition per batch: 8 batches
        wait_for(lambda: book.completed() == 8, 300, "the stream to complete every batch")
        assert reconcile(running, "counts", spark=spark).count() == 0  # while it runs
    truth = Counter(e["kind"] for e in EVENTS)
    assert state.snapshot() == dict(truth)

    # Events the stream never read: the batch side stops where the stream's batches did.
    produce(producer, LATE, first=len(EVENTS))
    assert reconcile(running, "counts", spark=spark).count() == 0
    everything = batch_aggregate(topo, "counts", through="end", spark=spark)
    assert as_dict(everything, "kind", "value") == {**truth, "k1": truth["k1"] + 1, "late": 1}

    # The stream goes wrong as a plain counter would: one aggregator task applies its share
    # of batch 3 a second time. Reconcile names exactly that task's keys, with both values.
    ranges = {p: (start, end) for p, start, end in book.meta(3)}
    book.close()
    batch3 = Counter(e["kind"] for n, e in enumerate(EVENTS)
                     if ranges[n % 4][0] <= n // 4 < ranges[n % 4][1])
    twice = {k: c for k, c in batch3.items() if stable_hash([k]) % 2 == 0}
    assert 0 < len(twice) < len(truth)
    state.multi_put([(k,) for k in twice], [TxValue(3, truth[k] + c) for k, c in twice.items()])
    diff = reconcile(running, "counts", spark=spark)
    assert diff.columns == ["kind", "stream", "batch"]
    assert [tuple(r) for r in diff.collect()] == sorted(
        (k, truth[k] + c, truth[k]) for k, c in twice.items())
