"""Parquet segments of one recorded stream, written from decoded columns: the converter
processes' and readers' half of a recording (``runtime/recording/_parquet.py`` is the
emitting instance's half). pyarrow is imported inside the functions that use it.

A folder holds ``part-<task>-<opened ns>-<seq>.parquet`` files, ``FIELDS_FILE`` (the
declared fields and type hints), ``SCHEMA_FILE`` (the column types, fixed once) and
``_rejected/`` (segments that did not fit them, as text). See ``docs/internals/recording.md``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from collections.abc import Iterable

log = logging.getLogger("tupleflow.recording")

RECORDINGS = "recordings"  # run_dir/recordings/<component>/<stream>/part-*.parquet
REJECTED = "_rejected"  # segments that did not fit the stream's column types
META_COLUMNS = ("_root_id", "_task", "_emit_ts")
# Dictionary pages only for the two columns with few distinct values per segment (the
# fields' are 3x slower to write and hardly smaller once compressed); no column statistics
# (15 % of the write; nothing reads them yet); snappy, which every Parquet reader knows
# (lz4 is no faster here; none saves ~25 ns a row, but text fields would not shrink);
# text and bytes columns delta-length encoded (parquet_options).
PARQUET_OPTIONS = {"compression": "snappy", "use_dictionary": ["_task", "_emit_ts"],
                   "write_statistics": False}


def parquet_options(schema) -> dict:
    """PARQUET_OPTIONS for a table of ``schema``: its text and bytes columns encoded
    DELTA_LENGTH_BYTE_ARRAY (lengths bit-packed, then the bytes: ~10 % faster to write
    than PLAIN and ~20 % smaller for short words; Spark reads it since 3.3)."""
    import pyarrow as pa

    delta = {field.name: "DELTA_LENGTH_BYTE_ARRAY" for field in schema
             if pa.types.is_string(field.type) or pa.types.is_binary(field.type)}
    return {**PARQUET_OPTIONS, "column_encoding": delta} if delta else PARQUET_OPTIONS


def recording_dir(run_dir: str, component: str, stream: str = "default") -> str:
    """Where a stream's segments are written."""
    return os.path.join(run_dir, RECORDINGS, component, stream)


