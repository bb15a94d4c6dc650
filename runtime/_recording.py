"""Recording a stream to Parquet: the durable cousin of the tap (``running.sample``).

A :class:`Recorder` belongs to one stream of one task. The tuple path only appends: a
tracked tuple at emit (``tracked``, with its root id), everything else at flush
(``flushed`` moves the batch about to be sent into per-field lists, one ``map`` per
field). Each flush stamps the new rows with one clock read (``_emit_ts``, kept as
runs). When a segment is full (``segment_rows``) or old (``segment_seconds``) its lists
are handed whole to a :class:`SegmentWriter` thread, which makes Arrow arrays of them
and writes ``part-<task>-<opened ns>-<seq>.parquet`` under a hidden temporary name, then
renames it: a reader (Spark's file source, :mod:`runtime.recording`) never sees half a
file.

Memory is bounded: at most ``WRITE_QUEUE`` segments wait for the writer; past that the
tuple path waits for the writer (it slows down, it loses nothing). pyarrow is imported
only when a recording starts (:func:`warm_up`), so an instance that records nothing
never imports it. See ``docs/internals/recording.md``.

A segment that does not fit the stream's column types (the first segment fixes them,
from the declared type hints or else from the data) is written with every value as
text under ``_rejected/`` (which Spark and pyarrow datasets skip), and the error is
reported by the instance like any other user-code error: nothing is lost.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

log = logging.getLogger("tupleflow.recording")

SEGMENT_ROWS = 200_000  # rows per Parquet segment, at most
SEGMENT_SECONDS = 1.0  # a segment is closed this long after its first row, at the latest
WRITE_QUEUE = 4  # closed segments that may wait for the writer before the tuple path waits
RECORDINGS = "recordings"  # run_dir/recordings/<component>/<stream>/part-*.parquet
REJECTED = "_rejected"  # segments that did not fit the stream's column types
META_COLUMNS = ("_root_id", "_task", "_emit_ts")

TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", bytes: "bytes"}
HINTS = frozenset(TYPE_NAMES.values())


class FieldError(ValueError):
    """A declared output field that is neither a name nor a name with a known type."""


def split_field(field: Any) -> tuple[str, str | None]:
    """A declared output field as ``(name, type name or None)``.

    Fields are plain names, ``"name: type"`` or ``(name, type)``, the type one of
    str, int, float, bool, bytes (the class or its name).

    >>> split_field("word"), split_field("count: int"), split_field(("score", float))
    (('word', None), ('count', 'int'), ('score', 'float'))
    """
    if isinstance(field, str):
        name, sep, hint = field.partition(":")
        return (field, None) if not sep else (name.strip(), _hint(field, hint.strip()))
    if isinstance(field, tuple) and len(field) == 2 and isinstance(field[0], str):
        return field[0], _hint(field, TYPE_NAMES.get(field[1], field[1]))
    raise FieldError(f"field {field!r} is not a name, 'name: type' or (name, type)")


def _hint(field: Any, hint: Any) -> str:
    if hint not in HINTS:
        raise FieldError(f"field {field!r}: unknown type {hint!r}; use one of "
                         f"{', '.join(sorted(HINTS))}")
    return hint


def declared_types(impl: Any, stream: str) -> dict[str, str]:
    """The type hints of ``stream``'s fields, as declared on the component's ``outputs``."""
    outputs = getattr(impl, "outputs", [])
    fields = outputs.get(stream, ()) if isinstance(outputs, dict) else (
        outputs if stream == "default" else ())
    hinted = (split_field(f) for f in fields)
    return {name: hint for name, hint in hinted if hint is not None}


def recording_dir(run_dir: str, component: str, stream: str = "default") -> str:
    """Where a stream's segments are written."""
    return os.path.join(run_dir, RECORDINGS, component, stream)


def signed64(root: int) -> int:
    """A 64-bit root id as the signed integer with the same bits (Parquet and Spark have
    no unsigned 64-bit column).

    >>> signed64(5), signed64(2**64 - 1)
    (5, -1)
    """
    return root - (1 << 64) if root >= 1 << 63 else root


