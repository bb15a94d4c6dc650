"""Every frame that crosses a socket, defined in one place. Only this module imports msgpack.

Data plane (instance <-> stream manager <-> stream manager) uses two-part messages,
``[header, body]``. The 12-byte header is enough to route a frame, so a stream manager
forwards it without decoding the tuples in the body:

>>> h = data_header(DATA, stream=3, dest=7, src=2)
>>> parse_header(h)
Header(kind=1, stream=3, dest=7, src=2)
>>> decode_batch(encode_batch([["a", 1], ["b", 2]]))
[['a', 1], ['b', 2]]

One-field streams: in the bodies of tuple frames (DATA, TRACKED, RUN, ANCHORED), a tuple is the
list of its values, except on a stream declared with one field, where it is that value,
bare (a batch of words is ``["a", "b"]``, not ``[["a"], ["b"]]``). The receiver knows
the stream's fields from the plan, by the header's stream id, and wraps each value back
into its list as it makes the Tuple (``runtime.model.api.OneFieldTuple``). A one-element list
per tuple would cost the sender ~100-200 ns a tuple: it is kept alive until its batch
is sent, then packed as a container of its own (docs/internals/performance.md,
"One-field streams").

Control plane (everyone <-> topology master, and the client) uses sealed messages:
``[body, mac]`` where body is a msgpack map with a ``"t"`` kind and mac is an
HMAC-SHA256 of the body under the topology's secret. A message whose mac does not
verify is never decoded, and only a verified message may carry pickled user code.

Each control message is a frozen record of its own (:class:`Hello`, :class:`Stats`,
:class:`Kill`, ...), registered by its kind in :data:`MESSAGES`:

>>> secret = b"k" * 32
>>> frames = seal(secret, Restart(task=3, reason="hung", incarnation=0))
>>> unseal(secret, frames)
Restart(task=3, reason='hung', incarnation=0)
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Iterator
from dataclasses import MISSING, dataclass
from dataclasses import fields as dataclass_fields
from types import UnionType
from typing import IO, Any, ClassVar, NamedTuple, get_args, get_type_hints

import msgpack

__all__ = [
    "ACKED", "ACKED_FAILED", "ACKED_OK", "ACKED_RENEWED", "ACKED_TIMEOUT", "ACKS", "ACK_ACK",
    "ACK_FAIL", "ACK_INIT", "ACK_RESET", "ANCHORED", "Activate", "Adopt", "AskAckerState",
    "AskEvents", "AskExceptions", "AskKill", "AskLogs", "AskMetrics", "AskPause", "AskRebalance",
    "AskRecord", "AskResume", "AskSample", "AskSetMaxSpoutPending", "AskSetTrace", "AskStatistics",
    "AskStatus", "AskTraces", "BACKPRESSURE", "BackpressureChange", "Bye", "CHECKPOINT",
    "COMPLETED", "Control", "DATA", "Deactivate", "ExceptionReport", "HEADER_SIZE", "HELLO",
    "Header", "Hello", "KINDS", "Kill", "Logs", "LogsReply", "MAX_FRAME", "MESSAGES", "Question",
    "ROUTED", "RUN", "Ready", "Recording", "Replan", "Reply", "Restart", "Restarted", "Running",
    "Samples", "Setting", "SmStats", "Stats", "Switch", "Switched", "TRACED", "TRACKED", "Tap",
    "TraceReport", "Welcome", "WireError", "bp_header", "bp_transition", "control", "data_header",
    "decode_batch", "decode_traced", "dest_of", "encodable", "encode_batch", "encode_traced",
    "iter_records", "pack", "parse_header", "seal", "unpack", "unpack_raw", "unseal",
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
ANCHORED = 7  # body: flat tuple, ids, ack_val triples: a bolt's tracked tuples. ids: an
# int root (the tuple belongs to that one tree; its ack value is ids ^ ack_val, so
# ack_val is root ^ its edge id) or a {root: edge} map with ack_val 0 (acker.md, "Frames")
TRACED = 8  # body: [[kind, inner body, trace id, [hop id, ...], emit time], ...]: frames of
# that kind (DATA, TRACKED, RUN, ANCHORED) holding only traced tuples, with their marks
# (docs/internals/tracing.md)
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
    """A TRACED body: traced tuples for one task, as entries ``[kind, body, trace, hops,
    emitted]``: a frame of that kind holding only tuples of one trace (kind and body
    untouched), the trace id, a hop id per tuple, in order, and when it left. The inner
    frame keeps its own decoder; only traced tuples pay for the wrap.

    >>> decode_traced(encode_traced([[DATA, encode_batch([["a"]]), 7, [9], 1.5]]))
    [(1, b'\\x91\\x91\\xa1a', 7, [9], 1.5)]
    """
    return _pack(entries)


def decode_traced(body: bytes) -> list[tuple[int, bytes, int, list, float]]:
    """Each entry's kind, inner body, trace id, hop ids and emit time (wall seconds);
    WireError if any is malformed."""
    entries = decode_batch(body)
    if not entries or not all(map(_traced_entry, entries)):
        raise WireError("a traced frame must hold [kind, body, trace id, hop ids, emit time] "
                        "entries")
    return [(e[0], e[1], e[2], e[3], float(e[4])) for e in entries]


def _traced_entry(e: Any) -> bool:
    return (type(e) is list and len(e) == 5 and e[0] in _TRACED_INNER and type(e[1]) is bytes
            and type(e[2]) is int and type(e[3]) is list and type(e[4]) in (int, float)
            and set(map(type, e[3])) <= _INTS)  # one C loop over the hop ids


_INTS = {int}


def encodable(value: Any) -> bool:
    """Whether msgpack can carry this value (used to name the culprit of a failed batch)."""
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


# -- control plane ------------------------------------------------------------------------
#
# Every control message is a frozen record declared here, one class per kind, registered
# in MESSAGES (kind -> record). On the wire it is a msgpack map: {"t": kind, field: value,
# ...}. Decoding checks the kind, that every required field is there, that there is no
# field the record does not declare, and each field's type (int means an int, never a
# bool; float accepts an int); what fails is a WireError, which every receiver logs,
# counts and drops. Each process dispatches on the record's type through one table.

MESSAGES: dict[str, type] = {}  # kind -> record class


def _message(kind: str):
    """Register a record class as the control message ``kind``."""
    def register(cls: type) -> type:
        cls.KIND = kind
        MESSAGES[kind] = cls
        return cls
    return register


@dataclass(frozen=True, slots=True)
class Control:
    """The base of every control message record."""

    KIND: ClassVar[str] = ""

    def fields(self) -> dict[str, Any]:
        """The record's fields by name (without its kind)."""
        return {f: getattr(self, f) for f in _FIELDS[type(self)]}


