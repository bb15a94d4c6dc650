"""One task's executor: runs the user's spout or bolt, batches what it emits, and turns
incoming frames into ``process`` calls. It owns no socket and no clock: whoever drives it
(the instance process, or the in-memory twin in :mod:`runtime.testing`) passes ``send``,
the clocks, and calls :meth:`Executor.step`, :meth:`Executor.on_frame` and
:meth:`Executor.on_timer` (the interface: :class:`runtime.engine.driven.TaskExecutor`).

The hot path is ``emit -> list.append``; a batch is encoded and sent when it holds
``batch_size`` tuples, or when ``flush_interval`` has passed (Storm 2.0's batching with
flush tuples, driven here by the executor's own timer).

With acking on (``ackers`` > 0), a spout tuple emitted with a ``msg_id`` gets a random
root id, and each copy sent to a task a random edge id; the spout tells the acker the
XOR of those edges. A bolt's emit anchored to tracked inputs gives each copy an edge id
per anchor and XORs it into the anchor's ``ack_val``; acking the input sends, per root,
its own edge id XOR that ``ack_val`` (for a tuple of one root, ``ack_val`` holds its own
edge id too). See ``docs/internals/acker.md``.

The executor is a facade over rooms, one phrase each:

====================  ==============================================================
``wiring.py``         the task's streams, and the collector bound onto the user
``spout_side.py``     the spout's turns, its tracked roots and their outcomes
``runs.py``           a tracking spout's default stream, in runs of roots
``bolt_side.py``      the bolt's input: frames to ``process``
``bolt_acks.py``      the bolt's acks and fails of its input, and anchored emits
``acks.py``           the ack messages the task owes ackers and spouts
``taps.py``           the taps and recordings on the task's streams
``stats.py``          what the task counted, and its report
``outbound.py``       per-stream batches, split among subscribers' tasks
``tracing.py``        the sampled traced tuples: marked, caught, recorded
``tracing_spout.py``  its spout's part: runs sampled, traced roots' outcomes
``tracing_bolt.py``   its bolt's part: traced inputs processed, held ones watched
``trace_window.py``   a traced call's window on the pending lists
``trace_ids.py``      trace and hop ids, the sampling gap, the limits
``riders.py``         the traced frames waiting to ride the next frame to their task
====================  ==============================================================
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sized
from typing import Any

from runtime import wire
from runtime.acking._bound import floor_for
from runtime.acking._ids import RootIds
from runtime.acking._tracking import SpoutTracker
from runtime.model.constants import (
    ACKERS,
    BATCH_SIZE,
    FLUSH_INTERVAL,
    MAX_SPOUT_PENDING,
    MESSAGE_TIMEOUT,
    METRICS_ENABLED,
    RECORD,
    TARGET_LATENCY,
    TICK_FREQ_SECS,
    TRACE,
    TUNE_INTERVAL,
)
from runtime.model.plan import PhysicalPlan
from runtime.model.topology import ComponentSpec
from runtime.observe.stats import InstanceStats
from runtime.observe.user_metrics import UserMetrics

from .acks import AckOut
from .bolt_side import BoltSide
from .errors import UserCodeError, call_user
from .runs import Runs
from .spout_side import STEP_CHUNK, SpoutSide
from .stats import TaskCounts, streams_report, user_report, watched_report, window_report
from .taps import StreamWatch
from .tracing import Tracer
from .wiring import Collector, Send, build_streams, subscribe_all, task_context

log = logging.getLogger("tupleflow.executor")

_TUPLE_KINDS = (wire.DATA, wire.TRACKED, wire.RUN, wire.ANCHORED)
# flush intervals an idle bolt sleeps between timer calls (on_timer): its input wakes it
# sooner; only an emit from outside ``process`` (a user's thread) waits this long, 20 ms
# with the default 2 ms interval
IDLE_FLUSHES = 10


class Executor:
    """Runs one task. Build it, call :meth:`start`, then feed it frames and timer ticks.

    It owns the task's identity (plan, spec, config, the user's object, its context), the
    driver's hooks (``on_error``, ``output_waiting``) and the timers (flush, ticks), and
    hands the rest to its rooms: ``spout`` or ``bolt`` (the other is None), ``acks``,
    ``streams``, ``watch`` and ``counts``."""

    def __init__(self, plan: PhysicalPlan, specs: Mapping[str, ComponentSpec], task: int,
                 send: Send, *, run_dir: str = "", monotonic=time.monotonic, wall=time.time,
                 user: Any = None, drains: bool = False) -> None:
        """``drains``: the driver calls :meth:`drained` after each drain of its input
        (the instance process does), so a bolt's acks wait for it: one ACKS frame a
        drain, not one a frame."""
        info = plan.task(task)
        self.drains = drains
        self.plan, self.task, self.info = plan, task, info
        self.spec = spec = specs[info.component]
        self.specs = specs  # a rebalance wires the streams again (retarget)
        self.config = {**plan.config, **spec.config}
        self.kind = spec.kind
        self.monotonic, self.wall = monotonic, wall
        self.user = user if user is not None else spec.new_instance()
        self.user_metrics = UserMetrics()  # what the user's code registers (context)
        self.context = task_context(plan, spec, task, run_dir, self.user_metrics)
        self.output_waiting: Sized = ()  # the driver's unsent frames (a spout stops at any)
        self.acking = int(self.config[ACKERS]) > 0
        self.counts = TaskCounts(monotonic, wall, bool(self.config.get(METRICS_ENABLED, True)))
        self.acks = AckOut(plan, task, send, self.counts)
        self.streams = build_streams(plan, specs, spec, self.context, send, self._unencodable)
        self.watch = StreamWatch(spec, task, self.streams, self.config, run_dir, monotonic,
                                 wall, self._on_error)
        self.spout, self.bolt = self._sides(specs)
        self.tracer = Tracer(spec.id, task, self.streams, send, self.acking,
                             float(self.config.get(TRACE) or 0.0),
                             float(self.config[MESSAGE_TIMEOUT]), wall,
                             spout=self.spout is not None)
        if self.spout is not None:
            self.spout.expired_hook = self.tracer.on_expired
        for out in self.streams.values():  # when each stream's batches were last emptied
            out.clock = monotonic  # (flush_due)
        self._timers()

    def _sides(self, specs) -> tuple[SpoutSide | None, BoltSide | None]:
        size = int(self.config[BATCH_SIZE])
        if self.kind == "bolt":
            return None, BoltSide(self.user, self.plan, specs, self.spec, self.counts,
                                  self.acks, self.acking, size)
        tracker = self._tracker() if self.acking else None
        roots = RootIds(self.task, self.plan.root_bits())  # self-initialising
        runs = Runs.on_default_stream(self.streams, roots, tracker, self.monotonic, size)
        return SpoutSide(self.user, self.spec, self.counts, self.streams, tracker, roots,
                         self.acks, runs, self.monotonic, size), None

    def _tracker(self) -> SpoutTracker:
        tracker = SpoutTracker(float(self.config[MESSAGE_TIMEOUT]),
                               self.config.get(MAX_SPOUT_PENDING),
                               float(self.config[TUNE_INTERVAL]), self.monotonic(),
                               self.config.get(TARGET_LATENCY))
        tracker.set_floor(floor_for(t.component for t in self.plan.tasks))
        return tracker

    def _timers(self) -> None:
        self._tick_every = self.config.get(TICK_FREQ_SECS)
        self._next_tick: float | None = None
        self._flush_every = float(self.config[FLUSH_INTERVAL])
        self._next_flush = 0.0

    @property
    def tracker(self) -> SpoutTracker | None:
        """A tracking spout's in-flight roots (None for a bolt, or with acking off)."""
        return self.spout.tracker if self.spout is not None else None

    # -- errors -------------------------------------------------------------------------
    def on_error(self, where: str, err: BaseException) -> None:
        """Recoverable error in this instance; the driver replaces this to report it."""
        log.error("%s: %s", where, err)

    def _on_error(self, where: str, err: BaseException) -> None:
        self.on_error(where, err)  # the driver's, set after the rooms were built

    def _unencodable(self, stream: str, values, ids: dict | None) -> None:
        """A tuple msgpack cannot carry was dropped: fail its trees now (the copy is
        lost), count it, and report it by field."""
        if ids is not None:
            self.acks.fail(ids)
        fields = self.spec.streams[stream]
        self.counts.dropped += 1
        bad = [f"{f} ({type(v).__name__})" for f, v in zip(fields, values)
               if not wire.encodable(v)]
        err = TypeError(f"component {self.spec.id!r} stream {stream!r}: cannot send field(s) "
                        f"{', '.join(bad)}: values must be msgpack types (None, bool, int, "
                        "float, str, bytes, list, dict); the tuple was dropped")
        self.on_error(f"{self.spec.class_name}.emit", err)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Bind the collector, start the recordings asked for when the component was
        declared, and call ``open``/``prepare``."""
        Collector(self.spec.id, self.streams, int(self.config[BATCH_SIZE]), self.acking,
                  self.spout, self.bolt).bind(self.user)
        self.tracer.user = self.user
        if self.spout is not None:
            self.tracer.arm(0)  # a spout's first traced tuple may be its first
        for stream in self.config.get(RECORD) or ():
            self.watch.set_recording(stream, True)
        now = self.monotonic()
        self._next_flush = now + self._flush_every
        if self._tick_every:
            self._next_tick = now + float(self._tick_every)
        where = "open" if self.kind == "spout" else "prepare"
        call_user(f"{self.spec.class_name}.{where}", getattr(self.user, where),
                  dict(self.config), self.context)

    def stop(self) -> None:
        """Flush what is buffered and call ``close``/``cleanup`` (best effort)."""
        self.flush()
        where = "close" if self.kind == "spout" else "cleanup"
        try:
            getattr(self.user, where)()
        except Exception as exc:  # the instance is going away; report and carry on
            self.on_error(f"{self.spec.class_name}.{where}", exc)
        self.watch.close_recordings()

    # -- driving ------------------------------------------------------------------------
    def step(self, calls: int) -> int:
        """A spout's turn (:meth:`SpoutSide.step`); 0 for a bolt."""
        if self.spout is None:
            return 0
        if self.tracer.rate:  # a float's truth: the one cost of tracing when it is off
            return self._sampled_step(calls)
        return self.spout.step(calls, self.output_waiting)

    def spout_held(self) -> bool:
        """A spout's turn may not call ``next_tuple`` now (:meth:`SpoutSide.held`); False
        for a bolt."""
        return self.spout is not None and self.spout.held(self.output_waiting)

    def _sampled_step(self, calls: int) -> int:
        """A spout's turn cut where the next run of traced tuples is due (``tracer.skip``
        tuples on), so that it is armed in time: two pieces per run, not a wrapper
        around every emit. Once armed, the piece runs over the run and the gap after it
        (drawn when it is armed): the armed emit traces the run's tuples and disarms
        itself; a run the piece cuts short is caught at its end (``tracer.arm``)."""
        tracer, total, idle = self.tracer, 0, 0
        while calls > 0:
            n = min(calls, tracer.piece())
            try:
                got = self.spout.step(n, self.output_waiting)
            except BaseException:
                tracer.cut()  # a run's window is never left open
                raise
            tracer.arm(got)
            total, calls = total + got, calls - n
            idle = 0 if got else idle + n
            if idle >= STEP_CHUNK or (not got and self.output_waiting):
                break  # held, or idle: the rest of the turn would be too
        return total

    def queued_or_sent(self) -> int:
        """Tuples emitted so far, sent or waiting in a batch."""
        return sum(o.emitted + o.queued() for o in self.streams.values())

    def activate(self, active: bool) -> None:
        """The topology was activated or deactivated: a spout's hook is called, as
        Storm's are on each change (bolts have none)."""
        if self.spout is not None:
            self.spout.activate(active)

    def retarget(self, plan: PhysicalPlan) -> None:
        """A rebalance switched the topology to ``plan`` (docs/internals/rebalance.md):
        send what is batched on the old routing, then wire every stream to the new plan's
        tasks and bind the collector again (its closures hold the old outlets). This
        task's id, index and container are the same in both plans."""
        self.flush()
        fresh = plan.epoch == self.plan.epoch  # this instance opened on the new plan
        self.plan = plan
        context = task_context(plan, self.spec, self.task, self.context.run_dir,
                               self.user_metrics)
        for f in dataclasses.fields(context):  # the object the user was given, updated
            object.__setattr__(self.context, f.name, getattr(context, f.name))
        subscribe_all(self.streams, plan, self.specs, self.spec, self.context)
        if self.bolt is not None:
            self.bolt.plan = plan  # where an input task's component is looked up
        elif self.spout.runs is not None:
            self.spout.runs = Runs.on_default_stream(
                self.streams, self.spout.roots, self.spout.tracker, self.monotonic,
                int(self.config[BATCH_SIZE]))
        Collector(self.spec.id, self.streams, int(self.config[BATCH_SIZE]), self.acking,
                  self.spout, self.bolt).bind(self.user)
        if self.spout is not None:
            self._spout_rebalanced(self.context, fresh)

    def retire(self) -> None:
        """A rebalance removed this task: send what is batched on the old routing, and
        let a spout give back what it holds (committed offsets, partitions) before its
        successors take over; the instance is stopped next."""
        self.flush()
        if self.spout is not None:
            self._spout_rebalanced(None, False)

    def _spout_rebalanced(self, context, fresh: bool) -> None:
        hook = getattr(self.user, "rebalanced", None)  # a spout that is no Spout may lack it
        if hook is not None:
            call_user(f"{self.spec.class_name}.rebalanced", hook, context, fresh)

    def set_max_spout_pending(self, value) -> None:
        """Change the limit of a running spout: an int, None, or "auto"."""
        if self.spout is not None:
            self.spout.set_max_spout_pending(value)

    def set_trace(self, rate: float) -> None:
        """Change the fraction of this spout's tuples that are traced (0.0: off)."""
        self.tracer.set_rate(rate)

    def on_frame(self, header: bytes, body: bytes) -> None:
        """One frame from the stream manager. WireError for a malformed frame."""
        h = wire.parse_header(header)
        if h.dest != self.task:
            raise wire.WireError(f"frame for task {h.dest} reached task {self.task}")
        if h.kind == wire.COMPLETED:
            batch = wire.decode_batch(body)
            if self.tracer.roots:  # traced trees wait on some of these
                self.tracer.on_completed(batch)
            return self._spout("completions").on_completed(batch, self.task)
        if h.kind == wire.ACKED:
            batch = wire.decode_batch(body)
            if self.tracer.roots:
                self.tracer.on_acked(batch)
            return self._spout("ack outcomes").on_acked(batch, self.task)
        if h.kind == wire.TRACED and self.bolt is not None:
            return self.tracer.on_traced(self.bolt, h, body, self.output_waiting,
                                         ack_now=not self.drains)
        if h.kind not in _TUPLE_KINDS or self.bolt is None:
            raise wire.WireError(f"frame kind {h.kind} is not for a {self.kind}")
        return self.bolt.on_frame(h, body, self.output_waiting, ack_now=not self.drains)

    def _spout(self, what: str) -> SpoutSide:
        if self.spout is None or self.spout.tracker is None:
            raise wire.WireError(f"{what} for task {self.task}, which tracks nothing")
        return self.spout

    @property
    def leftover(self) -> tuple:
        """A bolt's input set aside while output waited (empty: none)."""
        return self.bolt.leftover if self.bolt is not None else ()

    def run_leftover(self) -> None:
        """Process the input set aside while output waited (the driver calls this once
        nothing waits any more, before it reads another frame)."""
        if self.bolt is not None:
            self.bolt.run_leftover(self.output_waiting)

    def on_timer(self, now: float) -> float:
        """Flush due batches and send due ticks; return when it next wants to be called.
        A bolt with nothing waiting to be sent wants no flush: its next input wakes its
        loop anyway (and is flushed once read), so it asks again only after
        ``IDLE_FLUSHES`` flush intervals, for an emit made outside ``process`` (a user's
        thread). docs/internals/performance-log.md, "Issue 17, fourth pass"."""
        if self.spout is not None:
            self.spout.on_timer(now)
        if now >= self._next_flush:
            self._next_flush = self.flush_due(now)
        if self._next_tick is not None and now >= self._next_tick:
            if self.bolt is not None:
                self.bolt.tick(self._tick_every)
            self._next_tick = now + float(self._tick_every)
        due = self._next_flush
        if self.bolt is not None and not self.holding():  # (after the tick: what it emitted
            due = now + self._flush_every * IDLE_FLUSHES  # waits for the flush as before)
        return due if self._next_tick is None else min(due, self._next_tick)

    def flush(self) -> None:
        """Send every pending batch (a custom grouping that raises is user code failing)."""
        try:
            for out in self.streams.values():
                out.flush()
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name} grouping", exc) from exc
        self._flushed()

    def flush_due(self, now: float) -> float:
        """The flush timer's turn: send the batches of each stream whose tuples may have
        waited a flush interval, and return when the next one may have. A stream whose
        batches were all emptied since ``now`` less the interval (a full batch went, and
        what waits was emitted after it) is left to fill: its tuples wait no longer than
        the interval, as before, but at full rate its frames go full instead of every
        timer's turn cutting one short (at 1.47 M tuples/s and a batch of 2,000 the timer
        cut every other frame: 1,464 tuples a frame on average; docs/internals/
        performance-log.md, "Word count on a faster machine"). Acks, traced riders and the
        tracker's snapshot go at every turn, as :meth:`flush` sends them."""
        every, soonest = self._flush_every, now + self._flush_every
        try:
            for out in self.streams.values():
                due = out.emptied_at + every
                if due > now:
                    soonest = min(soonest, due)
                else:
                    out.flush()
                    out.emptied_at = now  # (the timer's turn, not its clock read after)
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name} grouping", exc) from exc
        self._flushed()
        return soonest

    def _flushed(self) -> None:
        """What every flush sends besides the streams' batches."""
        riders = self.tracer.riders
        if riders.riding:  # traced entries that found no frame to ride go now
            riders.flush()
        if self.tracker is not None:
            self.tracker.snapshot()
        self.acks.flush()

    def holding(self) -> bool:
        """Whether anything waits to be sent at the next flush: tuples in a batch, ack
        messages, traced frames waiting for a ride."""
        return (self.acks.waiting() or bool(self.tracer.riders.riding)
                or any(out.queued() for out in self.streams.values()))

    def drained(self) -> None:
        """The driver's drain of its input ended: a bolt's acks of the frames it handled
        go now, one ACKS frame per acker task (and one COMPLETED per spout task) for the
        whole drain, not one a frame (``drains``; docs/internals/performance-log.md, "Issue
        17, seventh pass"). A spout's acker messages wait for its flush, as before."""
        if self.bolt is not None:
            self.acks.flush()

    # -- taps and recordings ------------------------------------------------------------
    def tap(self, stream: str, n: int, seconds: float) -> None:
        self.watch.tap(stream, n, seconds)

    def tap_samples(self) -> dict[str, list[dict]]:
        return self.watch.tap_samples()

    def set_recording(self, stream: str, on: bool) -> bool:
        return self.watch.set_recording(stream, on)

    def close_recordings(self) -> None:
        self.watch.close_recordings()

    # -- statistics ---------------------------------------------------------------------
    def report(self) -> dict:
        """The executor's counters, as the plain dict an instance reports."""
        tracker, counts = self.tracker, self.counts
        return {"component": self.spec.id, "task": self.task, "kind": self.kind,
                "container": self.info.container, **streams_report(self.streams),
                **counts.report(), **watched_report(self.streams),
                **counts.latency_report(tracker.latency if tracker is not None else None),
                **(tracker.report() if tracker is not None else {}),
                **(tracker.roots_report(self.monotonic()) if tracker is not None else {}),
                **user_report(self.user_metrics), **window_report(self.user)}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.report(), "state": "running"})

    # the counters the drivers and tests read (and the drivers add to: errors, dropped,
    # busy_seconds); TaskCounts owns them
    executed = property(lambda self: self.counts.executed)
    acked = property(lambda self: self.counts.acked)
    failed = property(lambda self: self.counts.failed)
    errors = property(lambda self: self.counts.errors,
                      lambda self, n: setattr(self.counts, "errors", n))
    dropped = property(lambda self: self.counts.dropped,
                       lambda self, n: setattr(self.counts, "dropped", n))
    busy_seconds = property(lambda self: self.counts.busy_seconds,
                            lambda self, s: setattr(self.counts, "busy_seconds", s))
