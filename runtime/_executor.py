"""One task's executor: runs the user's spout or bolt, batches what it emits, and turns
incoming frames into ``process`` calls. It owns no socket and no clock: whoever drives it
(the instance process, or the in-memory twin in :mod:`runtime.testing`) passes ``send``,
the clocks, and calls :meth:`Executor.step`, :meth:`Executor.on_frame` and
:meth:`Executor.on_timer`.

The hot path is ``emit -> deliver -> list.append``; a batch is encoded and sent when it
holds ``batch_size`` tuples, or when ``flush_interval`` has passed (Storm 2.0's batching
with flush tuples, driven here by the executor's own timer).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import wire
from ._api import BasicBolt, Context, FailedException, Tuple, TupleSource
from ._constants import (
    BATCH_SIZE,
    DEFAULT_STREAM,
    FLUSH_INTERVAL,
    SYSTEM,
    TICK,
    TICK_FREQ_SECS,
)
from ._outbound import Outlet, StreamOut
from ._plan import PhysicalPlan
from ._stats import InstanceStats
from ._topology import ComponentSpec
from .groupings import DirectGrouping

log = logging.getLogger("tupleflow.executor")

Send = Callable[[bytes, bytes], None]


class UserCodeError(Exception):
    """User code raised; the instance is restarted. ``where`` names the callable."""

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(f"{where} raised {type(cause).__name__}: {cause}")
        self.where = where
        self.cause = cause


class Executor:
    """Runs one task. Build it, call :meth:`start`, then feed it frames and timer ticks."""

    def __init__(self, plan: PhysicalPlan, specs: Mapping[str, ComponentSpec], task: int,
                 send: Send, *, run_dir: str = "", monotonic=time.monotonic, wall=time.time,
                 user: Any = None) -> None:
        info = plan.task(task)
        self.plan, self.specs, self.task, self.info = plan, specs, task, info
        self.spec = specs[info.component]
        self.config = {**plan.config, **self.spec.config}
        self.kind = self.spec.kind
        self.monotonic, self.wall = monotonic, wall
        self.user = user if user is not None else self.spec.new_instance()
        self.context = self._context(run_dir)
        self._stream_ids = plan.stream_ids()
        self._batch_size = int(self.config[BATCH_SIZE])
        self._sources: dict[tuple[int, int], TupleSource] = {}
        self._acks: list = []
        self.executed = self.acked = self.failed = self.dropped = self.errors = 0
        self.first_executed: float | None = None
        self.last_executed: float | None = None
        self.streams = self._build_streams(send)
        self._tick_every = self.config.get(TICK_FREQ_SECS)
        self._next_tick = None
        self._flush_every = float(self.config[FLUSH_INTERVAL])
        self._next_flush = 0.0

    # -- wiring -------------------------------------------------------------------------
    def _context(self, run_dir: str) -> Context:
        plan, info = self.plan, self.info
        tasks = plan.component_tasks()
        return Context(plan.topology, info.component, self.task, info.index,
                       self.spec.parallelism, tasks, info.container, run_dir,
                       dict(self.spec.streams), plan.task_containers())

    def _build_streams(self, send: Send) -> dict[str, StreamOut]:
        """Each declared stream of this component, wired to its subscribers' tasks."""
        streams = {name: StreamOut(name, len(fields), send, self._report_unencodable)
                   for name, fields in self.spec.streams.items()}
        tasks = self.plan.component_tasks()
        for target in self.specs.values():
            for sub in target.inputs:
                if sub.source == self.spec.id:
                    self._subscribe(streams[sub.stream], sub, tasks[target.id])
        return streams

    def _subscribe(self, out: StreamOut, sub, tasks: tuple[int, ...]) -> None:
        stream_id = self._stream_ids[(self.spec.id, sub.stream)]
        grouping = copy.copy(sub.grouping)  # each sender prepares its own
        if isinstance(grouping, DirectGrouping):
            for t in tasks:
                out.direct[t] = (wire.data_header(wire.DATA, stream_id, t, self.task), [])
            return
        prepare = getattr(grouping, "prepare", None)
        if prepare is not None:
            prepare(self.context, sub.stream, tasks)
        else:
            grouping.target_tasks = list(tasks)
        out.outlets.append(Outlet(grouping, tasks, stream_id, self.task))

    def _report_unencodable(self, stream: str, values) -> None:
        fields = self.spec.streams[stream]
        self.dropped += 1
        bad = [f"{f} ({type(v).__name__})" for f, v in zip(fields, values)
               if not wire.encodable(v)]
        err = TypeError(f"component {self.spec.id!r} stream {stream!r}: cannot send field(s) "
                        f"{', '.join(bad)}: values must be msgpack types (None, bool, int, "
                        "float, str, bytes, list, dict); the tuple was dropped")
        self.on_error(f"{self.spec.class_name}.emit", err)

    def on_error(self, where: str, err: BaseException) -> None:
        """Recoverable error in this instance; the driver replaces this to report it."""
        log.error("%s: %s", where, err)

    # -- the collector, bound onto the user's object ------------------------------------
    def _bind(self) -> None:
        user = self.user
        user.emit = self._make_emit()
        user.emit_direct = self._emit_direct
        if self.kind == "bolt":
            user.ack = self._bolt_ack
            user.fail = self._bolt_fail
            user.reset_timeout = self._bolt_reset_timeout

    def _make_emit(self):
        """``emit``: check the stream and arity, append; a full batch is flushed."""
        streams = {name: (out.arity, out.items, out) for name, out in self.streams.items()}
        comp, acks, size = self.spec.id, self._acks, self._batch_size
        is_spout = self.kind == "spout"

        def emit(values, stream=DEFAULT_STREAM, msg_id=None, anchors=None):
            try:
                n, items, out = streams[stream]
            except KeyError:
                raise _unknown_stream(comp, stream, streams) from None
            try:
                ok = len(values) == n
            except TypeError:
                ok = False
            if not ok:
                raise _wrong_arity(comp, stream, values, n)
            items.append(values)
            if len(items) >= size:
                out.flush()
            if msg_id is not None and is_spout:
                acks.append(msg_id)

        return emit

    def _emit_direct(self, task: int, values, stream=DEFAULT_STREAM, msg_id=None, anchors=None):
        comp = self.spec.id
        out = self.streams.get(stream)
        if out is None:
            raise _unknown_stream(comp, stream, self.streams)
        target = out.direct.get(task)
        if target is None:
            raise ValueError(f"component {comp!r}: emit_direct to task {task}, which does not "
                             f"subscribe to stream {stream!r} with a direct grouping")
        if _arity(values) != out.arity:
            raise _wrong_arity(comp, stream, values, out.arity)
        target[1].append(values)
        if len(target[1]) >= self._batch_size:
            out.flush()
        if msg_id is not None and self.kind == "spout":
            self._acks.append(msg_id)

    def _bolt_ack(self, tup: Tuple) -> None:
        self.acked += 1

    def _bolt_fail(self, tup: Tuple) -> None:
        self.failed += 1

    def _bolt_reset_timeout(self, tup: Tuple) -> None:
        """Nothing to reset in at-most-once mode."""

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Bind the collector and call ``open``/``prepare``."""
        self._bind()
        now = self.monotonic()
        self._next_flush = now + self._flush_every
        if self._tick_every:
            self._next_tick = now + float(self._tick_every)
        where = "open" if self.kind == "spout" else "prepare"
        self._call(where, getattr(self.user, where), dict(self.config), self.context)

    def stop(self) -> None:
        """Flush what is buffered and call ``close``/``cleanup`` (best effort)."""
        self.flush()
        where = "close" if self.kind == "spout" else "cleanup"
        try:
            getattr(self.user, where)()
        except Exception as exc:  # the instance is going away; report and carry on
            self.on_error(f"{self.spec.class_name}.{where}", exc)

    def _call(self, where: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.{where}", exc) from exc

    # -- spouts -------------------------------------------------------------------------
    def step(self, calls: int) -> int:
        """Call ``next_tuple`` up to ``calls`` times; return how many tuples were emitted."""
        before = self.queued_or_sent()
        next_tuple = self.user.next_tuple
        try:
            for _ in range(calls):
                next_tuple()
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.next_tuple", exc) from exc
        if self._acks:
            self._ack_at_emit()
        return self.queued_or_sent() - before

    def _ack_at_emit(self) -> None:
        """At most once: a tuple given a msg_id is acked as soon as it is emitted."""
        acks, ack = self._acks[:], self.user.ack
        self._acks.clear()
        self.acked += len(acks)
        for msg_id in acks:
            self._call("ack", ack, msg_id)

    def queued_or_sent(self) -> int:
        return sum(o.emitted + o.queued() for o in self.streams.values())

    # -- bolts --------------------------------------------------------------------------
    def on_frame(self, header: bytes, body: bytes) -> None:
        """One data frame from the stream manager. WireError for a malformed frame."""
        h = wire.parse_header(header)
        if h.kind != wire.DATA:
            raise wire.WireError(f"frame kind {h.kind} is not for an instance")
        if h.dest != self.task:
            raise wire.WireError(f"frame for task {h.dest} reached task {self.task}")
        batch = wire.decode_batch(body)
        source = self._source(h.src, h.stream)
        self._execute(batch, source)

    def _source(self, src: int, stream: int) -> TupleSource:
        key = (src, stream)
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = self._new_source(src, stream)
        return source

    def _new_source(self, src: int, stream: int) -> TupleSource:
        try:
            comp, name = self.plan.streams[stream]
            info = self.plan.task(src)
        except IndexError:
            raise wire.WireError(f"frame from unknown task {src} or stream {stream}") from None
        if info.component != comp:
            raise wire.WireError(f"task {src} does not belong to {comp!r}")
        return TupleSource.of(comp, src, name, self.specs[comp].streams[name])

    def _execute(self, batch: list, source: TupleSource) -> None:
        process = self.user.process
        basic = isinstance(self.user, BasicBolt)
        now = self.wall()
        if self.first_executed is None:
            self.first_executed = now
        done = fails = 0
        try:
            for values in batch:
                tup = Tuple(values, source)
                try:
                    process(tup)
                except FailedException:
                    if not basic:
                        raise
                    fails += 1
                done += 1
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.process", exc) from exc
        finally:
            self.executed += done
            self.last_executed = self.wall()
            if basic:  # a BasicBolt's input is acked when process returns, failed if it raised
                self.acked += done - fails
                self.failed += fails

    # -- timers -------------------------------------------------------------------------
    def on_timer(self, now: float) -> float:
        """Flush due batches and send due ticks; return when it next wants to be called."""
        if now >= self._next_flush:
            self.flush()
            self._next_flush = now + self._flush_every
        due = self._next_flush
        if self._next_tick is not None:
            if now >= self._next_tick:
                self._tick()
                self._next_tick = now + float(self._tick_every)
            due = min(due, self._next_tick)
        return due

    def _tick(self) -> None:
        if self.kind != "bolt":
            return
        source = TupleSource.of(SYSTEM, 0, TICK, ["freq"])
        self._call("process_tick", self.user.process_tick, Tuple([self._tick_every], source))

    def flush(self) -> None:
        """Send every pending batch (a custom grouping that raises is user code failing)."""
        try:
            for out in self.streams.values():
                out.flush()
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name} grouping", exc) from exc

    # -- statistics ---------------------------------------------------------------------
    def record(self) -> dict:
        """The executor's counters, as the plain dict an instance reports."""
        return {"component": self.spec.id, "task": self.task, "kind": self.kind,
                "container": self.info.container,
                "emitted": sum(o.emitted for o in self.streams.values()),
                "transferred": sum(o.transferred for o in self.streams.values()),
                "executed": self.executed, "acked": self.acked, "failed": self.failed,
                "dropped": self.dropped, "errors": self.errors,
                "first_executed": self.first_executed, "last_executed": self.last_executed}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.record(), "state": "running"})


def _unknown_stream(comp: str, stream: str, routes) -> ValueError:
    return ValueError(f"component {comp!r}: emit on undeclared stream {stream!r}; "
                      f"it declares {sorted(routes)}")


def _arity(values) -> int:
    try:
        return len(values)
    except TypeError:
        return -1


def _wrong_arity(comp: str, stream: str, values, n: int) -> ValueError:
    n_got = _arity(values)
    got = f"{n_got} values" if n_got >= 0 else f"a {type(values).__name__}"
    return ValueError(f"component {comp!r} stream {stream!r}: emitted {got} but the stream "
                      f"declares {n} field(s); emit a list of values, e.g. emit([v1, v2])")