@_message("hello")
@dataclass(frozen=True, slots=True)
class Hello(Control):
    """A process introduces itself to the master (an sm also says where peers reach it)."""

    role: str  # "sm" or "instance"
    id: int  # container or task
    incarnation: int  # an instance's incarnation, a stream manager's generation
    pid: int
    inbound: str | None = None  # sm: the address peers push frames to
    run_dir: str | None = None  # sm: its run directory (remote: on its host)


@_message("welcome")
@dataclass(frozen=True, slots=True)
class Welcome(Control):
    """Master -> process: the plan; instances get the code bundle, sms the peers."""

    plan: dict
    bundle: bytes | None = None  # pickled user code, for instances (sealed, so trusted)
    inbound: dict | None = None  # sm: container -> where its peers push
    incarnations: dict | None = None  # remote sm: task -> the incarnation to start at


@_message("ready")
@dataclass(frozen=True, slots=True)
class Ready(Control):
    """Instance -> master: opened or prepared, ready for tuples."""

    task: int
    incarnation: int
    task_kind: str | None = None  # "spout", "bolt", ...: a rebalance's guard asks (issue 22)


@_message("activate")
@dataclass(frozen=True, slots=True)
class Activate(Control):
    """Master -> instances: every instance is ready (or resume): spouts may run."""


