"""Reading a recording back without Spark (see :mod:`runtime.recording`): its complete
Parquet segments, leftovers of a killed run converted first, as pyarrow or pandas."""

from __future__ import annotations

import logging
import os
from typing import Any

from ._raw import convert_leftovers, leftovers
from ._sink import (
    FIELDS_FILE,
    META_COLUMNS,
    REJECTED,
    SegmentSink,
    read_fields,
    read_schema,
    recording_dir,
)

log = logging.getLogger("tupleflow.recording")


def _recordings_base(source: Any) -> str:
    """Where recordings are: a run directory (or its folder in a ``record_dir``), or a
    RunningTopology's ``record_base``."""
    return os.fspath(getattr(source, "record_base", source))


def segments(source: Any, component: str, stream: str = "default", *,
             rejected: bool = False) -> list[str]:
    """The complete Parquet segments of a recording, oldest first per task (none if
    nothing was recorded yet); with ``rejected=True``, those of its ``_rejected`` folder.
    Leftover raw segments are converted first (see the module docstring)."""
    folder = recording_dir(_recordings_base(source), component, stream)
    if leftovers(folder) and (sink := _leftover_sink(folder)) is not None:
        convert_leftovers(folder, lambda: sink)
    if rejected:
        folder = os.path.join(folder, REJECTED)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder, n) for n in names
                  if n.startswith("part-") and n.endswith(".parquet"))


def _leftover_sink(folder: str) -> SegmentSink | None:
    """A sink for a killed run's raw segments: the declared fields and hints, and the
    folder's column types when fixed (so that the folder keeps one schema);
    None, with a log line, when neither says what the columns are."""
    schema = read_schema(folder)
    fields, types = read_fields(folder) or (
        [n for n in schema.names if n not in META_COLUMNS] if schema else [], {})
    if not fields and schema is None:
        log.error("raw recording segments in %s left as they are: no %s to name the "
                  "columns", folder, FIELDS_FILE)
        return None
    return SegmentSink(folder, 0, fields, types, schema=schema)


def read_table(source: Any, component: str, stream: str = "default", *,
               rejected: bool = False):
    """Every complete segment of a recording as one ``pyarrow.Table`` (an empty table of
    the metadata columns when nothing was recorded yet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = segments(source, component, stream, rejected=rejected)
    if not files:
        return pa.table({"_root_id": pa.array([], pa.int64()), "_task": pa.array([], pa.int32()),
                         "_emit_ts": pa.array([], pa.timestamp("us", tz="UTC"))})
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def read_pandas(source: Any, component: str, stream: str = "default", *,
                rejected: bool = False):
    """A recording as a pandas DataFrame (see :func:`read_table`)."""
    return read_table(source, component, stream, rejected=rejected).to_pandas()