class SegmentSink:
    """Writes segments of one stream as Parquet files, atomically (hidden temporary name,
    then rename); the first segment any writer of the folder wrote fixes the column
    types for all of them (``SCHEMA_FILE``). Used by the converter processes (one per
    task of the stream), and by readers for the leftovers of a killed run."""

    def __init__(self, folder: str, task: int, fields: list[str],
                 types: dict[str, str], schema=None) -> None:
        self.folder, self.task, self.fields, self.types = folder, task, fields, types
        self.opened_ns, self.seq = time.time_ns(), 0
        self.schema = schema  # the folder's, once fixed (see _fixed_schema), unless given
        self.errors: deque[str] = deque(maxlen=100)  # to report to the recording instance
        self.written = self.rejected = 0  # rows
        self.files: list[str] = []

    def _error(self, message: str) -> None:
        log.error("%s", message)
        self.errors.append(message)

    def write(self, columns: list[list], roots: list, stamps: tuple[list, list], *,
              name: str | None = None) -> str:
        """One segment to one Parquet file (``name``, else the next of this sink's own
        names), atomically; the path. ``columns`` holds one list per field, ``roots``
        one root id (or None) per row, ``stamps`` the emit times as runs."""
        import pyarrow as pa

        name = name or self._next_name()
        task = task_of(name, self.task)
        meta, n = _meta_columns(pa, task, roots, stamps), len(roots)
        try:
            first = self._folder_schema() is None
            table = self._table(pa, columns, meta)
            if first and not self._fixed_schema(table.schema):
                table = self._table(pa, columns, meta)  # another writer's types won
        except _arrow_errors(pa) as exc:
            self._error(f"recording of task {task}: {n} rows do not fit the "
                        f"columns {self.schema}: {exc}; written as text under {REJECTED}/")
            self.rejected += n
            return self._save(_as_text(pa, self.fields, columns, meta), name, REJECTED)
        self.written += n
        return self._save(table, name)

    def _next_name(self) -> str:
        self.seq += 1
        return f"part-{self.task:05d}-{self.opened_ns}-{self.seq - 1:06d}.parquet"

    def _table(self, pa, columns: list[list], meta: list):
        """The table of exactly decoded columns (Python strings and lists)."""
        if self.schema is None:
            arrays = [_first_array(pa, col, self.types.get(name))
                      for name, col in zip(self.fields, columns)]
            return pa.table(arrays + meta, names=[*self.fields, *META_COLUMNS])
        arrays = [typed_array(pa, col, self.schema.field(i).type)
                  for i, col in enumerate(columns)]
        return pa.table(arrays + meta, schema=self.schema)

    def _fixed_schema(self, schema) -> bool:
        """Offer ``schema`` (of a first segment) as the folder's; True when it is now the
        folder's, False when another writer's was fixed first (then ``self.schema``)."""
        self.schema = fix_schema(self.folder, schema)
        return self.schema.equals(schema)

    def _folder_schema(self):
        """``self.schema``, taken from the folder if another writer fixed it already."""
        if self.schema is None:
            self.schema = read_schema(self.folder)
        return self.schema

    def quick_types(self) -> list | None:
        """Per field, its Arrow type when known (the folder's, else its hint) or None
        when the data will tell; None as a whole when a known type is not flat (text,
        bytes, numbers, booleans): such a stream is decoded the exact way only."""
        import pyarrow as pa

        if self._folder_schema() is not None:
            types = [self.schema.field(i).type for i in range(len(self.fields))]
        else:
            types = [arrow_type(pa, self.types[name]) if name in self.types else None
                     for name in self.fields]
        return types if all(kind is None or _is_flat(kind) for kind in types) else None

    def write_quick(self, parts: Iterable[tuple[list[list], list, tuple[list, list]]],
                    types: list, *, name: str | None = None) -> str:
        """One segment, decoded the quick way (``chunks_of(..., text=False)``: text as
        UTF-8 bytes, which Arrow checks as it casts them) for the ``types`` that
        ``quick_types`` gave, to one Parquet file; the path. Each part becomes Arrow
        arrays before the next is decoded. A value that does not fit raises NeedsText;
        nothing is written."""
        import pyarrow as pa

        from ._raw import NeedsText

        name = name or self._next_name()
        task = task_of(name, self.task)
        names, batches, n = [*self.fields, *META_COLUMNS], [], 0
        for columns, roots, stamps in parts:  # what decoding raises goes through
            try:
                arrays = [quick_array(pa, col, kind) for col, kind in zip(columns, types)]
                arrays += _meta_columns(pa, task, roots, stamps)
                batches.append(pa.RecordBatch.from_arrays(arrays, names=names))
            except _arrow_errors(pa) as exc:
                raise NeedsText(str(exc)) from None
            n += len(roots)
        try:
            table = pa.Table.from_batches(batches, schema=self.schema)  # same types, each
        except _arrow_errors(pa) as exc:
            raise NeedsText(str(exc)) from None
        if self.schema is None and not self._fixed_schema(table.schema):
            raise NeedsText("another writer fixed the folder's column types first")
        self.written += n
        return self._save(table, name)

    def _save(self, table, name: str, sub: str = "") -> str:
        import pyarrow.parquet as pq

        folder = os.path.join(self.folder, sub) if sub else self.folder
        os.makedirs(folder, exist_ok=True)
        temp, final = os.path.join(folder, "." + name + ".tmp"), os.path.join(folder, name)
        pq.write_table(table, temp, **parquet_options(table.schema))
        os.replace(temp, final)
        self.files.append(final)
        return final


def task_of(name: str, default: int) -> int:
    """The emitting task in a segment's name ``part-<task>-...``.

    >>> task_of("part-00007-1-000000.parquet", 0)
    7
    """
    try:
        return int(os.path.basename(name).split("-")[1])
    except (IndexError, ValueError):
        return default


ARROW_TYPES = {"str": "string", "int": "int64", "float": "float64", "bool": "bool_",
               "bytes": "binary"}


def arrow_type(pa, hint: str):
    return getattr(pa, ARROW_TYPES[hint])()