@_message("deactivate")
@dataclass(frozen=True, slots=True)
class Deactivate(Control):
    """Master -> instances: pause; spouts stop calling next_tuple."""


@_message("stats")
@dataclass(frozen=True, slots=True)
class Stats(Control):
    """Instance -> master, every stats_interval (also its heartbeat)."""

    task: int
    incarnation: int
    record: dict


@_message("exception")
@dataclass(frozen=True, slots=True)
class ExceptionReport(Control):
    """Instance -> master: user code raised."""

    task: int
    incarnation: int
    error: str
    traceback: str
    time: float  # wall clock, seconds
    fatal: bool = True  # whether it ended the instance


@_message("restarted")
@dataclass(frozen=True, slots=True)
class Restarted(Control):
    """Stream manager -> master: an instance was replaced."""

    task: int
    incarnation: int
    restarts: int
    reason: str


@_message("kill")
@dataclass(frozen=True, slots=True)
class Kill(Control):
    """Master -> stream managers and instances: stop now."""


@_message("bye")
@dataclass(frozen=True, slots=True)
class Bye(Control):
    """A process tells the master it is exiting."""

    role: str
    id: int


@_message("backpressure")
@dataclass(frozen=True, slots=True)
class BackpressureChange(Control):
    """Stream manager -> master: a cause crossed a water mark."""

    container: int
    on: bool
    cause: int | str  # a task, or "container N" for a peer link


@_message("restart")
@dataclass(frozen=True, slots=True)
class Restart(Control):
    """Master -> stream manager: replace that incarnation (presumed hung)."""

    task: int
    reason: str
    incarnation: int


@_message("set")
@dataclass(frozen=True, slots=True)
class Setting(Control):
    """Master -> instances: change a live setting (max_spout_pending)."""

    key: str
    value: Any  # checked by runtime.model.controls before it is sent


@_message("tap")
@dataclass(frozen=True, slots=True)
class Tap(Control):
    """Master -> instances: keep the last n tuples sent on a stream, for seconds."""

    stream: str
    n: int
    seconds: float


@_message("samples")
@dataclass(frozen=True, slots=True)
class Samples(Control):
    """Instance -> master: a tap's tuples."""

    task: int
    incarnation: int
    stream: str
    samples: list


@_message("record")
@dataclass(frozen=True, slots=True)
class Recording(Control):
    """Master -> instances: start (on) or stop recording a stream to Parquet."""

    stream: str
    on: bool


@_message("traces")
@dataclass(frozen=True, slots=True)
class TraceReport(Control):
    """Instance -> master, with its statistics: what it saw of traced trees, each record
    a list (``runtime.observe.tracestore`` reads them: start, sent, hop, outcome, done)."""

    task: int
    incarnation: int
    records: list


@_message("sm_stats")
@dataclass(frozen=True, slots=True)
class SmStats(Control):
    """Stream manager -> master: queued bytes and frames, time in backpressure."""

    container: int
    record: dict


@_message("replan")
@dataclass(frozen=True, slots=True)
class Replan(Control):
    """Master -> stream manager, a rebalance in place (docs/internals/rebalance.md):
    ``step`` "start": route to the new plan's tasks too and start the local new ones;
    "switch": every instance runs on it now, stop the local tasks it no longer has and
    drop their routes (a frame for one is dropped and counted)."""

    plan: dict  # the new plan, its epoch inside
    step: str


@_message("switch")
@dataclass(frozen=True, slots=True)
class Switch(Control):
    """Master -> instance: send on the new plan's routing from now on (answered with
    ``switched``). The checkpoint task's carries ``counts`` (component -> new
    parallelism), sent once every other task switched: it moves the keyed state and
    rolls every task back to it."""

    plan: dict
    counts: dict | None = None


