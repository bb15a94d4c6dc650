"""Every frame that crosses a socket, defined in one place. Only this module imports msgpack.

Data plane (instance <-> stream manager <-> stream manager) uses two-part messages,
``[header, body]``. The 12-byte header is enough to route a frame, so a stream manager
forwards it without decoding the tuples in the body:

>>> h = data_header(DATA, stream=3, dest=7, src=2)
>>> parse_header(h)
Header(kind=1, stream=3, dest=7, src=2)
>>> decode_batch(encode_batch([["a", 1], ["b", 2]]))
[['a', 1], ['b', 2]]

One-field streams: in the bodies of tuple frames (DATA, TRACKED, RUN), a tuple is the
list of its values, except on a stream declared with one field, where it is that value,
bare (a batch of words is ``["a", "b"]``, not ``[["a"], ["b"]]``). The receiver knows
the stream's fields from the plan, by the header's stream id, and wraps each value back
into its list as it makes the Tuple (``runtime.model.api.OneFieldTuple``). A one-element list
per tuple would cost the sender ~100-200 ns a tuple: it is kept alive until its batch
is sent, then packed as a container of its own (docs/internals/performance.md,
"One-field streams").

Control plane (everyone <-> topology master, and the client) uses sealed messages:
``[body, mac]`` where body is a msgpack map with a ``"t"`` type and mac is an
HMAC-SHA256 of the body under the topology's secret. A message whose mac does not
verify is never decoded, and only a verified message may carry pickled user code.

>>> secret = b"k" * 32
>>> frames = seal(secret, control("kill"))
>>> unseal(secret, frames)
{'t': 'kill'}
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

import msgpack

__all__ = [
    "ACKED", "ACKED_FAILED", "ACKED_OK", "ACKED_RENEWED", "ACKED_TIMEOUT", "ACKS", "ACK_ACK",
    "ACK_FAIL", "ACK_INIT", "ACK_RESET", "BACKPRESSURE", "COMPLETED", "CONTROL", "DATA",
    "HEADER_SIZE", "HELLO", "Header", "KINDS", "MAX_FRAME", "ROUTED", "RUN", "TRACKED",
    "WireError", "bp_header", "bp_transition", "control", "data_header", "decode_batch",
    "dest_of", "encodable", "encode_batch", "iter_records", "pack", "parse_header", "seal",
    "unpack", "unpack_raw", "unseal",
]

# -- data plane ---------------------------------------------------------------------------

DATA = 1  # body: a batch of tuples, each a list of values, or bare (a one-field stream)
TRACKED = 2  # body: flat tuple, ids, tuple, ids... (ids: {root: edge}, or an int root
# that is its own edge id: a spout tuple's only copy) for at-least-once tuples
ACKS = 3  # body: flat op, root, value triples (ACK ops) for an acker task; an INIT's
# spout task is the frame's source (docs/internals/acker.md, "Frames")
ACKED = 4  # body: flat root, outcome pairs (ACKED outcomes) for a spout task, from an acker
RUN = 5  # body: [first root, [tuple, tuple, ...]]: a spout's tracked tuples numbered by
# consecutive self-initialising roots, first, first + 1, ... (acker.md, "Runs of roots")
COMPLETED = 6  # body: [first root, count, [root, ...]]: one-tuple trees a bolt acked, for
# the spout task written in their roots (docs/internals/acker.md, "Leaves")
HELLO = 9  # instance -> its stream manager, once connected: "route my frames to me"
BACKPRESSURE = 10  # stream manager -> peers: src is the cause task; stream 1 = start, 0 = stop
ROUTED = frozenset({DATA, TRACKED, ACKS, ACKED, RUN, COMPLETED})  # what a stream manager
KINDS = ROUTED | {HELLO, BACKPRESSURE}  # forwards to a task, and every kind there is

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


def encodable(value: Any) -> bool:
    """Whether msgpack can carry this value (used to name the culprit of a failed batch)."""
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


# -- control plane ------------------------------------------------------------------------

# type -> required fields. Optional fields may be added freely; unknown types are refused.
CONTROL: dict[str, tuple[str, ...]] = {
    "hello": ("role", "id", "incarnation", "pid"),  # a process introduces itself to the TM
    "welcome": ("plan",),  # TM -> process: the plan (and, for instances, the code bundle)
    "ready": ("task", "incarnation"),  # instance: opened/prepared, ready for tuples
    "activate": (),  # TM -> instances: every instance is ready (or resume); spouts may run
    "deactivate": (),  # TM -> instances: pause; spouts stop calling next_tuple
    "stats": ("task", "incarnation", "record"),  # instance -> TM, every stats_interval
    "exception": ("task", "incarnation", "error", "traceback", "time"),  # user code raised
    "restarted": ("task", "incarnation", "restarts", "reason"),  # SM -> TM: instance replaced
    "request": ("id", "what"),  # client -> TM: a question ("statistics", "plan", "kill", ...)
    "reply": ("id", "ok", "value"),  # TM -> client
    "kill": (),  # TM -> SM / instances: stop now
    "bye": ("role", "id"),  # a process tells the TM it is exiting
    "backpressure": ("container", "on", "cause"),  # SM -> TM: a cause crossed a water mark
    "restart": ("task", "reason", "incarnation"),  # TM -> SM: replace that incarnation (hung)
    "set": ("key", "value"),  # TM -> instances: change a live setting (max_spout_pending)
    "tap": ("stream", "n", "seconds"),  # TM -> instances: keep the last n tuples sent on it
    "samples": ("task", "incarnation", "stream", "samples"),  # instance -> TM: a tap's tuples
    "record": ("stream", "on"),  # TM -> instances: start/stop recording a stream to Parquet
    "sm_stats": ("container", "record"),  # SM -> TM: queued bytes/frames, time in backpressure
    "logs": ("request", "component", "task", "limit"),  # TM -> SM: send an instance's log
    "logs_reply": ("request", "ok", "value"),  # SM -> TM: its end (or why not), for a client
}


def control(kind: str, **fields: Any) -> dict:
    """Build a control message, checking its fields against :data:`CONTROL`."""
    _check_control({"t": kind, **fields})
    return {"t": kind, **fields}


def _check_control(msg: Any) -> dict:
    if type(msg) is not dict or type(msg.get("t")) is not str or msg["t"] not in CONTROL:
        kind = msg.get("t") if type(msg) is dict else type(msg).__name__
        raise WireError(f"unknown control message {kind!r}")
    missing = [f for f in CONTROL[msg["t"]] if f not in msg]
    if missing:
        raise WireError(f"control message {msg['t']!r} lacks {missing}")
    return msg


def seal(secret: bytes, msg: dict) -> list[bytes]:
    body = _pack(msg)
    return [body, hmac.digest(secret, body, "sha256")]


def unseal(secret: bytes, frames: list[bytes]) -> dict:
    """Verify and decode a sealed message; WireError if it is forged, truncated or unknown."""
    if len(frames) != 2:
        raise WireError(f"control message of {len(frames)} parts, expected 2")
    body, mac = frames
    if len(body) > MAX_FRAME:
        raise WireError(f"control message of {len(body)} bytes exceeds the limit")
    if not hmac.compare_digest(hmac.digest(secret, body, "sha256"), mac):
        raise WireError("control message with a bad signature (not from this topology)")
    try:
        msg = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise WireError(f"undecodable control message: {exc}") from None
    return _check_control(msg)


# -- records on disk (sinks, bootstrap blobs) -------------------------------------------------

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
