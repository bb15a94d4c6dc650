"""Records on disk (sinks, bootstrap blobs): plain data as msgpack, and read back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import msgpack

from runtime.wire.frames import _pack

__all__ = ["iter_records", "pack", "unpack", "unpack_raw"]


def pack(obj: Any) -> bytes:
    """msgpack-encode plain data (bootstrap blobs, records)."""
    return _pack(obj)


def unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)


def unpack_raw(raw: bytes) -> Any:
    """:func:`unpack` that leaves strings as their UTF-8 ``bytes`` and makes arrays
    tuples (the recording converter's quick way). ValueError for what is no msgpack.

    >>> unpack_raw(pack([["storm", 1]]))
    ((b'storm', 1),)
    """
    try:
        return msgpack.unpackb(raw, raw=True, use_list=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise ValueError(str(exc)) from None


def iter_records(stream: IO[bytes]) -> Iterator[Any]:
    """Read back records written with :func:`pack`; a truncated tail is ignored."""
    unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False)
    try:
        yield from unpacker
    except msgpack.OutOfData:
        return