@_message("switched")
@dataclass(frozen=True, slots=True)
class Switched(Control):
    """Instance -> master: it runs on the plan of ``epoch``; ``moved``: the checkpoint
    task's keys moved per stateful component."""

    task: int
    incarnation: int
    epoch: int
    moved: dict | None = None


@_message("logs")
@dataclass(frozen=True, slots=True)
class Logs(Control):
    """Master -> stream manager: send the end of an instance's log."""

    request: int
    component: str
    task: int
    limit: int  # bytes


@_message("logs_reply")
@dataclass(frozen=True, slots=True)
class LogsReply(Control):
    """Stream manager -> master: a log's end (or why not), for a client."""

    request: int
    ok: bool
    value: str


@_message("adopt")
@dataclass(frozen=True, slots=True)
class Adopt(Control):
    """A master that replaces a dead one -> stream manager: say what you run
    (docs/reliability.md, "A master that may die")."""

    master_pid: int


@_message("running")
@dataclass(frozen=True, slots=True)
class Running(Control):
    """Stream manager -> an adopting master: the container as it runs, for the master to
    rebuild its supervision from. ``tasks``: task -> {"incarnation", "pid", "restarts"}
    (pid 0 while its instance is being restarted)."""

    container: int
    generation: int
    pid: int
    inbound: str
    run_dir: str
    plan: dict
    tasks: dict


@_message("reply")
@dataclass(frozen=True, slots=True)
class Reply(Control):
    """Master -> client: the answer to the question ``id`` (``value`` says why if not ok)."""

    id: int
    ok: bool
    value: Any


# -- the client's questions (RunningTopology._ask): each answered by one Reply ----------------

@dataclass(frozen=True, slots=True)
class Question(Control):
    """The base of the client's questions to the master; ``id`` pairs it with its Reply."""

    id: int


@_message("ask_statistics")
@dataclass(frozen=True, slots=True)
class AskStatistics(Question):
    """Every task's latest statistics."""


@_message("ask_status")
@dataclass(frozen=True, slots=True)
class AskStatus(Question):
    """The master's state, pids and counters."""


@_message("ask_metrics")
@dataclass(frozen=True, slots=True)
class AskMetrics(Question):
    """Metrics over a window ("1m", "10m", "1h", "3h", "all")."""

    window: str = "1m"


@_message("ask_exceptions")
@dataclass(frozen=True, slots=True)
class AskExceptions(Question):
    """The grouped exceptions of user code."""


@_message("ask_events")
@dataclass(frozen=True, slots=True)
class AskEvents(Question):
    """Restarts, activation and other events."""


@_message("ask_acker_state")
@dataclass(frozen=True, slots=True)
class AskAckerState(Question):
    """Each acker task's pending roots by age, and its oldest roots named by the spouts."""


@_message("ask_pause")
@dataclass(frozen=True, slots=True)
class AskPause(Question):
    """Deactivate every spout."""


@_message("ask_resume")
@dataclass(frozen=True, slots=True)
class AskResume(Question):
    """Activate the spouts again."""


@_message("ask_set_max_spout_pending")
@dataclass(frozen=True, slots=True)
class AskSetMaxSpoutPending(Question):
    """Change max_spout_pending of a spout component (of every one if None)."""

    value: Any  # checked by runtime.model.controls.check_max_spout_pending
    component: str | None = None


@_message("ask_traces")
@dataclass(frozen=True, slots=True)
class AskTraces(Question):
    """The newest traces (of one status, at most ``limit``), or the one of ``msg_id``."""

    status: str | None = None
    limit: int = 100
    msg_id: Any = None
    by_msg: bool = False  # True: the trace of msg_id (which may be None)


@_message("ask_set_trace")
@dataclass(frozen=True, slots=True)
class AskSetTrace(Question):
    """Change the fraction of spout tuples traced, live (every spout)."""

    value: Any  # checked by runtime.model.controls.check_trace


