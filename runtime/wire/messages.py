"""The control plane: the sealed records everyone exchanges with the topology master.

A control message is ``[body, mac]``: body is a msgpack map with a ``"t"`` kind, mac the
HMAC-SHA256 of the body under the topology's secret (:func:`seal`, :func:`unseal`). Every
kind is a frozen record registered in :data:`MESSAGES`; the client's questions are in
:mod:`runtime.wire.questions`, registered in the same table.
"""

from __future__ import annotations

import hmac
from typing import Any, ClassVar

import msgpack

from runtime.wire.frames import MAX_FRAME, WireError, _pack
from runtime.wire.frozen import Record

__all__ = [
    "Activate", "Adopt", "BackpressureChange", "Bye", "Control", "Deactivate",
    "ExceptionReport", "Hello", "Kill", "Logs", "LogsReply", "MESSAGES", "Ready", "Recording",
    "Replan", "Reply", "Restart", "Restarted", "Running", "Samples", "Setting", "SmStats",
    "Stats", "Switch", "Switched", "Tap", "TraceReport", "Welcome", "control", "seal", "unseal",
]

# Every control message is a frozen record, one class per kind, registered in MESSAGES
# (kind -> record): here, and the client's questions in runtime/wire/questions.py. On the
# wire it is a msgpack map: {"t": kind, field: value, ...}. Decoding checks the kind, that
# every required field is there, that there is no field the record does not declare, and
# each field's type (int means an int, never a bool; float accepts an int); what fails is a
# WireError, which every receiver logs, counts and drops. Each process dispatches on the
# record's type through one table.

MESSAGES: dict[str, type] = {}  # kind -> record class
# a record's fields and the types each accepts, and the fields without a default: filled
# as each record registers (the questions register in their own module)
_FIELDS: dict[type, dict[str, tuple[type, ...] | None]] = {}
_REQUIRED: dict[type, tuple[str, ...]] = {}


# The names a field's annotation may use, read from its text (the records' module uses
# PEP 563 annotations): cheaper than typing.get_type_hints, which evaluates each one.
_TYPE_NAMES: dict[str, type] = {t.__name__: t for t in (int, str, float, bool, dict, list,
                                                        bytes)} | {"None": type(None)}


def _field_types(cls: type, name: str) -> tuple[type, ...] | None:
    """The exact types a field accepts (None: anything), from its annotation: ``Any``,
    or names of _TYPE_NAMES joined by ``|``. TypeError, at import, for any other."""
    hint = cls._hints[name]
    if hint == "Any":
        return None
    try:
        return tuple(_TYPE_NAMES[part.strip()] for part in hint.split("|"))
    except KeyError:
        raise TypeError(f"control message {cls.__name__}: field {name!r} is annotated "
                        f"{hint!r}; the wire checks only {sorted(_TYPE_NAMES)} or Any") \
            from None


def _message(kind: str):
    """Register a record class as the control message ``kind``."""
    def register(cls: type) -> type:
        cls.KIND = kind
        MESSAGES[kind] = cls
        _FIELDS[cls] = {f: _field_types(cls, f) for f in cls._fields}
        _REQUIRED[cls] = tuple(f for f in cls._fields if f not in cls._defaults)
        return cls
    return register


class Control(Record):
    """The base of every control message record."""

    KIND: ClassVar[str] = ""

    def fields(self) -> dict[str, Any]:
        """The record's fields by name (without its kind)."""
        return {f: getattr(self, f) for f in _FIELDS[type(self)]}


@_message("hello")
class Hello(Control):
    """A process introduces itself to the master (an sm also says where peers reach it)."""

    role: str  # "sm" or "instance"
    id: int  # container or task
    incarnation: int  # an instance's incarnation, a stream manager's generation
    pid: int
    inbound: str | None = None  # sm: the address peers push frames to
    run_dir: str | None = None  # sm: its run directory (remote: on its host)


@_message("welcome")
class Welcome(Control):
    """Master -> process: the plan; instances get the code bundle, sms the peers."""

    plan: dict
    bundle: bytes | None = None  # pickled user code, for instances (sealed, so trusted)
    inbound: dict | None = None  # sm: container -> where its peers push
    incarnations: dict | None = None  # remote sm: task -> the incarnation to start at


@_message("ready")
class Ready(Control):
    """Instance -> master: opened or prepared, ready for tuples."""

    task: int
    incarnation: int
    task_kind: str | None = None  # "spout", "bolt", ...: a rebalance's guard asks (issue 22)
    # a task whose parallelism a rebalance may not change: why (a spout whose class does
    # not say ``resizable``; a WindowedBolt under checkpoints); None for any other task
    fixed: str | None = None


@_message("activate")
class Activate(Control):
    """Master -> instances: every instance is ready (or resume): spouts may run."""


@_message("deactivate")
class Deactivate(Control):
    """Master -> instances: pause; spouts stop calling next_tuple."""


