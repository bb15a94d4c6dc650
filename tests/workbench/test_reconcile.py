"""One definition, two backends: a persistent aggregation run again by a real local Spark
session over the same source, and ``workbench.reconcile`` comparing it with the state the
stream built in real processes. A state that agrees gives an empty frame; a tampered one
gives exactly the keys that differ, with both values."""

from __future__ import annotations

import math
import sqlite3
import sys
from collections import Counter

import cloudpickle
import pytest

from runtime import BatchLogSpout, Count, SQLiteMap, Sum, Topology
from runtime.sources import EmbeddedLog
from runtime.testing import wait_for
from runtime.trident import ListBatchSpout, MemoryMap, ReducerAggregator, TxValue
from workbench import batch_aggregate, reconcile

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # Spark on a loaded 2-core machine

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EVENTS = [{"kind": f"k{i % 7}", "user": f"u{i % 5}", "ms": i % 100} for i in range(3000)]


def split(values):
    """Trident's ``each``, run by the spout (and, through it, by the batch job)."""
    return [[values[0], values[1], values[2]], [values[0], "any", values[2]]]


def as_dict(frame, keys, value):
    return {tuple(r[k] for k in keys): r[value] for r in frame.collect()}


def completed(ledger) -> int:
    """The last txid the spout's ledger marks completed."""
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as db:
            row = db.execute("SELECT txid FROM done").fetchone()
    except sqlite3.OperationalError:  # not made yet, or its tables not yet
        return 0
    return 0 if row is None else row[0]


def log_with_events(tmp_path) -> EmbeddedLog:
    log = EmbeddedLog(tmp_path / "log")
    log.create_topic("events", 3)
    for e in EVENTS:
        log.append_json("events", e, key=e["user"])
    log.sync()
    return log


def test_the_batch_job_uses_the_aggregations_own_definition(spark, tmp_path):
    log = log_with_events(tmp_path)
    topo = Topology("batch-only")
    topo.spout("events", BatchLogSpout("events", log.root, fields=["kind", "user", "ms"],
                                       each=split))
    topo.persistent_aggregate("ms", "events", ["kind", "user"], Sum("ms"), MemoryMap(),
                              value_field="total")
    frame = batch_aggregate(topo, "ms", through="end", spark=spark)
    assert frame.columns == ["kind", "user", "total"]
    truth = Counter()
    for e in EVENTS:  # each event counts once under its user and once under "any"
        truth[(e["kind"], e["user"])] += e["ms"]
        truth[(e["kind"], "any")] += e["ms"]
    assert as_dict(frame, ["kind", "user"], "total") == dict(truth)


class Longest(ReducerAggregator):
    """The longest word seen per key: a reducer, folded from ``init()``."""

    def init(self):
        return ""

    def reduce(self, value, tup):
        return max(value, tup["word"], key=len)


def test_a_reducer_is_folded_from_init(spark):
    words = [["a", "x"], ["a", "xyz"], ["b", "yy"], ["a", "xy"]]
    topo = Topology("reducer")
    topo.spout("w", ListBatchSpout(words, fields=["key", "word"], batch_size=2))
    topo.persistent_aggregate("longest", "w", "key", Longest(), MemoryMap())
    frame = batch_aggregate(topo, "longest", through="end", spark=spark)
    assert as_dict(frame, ["key"], "value") == {("a",): "xyz", ("b",): "yy"}


def test_reconcile_finds_exactly_the_keys_that_differ_with_both_values(spark, tmp_path):
    log = log_with_events(tmp_path)
    state, ledger = SQLiteMap(tmp_path / "counts.sqlite"), tmp_path / "ledger.sqlite"
    topo = Topology("reconcile", ackers=1, message_timeout=5.0)
    topo.spout("events", BatchLogSpout("events", log.root, fields=["kind", "user", "ms"],
                                       batch_size=400, ledger=ledger))
    topo.persistent_aggregate("counts", "events", ["kind"], Count(), state, parallelism=2)
    with topo.submit() as running:
        wait_for(lambda: completed(ledger) == math.ceil(len(EVENTS) / 400), timeout=300,
                 what="the stream to complete every batch")
        assert reconcile(running, "counts", spark=spark).count() == 0  # while it runs
    truth = Counter(e["kind"] for e in EVENTS)
    assert state.snapshot() == dict(truth)
    assert reconcile(running, "counts", spark=spark).count() == 0  # after the kill too

    # The stream goes wrong: one key over-counted, one it never saw, one it lost.
    state.multi_put([("k1",), ("zz",)], [TxValue(10**6, truth["k1"] + 3), TxValue(10**6, 1)])
    with sqlite3.connect(tmp_path / "counts.sqlite") as db:
        db.execute("DELETE FROM state WHERE key = ?", ('["k4"]',))
    diff = reconcile(running, "counts", spark=spark)
    assert diff.columns == ["kind", "stream", "batch"]
    assert [tuple(r) for r in diff.collect()] == [
        ("k1", truth["k1"] + 3, truth["k1"]), ("k4", None, truth["k4"]), ("zz", 1, None)]


def test_reconcile_reads_only_the_batches_the_stream_completed(spark, tmp_path):
    """Before the first batch completes the batch side is empty: a stream is judged on
    what it finished, not on input it has not reached yet."""
    log = log_with_events(tmp_path)
    topo = Topology("not-yet")
    topo.spout("events", BatchLogSpout("events", log.root, fields=["kind", "user", "ms"],
                                       ledger=tmp_path / "ledger.sqlite"))
    topo.persistent_aggregate("counts", "events", ["kind"], Count(), MemoryMap())
    assert batch_aggregate(topo, "counts", spark=spark).count() == 0
    assert batch_aggregate(topo, "counts", through="end", spark=spark).count() == 7


def test_reconcile_names_what_is_not_a_persistent_aggregation(spark):
    topo = Topology("plain")
    topo.spout("w", ListBatchSpout([["a"]], fields=["word"]))
    with pytest.raises(ValueError, match="'w' is a ListBatchSpout, not a persistent_aggregate"):
        batch_aggregate(topo, "w", spark=spark)
    with pytest.raises(ValueError, match="'nope' is no component"):
        batch_aggregate(topo, "nope", spark=spark)
    with pytest.raises(ValueError, match="does not know its topology"):
        reconcile(object(), "w", spark=spark)