class Recorder:
    """Buffers one stream of one task, as columns, and closes segments; see the module
    docstring. Values are moved into per-field lists at once (one ``map`` per field and
    flush), so the emitted row lists are freed as before and the garbage collector never
    scans a segment's worth of them."""

    __slots__ = ("writer", "rows_limit", "seconds", "clock", "getters", "columns", "roots",
                 "ends", "times", "n", "report")

    def __init__(self, writer: SegmentWriter, *, segment_rows: int = SEGMENT_ROWS,
                 segment_seconds: float = SEGMENT_SECONDS,
                 clock: Callable[[], float] = time.time,
                 report: Callable[[str], None] = log.error) -> None:
        self.writer, self.rows_limit, self.seconds = writer, segment_rows, segment_seconds
        self.clock, self.report = clock, report
        self.getters = [itemgetter(i) for i in range(len(writer.fields))]
        self._clear()

    def _clear(self) -> None:
        self.columns: list[list] = [[] for _ in self.getters]
        self.roots: list = []
        self.ends: list[int] = []  # _emit_ts as runs: rows [ends[i-1], ends[i]) at times[i]
        self.times: list[float] = []
        self.n = 0

    def tracked(self, values, root: int) -> None:
        """A tracked tuple, at emit: its values and (signed) root id."""
        for column, value in zip(self.columns, values):
            column.append(value)
        self.roots.append(signed64(root))
        self.n += 1

    def flushed(self, batches: Iterable[list]) -> None:
        """A flush: take the untracked ``batches`` about to be sent, stamp every new row
        with this one clock read, and close the segment if it is full or old."""
        for batch in batches:
            if batch:
                for column, get in zip(self.columns, self.getters):
                    column.extend(map(get, batch))
                self.roots.extend(repeat(None, len(batch)))
                self.n += len(batch)
        if not self.n:
            return
        now, ends = self.clock(), self.ends
        if not ends or ends[-1] != self.n:
            ends.append(self.n)
            self.times.append(now)
        if self.n >= self.rows_limit or now - self.times[0] >= self.seconds:
            self.roll()
            self.report_errors()

    def report_errors(self) -> None:
        """The writer's errors, reported from this (the tuple path's) thread."""
        errors = self.writer.errors
        while errors:
            self.report(errors.popleft())

    def roll(self) -> None:
        """Hand the open segment to the writer (waiting if WRITE_QUEUE are waiting)."""
        if self.n:
            self.writer.put(self.columns, self.roots, (self.ends, self.times))
            self._clear()

    def close(self) -> None:
        """Stamp and hand over what is buffered, then wait for the writer to finish."""
        started = time.monotonic()
        self.flushed(())
        self.roll()
        self.writer.close()
        self.report_errors()
        log.info("recording to %s closed in %.3f s: %d rows in %d segments", self.writer.folder,
                 time.monotonic() - started, self.writer.written, len(self.writer.files))


class SegmentWriter(threading.Thread):
    """Writes the closed segments of one stream of one task, in order, off the tuple path."""

    def __init__(self, folder: str, task: int, fields: list[str],
                 types: dict[str, str]) -> None:
        super().__init__(name=f"recorder-{task}", daemon=True)
        self.folder, self.task, self.fields, self.types = folder, task, fields, types
        self.queue: queue.Queue = queue.Queue(WRITE_QUEUE)
        self.opened_ns, self.seq = time.time_ns(), 0
        self.schema = None  # fixed by the first segment written
        self.errors: deque[str] = deque(maxlen=100)  # popped and reported by the tuple path
        self.written = self.rejected = 0  # rows
        self.files: list[str] = []

    def put(self, columns: list[list], roots: list, stamps: tuple[list, list]) -> None:
        """Queue a closed segment; blocks while WRITE_QUEUE segments already wait."""
        if self.ident is None:
            self.start()
        self.queue.put((columns, roots, stamps))

    def run(self) -> None:
        while (segment := self.queue.get()) is not None:
            try:
                self.write(*segment)
            except Exception as exc:  # the disk, say: log it, keep the thread alive
                log.exception("could not write a recording segment")
                self._error(f"could not write a segment to {self.folder}: {exc}")

    def close(self) -> None:
        """Write everything queued, then stop the thread (if it ever started)."""
        if self.is_alive():
            self.queue.put(None)
            self.join()

    def _error(self, message: str) -> None:
        log.error("%s", message)
        self.errors.append(message)

    def write(self, columns: list[list], roots: list, stamps: tuple[list, list]) -> str:
        """One segment to one Parquet file, atomically; the path. ``columns`` holds one
        list per field, ``roots`` one root id (or None) per row, ``stamps`` the emit
        times as runs ``(ends, times)``."""
        import pyarrow as pa

        meta, n = _meta_columns(pa, self.task, roots, stamps), len(roots)
        try:
            table = self._table(pa, columns, meta)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            self._error(f"recording of task {self.task}: {n} rows do not fit the "
                        f"columns {self.schema}: {exc}; written as text under {REJECTED}/")
            self.rejected += n
            return self._save(_as_text(pa, self.fields, columns, meta), REJECTED)
        self.written += n
        return self._save(table)

    def _table(self, pa, columns: list[list], meta: list):
        if self.schema is None:
            arrays = [_first_array(pa, col, self.types.get(name))
                      for name, col in zip(self.fields, columns)]
            table = pa.table(arrays + meta, names=[*self.fields, *META_COLUMNS])
            self.schema = table.schema
            return table
        arrays = [pa.array(col, type=self.schema.field(i).type)
                  for i, col in enumerate(columns)]
        return pa.table(arrays + meta, schema=self.schema)

    def _save(self, table, sub: str = "") -> str:
        import pyarrow.parquet as pq

        folder = os.path.join(self.folder, sub) if sub else self.folder
        os.makedirs(folder, exist_ok=True)
        name = f"part-{self.task:05d}-{self.opened_ns}-{self.seq:06d}.parquet"
        self.seq += 1
        temp, final = os.path.join(folder, "." + name + ".tmp"), os.path.join(folder, name)
        # no dictionary pages: 3x faster to write, and hardly bigger once compressed
        pq.write_table(table, temp, compression="snappy", use_dictionary=False)
        os.replace(temp, final)
        self.files.append(final)
        return final


