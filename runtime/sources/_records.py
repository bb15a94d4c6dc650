"""The record format of the embedded log: a length, a checksum, then the payload.

Every record in a segment file is an 8-byte header followed by the payload bytes::

    length   u32, big-endian   number of payload bytes
    crc      u32, big-endian   zlib.crc32 of the 4 length bytes, continued over the payload
    payload  `length` bytes

The checksum covers the length too, so a damaged length is caught when the record still fits
in the file. Offsets are not stored: a record's offset is its segment's base offset (the file
name) plus its position in the file. Everything here works on bytes and is pure.

>>> blob = encode(b"hi")
>>> len(blob), decode(blob, 0)
(10, (b'hi', 10))
>>> decode(blob[:7], 0) is SHORT, scan(blob + blob[:5]).tail
(True, 'torn')
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 64 * 1024 * 1024  # a larger length can only be damage

SHORT = "short"  # the buffer ends inside the record
BAD = "bad"  # the record's length is impossible or its checksum does not match


def encode(payload: bytes) -> bytes:
    """One record: header and payload."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes is over the {MAX_PAYLOAD}-byte limit")
    length = len(payload).to_bytes(4, "big")
    return length + zlib.crc32(payload, zlib.crc32(length)).to_bytes(4, "big") + bytes(payload)


def decode(buf: bytes, pos: int) -> tuple[bytes, int] | str:
    """The record at `pos` as (payload, next position), or SHORT, or BAD."""
    if len(buf) - pos < HEADER_SIZE:
        return SHORT
    length, crc = HEADER.unpack_from(buf, pos)
    if length > MAX_PAYLOAD:
        return BAD
    end = pos + HEADER_SIZE + length
    if end > len(buf):
        return SHORT
    payload = bytes(buf[pos + HEADER_SIZE : end])
    if zlib.crc32(payload, zlib.crc32(buf[pos : pos + 4])) != crc:
        return BAD
    return payload, end


@dataclass(frozen=True)
class Scan:
    """What a scan found: the start of every valid record, where they end, and what follows.

    `tail` is "clean" (nothing follows), "torn" (the bytes end inside a record), "bad" (one
    record with a bad checksum reaching exactly to the end), "zeros" (only zero bytes follow,
    as some file systems leave after a crash) or "corrupt" (damage with data after it).
    """

    positions: list[int]
    end: int
    tail: str


def scan(buf: bytes, start: int = 0) -> Scan:
    """Walk the records of `buf` from `start` until the end or the first damage."""
    positions, pos = [], start
    while pos < len(buf):
        got = decode(buf, pos)
        if got is SHORT:
            return Scan(positions, pos, "torn")
        if got is BAD:
            return Scan(positions, pos, _bad_tail(buf, pos))
        positions.append(pos)
        pos = got[1]
    return Scan(positions, pos, "clean")


def _bad_tail(buf: bytes, pos: int) -> str:
    if not any(buf[pos:]):
        return "zeros"
    length = HEADER.unpack_from(buf, pos)[0]
    return "bad" if pos + HEADER_SIZE + length == len(buf) else "corrupt"