def _arrow_errors(pa) -> tuple:
    """What building an Arrow array of values that do not fit its type raises."""
    return (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _is_flat(kind) -> bool:
    import pyarrow as pa

    return (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_integer(kind)
            or pa.types.is_floating(kind) or pa.types.is_boolean(kind))


def _first_array(pa, column, hint: str | None):
    """A column of the first segment: of its declared type, else inferred (text when the
    segment holds only nulls, so that the file's schema stays one Spark can read)."""
    if hint is not None:
        return typed_array(pa, column, arrow_type(pa, hint))
    array = pa.array(column)
    return array.cast(pa.string()) if pa.types.is_null(array.type) else array


def typed_array(pa, values: list, kind):
    """``values`` as an Arrow array of type ``kind``, refusing what would change a value:
    ``pa.array`` truncates a float put in an integer column (1.5 becomes 1), so an
    integer column's values are inferred first and must be integers (or nulls)."""
    if pa.types.is_integer(kind):
        array = pa.array(values)
        if not (pa.types.is_integer(array.type) or pa.types.is_null(array.type)):
            raise pa.ArrowTypeError(f"{array.type} values in an {kind} column")
        return array.cast(kind)  # a safe cast: refuses a value out of a narrower range
    return pa.array(values, type=kind)


def quick_array(pa, values: list, kind):
    """Quickly decoded ``values`` (text as UTF-8 bytes, which Arrow checks as it casts
    them) as an Arrow array of type ``kind``, or, when ``kind`` is None, of the type the
    values show: every bytes value is text then (``columns_of`` made sure of it)."""
    if kind is None:
        array = _first_array(pa, values, None)
        if pa.types.is_binary(array.type):
            return array.cast(pa.string())
        if not _is_flat(array.type):
            raise pa.ArrowTypeError(f"{array.type} is not a flat column")
        return array
    if pa.types.is_string(kind):
        return pa.array(values, pa.binary()).cast(kind)
    return typed_array(pa, values, kind)


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
    compute call and first Parquet write take most of a second (lazy set-up). The
    converter pays it before it says ``ready``, which ``open_recorder`` waits for (before
    the instance reports ready, for a declared recording), so it is not paid in a kill's
    short grace period. A missing pyarrow is left for the writes to report."""
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
    table = pa.table([pa.array(["x"])] + meta, names=["x", *META_COLUMNS])
    pq.write_table(table, sink, **parquet_options(table.schema))


def _as_text(pa, fields: list[str], columns: list[list], meta: list):
    arrays = [pa.array([None if v is None else repr(v) for v in col], pa.string())
              for col in columns]
    return pa.table(arrays + meta, names=[*fields, *META_COLUMNS])


FIELDS_FILE = "_fields.json"  # the declared fields and type hints (Spark skips "_" names)
SCHEMA_FILE = "_schema.arrow"  # the column types of every segment, fixed once (Arrow IPC)


def read_schema(folder: str):
    """The folder's column types (``SCHEMA_FILE``), or None before any segment; a folder
    written before the file existed gives its first segment's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open(os.path.join(folder, SCHEMA_FILE), "rb") as f:
            return pa.ipc.read_schema(pa.py_buffer(f.read()))
    except FileNotFoundError:
        pass
    try:
        written = sorted(n for n in os.listdir(folder)
                         if n.startswith("part-") and n.endswith(".parquet"))
    except FileNotFoundError:
        return None
    return pq.read_schema(os.path.join(folder, written[0])) if written else None


def fix_schema(folder: str, schema):
    """Make ``schema`` the folder's column types unless a writer fixed them first (each
    task's converter, a restarted incarnation's, a reader converting leftovers: the
    folder must keep one schema for Spark and pyarrow to read it); the folder's.
    Exclusive by ``os.link``, which fails when the name exists."""
    path = os.path.join(folder, SCHEMA_FILE)
    os.makedirs(folder, exist_ok=True)
    temp = f"{path}.{os.getpid()}.{time.time_ns()}.tmp"  # "_" first: readers skip it
    with open(temp, "wb") as f:
        f.write(schema.serialize().to_pybytes())
    try:
        os.link(temp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
    return read_schema(folder)


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
