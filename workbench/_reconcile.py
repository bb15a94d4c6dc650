"""One definition, two backends (Summingbird's lesson): a ``persistent_aggregate`` run again
as a Spark batch job over the same source, and reconciled with the state the stream built.

The batch job reads the aggregation's own batch spout, piece by piece on Spark's workers
(one piece per log partition; a Kafka topic's pieces are read in the driver with
confluent-kafka), with the spout's own decoding and ``each``, and folds the tuples with
the aggregation's own aggregator: nothing is written twice, so a difference is the
stream's doing, not a second definition's. By default it reads the source through the
last batch the stream completed (the spout's ledger), so a stream still running is judged
on what it has finished.

>>> from runtime import Count, MemoryMap, Topology
>>> from runtime.trident import ListBatchSpout
>>> topo = Topology("words")
>>> _ = topo.spout("w", ListBatchSpout([["a"], ["b"], ["a"]], fields=["word"]))
>>> _ = topo.persistent_aggregate("n", "w", ["word"], Count(), MemoryMap())
>>> aggregation(topo, "n").group_by, aggregation(topo, "n").value_field
(['word'], 'value')
"""

from __future__ import annotations

import copy
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from runtime.trident import (
    BATCH_FIELD,
    CombinerAggregator,
    PersistentAggregateBolt,
    TransactionalSpout,
    freeze,
)

__all__ = ["aggregation", "batch_aggregate", "reconcile"]

STREAM, BATCH = "stream", "batch"  # the value columns of reconcile's frame


@dataclass(frozen=True)
class Aggregation:
    """What a persistent aggregation is made of, read from its topology."""

    component: str
    source: str  # the batch spout's component id
    spout: TransactionalSpout
    group_by: list[str]
    aggregator: Any
    state: Any
    value_field: str


def aggregation(topology, component: str) -> Aggregation:
    """The persistent aggregation ``component`` of ``topology``; ValueError naming it if it
    is none."""
    spec = topology.components.get(component)
    bolt = getattr(spec, "impl", None)
    if not isinstance(bolt, PersistentAggregateBolt):
        what = "no component" if spec is None else f"a {spec.class_name}"
        raise ValueError(f"{component!r} is {what}, not a persistent_aggregate of "
                         f"topology {topology.name!r}")
    (source,) = {i.source for i in spec.inputs}
    spout = topology.components[source].impl
    return Aggregation(component, source, spout, bolt.group_by, bolt.aggregator, bolt.state,
                       bolt.outputs[-1])


def batch_aggregate(topology, component: str, *, through: str = "completed",
                    run_dir: str | None = None, spark=None):
    """The aggregation ``component`` computed by Spark over its source: a DataFrame of the
    group-by fields and the value field. ``through="completed"`` reads the source through
    the last batch the stream completed (its ledger; ``run_dir`` is where a ledger kept in
    the run directory is), ``"end"`` all of it now."""
    from runtime.recording import spark_session

    agg = aggregation(topology, component)
    spark = spark or spark_session()
    pieces = _pieces(topology, agg, through, run_dir)
    rows = _fold(_values(spark, agg.spout, pieces), agg)
    return _frame(spark, rows.map(lambda kv: [*kv[0], kv[1]]).collect(),
                  agg.group_by + [agg.value_field])


def reconcile(running, component: str, *, through: str = "completed", spark=None):
    """Keys whose stream state and batch result differ, with both values: a Spark
    DataFrame of the group-by fields, ``stream`` (the state's value, null if the key is
    missing there) and ``batch`` (Spark's, null if missing there). Empty: they agree.

    ``running`` is the ``RunningTopology`` (running or killed) of the topology that holds
    the persistent aggregation ``component``; its state is read with ``snapshot()``."""
    from runtime.recording import spark_session

    topology = getattr(running, "topology", None)
    if topology is None:
        raise ValueError(f"{running!r} does not know its topology (submit it with "
                         "Topology.submit)")
    agg = aggregation(topology, component)
    spark = spark or spark_session()
    batch = batch_aggregate(topology, component, through=through,
                            run_dir=running.run_dir, spark=spark)
    stream = _frame(spark, _state_rows(agg), agg.group_by + [STREAM])
    return _differences(stream, batch.withColumnRenamed(agg.value_field, BATCH), agg.group_by)


# -- the batch job ---------------------------------------------------------------------------
def _pieces(topology, agg: Aggregation, through: str, run_dir: str | None) -> list:
    if through not in ("completed", "end"):
        raise ValueError(f"through must be 'completed' or 'end', not {through!r}")
    reader = copy.copy(agg.spout)
    try:
        if through == "end":
            return reader.pieces(None)
        ledger = reader.ledger_file(topology.name, agg.source, run_dir or "")
        return reader.pieces(_completed_meta(ledger)) if os.path.exists(ledger) else []
    finally:
        _close(reader)


