"""Transactional batch spouts: batch ``txid`` N is a fixed, recorded range of a replayable
source, so batch N holds exactly the same tuples every time it is emitted, even by a
spout restarted after a crash.

One batch is in flight at a time (Trident's strong ordering). For each persistent
aggregation fed by the spout (a *route*), each tuple goes with ``emit_direct`` to the
aggregator task that owns its key, carrying the attempt id in its last field, untracked;
then each task that got tuples gets an end marker ``[txid, attempt, count]`` on the same
stream, tracked with ``msg_id=(txid, attempt, task)``. The batch is done when every
marker is acked (each aggregator task acks after its commit); a failed or timed-out
marker makes the spout emit the same txid again under a new attempt id.

The txid -> range records and the last completed txid live in a small SQLite file, the
*ledger*, written before a batch is first emitted and when it completes.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from runtime import wire
from runtime.acking._ids import new_id
from runtime.groupings import stable_hash
from runtime.model.api import Spout

log = logging.getLogger("tupleflow.trident")

BATCH_FIELD = "_batch"  # last field of a batch spout's tuples: the attempt id, or a marker


class BatchLedger:
    """The spout's durable memory: ``txid -> meta`` of recent batches, and the last txid
    completed. One SQLite file; each write is one transaction."""

    KEEP = 1000  # batch records kept behind the last completed one

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS batches (txid INTEGER PRIMARY KEY, "
                        "meta TEXT NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS done (id INTEGER PRIMARY KEY CHECK (id=0),"
                        " txid INTEGER NOT NULL)")

    def last(self) -> tuple[int, Any] | None:
        """The newest recorded batch, ``(txid, meta)``, or None."""
        row = self.db.execute("SELECT txid, meta FROM batches ORDER BY txid DESC LIMIT 1")
        row = row.fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def meta(self, txid: int) -> Any:
        row = self.db.execute("SELECT meta FROM batches WHERE txid=?", (txid,)).fetchone()
        return None if row is None else json.loads(row[0])

    def completed(self) -> int:
        """The last txid every aggregator committed (0 before the first)."""
        row = self.db.execute("SELECT txid FROM done WHERE id=0").fetchone()
        return 0 if row is None else row[0]

    def record(self, txid: int, meta: Any) -> None:
        self.db.execute("INSERT INTO batches (txid, meta) VALUES (?, ?)",
                        (txid, json.dumps(meta)))

    def complete(self, txid: int) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO done (id, txid) VALUES (0, ?)", (txid,))
            self.db.execute("DELETE FROM batches WHERE txid < ?", (txid - self.KEEP,))

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True)
class Route:
    """A persistent aggregation fed by this spout: its component and group-by fields."""

    component: str
    key_indexes: tuple[int, ...]


@dataclass
class _Batch:
    txid: int
    meta: Any
    attempt: int | None = None  # None: to be emitted (again)
    waiting: set | None = None  # marker tasks not yet acked


class TransactionalSpout(Spout):
    """Base of batch spouts. A subclass defines ``plan_batch(after_meta) -> meta or None``
    (the next range after the previous batch's, None when there is nothing new; meta must
    be JSON) and ``read_batch(meta) -> list of values`` (the same tuples every time).

    ``each`` (optional) maps one record's values to an iterable of output values (Trident's
    ``each``, run in the spout so its output is grouped); it must be deterministic.
    """

    read_in_driver = False  # a batch job reads the pieces on its workers (True: in its driver)

    def __init__(self, fields: Sequence[str], batch_size: int = 1000,
                 each: Callable[[list], Iterable[list]] | None = None,
                 ledger: str | os.PathLike | None = None) -> None:
        fields = [fields] if isinstance(fields, str) else list(fields)
        if BATCH_FIELD in fields:
            raise ValueError(f"{type(self).__name__}: the field name {BATCH_FIELD!r} is "
                             "reserved for the batch id")
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"{type(self).__name__}: batch_size must be an integer >= 1, "
                             f"not {batch_size!r}")
        self.fields, self.batch_size, self.each = fields, batch_size, each
        self.outputs = fields + [BATCH_FIELD]
        self.ledger_path = None if ledger is None else os.fspath(ledger)
        self.routes: tuple[Route, ...] = ()
        self.skipped = 0  # records or tuples that could not be decoded, grouped or sent

    def with_route(self, component: str, group_by: Sequence[str]) -> TransactionalSpout:
        """A copy that also feeds ``component``, keyed on ``group_by`` (done by
        ``Topology.persistent_aggregate``; the user's object is left alone)."""
        missing = [f for f in group_by if f not in self.fields]
        if missing or not group_by:
            raise ValueError(f"group_by {list(group_by)}: the spout's fields are "
                             f"{self.fields}")
        clone = _shallow_copy(self)
        clone.routes = self.routes + (Route(component, tuple(self.fields.index(f)
                                                             for f in group_by)),)
        return clone

    # -- for subclasses ----------------------------------------------------------------
    def plan_batch(self, after: Any) -> Any:
        raise NotImplementedError

    def read_batch(self, meta: Any) -> list[list]:
        raise NotImplementedError

    def default_ledger(self, context) -> str:
        return os.path.join(context.run_dir, "transactional", f"{context.component_id}.sqlite")

    # -- the same source as a batch job (workbench.reconcile) -------------------------------
    def ledger_file(self, topology: str, component: str, run_dir: str) -> str:
        """Where this spout, run as ``component`` of ``topology`` in ``run_dir``, keeps
        its ledger."""
        where = SimpleNamespace(topology_name=topology, component_id=component,
                                run_dir=run_dir)
        return self.ledger_path or self.default_ledger(where)

    def pieces(self, through: Any = None) -> list:
        """Metas that together cover the source from its start through the batch whose
        meta is ``through`` (None: everything there is now), to be read independently:
        what a batch job over the same source reads, in parallel."""
        raise NotImplementedError(f"{type(self).__name__} cannot be read as a batch job")

    def read_piece(self, piece: Any) -> list[list]:
        """A piece's tuples exactly as the spout emits them: decoded, ``each`` applied,
        unsendable ones skipped."""
        return self._tuples(piece)

    def close_reader(self) -> None:
        """Release what ``pieces`` and ``read_piece`` opened (a file, a connection)."""

    # -- the spout ----------------------------------------------------------------------
    def open(self, config, context) -> None:
        if context.parallelism != 1:
            raise ValueError(f"component {context.component_id!r}: a transactional spout "
                             "runs as one task (parallelism=1); batches are strictly ordered")
        self.ledger = BatchLedger(self.ledger_path or self.default_ledger(context))
        self._tasks = {r.component: context.get_component_tasks(r.component)
                       for r in self.routes}
        self.emitted_batches = self.replays = 0
        self.skipped = 0  # records or tuples that could not be decoded, grouped or sent
        self.current: _Batch | None = None
        last, done = self.ledger.last(), self.ledger.completed()
        self._after = None if last is None else last[1]
        self._next_txid = 1 if last is None else last[0] + 1
        if last is not None and last[0] > done:  # emitted before a crash, never completed
            self.current = _Batch(last[0], last[1])
            self.replays += 1

    def close(self) -> None:
        self.ledger.close()

    def next_tuple(self) -> None:
        if self.current is None:
            self.current = self._new_batch()
            if self.current is None:
                return
        if self.current.attempt is None:
            self._emit_batch(self.current)

    def _new_batch(self) -> _Batch | None:
        meta = self.plan_batch(self._after)
        if meta is None:
            return None
        txid, self._next_txid, self._after = self._next_txid, self._next_txid + 1, meta
        self.ledger.record(txid, meta)
        return _Batch(txid, meta)

    def _emit_batch(self, batch: _Batch) -> None:
        batch.attempt = attempt = new_id()
        batch.waiting = set()
        self.emitted_batches += 1
        tuples = self._tuples(batch.meta)
        markers = []
        for route in self.routes:
            counts = self._emit_route(route, tuples, attempt)
            markers += [(task, n) for task, n in counts.items()]
        batch.waiting = {task for task, _ in markers}
        blank = [None] * len(self.fields)
        for task, n in markers:
            self.emit_direct(task, blank + [[batch.txid, attempt, n]],
                             msg_id=(batch.txid, attempt, task))
        if not markers:
            self._completed(batch)

    def _tuples(self, meta) -> list[list]:
        records = self.read_batch(meta)
        if self.each is not None:
            records = [list(out) for values in records for out in self.each(values)]
        return self._sendable(records)

    def _sendable(self, tuples: list) -> list[list]:
        """The tuples that can travel: the right number of fields, msgpack values (checked
        once for the whole batch; tuple by tuple only when that fails). Others are skipped
        with a warning, the same way on every replay, so counts stay consistent."""
        n = len(self.fields)
        good = [t for t in tuples if type(t) is list and len(t) == n]
        if not wire.encodable(good):
            good = [t for t in good if wire.encodable(t)]
        if len(good) < len(tuples):
            self.skipped += len(tuples) - len(good)
            self._skip(f"{len(tuples) - len(good)} tuple(s) of a batch without {n} sendable "
                       f"values (fields {self.fields}; values must be msgpack types)")
        return good

    def _skip(self, why: str) -> None:
        log.warning("%s: skipped %s", type(self).__name__, why)

    def _emit_route(self, route: Route, tuples: list[list], attempt: int) -> Counter:
        tasks, idx, counts = self._tasks[route.component], route.key_indexes, Counter()
        n, emit = len(tasks), self.emit_direct
        for values in tuples:
            try:
                task = tasks[stable_hash([values[i] for i in idx]) % n]
            except TypeError as exc:  # a key that cannot be grouped on
                self.skipped += 1
                self._skip(f"a tuple for {route.component!r}: {exc}")
                continue
            emit(task, values + [attempt])
            counts[task] += 1
        return counts

    def ack(self, msg_id) -> None:
        txid, attempt, task = msg_id
        batch = self.current
        if batch is None or batch.attempt != attempt:
            return  # a marker of an attempt already replayed
        batch.waiting.discard(task)
        if not batch.waiting:
            self._completed(batch)

    def _completed(self, batch: _Batch) -> None:
        self.ledger.complete(batch.txid)
        self.current = None

    def fail(self, msg_id) -> None:
        txid, attempt, task = msg_id
        batch = self.current
        if batch is not None and batch.attempt == attempt:
            log.info("batch %d failed at task %d; emitting it again", txid, task)
            batch.attempt, batch.waiting = None, None
            self.replays += 1

    def statistics(self) -> dict:
        return {"batches_emitted": self.emitted_batches, "replays": self.replays,
                "skipped": self.skipped, "completed_txid": self.ledger.completed()}


def _shallow_copy(obj):
    clone = object.__new__(type(obj))
    clone.__dict__.update(obj.__dict__)
    return clone


class ListBatchSpout(TransactionalSpout):
    """Batches of ``batch_size`` consecutive items of a list (for tests and examples).
    Its ledger defaults to the run directory, so it survives restarts of the spout but
    not a new submission: give ``ledger=`` a path for state that outlives the run."""

    def __init__(self, tuples: Iterable[list], fields: Sequence[str] = ("value",),
                 batch_size: int = 100, **options: Any) -> None:
        super().__init__(fields, batch_size, **options)
        self.tuples = [list(t) for t in tuples]

    def plan_batch(self, after):
        start = 0 if after is None else after[1]
        end = min(start + self.batch_size, len(self.tuples))
        return None if start >= end else [start, end]

    def read_batch(self, meta):
        start, end = meta
        return [list(t) for t in self.tuples[start:end]]

    def pieces(self, through=None):
        return [[0, len(self.tuples) if through is None else through[1]]]


class PartitionedBatchSpout(TransactionalSpout):
    """Batches of a partitioned topic addressed by offsets (the embedded log, Kafka): batch N
    is ``[partition, start, end)`` for every partition (``start == end`` where it takes
    nothing), recorded in the ledger, read again on replay. Records decode as in
    ``LogSpout`` (one field: the JSON record; several: an object's keys or an array's items).

    A subclass supplies the I/O: ``_bounds()`` (``{partition: (first, end)}`` offsets now),
    ``_records(ranges)`` (``(partition, offset, payload)`` of every record in the ranges, in
    their order) and ``_open_reader()``/``close_reader()`` for use outside a topology."""

    def __init__(self, topic: str, *, fields: Sequence[str] = ("value",),
                 batch_size: int = 1000, decode: str = "json", **options: Any) -> None:
        if decode not in ("json", "bytes"):
            raise ValueError(f"{type(self).__name__}({topic!r}): decode must be 'json' or "
                             f"'bytes', not {decode!r}")
        super().__init__(fields, batch_size, **options)
        self.topic, self.decode = topic, decode

    # -- for subclasses ----------------------------------------------------------------
    def _bounds(self) -> dict[int, tuple[int, int]]:
        raise NotImplementedError

    def _records(self, ranges: list) -> Iterable[tuple[int, int, bytes]]:
        raise NotImplementedError

    def _open_reader(self) -> None:
        raise NotImplementedError

    # -- batches -----------------------------------------------------------------------
    def plan_batch(self, after):
        bounds = self._bounds()
        starts = {p: first for p, (first, _end) in bounds.items()}
        for p, _start, end in after or ():
            starts[p] = end
        avail = {p: max(0, bounds[p][1] - s) if p in bounds else 0 for p, s in starts.items()}
        take = _share(avail, self.batch_size)
        ranges = [[p, starts[p], starts[p] + n] for p, n in take.items() if n > 0]
        if not ranges:
            return None
        carried = [[p, s, s] for p, s in starts.items() if take.get(p, 0) == 0]
        return sorted(ranges + carried)

    def read_batch(self, meta):
        ranges = [(p, start, end) for p, start, end in meta if end > start]
        return [v for p, o, payload in self._records(ranges)
                if (v := self._values(p, o, payload)) is not None]

    def _values(self, partition: int, offset: int, payload: bytes) -> list | None:
        """A record's values; None (logged, counted in ``skipped``) for one that cannot be
        decoded, the same way every time the batch is read."""
        try:
            record = json.loads(payload) if self.decode == "json" else payload
            if len(self.fields) == 1:
                return [record]
            if isinstance(record, Mapping):
                return [record[f] for f in self.fields]
            if isinstance(record, list) and len(record) == len(self.fields):
                return record
            raise TypeError(f"expected a JSON object or an array of {len(self.fields)} items, "
                            f"not {type(record).__name__}")
        except (ValueError, KeyError, TypeError) as exc:
            self.skipped += 1
            log.warning("%s(%r): skipped partition %d offset %d, which cannot be decoded: %s",
                        type(self).__name__, self.topic, partition, offset, exc)
            return None

    # -- the same source as a batch job -------------------------------------------------
    def pieces(self, through=None):
        """One piece a partition, from its start: ``[[p, 0, end]]``."""
        if through is None:
            self._open_reader()
            through = [[p, first, end] for p, (first, end) in sorted(self._bounds().items())]
        return [[[p, 0, end]] for p, _start, end in through]

    def read_piece(self, piece):
        self._open_reader()
        return super().read_piece(piece)


class BatchLogSpout(PartitionedBatchSpout):
    """Batches of an embedded-log topic (see ``PartitionedBatchSpout``).

    The ledger defaults to ``<log root>/.transactional/<topology>.<component>.<topic>.sqlite``,
    beside the log, so a new submission continues where the last one stopped (the state's
    stored txids stay meaningful)."""

    def __init__(self, topic: str, root: str | os.PathLike | None = None, *,
                 fields: Sequence[str] = ("value",), batch_size: int = 1000,
                 decode: str = "json", **options: Any) -> None:
        super().__init__(topic, fields=fields, batch_size=batch_size, decode=decode, **options)
        self.root = root

    def _root(self) -> Path:
        from runtime.sources import default_root

        return Path(self.root) if self.root is not None else default_root()

    def default_ledger(self, context) -> str:
        name = f"{context.topology_name}.{context.component_id}.{self.topic}.sqlite"
        return os.fspath(self._root() / ".transactional" / name)

    def open(self, config, context) -> None:
        self.log = None
        self._open_reader()
        super().open(config, context)

    def close(self) -> None:
        super().close()
        self.close_reader()

    def _open_reader(self) -> None:
        """The log, opened once (by the spout, or for reading outside a topology)."""
        if getattr(self, "log", None) is None:
            from runtime.sources import EmbeddedLog

            self.log = EmbeddedLog(self._root())
            self.partitions = self.log.partitions(self.topic)

    def close_reader(self) -> None:
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None

    def _bounds(self):
        return {p: (0, self.log.end_offset(self.topic, p)) for p in range(self.partitions)}

    def _records(self, ranges):
        for p, start, end in ranges:
            offset = start
            while offset < end:
                records = self.log.read(self.topic, p, offset, end - offset)
                if not records:
                    raise RuntimeError(f"BatchLogSpout({self.topic!r}): partition {p} ends "
                                       f"before offset {end} recorded for a batch")
                yield from ((p, o, payload) for o, payload in records)
                offset = records[-1][0] + 1


def _share(avail: dict[int, int], budget: int) -> dict[int, int]:
    """Up to ``budget`` records over partitions: an even share each, then the rest in
    partition order (deterministic, so the record of a batch is all a replay needs)."""
    fair = max(1, budget // max(1, len(avail)))
    take = {p: min(a, fair) for p, a in avail.items()}
    left = max(0, budget - sum(take.values()))
    for p in sorted(avail):
        extra = min(left, avail[p] - take[p])
        take[p] += extra
        left -= extra
    return take