@_message("stats")
class Stats(Control):
    """Instance -> master, every stats_interval (also its heartbeat)."""

    task: int
    incarnation: int
    record: dict


@_message("exception")
class ExceptionReport(Control):
    """Instance -> master: user code raised."""

    task: int
    incarnation: int
    error: str
    traceback: str
    time: float  # wall clock, seconds
    fatal: bool = True  # whether it ended the instance


@_message("restarted")
class Restarted(Control):
    """Stream manager -> master: an instance was replaced."""

    task: int
    incarnation: int
    restarts: int
    reason: str


@_message("kill")
class Kill(Control):
    """Master -> stream managers and instances: stop now."""


@_message("bye")
class Bye(Control):
    """A process tells the master it is exiting."""

    role: str
    id: int


@_message("backpressure")
class BackpressureChange(Control):
    """Stream manager -> master: a cause crossed a water mark."""

    container: int
    on: bool
    cause: int | str  # a task, or "container N" for a peer link


@_message("restart")
class Restart(Control):
    """Master -> stream manager: replace that incarnation (presumed hung)."""

    task: int
    reason: str
    incarnation: int


@_message("set")
class Setting(Control):
    """Master -> instances: change a live setting (max_spout_pending)."""

    key: str
    value: Any  # checked by runtime.model.controls before it is sent


@_message("tap")
class Tap(Control):
    """Master -> instances: keep the last n tuples sent on a stream, for seconds."""

    stream: str
    n: int
    seconds: float


@_message("samples")
class Samples(Control):
    """Instance -> master: a tap's tuples."""

    task: int
    incarnation: int
    stream: str
    samples: list


@_message("record")
class Recording(Control):
    """Master -> instances: start (on) or stop recording a stream to Parquet."""

    stream: str
    on: bool


@_message("traces")
class TraceReport(Control):
    """Instance -> master, with its statistics: what it saw of traced trees, each record
    a tuple of atoms mostly (``runtime.engine.tracing`` says what each holds;
    ``runtime.observe.tracestore`` reads them: start, sent, hops, outcome, done)."""

    task: int
    incarnation: int
    records: list


@_message("sm_stats")
class SmStats(Control):
    """Stream manager -> master: queued bytes and frames, time in backpressure."""

    container: int
    record: dict


@_message("replan")
class Replan(Control):
    """Master -> stream manager, a rebalance in place (docs/internals/rebalance.md):
    ``step`` "start": route to the new plan's tasks too and start the local new ones;
    "switch": every instance runs on it now, stop the local tasks it no longer has and
    drop their routes (a frame for one is dropped and counted)."""

    plan: dict  # the new plan, its epoch inside
    step: str


@_message("switch")
class Switch(Control):
    """Master -> instance: send on the new plan's routing from now on (answered with
    ``switched``). The checkpoint task's carries ``counts`` (component -> new
    parallelism), sent once every other task switched: it moves the keyed state and
    rolls every task back to it."""

    plan: dict
    counts: dict | None = None


@_message("switched")
class Switched(Control):
    """Instance -> master: it runs on the plan of ``epoch``; ``moved``: the checkpoint
    task's keys moved per stateful component."""

    task: int
    incarnation: int
    epoch: int
    moved: dict | None = None


@_message("logs")
class Logs(Control):
    """Master -> stream manager: send the end of an instance's log."""

    request: int
    component: str
    task: int
    limit: int  # bytes


@_message("logs_reply")
class LogsReply(Control):
    """Stream manager -> master: a log's end (or why not), for a client."""

    request: int
    ok: bool
    value: str


@_message("adopt")
class Adopt(Control):
    """A master that replaces a dead one -> stream manager: say what you run
    (docs/reliability.md, "A master that may die"). ``epoch`` None: as it is; an int: a
    rebalance in place was cut short, run on the plan of that epoch first (switch to the
    plan it started, or roll it back), then say."""

    master_pid: int
    epoch: int | None = None


@_message("running")
class Running(Control):
    """Stream manager -> an adopting master: the container as it runs, for the master to
    rebuild its supervision from. ``tasks``: task -> {"incarnation", "pid", "restarts"}
    (pid 0 while its instance is being restarted). ``plan`` is the one it switched to;
    ``pending`` a newer one a rebalance started (``Replan`` "start") and never switched
    to, else None."""

    container: int
    generation: int
    pid: int
    inbound: str
    run_dir: str
    plan: dict
    tasks: dict
    pending: dict | None = None


@_message("reply")
class Reply(Control):
    """Master -> client: the answer to the question ``id`` (``value`` says why if not ok)."""

    id: int
    ok: bool
    value: Any


def _fits(value: Any, types: tuple[type, ...] | None) -> bool:
    return types is None or type(value) in types or (type(value) is int and float in types)


def control(kind: str, **fields: Any) -> Control:
    """Build a control message by its kind, checked as a received one is.

    >>> control("ready", task=3, incarnation=0, task_kind="bolt")
    Ready(task=3, incarnation=0, task_kind='bolt', fixed=None)
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