def _completed_meta(path: str) -> Any:
    """The meta of the last batch the ledger marks completed ([] before the first)."""
    import json

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    try:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        done = db.execute("SELECT txid FROM done WHERE id=0").fetchone() \
            if "done" in tables else None
        if done is None:  # the spout is still making it, or completed nothing yet
            return []
        (meta,) = db.execute("SELECT meta FROM batches WHERE txid=?", done).fetchone()
        return json.loads(meta)
    finally:
        db.close()


def _values(spark, spout: TransactionalSpout, pieces: list):
    """An RDD of the source's tuples: read by Spark's tasks, one a piece, or, for a spout
    that says ``read_in_driver`` (Kafka: Spark's Kafka connector is a Maven jar this
    project does not fetch, and a loopback broker is out of a remote worker's reach), read
    here in the driver and handed to Spark."""
    slices = max(1, len(pieces))
    if not getattr(spout, "read_in_driver", False):
        return spark.sparkContext.parallelize(pieces, slices).flatMap(_reader(spout))
    read = _reader(spout)
    return spark.sparkContext.parallelize([v for piece in pieces for v in read(piece)],
                                          slices)


def _reader(spout: TransactionalSpout):
    """The function a Spark task runs on one piece: its tuples, each as ``values``."""

    def read(piece):
        reader = copy.copy(spout)
        try:
            return reader.read_piece(piece)
        finally:
            _close(reader)

    return read


def _close(spout) -> None:
    spout.close_reader()


def _fold(values, agg: Aggregation):
    """``(key, value)`` pairs: the aggregator over each key's tuples, as the stream folds
    them (a combiner: ``combine(zero, init(t1) + ...)``; a reducer from ``init()``, in
    the order the source holds them)."""
    idx = [agg.spout.fields.index(f) for f in agg.group_by]
    fields = (*agg.spout.fields, BATCH_FIELD)
    index = {f: i for i, f in enumerate(fields)}
    aggregator = agg.aggregator
    keyed = values.map(lambda v: (_key(v, idx), BatchTuple([*v, None], fields, index)))
    if isinstance(aggregator, CombinerAggregator):
        partial = keyed.mapValues(aggregator.init).reduceByKey(aggregator.combine)
        return partial.mapValues(lambda v: aggregator.combine(aggregator.zero(), v))
    return keyed.groupByKey().mapValues(lambda tuples: _reduce(aggregator, tuples))


class BatchTuple:
    """A tuple as the aggregator sees it in the stream: ``values`` (the spout's fields and
    the batch field, None here), read by field name or position."""

    __slots__ = ("values", "fields", "_index")

    def __init__(self, values: list, fields: tuple[str, ...], index: dict[str, int]) -> None:
        self.values, self.fields, self._index = values, fields, index

    def __getitem__(self, key: str | int) -> Any:
        return self.values[self._index[key] if isinstance(key, str) else key]

    def __len__(self) -> int:
        return len(self.values)


def _key(values: list, idx: list[int]) -> tuple:
    return tuple(freeze(values[i]) for i in idx)


def _reduce(aggregator, tuples) -> Any:
    value = aggregator.init()
    for tup in tuples:
        value = aggregator.reduce(value, tup)
    return value


# -- the stream's side and the comparison ---------------------------------------------------
def _state_rows(agg: Aggregation) -> list[list]:
    """The state's keys and values as rows (a one-field key comes out of ``snapshot``
    bare)."""
    snapshot = agg.state.snapshot()
    one = len(agg.group_by) == 1
    return [[key, value] if one else [*key, value] for key, value in snapshot.items()]


def _frame(spark, rows: list[list], columns: list[str]):
    """A DataFrame of ``rows``; with no rows, string columns (there is nothing to type)."""
    if not rows:
        return spark.createDataFrame([], ", ".join(f"`{c}` string" for c in columns))
    return spark.createDataFrame([tuple(r) for r in rows], columns)


def _differences(stream, batch, keys: list[str]):
    from pyspark.sql import functions as F

    on = [stream[k].eqNullSafe(batch[k]) for k in keys]
    joined = stream.join(batch, on, "full_outer")
    both = [F.coalesce(stream[k], batch[k]).alias(k) for k in keys]
    out = joined.select(*both, stream[STREAM], batch[BATCH])
    return out.where(~F.col(STREAM).eqNullSafe(F.col(BATCH))).orderBy(*keys)
