"""One task's executor: runs the user's spout or bolt, batches what it emits, and turns
incoming frames into ``process`` calls. It owns no socket and no clock: whoever drives it
(the instance process, or the in-memory twin in :mod:`runtime.testing`) passes ``send``,
the clocks, and calls :meth:`Executor.step`, :meth:`Executor.on_frame` and
:meth:`Executor.on_timer`.

The hot path is ``emit -> list.append``; a batch is encoded and sent when it holds
``batch_size`` tuples, or when ``flush_interval`` has passed (Storm 2.0's batching with
flush tuples, driven here by the executor's own timer).

With acking on (``ackers`` > 0), a spout tuple emitted with a ``msg_id`` gets a random
root id, and each copy sent to a task a random edge id; the spout tells the acker the
XOR of those edges. A bolt's emit anchored to tracked inputs gives each copy an edge id
per anchor and XORs it into the anchor's ``ack_val``; acking the input sends, per root,
its own edge id XOR that ``ack_val``. See ``docs/internals/acker.md``.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from itertools import count, islice, repeat
from operator import lt
from sys import getrefcount
from typing import Any

from runtime import wire
from runtime.acking._ledger import SELF_INIT, RootIds, new_id, root_task, task_bits
from runtime.acking._tracking import SpoutTracker
from runtime.groupings import DirectGrouping
from runtime.model.api import (
    BasicBolt,
    Context,
    FailedException,
    OneFieldTuple,
    Spout,
    Tuple,
    TupleSource,
)
from runtime.model.constants import (
    ACKER,
    ACKERS,
    BATCH_SIZE,
    DEFAULT_STREAM,
    FLUSH_INTERVAL,
    MAX_SPOUT_PENDING,
    MESSAGE_TIMEOUT,
    METRICS_ENABLED,
    RECORD,
    RECORD_DIR,
    RECORD_ROWS,
    RECORD_SECONDS,
    SYSTEM,
    TICK,
    TICK_FREQ_SECS,
    TUNE_INTERVAL,
)
from runtime.model.plan import PhysicalPlan
from runtime.model.topology import ComponentSpec
from runtime.observe.metrics import LatencyHistogram
from runtime.observe.stats import InstanceStats

from .outbound import Outlet, StreamOut, Tap

log = logging.getLogger("tupleflow.executor")

STEP_CHUNK = 8  # next_tuple calls between two looks at whether output waits unsent
# (_untracked_steps writes out that many calls: change both together)

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
        self.busy_seconds = 0.0  # in process() (bolts) or next_tuple (spouts, timed by the driver)
        self.first_executed: float | None = None
        self.last_executed: float | None = None
        # latency histograms, one record per batch (docs/internals/metrics.md); None: off
        self.metrics_on = bool(self.config.get(METRICS_ENABLED, True))
        self.execute_latency = LatencyHistogram() if self.metrics_on else None
        self.process_latency = LatencyHistogram() if self.metrics_on else None
        self._arrived = 0.0  # when the frame being executed was taken off the socket
        self.output_waiting: Sized = ()  # the driver's unsent frames (a spout stops at any)
        # input set aside while output waited: (entries, source, ids) (_execute_frame)
        self.leftover: tuple = ()
        self.streams = self._build_streams(send)
        self.acking = int(self.config[ACKERS]) > 0
        self._acker_tasks = plan.component_tasks().get(ACKER, ())
        # per acker task, the ACKS body being filled: flat op, root, value triples
        self._ack_out: dict[int, list] = {t: [] for t in self._acker_tasks}
        self._ack_headers = {t: wire.data_header(wire.ACKS, 0, t, task)
                             for t in self._acker_tasks}
        self._ack_batches = list(self._ack_out.values())  # by root % n
        # roots of one-tuple trees acked here, for the spout tasks written in them
        self._leaves: list[int] = []
        self._leaf_headers: dict[int, bytes] = {}
        self._send = send
        self.tracker = self._tracker() if self.kind == "spout" and self.acking else None
        self._task_bits = task_bits(len(plan.tasks))  # the task field of every root
        self._roots = RootIds(task, self._task_bits)  # this task's self-initialising roots
        # with the spout's fast path: read the clock for the emit time of the tracked
        # tuples emitted from now on (each chunk of next_tuple calls, and every other
        # call into the spout, starts with it; see _default_stream_first)
        self._restamp: Callable[[], None] | None = None
        self._current: list[Tuple | None] = [None]  # a BasicBolt's input being processed
        self._tick_every = self.config.get(TICK_FREQ_SECS)
        self._next_tick = None
        self._flush_every = float(self.config[FLUSH_INTERVAL])
        self._next_flush = 0.0

    def _tracker(self) -> SpoutTracker:
        return SpoutTracker(float(self.config[MESSAGE_TIMEOUT]),
                            self.config.get(MAX_SPOUT_PENDING),
                            float(self.config[TUNE_INTERVAL]), self.monotonic())

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
                out.direct_tracked[t] = (wire.data_header(wire.TRACKED, stream_id, t, self.task),
                                         [])
            return
        prepare = getattr(grouping, "prepare", None)
        if prepare is not None:
            prepare(self.context, sub.stream, tasks)
        else:
            grouping.target_tasks = list(tasks)
        out.outlets.append(Outlet(grouping, tasks, stream_id, self.task, out.bare))

    def _report_unencodable(self, stream: str, values, ids: dict | None) -> None:
        for root in roots_of(ids) if ids is not None else ():
            self._ack(wire.ACK_FAIL, root, 0)  # the copy is lost: fail its trees now
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
            user.ack = self._make_bolt_ack()
            user.fail = self._bolt_fail
            user.reset_timeout = self._bolt_reset_timeout

    def _make_emit(self):
        """``emit``: check the stream and arity, append; a full batch is flushed.

        Tracked tuples (a spout's with a ``msg_id``, a bolt's anchored to tracked inputs,
        both only with acking on) take :meth:`_emit_root` / :meth:`_emit_anchored`.
        Spouts and bolts get functions of their own: this is the per-tuple path.
        """
        streams = {name: (out.arity, out.items, out) for name, out in self.streams.items()}
        comp, size, acking = self.spec.id, self._batch_size, self.acking

        def checked(values, stream):
            """The stream's arity, batch and outlet, once the stream and the arity are
            right."""
            try:
                n, items, out = streams[stream]
                ok = len(values) == n
            except KeyError:
                raise _unknown_stream(comp, stream, streams) from None
            except TypeError:
                ok = False
            if not ok:
                raise _wrong_arity(comp, stream, values, streams[stream][0])
            return n, items, out

        if self.kind == "spout":
            return self._spout_emit(streams, checked, comp, size, acking)
        return self._bolt_emit(streams, checked, comp, size, acking)

    def _spout_emit(self, streams, checked, comp, size, acking):
        acks = self._acks

        def emit(values, stream=DEFAULT_STREAM, msg_id=None):
            try:  # the common case inline; anything unusual goes through checked()
                n, items, out = streams[stream]
                ok = len(values) == n
            except (KeyError, TypeError):
                ok = False
            if not ok:
                n, items, out = checked(values, stream)
            if msg_id is not None:
                if acking:
                    return self._emit_root(out, values, msg_id)
                acks.append(msg_id)
            try:
                items.append(values[0] if n == 1 else values)
            except (TypeError, LookupError):
                raise _not_a_list(comp, stream, values) from None
            if len(items) >= size:
                out.flush()

        if DEFAULT_STREAM not in streams:
            return emit
        n, items, out = streams[DEFAULT_STREAM]
        runs = acking and len(out.outlets) == 1 and out.outlets[0].pick is not None
        return _default_stream_first(emit, n, items, out, size, self if runs else None)

    def _bolt_emit(self, streams, checked, comp, size, acking):
        current, basic = self._current, isinstance(self.user, BasicBolt)
        anchored = self._emit_anchored

        def emit(values, stream=DEFAULT_STREAM, anchors=None):
            try:
                n, items, out = streams[stream]
                ok = len(values) == n
            except (KeyError, TypeError):
                ok = False
            if not ok:
                n, items, out = checked(values, stream)
            if acking and (anchors is not None or basic) and anchored(
                    out, values, current if anchors is None else anchors):
                return
            try:
                items.append(values[0] if n == 1 else values)
            except (TypeError, LookupError):
                raise _not_a_list(comp, stream, values) from None
            if len(items) >= size:
                out.flush()

        return emit

    def _emit_root(self, out: StreamOut, values, msg_id, direct: int | None = None) -> None:
        """A new spout tuple tree. Sent to one task (the usual case), it gets a
        self-initialising root, which is also its edge id: the acker needs no init. Sent
        to several tasks (or none), it gets a plain root, an edge id per copy, and an
        init with their XOR, as in Storm (docs/internals/acker.md)."""
        if any(out.runs):  # what waits goes first, in emit order: the tracked batches,
            out.flush_tracked()  # then the runs (newer than they are)
        copies, entry = self._copies(out, values, direct), self._entry(out, values)
        if len(copies) == 1:
            root = self._roots.new()
            batch = copies[0]
            batch.append(entry)
            batch.append(root)  # an int stands for {root: root}
            if len(batch) >= 2 * self._batch_size:
                out.flush_tracked()
        else:
            root, xor, size = new_id(), 0, 2 * self._batch_size
            for batch in copies:
                edge = new_id()
                xor ^= edge
                batch.append(entry)
                batch.append({root: edge})
                if len(batch) >= size:
                    out.flush_tracked()
            self._ack(wire.ACK_INIT, root, xor)
        out.emitted += 1
        if out.recorder is not None:
            out.recorder.tracked(values, root)
        self.tracker.emitted(root, msg_id, self.monotonic())

    def _emit_anchored(self, out: StreamOut, values, anchors, direct: int | None = None) -> bool:
        """A tuple joining its anchors' trees; False when no anchor is tracked."""
        if isinstance(anchors, Tuple):
            anchors = [anchors]
        tracked = [a for a in anchors if a is not None and a.ids]
        if not tracked:
            return False
        size, entry = 2 * self._batch_size, self._entry(out, values)
        for batch in self._copies(out, values, direct):
            ids: dict[int, int] = {}
            for anchor in tracked:
                edge = new_id()
                anchor.ack_val ^= edge
                for root in roots_of(anchor.ids):
                    ids[root] = ids.get(root, 0) ^ edge
            batch.append(entry)
            batch.append(ids)
            if len(batch) >= size:
                out.flush_tracked()
        out.emitted += 1
        if out.recorder is not None:  # a tuple of several trees is recorded with its first
            out.recorder.tracked(values, next(iter(roots_of(tracked[0].ids))))
        return True

    def _entry(self, out: StreamOut, values):
        """What ``out``'s batches hold for ``values``: the list, or on a one-field stream
        the bare value (runtime/wire.py, "One-field streams")."""
        if not out.bare:
            return values
        try:
            return values[0]
        except (TypeError, LookupError):
            raise _not_a_list(self.spec.id, out.name, values) from None

    @staticmethod
    def _copies(out: StreamOut, values, direct: int | None) -> list[list]:
        """The tracked batches one tuple goes into: one per target task, chosen now."""
        if direct is not None:
            return [out.direct_tracked[direct][1]]
        return out.tracked_batches(values)

    def _ack(self, op: int, root: int, value: int) -> None:
        """Queue one message for the acker task that keeps ``root``: the root id mod the
        number of ackers picks it, as Storm's mod hashing does."""
        self._ack_batches[root % len(self._ack_batches)].extend((op, root, value))

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
        spout = self.kind == "spout"
        if self.acking and spout and msg_id is not None:
            return self._emit_root(out, values, msg_id, direct=task)
        if self.acking and not spout and (anchors is not None or self._current[0] is not None):
            anchors = self._current if anchors is None else anchors
            if self._emit_anchored(out, values, anchors, direct=task):
                return None
        target[1].append(self._entry(out, values))
        if len(target[1]) >= self._batch_size:
            out.flush()
        if msg_id is not None and spout:
            self._acks.append(msg_id)
        return None

    def _make_bolt_ack(self):
        """The bolt's ``ack``: :meth:`_bolt_ack`, with the commonest case written out
        (a spout tuple's only copy that anchored nothing: its root goes on the leaves)."""
        leaves, slow = self._leaves, self._bolt_ack

        def ack(tup: Tuple) -> None:
            ids = tup.ids
            if type(ids) is int and not tup.ack_val:
                self.acked += 1
                tup.ids = None  # a second ack of the same tuple changes nothing
                leaves.append(ids)
                return
            slow(tup)

        return ack

    def _bolt_ack(self, tup: Tuple) -> None:
        self.acked += 1
        ids = tup.ids
        if ids is None or not self.acking:
            return
        tup.ids = None  # a second ack of the same tuple changes nothing
        if type(ids) is int:  # a spout tuple's only copy: its root is its edge id
            if tup.ack_val:
                self._ack(wire.ACK_ACK, ids, ids ^ tup.ack_val)
            else:  # ...and it anchored nothing: the whole tree, complete
                self._leaves.append(ids)
            return
        ack_val = tup.ack_val
        for root, edge in ids.items():
            self._ack(wire.ACK_ACK, root, edge ^ ack_val)

    def _bolt_fail(self, tup: Tuple) -> None:
        self.failed += 1
        ids, tup.ids = tup.ids, None
        if ids and self.acking:
            for root in roots_of(ids):
                self._ack(wire.ACK_FAIL, root, 0)

    def _bolt_reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tree this tuple belongs to. The acker holds the
        root from now on, so a one-tuple tree's ack must go to it too, not straight to
        the spout: the int ids become their ``{root: root}`` map."""
        if tup.ids and self.acking:
            if type(tup.ids) is int:
                tup.ids = {tup.ids: tup.ids}
            for root in roots_of(tup.ids):
                self._ack(wire.ACK_RESET, root, 0)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Bind the collector, start the recordings asked for when the component was
        declared, and call ``open``/``prepare``."""
        self._bind()
        for stream in self.config.get(RECORD) or ():
            self.set_recording(stream, True)
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
        self.close_recordings()

    def _call(self, where: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.{where}", exc) from exc

    # -- spouts -------------------------------------------------------------------------
    def step(self, calls: int) -> int:
        """Call ``next_tuple`` up to ``calls`` times, and not while ``max_spout_pending``
        roots are in flight, nor once output waits in ``output_waiting`` (looked at every
        ``STEP_CHUNK`` calls: a held spout queues at most that many calls' output);
        return how many tuples were emitted."""
        before = self.queued_or_sent()
        next_tuple = self.user.next_tuple
        tracker, waiting, mark = self.tracker, self.output_waiting, self._restamp
        try:
            if tracker is None or tracker.limit is None:
                if mark is None:
                    _untracked_steps(next_tuple, calls, waiting)
                else:
                    _marked_steps(next_tuple, calls, waiting, mark)
            else:
                for i in range(calls):
                    if tracker.full() or waiting:
                        break
                    if mark is not None and not i % STEP_CHUNK:
                        mark()
                    next_tuple()
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.next_tuple", exc) from exc
        if self._acks:
            self._ack_at_emit()
        return self.queued_or_sent() - before

    def restamp(self) -> None:
        """Read the clock for the emit time of the tracked tuples emitted from now on
        (call before handing control to the spout outside :meth:`step`)."""
        if self._restamp is not None:
            self._restamp()

    def set_max_spout_pending(self, value) -> None:
        """Change the limit of a running spout: an int, None, or "auto"."""
        if self.tracker is not None:
            self.tracker.set_limit(value, self.monotonic())

    def _on_acked(self, batch: list) -> None:
        """The acker's outcomes (``root, outcome`` pairs, flat) for roots this spout task
        emitted: the spout's ``ack``/``fail`` are called with their msg_ids (not at all
        when the spout keeps Spout's own, which do nothing)."""
        if self.tracker is None:
            raise wire.WireError(f"ack outcomes for task {self.task}, which tracks nothing")
        if (len(batch) % 2 or not set(batch[1::2]) <= _OUTCOMES
                or not set(map(type, batch[0::2])) <= _INT):
            raise wire.WireError("an ACKED batch must hold root, outcome pairs")
        acked, failed = self.tracker.settle(batch, self.monotonic())
        self.acked += len(acked)
        self.failed += len(failed)
        user = self.user
        self._call_each("ack", user.ack, acked)
        self._call_each("fail", user.fail, failed)

    def _on_completed(self, body: list) -> None:
        """Roots of one-tuple trees that a bolt acked, ``[first, count, [root, ...]]``:
        ``count`` consecutive roots from ``first``, then others. ``ack`` their msg_ids."""
        if self.tracker is None:
            raise wire.WireError(f"completions for task {self.task}, which tracks nothing")
        if (len(body) != 3 or type(body[0]) is not int or type(body[1]) is not int
                or body[1] < 0 or type(body[2]) is not list
                or not set(map(type, body[2])) <= _INT):
            raise wire.WireError("a COMPLETED body must be [first root, count, [roots]]")
        first, count, others = body
        now = self.monotonic()
        acked = self.tracker.complete_range(first, count, now) if count else []
        if others:
            acked += self.tracker.complete(others, now)
        self.acked += len(acked)
        self._call_each("ack", self.user.ack, acked)

    def _call_each(self, where: str, fn, msg_ids: list) -> None:
        """``fn(msg_id)`` for each, unless ``fn`` is Spout's own no-op."""
        if msg_ids and getattr(fn, "__func__", None) is not _NO_OP[where]:
            self.restamp()  # what ack and fail emit was emitted now
            try:
                for msg_id in msg_ids:
                    fn(msg_id)
            except Exception as exc:
                raise UserCodeError(f"{self.spec.class_name}.{where}", exc) from exc

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
        """One frame from the stream manager. WireError for a malformed frame."""
        h = wire.parse_header(header)
        if h.dest != self.task:
            raise wire.WireError(f"frame for task {h.dest} reached task {self.task}")
        if h.kind == wire.COMPLETED:
            return self._on_completed(wire.decode_batch(body))
        if h.kind == wire.ACKED:
            return self._on_acked(wire.decode_batch(body))
        if h.kind not in _TUPLE_KINDS or self.kind != "bolt":
            raise wire.WireError(f"frame kind {h.kind} is not for a {self.kind}")
        if self.metrics_on:
            self._arrived = self.monotonic()
        batch = wire.decode_batch(body)
        source = self._source(h.src, h.stream)
        if h.kind == wire.DATA:
            entries, ids = batch, None
        else:
            entries, ids = (_run_parts if h.kind == wire.RUN else _tracked_parts)(batch)
        try:
            return self._execute_frame(entries, source, ids)
        finally:  # the acks of a tracked frame go at once: they are few frames, and waiting
            if ids is not None:  # for the flush timer would add to complete latency
                self.send_acks()

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

    def _execute_frame(self, entries: list, source: TupleSource,
                       ids: Iterable | None = None) -> None:
        """``process`` each entry of a frame's batch as a Tuple from ``source`` (``ids``:
        the entries' tracking ids in order, None for untracked ones). A BasicBolt's input
        is acked when ``process`` returns, failed when it raises FailedException, and
        its emits anchor to it.

        Once output waits unsent, the rest is set aside in ``leftover`` (a bolt emitting
        10,000 tuples per input must not turn a whole frame of inputs into output at
        once); :meth:`run_leftover` takes it up again.

        Each Tuple is made as its entry comes, and one that ``process`` did not keep is
        made again for the next entry: when nothing but this loop holds it (its
        reference count is what it was when it was made), nobody can see it change, so
        its fields are set anew instead of a new Tuple being allocated, as CPython's
        ``zip`` and ``enumerate`` reuse their result tuples. A bolt that keeps its input
        (to ack later, or in a window) gets a new Tuple each time. In-process, with the
        word count's bolt: ~150-200 ns a tuple less (docs/internals/performance.md,
        "Tuples made once")."""
        user, waiting, current = self.user, self.output_waiting, self._current
        process, basic = user.process, isinstance(user, BasicBolt)
        bare = len(source.fields) == 1  # its entries are bare values (wire.py)
        make = OneFieldTuple if bare else Tuple
        tids = repeat(None) if ids is None else iter(ids)
        tup, alone, done = None, 0, 0
        started = self._started_batch()
        try:
            for entry, tid in zip(entries, tids):
                if tup is not None and getrefcount(tup) == alone:  # nobody kept it
                    tup.values = [entry] if bare else entry
                    tup.ids, tup.ack_val = tid, 0
                else:
                    tup = make(entry, source, tid)
                    alone = getrefcount(tup)
                if basic:
                    current[0] = tup
                    try:
                        process(tup)
                    except FailedException:
                        self._bolt_fail(tup)
                    else:
                        self._bolt_ack(tup)
                    current[0] = None
                else:
                    process(tup)
                done += 1
                if waiting:
                    break
        except Exception as exc:
            raise UserCodeError(f"{self.spec.class_name}.process", exc) from exc
        finally:
            current[0] = None
            self._ended_batch(started, done)
        rest = len(entries) - done
        if rest:  # zip took no more ids than it gave out: the rest are the next ones
            self.leftover = (entries[done:], source,
                             None if ids is None else list(islice(tids, rest)))

    def run_leftover(self) -> None:
        """Process the input set aside while output waited (the driver calls this once
        nothing waits any more, before it reads another frame)."""
        leftover, self.leftover = self.leftover, ()
        if leftover:
            self._execute_frame(*leftover)

    def _started_batch(self) -> float:
        """When a batch starts (one clock read per batch, never per tuple)."""
        if self.first_executed is None:
            self.first_executed = self.wall()
        return self.monotonic()

    def _ended_batch(self, started: float, done: int) -> None:
        ended = self.monotonic()
        self.busy_seconds += ended - started
        self.executed += done
        self.last_executed = self.wall()
        if done and self.execute_latency is not None:
            self._batch_latencies(started, ended, done)

    def _batch_latencies(self, started: float, ended: float, done: int) -> None:
        """Per batch, not per tuple: each of its ``done`` tuples is counted with the
        batch's mean execute time, and with the mean time from the frame's arrival to
        the end of its ``process`` call (tuples run one after another, so the i-th of n
        ends at about ``started + took * i / n``)."""
        took = ended - started
        self.execute_latency.record(took / done, done)
        waited = started - self._arrived if self._arrived else 0.0
        self.process_latency.record(waited + took * (done + 1) / (2 * done), done)

    # -- timers -------------------------------------------------------------------------
    def on_timer(self, now: float) -> float:
        """Flush due batches and send due ticks; return when it next wants to be called."""
        if self.tracker is not None:
            self._spout_timers(now)
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

    def _spout_timers(self, now: float) -> None:
        """Fail the roots that timed out here, give the tuner its turn, and take the
        pending count the reports read (every turn of the instance's loop comes here)."""
        tracker, user = self.tracker, self.user
        expired = tracker.expire(now)
        self.failed += len(expired)
        self._call_each("fail", user.fail, expired)
        if tracker.tuner is not None:
            progress = self._call("progress", user.progress)
            tracker.tune(tracker.acked if progress is None else progress, now)
        tracker.snapshot()

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
        if self.tracker is not None:
            self.tracker.snapshot()
        self.send_acks()

    def send_acks(self) -> None:
        """Send the completed leaves to their spout tasks, and what was queued for each
        acker task."""
        if self._leaves:
            self._send_leaves()
        for task, messages in self._ack_out.items():
            if messages:
                self._send(self._ack_headers[task], wire.encode_batch(messages))
                messages.clear()

    def _send_leaves(self) -> None:
        """A one-tuple tree (a spout tuple's only copy, acked by a bolt that anchored
        nothing to it) is complete when that tuple is acked: nobody else holds anything
        of it, so its completion goes straight to the spout task written in its root, in
        a ``COMPLETED`` frame, and no acker is asked (docs/internals/acker.md, "Leaves")."""
        leaves, bits = self._leaves, self._task_bits
        first, last, n = leaves[0], leaves[-1], len(leaves)
        task = root_task(first, bits)
        if (task is not None and last - first == n - 1 and root_task(last, bits) == task
                and all(map(lt, leaves, islice(leaves, 1, None)))):
            # the usual frame: a spout's run, acked in order; sent as first and count
            self._send(self._leaf_header(task), wire.encode_batch([first, n, []]))
            leaves.clear()
            return
        task = root_task(min(leaves), bits)
        if task is not None and root_task(max(leaves), bits) == task:
            groups = {task: leaves}  # one spout task's roots (and every root between)
        else:
            groups = {}
            for root in leaves:
                task = root_task(root, bits)
                if task is None:  # an int id that is no self-initialising root: the
                    self._ack(wire.ACK_ACK, root, root)  # acker decides
                else:
                    groups.setdefault(task, []).append(root)
        for task, roots in groups.items():
            self._send(self._leaf_header(task), wire.encode_batch([0, 0, roots]))
        leaves.clear()

    def _leaf_header(self, spout_task: int) -> bytes:
        header = self._leaf_headers.get(spout_task)
        if header is None:
            header = self._leaf_headers[spout_task] = wire.data_header(
                wire.COMPLETED, 0, spout_task, self.task)
        return header

    # -- taps (running.sample) ----------------------------------------------------------
    def tap(self, stream: str, n: int, seconds: float) -> None:
        """Keep the last ``n`` tuples sent on ``stream`` for the next ``seconds`` (a new
        request extends the time); an unknown stream is ignored with a log line."""
        out = self.streams.get(stream)
        if out is None:
            log.warning("tap of unknown stream %r of %r ignored", stream, self.spec.id)
            return
        until = self.monotonic() + seconds
        out.tap = (Tap(n, until, self.wall, out.bare) if out.tap is None
                   else out.tap.resized(n, until))

    def tap_samples(self) -> dict[str, list[dict]]:
        """What each tapped stream sent lately, oldest first; a tap whose time is up is
        switched off here (so a stream nobody samples any more costs nothing again).
        Safe from another thread: the buffer is copied in one C-level step."""
        now, found = self.monotonic(), {}
        for name, out in self.streams.items():
            tap = out.tap
            if tap is None:
                continue
            if now > tap.until:
                out.tap = None
                continue
            fields = list(self.spec.streams[name])
            found[name] = [{"values": values, "fields": fields, "task": self.task,
                            "stream": name, "ids": ids, "to": list(to), "time": t}
                           for values, ids, to, t in list(tap.samples)]
        return found

    # -- recording (running.record; runtime/recording/_parquet.py) ------------------------------
    def set_recording(self, stream: str, on: bool) -> bool:
        """Start or stop recording ``stream`` to Parquet in the run directory; False (and
        a log line) for a stream this component does not declare. Stopping writes what
        was buffered first."""
        out = self.streams.get(stream)
        if out is None:
            log.warning("recording of unknown stream %r of %r ignored", stream, self.spec.id)
            return False
        if on and out.recorder is None:
            out.recorder = self._recorder(stream)
        elif not on and out.recorder is not None:
            recorder, out.recorder = out.recorder, None
            recorder.close()
        return True

    def _recorder(self, stream: str):
        from runtime.recording._parquet import declared_types, open_recorder

        where = f"{self.spec.class_name} recording of stream {stream!r}"
        return open_recorder(
            self.context.run_dir, self.spec.id, stream, self.task,
            list(self.spec.streams[stream]), declared_types(self.spec.impl, stream),
            report=lambda message: self.on_error(where, RuntimeError(message)),
            segment_rows=int(self.config.get(RECORD_ROWS, 200_000)),
            segment_seconds=float(self.config.get(RECORD_SECONDS, 1.0)), clock=self.wall,
            base=self.config.get(RECORD_DIR))

    def close_recordings(self) -> None:
        """Write every open segment (called on the way out, after the last flush)."""
        for name, out in self.streams.items():
            if out.recorder is not None:
                self.set_recording(name, False)

    # -- statistics ---------------------------------------------------------------------
    def record(self) -> dict:
        """The executor's counters, as the plain dict an instance reports."""
        return {"component": self.spec.id, "task": self.task, "kind": self.kind,
                "container": self.info.container,
                "emitted": sum(o.emitted for o in self.streams.values()),
                "stream_emitted": {name: o.emitted for name, o in self.streams.items()},
                "transferred": sum(o.transferred for o in self.streams.values()),
                "executed": self.executed, "acked": self.acked, "failed": self.failed,
                "busy_seconds": self.busy_seconds,
                "dropped": self.dropped, "errors": self.errors,
                "first_executed": self.first_executed, "last_executed": self.last_executed,
                "tapped": [name for name, o in self.streams.items() if o.tap is not None],
                "recording": [name for name, o in self.streams.items()
                              if o.recorder is not None],
                "queued_tuples": sum(o.queued() for o in self.streams.values()),
                **self._latency_record(),
                **(self.tracker.record() if self.tracker is not None else {})}

    def _latency_record(self) -> dict:
        """Latency histograms (cumulative, sparse buckets: the master windows them) and
        their summaries since this incarnation started; nothing with metrics off."""
        if self.execute_latency is None:
            return {}
        hists = {"execute": self.execute_latency, "process": self.process_latency}
        if self.tracker is not None:
            hists["complete"] = self.tracker.latency
        return {"histograms": {k: h.sparse() for k, h in hists.items()},
                "latency_ms": {k: h.summary() for k, h in hists.items()}}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.record(), "state": "running"})


