"""Trident-style persistent aggregation: exact state under at-least-once replays.

A transactional batch spout emits batch ``txid`` N (always the same tuples), and
``Topology.persistent_aggregate`` adds a bolt that groups them by fields, combines each
key's tuples of the batch in memory, and at the batch's end applies them to a backing map
with one ``multi_get`` and one ``multi_put``, storing the txid with each value. A replay
of a batch that a task already applied finds its txid stored and changes nothing, so the
state is exact however often batches fail. See ``docs/internals/trident.md``.

>>> from runtime import Topology
>>> from runtime.testing import InMemoryCluster
>>> words = ListBatchSpout([["a"], ["b"], ["a"]], fields=["word"], batch_size=2)
>>> counts = MemoryMap()
>>> topo = Topology("counts", ackers=1)
>>> _ = topo.spout("words", words)
>>> _ = topo.persistent_aggregate("count", "words", group_by=["word"], aggregator=Count(),
...                               state=counts, parallelism=2)
>>> with InMemoryCluster(topo) as cluster:
...     cluster.run_until_idle()
>>> counts.snapshot() == {"a": 2, "b": 1}
True
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from runtime.model.api import Bolt

from ._agg import (
    BatchAggregation,
    BatchEnd,
    CombinerAggregator,
    Count,
    ReducerAggregator,
    Sum,
    check_aggregator,
)
from ._kafka import KafkaBatchSpout
from ._spout import BATCH_FIELD, BatchLogSpout, ListBatchSpout, TransactionalSpout
from ._state import BackingMap, MapStatistics, MemoryMap, RedisMap, SQLiteMap, TxValue, freeze

log = logging.getLogger("tupleflow.trident")

STATS_DIR = "trident"  # under the run directory: <component>-<task>-<pid>.json per process


class PersistentAggregateBolt(Bolt):
    """The aggregator tasks of a persistent aggregation (added by
    ``Topology.persistent_aggregate``). Emits ``group_by + [value_field]`` for each key
    a batch changed, anchored to the batch's end marker."""

    def __init__(self, group_by: Sequence[str], aggregator: Any, state: Any,
                 value_field: str = "value") -> None:
        self.group_by, self.aggregator, self.state = list(group_by), aggregator, state
        self.outputs = self.group_by + [value_field]

    def prepare(self, config, context) -> None:
        self.core = BatchAggregation(self.aggregator, self.state)
        folder = os.path.join(context.run_dir, STATS_DIR)
        os.makedirs(folder, exist_ok=True)
        self._stats_path = os.path.join(
            folder, f"{context.component_id}-{context.task_id}-{os.getpid()}.json")
        self._key_of = None
        self._who = f"{context.component_id} task {context.task_id}"

    def process(self, tup) -> None:
        batch = tup.values[-1]
        if type(batch) is list:
            return self._end(tup, *batch)
        key_of = self._key_of or self._key_reader(tup)
        self.core.add(batch, key_of(tup.values), tup)

    def _key_reader(self, tup):
        idx = tuple(tup.fields.index(f) for f in self.group_by)
        scalar = (str, int, float, bool, type(None))

        def key_of(values):
            key = tuple(values[i] for i in idx)
            return key if all(type(v) in scalar for v in key) else freeze(key)

        self._key_of = key_of
        return key_of

    def _end(self, marker, txid: int, attempt: int, expected: int) -> None:
        """The batch's end for this task: commit and ack, or fail (the batch is replayed)."""
        result: BatchEnd = self.core.end(txid, attempt, expected)
        if not result.ok:
            log.warning("%s: %s; failing the batch so that it is replayed", self._who,
                        result.reason)
            self.fail(marker)
        else:
            for key, value in result.updated:
                self.emit(list(key) + [value], anchors=[marker])
            self.ack(marker)
        self._write_statistics()

    def _write_statistics(self) -> None:
        """The map's and the batches' counters of this process, for tests and notebooks
        (one small file per batch end; replaced atomically)."""
        stats = getattr(self.state, "statistics", None)
        body = {"map": _as_dict(stats() if callable(stats) else None),
                "batches": self.core.statistics()}
        tmp = self._stats_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(body, f)
        os.replace(tmp, self._stats_path)

    def cleanup(self) -> None:
        close = getattr(self.state, "close", None)
        if callable(close):
            close()


def _as_dict(stats: Any) -> dict:
    if isinstance(stats, MapStatistics):
        d = dict(vars(stats))
        d["puts_by_txid"] = {str(k): v for k, v in stats.puts_by_txid.items()}
        return d
    return dict(stats) if stats else {}


def read_statistics(run_dir: str, component: str) -> list[dict]:
    """What each process of a persistent aggregation reported at its last batch end:
    ``{"task", "pid", "map": {...}, "batches": {...}}``, one per process."""
    folder = os.path.join(run_dir, STATS_DIR)
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        comp, _, rest = name[:-len(".json")].rpartition("-")
        comp, _, task = comp.rpartition("-")
        if comp != component or not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name)) as f:
            out.append({"task": int(task), "pid": int(rest), **json.load(f)})
    return out


def persistent_aggregate(topology, name: str, source: str, group_by: Sequence[str] | str,
                         aggregator: Any, state: Any, *, parallelism: int = 1,
                         value_field: str = "value"):
    """Add ``name``: a bolt that keeps ``aggregator`` of ``source``'s tuples per
    ``group_by`` key in ``state``, exactly (see the module docstring). ``source`` must be
    a transactional batch spout. Returns the bolt's declarer."""
    from runtime.model.topology import TopologyError

    where = f"component {name!r}"
    group_by = [group_by] if isinstance(group_by, str) else list(group_by)
    spec = topology.components.get(source)
    if spec is None or spec.kind != "spout" or not isinstance(spec.impl, TransactionalSpout):
        what = "not a component" if spec is None else spec.class_name
        raise TopologyError(f"{where}: persistent_aggregate needs a transactional batch spout "
                            f"(e.g. a BatchLogSpout, KafkaBatchSpout or ListBatchSpout "
                            f"instance) as source, and {source!r} is {what}")
    if spec.parallelism != 1:
        raise TopologyError(f"{where}: the batch spout {source!r} must run as one task "
                            f"(parallelism=1), not {spec.parallelism}: batches are ordered")
    if value_field in group_by:
        raise TopologyError(f"{where}: value_field {value_field!r} is also a group_by field")
    try:
        check_aggregator(where, aggregator)
        _check_state(where, state)
        routed = spec.impl.with_route(name, group_by)
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"{where}: {exc}") from None
    bolt = PersistentAggregateBolt(group_by, aggregator, state, value_field)
    declarer = topology.bolt(name, bolt, parallelism=parallelism).direct_grouping(source)
    topology._components[source] = replace(spec, impl=routed)
    return declarer


def _check_state(where: str, state: Any) -> None:
    for method in ("multi_get", "multi_put"):
        if not callable(getattr(state, method, None)):
            raise TypeError(f"{where}: state {state!r} has no {method}() method; use "
                            "SQLiteMap, RedisMap, MemoryMap or a BackingMap subclass")


__all__ = [
    "BATCH_FIELD",
    "BackingMap",
    "BatchLogSpout",
    "CombinerAggregator",
    "Count",
    "KafkaBatchSpout",
    "ListBatchSpout",
    "MapStatistics",
    "MemoryMap",
    "PersistentAggregateBolt",
    "RedisMap",
    "ReducerAggregator",
    "SQLiteMap",
    "Sum",
    "TransactionalSpout",
    "TxValue",
    "persistent_aggregate",
    "read_statistics",
]