@_message("ask_record")
@dataclass(frozen=True, slots=True)
class AskRecord(Question):
    """Start (on) or stop recording a component's stream."""

    component: str
    stream: str
    on: bool


@_message("ask_sample")
@dataclass(frozen=True, slots=True)
class AskSample(Question):
    """The newest n tuples a component sent on a stream; keeps the tap on keep seconds."""

    component: str
    stream: str
    n: Any  # checked by runtime.model.controls.check_tap
    keep: Any = None  # checked by runtime.model.controls.check_keep; None: the default


@_message("ask_logs")
@dataclass(frozen=True, slots=True)
class AskLogs(Question):
    """The end of an instance's log, from its container."""

    component: str
    task: int


@_message("ask_rebalance")
@dataclass(frozen=True, slots=True)
class AskRebalance(Question):
    """Change components' parallelism (and the number of containers); answered with the
    new plan once the topology runs on it (docs/internals/rebalance.md)."""

    parallelism: dict  # component -> new parallelism, checked by the master
    containers: int | None = None


@_message("ask_kill")
@dataclass(frozen=True, slots=True)
class AskKill(Question):
    """Kill the topology; answered once it is down."""


def _field_types(hint: Any) -> tuple[type, ...] | None:
    """The exact types a field accepts (None: anything), from its annotation."""
    if hint is Any:
        return None
    args = get_args(hint) if isinstance(hint, UnionType) else (hint,)
    return tuple(type(None) if a is None else a for a in args)


_FIELDS: dict[type, dict[str, tuple[type, ...] | None]] = {
    cls: {f.name: _field_types(get_type_hints(cls)[f.name]) for f in dataclass_fields(cls)}
    for cls in MESSAGES.values()}
_REQUIRED: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclass_fields(cls) if f.default is MISSING)
    for cls in MESSAGES.values()}


def _fits(value: Any, types: tuple[type, ...] | None) -> bool:
    return types is None or type(value) in types or (type(value) is int and float in types)


def control(kind: str, **fields: Any) -> Control:
    """Build a control message by its kind, checked as a received one is.

    >>> control("ready", task=3, incarnation=0, task_kind="bolt")
    Ready(task=3, incarnation=0, task_kind='bolt')
    """
    return _decode({"t": kind, **fields})


def _decode(msg: Any) -> Control:
    """The record a decoded map stands for; WireError for an unknown kind or bad fields."""
    if type(msg) is not dict or type(msg.get("t")) is not str or msg["t"] not in MESSAGES:
        kind = msg.get("t") if type(msg) is dict else type(msg).__name__
        raise WireError(f"unknown control message {kind!r}")
    kind = msg.pop("t")
    cls = MESSAGES[kind]
    missing = [f for f in _REQUIRED[cls] if f not in msg]
    if missing:
        raise WireError(f"control message {kind!r} lacks {missing}")
    types = _FIELDS[cls]
    unknown = sorted(str(f) for f in msg if f not in types)
    if unknown:
        raise WireError(f"control message {kind!r} has unknown fields {unknown}")
    wrong = [f for f, value in msg.items() if not _fits(value, types[f])]
    if wrong:
        raise WireError(f"control message {kind!r}: field {wrong[0]!r} may not be "
                        f"{type(msg[wrong[0]]).__name__}")
    return cls(**msg)


def seal(secret: bytes, msg: Control) -> list[bytes]:
    """A record as ``[body, mac]``: its msgpack map and the HMAC-SHA256 of it."""
    body = _pack({"t": msg.KIND, **msg.fields()})
    return [body, hmac.digest(secret, body, "sha256")]


def unseal(secret: bytes, frames: list[bytes]) -> Control:
    """Verify and decode a sealed message; WireError if it is forged, truncated, unknown
    or malformed."""
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
    return _decode(msg)


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