ARROW_TYPES = {"str": "string", "int": "int64", "float": "float64", "bool": "bool_",
               "bytes": "binary"}


def arrow_type(pa, hint: str):
    return getattr(pa, ARROW_TYPES[hint])()


def _first_array(pa, column, hint: str | None):
    """A column of the first segment: of its declared type, else inferred (text when the
    segment holds only nulls, so that the file's schema stays one Spark can read)."""
    if hint is not None:
        return pa.array(column, type=arrow_type(pa, hint))
    array = pa.array(column)
    return array.cast(pa.string()) if pa.types.is_null(array.type) else array


def _meta_columns(pa, task: int, roots: list, stamps: tuple[list, list]) -> list:
    """``_root_id``, ``_task``, ``_emit_ts``, built in C++ from runs (little GIL time)."""
    import pyarrow.compute as pc

    n, (ends, times) = len(roots), stamps
    untracked = roots.count(None) == n
    micros = pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int64()), pa.array([round(t * 1e6) for t in times], pa.int64()))
    return [pa.nulls(n, pa.int64()) if untracked else pa.array(roots, pa.int64()),
            pa.nulls(n, pa.int32()).fill_null(task),
            pc.run_end_decode(micros).cast(pa.timestamp("us", tz="UTC"))]


_warm: list[bool] = []  # once per process


def warm_up(task: int) -> None:
    """Import pyarrow and write one row to memory, once per process: Arrow's first
    compute call and first Parquet write take most of a second (lazy set-up). Paid when
    the recording starts (before the instance reports ready, for a declared one), it is
    not paid in a kill's short grace period. A missing pyarrow is left for the writes to
    report."""
    if _warm:
        return
    started = time.monotonic()
    try:
        _write_one_row(task)
    except ImportError:
        return
    _warm.append(True)
    log.info("recording: pyarrow ready in %.3f s", time.monotonic() - started)


def _write_one_row(task: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = _meta_columns(pa, task, [None], ([1], [time.time()]))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table([pa.array(["x"])] + meta, names=["x", *META_COLUMNS]), sink,
                   compression="snappy", use_dictionary=False)


def _as_text(pa, fields: list[str], columns: list[list], meta: list):
    arrays = [pa.array([None if v is None else repr(v) for v in col], pa.string())
              for col in columns]
    return pa.table(arrays + meta, names=[*fields, *META_COLUMNS])


FIELDS_FILE = "_fields.json"  # the declared fields and type hints (Spark skips "_" names)


def write_fields(folder: str, fields: list[str], types: dict[str, str]) -> None:
    """Leave the stream's declared fields and hints next to its segments, so a reader
    knows the columns before the first segment exists (atomically, as segments are)."""
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{FIELDS_FILE}.{os.getpid()}.tmp")
    with open(temp, "w") as f:
        json.dump({"fields": fields, "types": types}, f)
    os.replace(temp, os.path.join(folder, FIELDS_FILE))


def read_fields(folder: str) -> tuple[list[str], dict[str, str]] | None:
    """What :func:`write_fields` left, or None before any instance started recording."""
    try:
        with open(os.path.join(folder, FIELDS_FILE)) as f:
            found = json.load(f)
    except FileNotFoundError:
        return None
    return list(found["fields"]), dict(found["types"])


def open_recorder(run_dir: str, component: str, stream: str, task: int, fields: list[str],
                  types: dict[str, str], *, report: Callable[[str], None] = log.error,
                  segment_rows: int = SEGMENT_ROWS, segment_seconds: float = SEGMENT_SECONDS,
                  clock: Callable[[], float] = time.time) -> Recorder:
    """A recorder of one stream of one task, writing under ``run_dir``; ``report`` is
    called (on the tuple path's thread) with each error the writer met."""
    folder = recording_dir(run_dir, component, stream)
    write_fields(folder, list(fields), types)
    writer = SegmentWriter(folder, task, list(fields), types)
    warm_up(task)
    writer.start()
    return Recorder(writer, segment_rows=segment_rows, segment_seconds=segment_seconds,
                    clock=clock, report=report)


def check_stream(streams, component: str, stream: str) -> tuple[str, str]:
    """A recordable ``(component, stream)`` of the plan's ``(component, stream)`` pairs, or
    a ValueError naming what exists (the same checks as a tap's).

    >>> check_stream([("words", "default")], "words", "default")
    ('words', 'default')
    """
    from ._controls import check_tap

    check_tap(streams, component, stream, 1, verb="record")
    return component, stream
