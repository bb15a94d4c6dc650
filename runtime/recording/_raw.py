"""Raw recording segments: what the emitting instance appends, and turning them into Parquet.

The instance that records a stream does almost nothing per flush: it appends the batch
its outlet already encoded with msgpack (the very bytes sent to the subscriber) to a raw
segment file, as one entry ``[kind, body length, flush time][body]``, with one
``os.write``. Everything costly (decoding, Arrow arrays, Parquet) happens in a converter
process (``runtime/recording/_convert.py``), or, for leftovers of a killed run, in the
reader (:func:`convert_leftovers`, called by ``runtime.recording.segments``).

A raw segment is named after the Parquet file it becomes, hidden:
``.part-<task>-<opened ns>-<seq>.parquet.raw`` (readers and Spark skip names starting
with ``.``). Whoever works on a raw file holds an exclusive ``flock`` on it: the instance
while it appends, the converter or a reader while it converts. So a reader converts
only what nobody alive is working on, and a file converted twice (a race between a
converter and a reader) is harmless: the Parquet name is the same, the second finds the
raw file gone. An empty raw file is never removed by a converter (its writer may be
about to lock it); its own writer removes it.

Kinds of entry: ``UNTRACKED``, a msgpack array of value lists (a DATA frame's body);
``BARE``, the same for a stream of one field, whose DATA bodies hold bare values
(``runtime/wire/__init__.py``, "One-field streams"); ``TRACKED``, a msgpack ``[value lists,
signed root ids]``. A truncated last entry (a
process killed in the middle of a write) is ignored: every complete entry is kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import time
from itertools import repeat
from operator import itemgetter

from runtime import wire

log = logging.getLogger("tupleflow.recording")

RAW_SUFFIX = ".raw"
UNTRACKED, TRACKED, BARE = 1, 2, 3
_ENTRY = struct.Struct("<BId")  # kind, body length, flush time (UTC seconds)


def raw_name(part: str) -> str:
    """The hidden raw name of a Parquet segment name.

    >>> raw_name("part-00001-5-000000.parquet")
    '.part-00001-5-000000.parquet.raw'
    """
    return "." + part + RAW_SUFFIX


def part_name(raw: str) -> str:
    """The Parquet segment name a raw file becomes (the inverse of :func:`raw_name`)."""
    base = os.path.basename(raw)
    return base[1:-len(RAW_SUFFIX)]


def is_raw(name: str) -> bool:
    return name.startswith(".part-") and name.endswith(RAW_SUFFIX)


def batch_entry(kind: int, body: bytes, now: float) -> bytes:
    """One raw entry (one batch of one flush): header and body (joined by the caller into
    one write per flush)."""
    return _ENTRY.pack(kind, len(body), now) + body


def batch_entries(data: bytes):
    """``(kind, body, time)`` of each complete entry; a truncated tail is left out."""
    at, size, end = 0, _ENTRY.size, len(data)
    while at + size <= end:
        kind, length, now = _ENTRY.unpack_from(data, at)
        if at + size + length > end:
            log.warning("raw recording: ignoring a truncated last entry (%d bytes)", end - at)
            return
        yield kind, data[at + size:at + size + length], now
        at += size + length


class BadSegment(ValueError):
    """A raw segment whose entries are not what a recorder writes (kept, not deleted)."""


CHUNK_ROWS = 16_384  # rows the quick way decodes before it turns them into Arrow arrays


def columns_of(data: bytes, arity: int) -> tuple[list[list], list, tuple[list, list]]:
    """A raw segment's rows as ``(columns, roots, (ends, times))``, the shape
    ``SegmentSink.write`` takes: one list per field (moved batch by batch, so no row
    lists outlive their batch), one signed root id or None per row, and the flush times
    as runs (rows ``[ends[i-1], ends[i])`` were flushed at ``times[i]``)."""
    return next(chunks_of(data, arity, rows=None))


def chunks_of(data: bytes, arity: int, *, text: bool = True, bytes_ok: bool = True,
              rows: int | None = CHUNK_ROWS):
    """:func:`columns_of` in parts of whole entries, each of at least ``rows`` rows but
    the last (``None``: one part), decoded as they are asked for: the quick way turns
    each into Arrow arrays before it decodes the next, which keeps ~20x fewer Python
    objects alive (and out of the caches the emitting processes use) than a whole
    segment would. At least one part, empty for a segment without rows.

    ``text=False`` is the quick decoding: msgpack strings stay UTF-8 ``bytes`` and
    arrays become tuples (about 75 ns a row less than Python strings in lists), for a
    sink whose columns are all flat (``SegmentSink.quick_types``), which has Arrow
    check the bytes as text. A bytes value then looks like text: with
    ``bytes_ok=False`` (a column's type still to be inferred), an entry that may hold
    one raises NeedsText."""
    columns: list[list] = [[] for _ in range(arity)]
    getters = [itemgetter(i) for i in range(arity)]
    roots: list = []
    ends: list[int] = []
    times: list[float] = []
    yielded = False
    for kind, body, now in batch_entries(data):
        if not bytes_ok and not text and _may_hold_bytes(body):
            raise NeedsText("an entry that may hold a bytes value")
        batch, ids = _rows(kind, body, text)
        if kind == BARE:
            if arity != 1:
                raise BadSegment(f"bare values in a segment of {arity} fields")
            columns[0].extend(batch)
        else:
            try:  # rows are checked at emit: a row too short here means a file not ours
                for column, get in zip(columns, getters):
                    column.extend(map(get, batch))
            except (IndexError, TypeError, KeyError) as exc:
                raise BadSegment(f"a row that is not a list of {arity} values: {exc}") from None
        roots.extend(repeat(None, len(batch)) if ids is None else ids)
        if columns and len(roots) != len(columns[0]):
            raise BadSegment("a tracked entry whose root ids do not match its rows")
        if ends and times[-1] == now:
            ends[-1] = len(roots)
        elif batch:
            ends.append(len(roots))
            times.append(now)
        if rows is not None and len(roots) >= rows:
            yield columns, roots, (ends, times)
            yielded = True
            columns, roots, ends, times = [[] for _ in range(arity)], [], [], []
    if roots or not yielded:
        yield columns, roots, (ends, times)


def _rows(kind: int, body: bytes, text: bool = True) -> tuple[list, list | None]:
    try:
        if kind in (UNTRACKED, BARE):
            return (wire.decode_batch(body) if text else _unpack_quick(body)), None
        if kind == TRACKED:
            rows, ids = wire.unpack(body) if text else _unpack_quick(body)
            return rows, ids
    except (wire.WireError, ValueError, TypeError) as exc:
        raise BadSegment(f"undecodable entry: {exc}") from None
    raise BadSegment(f"unknown entry kind {kind}")


def _unpack_quick(body: bytes):
    found = wire.unpack_raw(body)
    if type(found) is not tuple:
        raise ValueError(f"an entry must be an array, got {type(found).__name__}")
    return found


_BIN_MARKERS = (b"\xc4", b"\xc5", b"\xc6")  # msgpack's bin 8, bin 16, bin 32


def _may_hold_bytes(body: bytes) -> bool:
    """Whether an entry may hold a bytes value: it does unless none of msgpack's three
    bin markers occurs in it (they also occur inside numbers and non-ASCII text, so this
    errs towards the exact way; three ``memchr`` scans of the body)."""
    return any(marker in body for marker in _BIN_MARKERS)


def write_segment(sink, data: bytes, name: str) -> str:
    """Decode a raw segment and write it with ``sink``: quickly when its columns are all
    flat, and again the exact way when a value does not fit the quick way (a string in
    a number column, say), so that what is kept or rejected never depends on the way."""
    arity = len(sink.fields)
    types = sink.quick_types()
    if types is not None:
        try:
            parts = chunks_of(data, arity, text=False, bytes_ok=None not in types,
                              rows=CHUNK_ROWS)
            return sink.write_quick(parts, types, name=name)
        except NeedsText:
            log.info("recording: %s does not fit the quick way; decoding it as text", name)
    return sink.write(*columns_of(data, arity), name=name)


class NeedsText(ValueError):
    """Quickly decoded columns that do not fit the stream's types (decode them as text)."""


def convert_file(path: str, sink, *, wait: bool | float = True) -> str | None:
    """Convert one raw segment to Parquet with ``sink`` (a ``SegmentSink``) and remove it;
    the Parquet path, or None when there was nothing to do (gone, empty, or still locked
    by a live writer after ``wait``: True waits for the lock, False not at all, a number
    that many seconds). Raises BadSegment for a file that is not a raw
    segment (which is left in place: nothing is lost)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None  # converted by someone else meanwhile
    try:
        if not _lock(fd, wait) or os.fstat(fd).st_nlink == 0:
            return None
        data = _read_all(fd)
        if not data:
            return None  # its writer may be about to lock it: the writer removes it
        written = write_segment(sink, data, part_name(path))
        os.unlink(path)
        return written
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, wait: bool | float) -> bool:
    """Lock ``fd``: waiting for it (True), not at all (False), or up to ``wait`` seconds
    (a dying writer's lock goes a moment after its other pipes close)."""
    if wait is True:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + (wait or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 24):
        chunks.append(chunk)
    return b"".join(chunks)


def leftovers(folder: str, prefix: str = ".part-") -> list[str]:
    """The raw segments in ``folder`` (whose names start with ``prefix``), oldest first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.startswith(prefix) and is_raw(n))


def convert_leftovers(folder: str, make_sink, prefix: str = ".part-") -> list[str]:
    """Convert the raw segments nobody alive works on (a killed instance's last segment,
    or what a killed converter had not reached); the Parquet paths written. A segment
    that cannot be read is logged and left as it is."""
    written, sink = [], None
    for path in leftovers(folder, prefix):
        sink = sink or make_sink()
        try:
            done = convert_file(path, sink, wait=False)
        except BadSegment as exc:
            log.error("raw recording %s left as it is: %s", path, exc)
            continue
        if done:
            written.append(done)
    return written


class RawAppender:
    """The instance's side: one open raw segment, appended to with one write per flush
    while holding its lock (so no reader converts it under the writer's feet)."""

    __slots__ = ("folder", "prefix", "seq", "fd", "path")

    def __init__(self, folder: str, prefix: str) -> None:
        self.folder, self.prefix, self.seq = folder, prefix, 0
        self.fd: int | None = None
        self.path = ""

    def append(self, data: bytes) -> None:
        if self.fd is None:
            self._open()
        view = memoryview(data)
        while view:  # a regular file takes it whole, unless the disk is full
            view = view[os.write(self.fd, view):]

    def _open(self) -> None:
        name = f"{self.prefix}-{self.seq:06d}.parquet"
        self.seq += 1
        os.makedirs(self.folder, exist_ok=True)
        self.path = os.path.join(self.folder, raw_name(name))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def seal(self) -> str | None:
        """Close the open segment (releasing it to a converter); its path, if any."""
        if self.fd is None:
            return None
        fd, self.fd = self.fd, None
        if os.fstat(fd).st_size == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.close(fd)
            return None
        os.close(fd)
        return self.path
