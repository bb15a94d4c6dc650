"""The data plane: frame kinds, the 12-byte header, batches of tuples, TRACED frames.

A data frame is two parts, ``[header, body]``: the header routes it (a stream manager reads
only the destination), the body is a msgpack batch a task decodes. The one msgpack packer
of the package lives here; the control plane and the records on disk share it.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgpack

__all__ = [
    "ACKED", "ACKED_FAILED", "ACKED_OK", "ACKED_RENEWED", "ACKED_TIMEOUT", "ACKS", "ACK_ACK",
    "ACK_FAIL", "ACK_INIT", "ACK_RESET", "ANCHORED", "BACKPRESSURE", "CHECKPOINT", "COMPLETED",
    "DATA", "HEADER_SIZE", "HELLO", "Header", "KINDS", "MAX_FRAME", "ROUTED", "RUN", "TRACED",
    "TRACKED", "WireError", "batch_values", "bp_header", "bp_transition",
    "data_header", "decode_batch", "decode_traced", "dest_of", "encodable", "encode_batch",
    "encode_traced", "parse_header",
]

DATA = 1  # body: a batch of tuples, each a list of values, or bare (a one-field stream)
TRACKED = 2  # body: flat tuple, ids, tuple, ids... (ids: {root: edge}, or an int root
# that is its own edge id: a spout tuple's only copy) for at-least-once tuples
ACKS = 3  # body: flat op, root, value triples (ACK ops) for an acker task; an INIT's
# spout task is the frame's source (docs/internals/acker.md, "Frames")
ACKED = 4  # body: flat root, outcome pairs (ACKED outcomes) for a spout task, from an acker
RUN = 5  # body: [first root, [tuple, tuple, ...]]: a spout's tracked tuples numbered by
# consecutive self-initialising roots, first, first + 1, ... (acker.md, "Runs of roots")
COMPLETED = 6  # body: [first root, count, ..., first root, count, [root, ...]]: completed
# trees for the spout task written in their roots, as stretches of count consecutive roots
# from first, then any others. A bolt's one-tuple trees go as one stretch (acker.md,
# "Leaves"), an acker's as any number ([0, 0, roots] when none: acker.md, "Frames")
ANCHORED = 7  # body: flat tuple, ids, ack_val triples: a bolt's tracked tuples. ids: an
# int root (the tuple belongs to that one tree) with ack_val its edge id, which is its
# ack value until it anchors tuples of its own; or a {root: edge} map with ack_val 0
# (acker.md, "Frames")
TRACED = 8  # body: [[kind, inner body, trace id, first hop id, emit time(, spans)], ...]:
# frames of that kind (DATA, TRACKED, RUN, ANCHORED) holding only traced tuples, with their
# marks (their hop ids consecutive from the first; ``spans``, a run's: which trace each
# tuple is of); an entry with trace id 0 is an untraced frame they rode in (its hop id and
# time unread) (docs/internals/tracing.md)
HELLO = 9  # instance -> its stream manager, once connected: "route my frames to me"
BACKPRESSURE = 10  # stream manager -> peers: src is the cause task; stream 1 = start, 0 = stop
CHECKPOINT = 11  # body: [op, epoch, checkpoint id]: the checkpoint protocol between the
# checkpoint spout and the tasks (runtime/state/, docs/internals/checkpoints.md)
# what a stream manager forwards to a task, and every kind there is
ROUTED = frozenset({DATA, TRACKED, ACKS, ACKED, RUN, COMPLETED, ANCHORED, TRACED, CHECKPOINT})
KINDS = ROUTED | {HELLO, BACKPRESSURE}

# ACKS ops: what a spout or bolt tells the acker about a root (Storm's __ack_* streams)
ACK_INIT, ACK_ACK, ACK_FAIL, ACK_RESET = 0, 1, 2, 3
# ACKED outcomes: what the acker tells the spout task that emitted the root
ACKED_OK, ACKED_FAILED, ACKED_TIMEOUT, ACKED_RENEWED = 0, 1, 2, 3  # renewed: reset_timeout

_HEADER = struct.Struct("<BxHII")  # kind, pad, stream id, destination task, source task
HEADER_SIZE = _HEADER.size
MAX_FRAME = 64 * 1024 * 1024  # bytes; larger frames are refused by every receiver


class WireError(ValueError):
    """A frame that cannot be understood: dropped by the receiver, with a log line."""


class Header(NamedTuple):
    """A data frame's 12-byte header: what it is, on which stream, for and from which task."""
    kind: int
    stream: int
    dest: int
    src: int


def data_header(kind: int, stream: int, dest: int, src: int) -> bytes:
    return _HEADER.pack(kind, stream, dest, src)


