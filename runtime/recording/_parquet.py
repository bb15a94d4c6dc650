"""Recording a stream to Parquet: the durable cousin of the tap (``running.sample``).

A :class:`Recorder` belongs to one stream of one task, and keeps the emitting process's
share of the work near zero: at each flush it appends the batch's msgpack bytes (the
ones ``StreamOut.ship`` already encoded to send it) to a raw segment file with one
``os.write`` (``runtime/recording/_raw.py``); a tracked tuple is kept at emit
(``tracked``, with its root id) and appended at the next flush. Each flush stamps its
rows with one clock read (``_emit_ts``). When a segment is full (``segment_rows``) or
old (``segment_seconds``) it is sealed and handed to the recording's converter process
(``runtime/recording/_convert.py``), which decodes it, builds Arrow arrays with a
:class:`SegmentSink` and writes ``part-<task>-<opened ns>-<seq>.parquet`` under a hidden
temporary name, then renames it: a reader (Spark's file source, :mod:`runtime.recording`)
never sees half a file. Raw segments a kill left behind are converted by the reader.

Disk and memory stay bounded: at most ``BACKLOG`` sealed segments wait for the converter;
past that the tuple path waits (it slows down, it loses nothing). pyarrow is imported
only by converters and readers, never by an instance. See ``docs/internals/recording.md``.

A segment that does not fit the stream's column types (the first segment fixes them,
from the declared type hints or else from the data) is written with every value as
text under ``_rejected/`` (which Spark and pyarrow datasets skip), and the error is
reported by the instance like any other user-code error: nothing is lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

from runtime import wire
from runtime.model.fields import declared_types

from ._convert import BACKLOG, Converter
from ._raw import BARE, TRACKED, UNTRACKED, RawAppender, batch_entry
from ._sink import recording_dir, write_fields

# What the engine imports from here (the emitting instance's side of a recording), with
# ``declared_types`` (now in runtime/model/fields.py) and ``recording_dir`` (_sink.py).
__all__ = ["BACKLOG", "Recorder", "check_stream", "declared_types", "open_recorder",
           "recording_dir", "signed64"]

log = logging.getLogger("tupleflow.recording")

SEGMENT_ROWS = 200_000  # rows per Parquet segment, at most
SEGMENT_SECONDS = 1.0  # a segment is closed this long after its first row, at the latest


def signed64(root: int) -> int:
    """A 64-bit root id as the signed integer with the same bits (Parquet and Spark have
    no unsigned 64-bit column).

    >>> signed64(5), signed64(2**64 - 1)
    (5, -1)
    """
    return root - (1 << 64) if root >= 1 << 63 else root



class Recorder:
    """Appends one stream of one task to raw segments and closes them; see the module
    docstring. Per flush: the batch's msgpack bytes (``encoded``, left by
    ``StreamOut.ship`` when it encoded the whole batch for a subscriber; encoded here
    otherwise), one clock read and one ``os.write``. Nothing per tuple for untracked
    tuples, and no pyarrow in this process."""

    __slots__ = ("raw", "converter", "rows_limit", "seconds", "clock", "report", "n", "first",
                 "encoded", "rows", "roots", "untracked")

    def __init__(self, raw: RawAppender, converter, *, segment_rows: int = SEGMENT_ROWS,
                 segment_seconds: float = SEGMENT_SECONDS,
                 clock: Callable[[], float] = time.time,
                 report: Callable[[str], None] = log.error, bare: bool = False) -> None:
        self.raw, self.converter = raw, converter
        # a one-field stream's batches hold bare values, as its frames do (runtime/wire/__init__.py)
        self.untracked = BARE if bare else UNTRACKED
        self.rows_limit, self.seconds = segment_rows, segment_seconds
        self.clock, self.report = clock, report
        self.encoded: bytes | None = None  # the msgpack of this flush's whole batch, if sent
        self.rows: list = []  # tracked tuples since the last flush, and their roots
        self.roots: list[int] = []
        self.n, self.first = 0, 0.0  # rows in the open segment, and its first flush time

    def tracked(self, values, root: int) -> None:
        """A tracked tuple, at emit: its values and (signed) root id."""
        self.rows.append(values)
        self.roots.append(signed64(root))

    def flushed(self, batches: Iterable[list]) -> None:
        """A flush: append the untracked ``batches`` being sent (the first one's bytes as
        encoded for sending, when there are) and the tracked tuples emitted since the
        last flush, stamped with one clock read; close the segment if full or old."""
        body, self.encoded = self.encoded, None
        parts = []
        for i, batch in enumerate(batches):
            if batch:
                parts.append((self.untracked, body if i == 0 and body else _encoded(batch)))
                self.n += len(batch)
        if self.rows:
            parts.append((TRACKED, _tracked_body(self.rows, self.roots)))
            self.n += len(self.rows)
            self.rows, self.roots = [], []
        if not self.n:
            return
        now = self.clock()
        if parts:
            self.raw.append(b"".join(batch_entry(kind, part, now) for kind, part in parts))
            self.first = self.first or now
        if self.n >= self.rows_limit or now - self.first >= self.seconds:
            self.roll()
            self.report_errors()

    def report_errors(self) -> None:
        """The converter's errors, reported from this (the tuple path's) thread."""
        errors = self.converter.errors
        while errors:
            self.report(errors.popleft())

    def roll(self) -> None:
        """Hand the open segment to the converter (waiting while BACKLOG segments wait)."""
        path = self.raw.seal()
        if path is not None:
            self.converter.submit(path)
        self.n, self.first = 0, 0.0

    def close(self) -> None:
        """Stamp and hand over what is buffered, then wait for the converter to finish."""
        started = time.monotonic()
        self.flushed(())
        self.roll()
        self.converter.close()
        self.report_errors()
        log.info("recording to %s closed in %.3f s: %d rows in %d segments",
                 self.raw.folder, time.monotonic() - started, self.converter.written,
                 self.converter.files)


def _encoded(batch: list) -> bytes:
    """A batch's msgpack, without the values msgpack cannot carry (the outlet has
    already reported those as bad tuples: they were not sent, so not recorded)."""
    try:
        return wire.encode_batch(batch)
    except (TypeError, ValueError, OverflowError):
        return wire.encode_batch(_encodable(batch))


def _encodable(rows: list) -> list:
    return [row for row in rows if wire.encodable(row)]


def _tracked_body(rows: list, roots: list[int]) -> bytes:
    """Tracked tuples and their root ids, as one msgpack ``[rows, roots]``."""
    try:
        return wire.pack([rows, roots])
    except (TypeError, ValueError, OverflowError):
        kept = [i for i, row in enumerate(rows) if wire.encodable(row)]
        return wire.pack([[rows[i] for i in kept], [roots[i] for i in kept]])


def open_recorder(run_dir: str, component: str, stream: str, task: int, fields: list[str],
                  types: dict[str, str], *, report: Callable[[str], None] = log.error,
                  segment_rows: int = SEGMENT_ROWS, segment_seconds: float = SEGMENT_SECONDS,
                  clock: Callable[[], float] = time.time,
                  base: str | None = None) -> Recorder:
    """A recorder of one stream of one task, writing under ``base`` (the run's own folder
    in the ``record_dir`` option, when given) or else ``run_dir``, with its converter
    process started and ready (pyarrow warmed up; its log in ``run_dir``); ``report`` is
    called (on the tuple path's thread) with each error the converter met."""
    folder = recording_dir(base or run_dir, component, stream)
    write_fields(folder, list(fields), types)
    prefix = f"part-{task:05d}-{time.time_ns()}"
    log_path = os.path.join(run_dir, "logs", f"{component}-{task}-recorder-{stream}.log")
    converter = Converter(folder, task, list(fields), types, prefix, log_path)
    return Recorder(RawAppender(folder, prefix), converter, segment_rows=segment_rows,
                    segment_seconds=segment_seconds, clock=clock, report=report,
                    bare=len(fields) == 1)


def check_stream(streams, component: str, stream: str) -> tuple[str, str]:
    """A recordable ``(component, stream)`` of the plan's ``(component, stream)`` pairs, or
    a ValueError naming what exists (the same checks as a tap's).

    >>> check_stream([("words", "default")], "words", "default")
    ('words', 'default')
    """
    from runtime.model.controls import check_tap

    check_tap(streams, component, stream, 1, verb="record")
    return component, stream
