"""One partition of the embedded log: its segment files, their sparse indexes, and its writer.

A partition directory holds segment files named by their base offset
(``00000000000000000000.seg``, ``00000000000000004096.seg``, ...). Only the last segment is
written to. Each segment keeps a sparse in-memory index, (offset, file position) about every
`INDEX_BYTES`, built by scanning the file or by the writer as it appends.

Read first: `Partition.refresh`, then `Segment.extend`.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import zlib
from pathlib import Path

from ._errors import CorruptLogError
from ._records import HEADER, HEADER_SIZE, MAX_PAYLOAD, scan

log = logging.getLogger("runtime.sources")

INDEX_BYTES = 4096  # one index entry about every this many bytes of a segment
READ_CHUNK = 64 * 1024  # bytes read from a segment at a time (a spout reads ~100 records)
_SEGMENT = re.compile(r"^(\d{20})\.seg$")


def segment_name(base: int) -> str:
    """The file name of the segment whose first offset is `base`."""
    return f"{base:020d}.seg"


def list_bases(directory: Path) -> list[int]:
    """The base offsets of the segment files in `directory`, in order."""
    return sorted(int(m.group(1)) for m in map(_SEGMENT.match, os.listdir(directory)) if m)


class Segment:
    """One segment file: how many valid records it holds, where they end, and a sparse index."""

    def __init__(self, directory: Path, base: int) -> None:
        self.base, self.path = base, directory / segment_name(base)
        self.count = self.end = 0
        self.scanned = False  # whether count, end and the index come from the file
        self.offsets: list[int] = []
        self.positions: list[int] = []
        self.cursor = (-1, 0)  # (offset, file position) where the last read stopped

    @property
    def next_offset(self) -> int:
        return self.base + self.count

    def note(self, pos: int) -> None:
        """Count the record at `pos`, the next one in the file."""
        if not self.positions or pos - self.positions[-1] >= INDEX_BYTES:
            self.offsets.append(self.next_offset)
            self.positions.append(pos)
        self.count += 1

    def extend(self, last: bool, repair: bool) -> None:
        """Take in the records written past `end`; a damaged tail is legal only in the last one.

        The writer's recovery (`repair`) truncates a torn or bad tail; a reader stops before it.
        """
        with open(self.path, "rb") as f:
            f.seek(self.end)
            found = scan(f.read())
        for pos in found.positions:
            self.note(self.end + pos)
        tail_at, self.end, self.scanned = self.end + found.end, self.end + found.end, True
        if found.tail == "clean":
            return
        if found.tail == "corrupt" or not last:
            raise CorruptLogError(self.path, self.next_offset, tail_at, found.tail)
        if repair:
            size = self.path.stat().st_size
            os.truncate(self.path, tail_at)
            log.warning("truncated %d bytes of a %s record at offset %d (position %d) in %s",
                        size - tail_at, found.tail, self.next_offset, tail_at, self.path)

    def rescan(self) -> None:
        """Scan a sealed segment from the start, checking it ends where the next one begins."""
        expected = self.count
        self.count = self.end = 0
        self.offsets, self.positions = [], []
        self.cursor = (-1, 0)
        self.extend(last=False, repair=False)
        if self.count != expected:
            raise CorruptLogError(self.path, self.next_offset, self.end,
                                  f"{self.count} records where the next segment implies {expected}")

    def read(self, offset: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` records from `offset` (which this segment holds)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        at, pos = self.offsets[i], self.positions[i]
        if self.cursor[0] == offset:  # a sequential reader: no records to skip
            at, pos = self.cursor
        with open(self.path, "rb") as f:
            payloads, end, bad = _read_records(f, pos, self.end, offset - at, limit)
        if bad is not None:  # bad = (index from `at`, position) of the damaged record
            raise CorruptLogError(self.path, at + bad[0], bad[1],
                                  "bad checksum in a checked region")
        if payloads:
            self.cursor = (offset + len(payloads), end)
        return list(zip(range(offset, offset + len(payloads)), payloads, strict=True))


def _read_records(f, start: int, end: int, skip: int, limit: int):
    """Skip `skip` records from `start`, then read up to `limit` payloads before `end`:
    ``(payloads, position after the last one, None)``, or with ``(index, position)`` of a
    damaged record last. One loop with no generator: this is the log spout's hot path."""
    f.seek(start)
    buf, p, base, remaining = b"", 0, start, end - start
    unpack, crc32, out, seen = HEADER.unpack_from, zlib.crc32, [], 0
    while len(out) < limit:
        if len(buf) - p < HEADER_SIZE:
            more = f.read(min(remaining, READ_CHUNK))
            if not more:
                break
            remaining -= len(more)
            buf, base, p = buf[p:] + more, base + p, 0
            continue
        length, crc = unpack(buf, p)
        stop = p + HEADER_SIZE + length
        if length > MAX_PAYLOAD:
            return out, base + p, (seen, base + p)
        if stop > len(buf):
            more = f.read(min(remaining, max(READ_CHUNK, stop - len(buf))))
            if not more:
                break
            remaining -= len(more)
            buf, base, p = buf[p:] + more, base + p, 0
            continue
        payload = buf[p + HEADER_SIZE:stop]
        if crc32(payload, crc32(buf[p:p + 4])) != crc:
            return out, base + p, (seen, base + p)
        seen += 1
        if skip:
            skip -= 1
        else:
            out.append(payload)
        p = stop
    return out, base + p, None