def parse_header(raw: bytes) -> Header:
    if len(raw) != HEADER_SIZE:
        raise WireError(f"header of {len(raw)} bytes, expected {HEADER_SIZE}")
    header = Header(*_HEADER.unpack(raw))
    if header.kind not in KINDS:
        raise WireError(f"unknown frame kind {header.kind}")
    return header


def bp_header(task: int, on: bool) -> bytes:
    """A backpressure announcement: ``task`` crossed the high mark (on) or drained (off).

    >>> bp_transition(parse_header(bp_header(7, True)))
    'start'
    """
    return _HEADER.pack(BACKPRESSURE, int(on), 0, task)


def bp_transition(header: Header) -> str:
    return "start" if header.stream else "stop"


def dest_of(raw: bytes) -> int:
    """The destination task of a data header (the only thing a stream manager reads)."""
    if len(raw) != HEADER_SIZE:
        raise WireError(f"header of {len(raw)} bytes, expected {HEADER_SIZE}")
    return _HEADER.unpack(raw)[2]


_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def encode_batch(tuples: list) -> bytes:
    """One msgpack array of tuples. Raises TypeError for a value msgpack cannot carry."""
    return _pack(tuples)


def decode_batch(body: bytes) -> list:
    if len(body) > MAX_FRAME:
        raise WireError(f"frame of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    try:
        batch = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise WireError(f"undecodable batch: {exc}") from None
    if type(batch) is not list:
        raise WireError(f"a batch must be an array, got {type(batch).__name__}")
    return batch


_TRACED_INNER = frozenset({DATA, TRACKED, RUN, ANCHORED})


def encode_traced(entries: list) -> bytes:
    """A TRACED body: traced tuples for one task, as entries ``[kind, body, trace, first,
    emitted]``: a frame of that kind holding only tuples of one trace (kind and body
    untouched), the trace id, the first tuple's hop id (the n-th tuple's is ``first +
    n``: a frame's hop ids are consecutive, so none is counted or sent one by one), and
    when it left. A run's entry (tuples of several traces, traced in one window) has a
    sixth field, ``spans``, flat ``[d, n, d, n, ...]``: the frame's first ``n`` tuples
    are of trace ``trace + d``, the next ``n`` of the next ``d``'s, and so on. The inner
    frame keeps its own decoder; only traced tuples pay for the wrap. An entry of trace
    id 0 is an ordinary frame for the same task the traced entries rode in (its hop id
    and time are not read): it is processed as if it had come alone.

    >>> decode_traced(encode_traced([[DATA, encode_batch([["a"]]), 7, 9, 1.5]]))
    [(1, b'\\x91\\x91\\xa1a', 7, 9, 1.5, None)]
    """
    return _pack(entries)


def decode_traced(body: bytes) -> list[tuple[int, bytes, int, int, float, list | None]]:
    """Each entry's kind, inner body, trace id, first hop id, emit time (wall seconds)
    and spans (None: every tuple of the one trace); WireError if any is malformed."""
    entries = decode_batch(body)
    if not entries or not all(map(_traced_entry, entries)):
        raise WireError("a traced frame must hold [kind, body, trace id, first hop id, "
                        "emit time(, spans)] entries")
    return [(e[0], e[1], e[2], e[3], float(e[4]), e[5] if len(e) == 6 else None)
            for e in entries]


def _traced_entry(e: Any) -> bool:
    return (type(e) is list and 5 <= len(e) <= 6 and e[0] in _TRACED_INNER
            and type(e[1]) is bytes and type(e[2]) is int and type(e[3]) is int
            and type(e[4]) in (int, float) and (len(e) == 5 or _spans(e[5])))


def _spans(spans: Any) -> bool:
    """A run's spans: ``[d, n, ...]`` pairs of ints, each count at least 1."""
    return (type(spans) is list and len(spans) >= 2 and not len(spans) % 2
            and set(map(type, spans)) == {int} and min(spans[1::2]) >= 1)


# a tuple frame's batch: items per tuple (RUN: [first root, [entry, ...]], one per entry)
_STRIDE = {DATA: 1, TRACKED: 2, ANCHORED: 3, RUN: 1}


def batch_values(kind: int, body: bytes) -> list:
    """A tuple frame's values, one per tuple, in order (bare values of a one-field
    stream as they are): its batch without the ids (the master's trace store reads a
    traced frame's this way, once, instead of each task at the send)."""
    batch = decode_batch(body)
    if kind == RUN:
        if len(batch) != 2 or type(batch[1]) is not list:
            raise WireError("a run must be [first root, [values, ...]]")
        return batch[1]
    stride = _STRIDE.get(kind)
    if stride is None:
        raise WireError(f"frame kind {kind} holds no tuples")
    return batch[0::stride]


def encodable(value: Any) -> bool:
    """Whether msgpack can carry this value (used to name the culprit of a failed batch)."""
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True