def _default_stream_first(emit, n: int, items: list, out: StreamOut, size: int,
                          tracking: Executor | None = None):
    """``emit`` with the commonest calls made cheap: the default stream, the right arity,
    and no ``msg_id`` -- or, with ``tracking`` (a spout executor with acking on whose
    default stream has one subscriber, which takes each tuple on one of its tasks), a
    ``msg_id`` on an unrecorded stream. Anything else goes through ``emit`` itself, which
    checks it all.

    The tracked case numbers its tuples: each target task has a run of consecutive
    self-initialising roots, from a random start of its own. A tuple waits, its batch
    entry only, in its target's run, its msg_id and emit time beside it; when the runs
    end (one is full, or they are flushed) each is sent as one RUN frame, ``[first root,
    entries]``, and the tracker keeps it whole (``SpoutTracker.add_run``). Per tuple that
    leaves the grouping's choice and three appends: no random draw, no pending entry, no
    root on the wire (docs/internals/acker.md, "Runs of roots"). The runs count as in
    flight already (``SpoutTracker.unsent``)."""
    append, flush, bare = items.append, out.flush, out.bare

    def emit_default(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is DEFAULT_STREAM:
            try:
                ok = len(values) == n
                entry = values[0] if bare else values
            except (TypeError, LookupError):  # the checked way reports it
                ok = False
            if ok and msg_id is None:
                append(entry)
                if len(items) >= size:
                    flush()
                return None
        return emit(values, stream, msg_id)

    if tracking is None:
        return emit_default

    (outlet,) = out.outlets
    tracker, roots, clock = tracking.tracker, tracking._roots, tracking.monotonic
    targets = range(len(outlet.tasks))
    headers = list(zip(outlet.run_headers, outlet.tracked_headers))
    runs = out.runs = [[] for _ in targets]  # per target: the entries of its run,
    run_ids, run_stamps = [[] for _ in targets], [[] for _ in targets]  # msg_ids, times
    bases, end = [roots.run_start() for _ in targets], roots.run_end - size
    tracker.unsent = runs
    stamp = clock()  # the emit time of what the spout emits now (see mark)

    def end_runs() -> None:
        """Send each run as one RUN frame, its first root and its entries, and hand its
        msg_ids and emit times to the tracker."""
        for i, run in enumerate(runs):
            k = len(run)
            if not k:
                continue
            base = bases[i]
            out.ship_run(*headers[i], base, run)
            run.clear()  # before add_run counts them in flight: a report read between
            tracker.add_run(base, run_ids[i][:], run_stamps[i][:])  # must not count twice
            run_ids[i].clear()
            run_stamps[i].clear()
            out.emitted += k
            bases[i] = base + k if base + k < end else roots.run_start()  # (2 ** 46 on)

    def mark() -> None:
        """Read the clock for the emits to come: each chunk of ``next_tuple`` calls, and
        each other call into the spout, starts with one (STEP_CHUNK)."""
        nonlocal stamp
        stamp = clock()

    out.end_runs, tracking._restamp = end_runs, mark
    if len(targets) == 1:  # one task: no choice to make, and the lists at hand (in-process
        # 20-70 ns a tuple less than emit_picked with _first, on the spout's whole cost)
        (run,), (ids,), (stamps,) = runs, run_ids, run_stamps
        run_append, id_append, stamp_append = run.append, ids.append, stamps.append

        def emit_tracked(values, stream=DEFAULT_STREAM, msg_id=None):
            if stream is DEFAULT_STREAM and msg_id is not None and out.recorder is None:
                try:
                    ok = len(values) == n
                    entry = values[0] if bare else values
                except (TypeError, LookupError):
                    ok = False
                if ok:
                    id_append(msg_id)
                    stamp_append(stamp)
                    run_append(entry)
                    if len(run) >= size:
                        out.flush_tracked()
                    return None
            return emit_default(values, stream, msg_id)

        return emit_tracked

    pick = outlet.pick

    def emit_picked(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is DEFAULT_STREAM and msg_id is not None and out.recorder is None:
            try:
                ok = len(values) == n
                entry = values[0] if bare else values
                i = pick(values)
            except Exception:  # the checked way reports it (a wrong arity, a bad key)
                ok = False
            if ok:
                run_ids[i].append(msg_id)
                run_stamps[i].append(stamp)
                run = runs[i]
                run.append(entry)
                if len(run) >= size:
                    out.flush_tracked()
                return None
        return emit_default(values, stream, msg_id)

    return emit_picked


def _untracked_steps(next_tuple, calls: int, waiting: Sized) -> None:
    """``calls`` calls of ``next_tuple``, looking at ``waiting`` before every
    ``STEP_CHUNK`` (8) of them. The chunk is written out as eight calls: a loop of a loop
    cost more per call (~50 ns) than a spout's whole ``emit``."""
    chunks, rest = divmod(calls, STEP_CHUNK)
    for _ in repeat(None, chunks):
        if waiting:
            return
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
    if rest and not waiting:
        for _ in repeat(None, rest):
            next_tuple()


def _marked_steps(next_tuple, calls: int, waiting: Sized, mark: Callable[[], None]) -> None:
    """:func:`_untracked_steps` that also calls ``mark`` before each chunk: the tuples
    a chunk emits take the time it started as their emit time (it lasts 8 calls)."""
    chunks, rest = divmod(calls, STEP_CHUNK)
    for _ in repeat(None, chunks):
        if waiting:
            return
        mark()
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
    if rest and not waiting:
        mark()
        for _ in repeat(None, rest):
            next_tuple()


def _tracked_parts(batch: list) -> tuple[list, Iterator]:
    """A TRACKED batch, ``entry, ids, entry, ids, ...``, as its entries and their ids:
    ``ids`` is ``{root: edge}``, or an int root that is its own edge id (a spout tuple's
    only copy)."""
    ids = batch[1::2]
    if len(batch) % 2 or not set(map(type, ids)) <= _ID_TYPES:
        raise wire.WireError("a tracked batch must hold values, ids pairs (ids: int or map)")
    return batch[::2], iter(ids)


def _run_parts(batch: list) -> tuple[list, Iterator]:
    """A RUN batch, ``[first, [entry, ...]]``, as its entries and their ids: the n-th
    tuple's is the self-initialising root ``first + n``, its own edge id."""
    if (len(batch) != 2 or type(batch[0]) is not int or type(batch[1]) is not list
            or batch[0] < SELF_INIT or batch[0] + len(batch[1]) > 1 << 64):
        raise wire.WireError("a run must be [first self-initialising root, [values, ...]]")
    first, entries = batch
    return entries, count(first)


_TUPLE_KINDS = (wire.DATA, wire.TRACKED, wire.RUN)
_ID_TYPES = {int, dict}
_INT = {int}
_OUTCOMES = {wire.ACKED_OK, wire.ACKED_FAILED, wire.ACKED_TIMEOUT, wire.ACKED_RENEWED}
_NO_OP = {"ack": Spout.ack, "fail": Spout.fail}  # a spout that keeps these is not called


def roots_of(ids) -> dict[int, int]:
    """A tracked tuple's ``{root: edge}`` (its ids, or ``{root: root}`` for an int root)."""
    return {ids: ids} if type(ids) is int else ids


def _unknown_stream(comp: str, stream: str, routes) -> ValueError:
    return ValueError(f"component {comp!r}: emit on undeclared stream {stream!r}; "
                      f"it declares {sorted(routes)}")


def _arity(values) -> int:
    try:
        return len(values)
    except TypeError:
        return -1


def _not_a_list(comp: str, stream: str, values) -> ValueError:
    return ValueError(f"component {comp!r} stream {stream!r}: emitted a "
                      f"{type(values).__name__}, whose values cannot be read by position; "
                      "emit a list of values, e.g. emit([v1])")


def _wrong_arity(comp: str, stream: str, values, n: int) -> ValueError:
    n_got = _arity(values)
    got = f"{n_got} values" if n_got >= 0 else f"a {type(values).__name__}"
    return ValueError(f"component {comp!r} stream {stream!r}: emitted {got} but the stream "
                      f"declares {n} field(s); emit a list of values, e.g. emit([v1, v2])")