class Partition:
    """The segments of one partition; `write` is for the process holding the topic's writer lock."""

    def __init__(self, directory: Path, fsync: str) -> None:
        self.directory, self.fsync = directory, fsync
        self.segments: list[Segment] = []
        self._fd: int | None = None  # the last segment, open for appending

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0

    def refresh(self, repair: bool = False) -> None:
        """Catch up with the files: new segments, and records appended to the last one."""
        if repair and not list_bases(self.directory):
            (self.directory / segment_name(0)).touch()
        known = {s.base for s in self.segments}
        self.segments += [Segment(self.directory, b) for b in list_bases(self.directory)
                          if b not in known]
        self.segments.sort(key=lambda s: s.base)
        for seg, after in zip(self.segments, self.segments[1:]):
            if seg.scanned and seg.count != after.base - seg.base:
                seg.extend(last=False, repair=False)  # it was the last one when we scanned it
                _check_sealed(seg, after)
            seg.count = after.base - seg.base
        if self.segments:
            self.segments[-1].extend(last=True, repair=repair)

    def read(self, offset: int, limit: int) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        i = bisect.bisect_right([s.base for s in self.segments], offset) - 1
        for seg in self.segments[max(i, 0):]:
            if len(out) == limit or offset >= self.end_offset:
                break
            if not seg.scanned:
                seg.rescan()
            if offset < seg.next_offset:
                out += seg.read(offset, limit - len(out))
                offset = out[-1][0] + 1
        return out

    def write(self, blobs: list[bytes], segment_bytes: int) -> int:
        """Append encoded records; return the first one's offset once all are written."""
        first, batch, size = self.end_offset, [], 0
        for blob in blobs:
            seg = self.segments[-1]
            if seg.count + len(batch) and seg.end + size >= segment_bytes:
                self._write_out(batch)
                self._roll()
                batch, size = [], 0
            batch.append(blob)
            size += len(blob)
        self._write_out(batch)
        return first

    def sync(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write_out(self, batch: list[bytes]) -> None:
        if not batch:
            return
        seg, data = self.segments[-1], b"".join(batch)
        if self._fd is None:
            self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(self._fd, data)
            if self.fsync == "always":
                os.fsync(self._fd)
        except BaseException:
            os.ftruncate(self._fd, seg.end)  # leave no half-written batch behind
            raise
        for blob in batch:
            seg.note(seg.end)
            seg.end += len(blob)

    def _roll(self) -> None:
        self.close()
        seg = Segment(self.directory, self.end_offset)
        seg.scanned = True
        self.segments.append(seg)
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self.fsync == "always":
            _sync_dir(self.directory)


def _check_sealed(seg: Segment, after: Segment) -> None:
    if seg.next_offset != after.base:
        raise CorruptLogError(seg.path, seg.next_offset, seg.end,
                              f"ends at offset {seg.next_offset}, "
                              f"next segment starts at {after.base}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
