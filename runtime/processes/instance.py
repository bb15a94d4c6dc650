"""An instance process (Heron's "Heron Instance"): one task of one spout or bolt.

It gets its identity from its stream manager over stdin, fetches the plan and the user
code from the topology master over the sealed control channel, then runs one loop:
call ``next_tuple`` (spouts), handle incoming frames, flush batches on time, report.

Data frames come and go on one DEALER socket to the local stream manager (spouts use
the stream manager's spout socket, which it stops reading under backpressure); control
messages on another DEALER to the topology master. Sends never block: a frame the
stream manager cannot take yet waits in ``pending_emits`` (Storm 2.0's pendingEmitsQ),
and while it is not empty a spout calls no ``next_tuple`` and a bolt reads no input, but
both keep answering the master and a spout keeps reading what is sent to it.

A user-code exception is logged with its traceback, reported, and ends the process with
:data:`EXIT_USER_ERROR`; the stream manager starts a new incarnation.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque

import cloudpickle
import zmq

from runtime import _procs, wire
from runtime.acking._acker import AckerExecutor
from runtime.engine.driven import TaskExecutor
from runtime.engine.errors import UserCodeError
from runtime.engine.executor import Executor
from runtime.model.api import fixed_parallelism
from runtime.model.constants import (
    ACKER,
    FLUSH_INTERVAL,
    MAX_SPOUT_PENDING,
    METRICS_ENABLED,
    SPOUT_WAIT,
    STATS_INTERVAL,
    TRACE,
)
from runtime.model.controls import check_trace
from runtime.model.plan import PhysicalPlan
from runtime.state import checkpointing, executor_for, fixed_windows, started

from . import curve as _curve
from .zmqio import messages, send_pair

log = logging.getLogger("tupleflow.instance")

EXIT_USER_ERROR = 70  # user code raised: restart me
SPOUT_CALLS = 500  # most next_tuple calls between two looks at the sockets
MAX_DRAIN = 64  # frames handled before the loop looks at the clock again
WELCOME_TIMEOUT = 30.0  # seconds to wait for the topology master's answer
QUEUE_FRAMES = 16  # frames the data socket queues each way before sends refuse


class Instance:
    """The instance process. Owns its two sockets (control to the master, data to its
    stream manager), the frames waiting to be sent, whether it is active, and the time
    its output was held; the executor owns the task's logic and its counters."""

    def __init__(self, boot: dict) -> None:
        self.boot = boot
        self.secret: bytes = boot["secret"]
        self.task: int = boot["task"]
        self.incarnation: int = boot["incarnation"]
        self.stopping = False
        self.active = False
        self.zctx = zmq.Context()
        self.keys = _curve.keys_of(boot)  # remote: the master is a CURVE server over TCP
        self.ctl = _dealer(self.zctx, boot["tm"], b"i%d.%d" % (self.task, self.incarnation),
                           keys=self.keys)
        self.data: zmq.Socket | None = None  # connected once the kind is known
        self.pending_emits: deque[tuple[bytes, bytes]] = deque()
        self.held_seconds = 0.0  # time with output waiting in pending_emits (held)
        self.held_since: float | None = None  # when the current hold began
        self.metrics_on = True  # the plan's "metrics" option, once the plan is known
        self.config: dict = {}  # the topology options, once the plan is known
        # the settings a master told it live ({key: value}), in every report: a master
        # that adopts it tells it again only what differs from what the client was told
        self.live: dict = {}
        self.executor: Executor | None = None  # made from the master's welcome
        self.handlers = {wire.Activate: lambda _: self.set_active(True),
                         wire.Deactivate: lambda _: self.set_active(False),
                         wire.Kill: lambda _: setattr(self, "stopping", True),
                         wire.Setting: self.on_setting,
                         wire.Tap: self.on_tap, wire.Recording: self.on_recording,
                         wire.Switch: self.on_switch}

    # -- control channel ----------------------------------------------------------------
    def tell(self, msg: wire.Control) -> None:
        self.ctl.send_multipart(wire.seal(self.secret, msg))

    def _receive_ctl(self, timeout_ms: int) -> wire.Control | None:
        """The next control message, if one came in time; a malformed one is dropped
        (counted with the malformed frames once there is an executor) and read past."""
        while self.ctl.poll(timeout_ms):
            try:
                return wire.unseal(self.secret, self.ctl.recv_multipart())
            except wire.WireError as exc:
                self._drop(f"control message: {exc}")
        return None

    def handshake(self) -> TaskExecutor:
        """Say hello; the answer carries the plan and the pickled user code."""
        self.tell(wire.Hello(role="instance", id=self.task, incarnation=self.incarnation,
                             pid=os.getpid()))
        deadline = time.monotonic() + WELCOME_TIMEOUT
        while time.monotonic() < deadline:
            if self.stopping:  # SIGTERM before the welcome: nothing to stop yet
                raise SystemExit(0)
            msg = self._receive_ctl(100)
            if isinstance(msg, wire.Welcome):
                return self._executor(msg)
        raise SystemExit(f"task {self.task}: no answer from the topology master")

    def _executor(self, welcome: wire.Welcome) -> TaskExecutor:
        plan = PhysicalPlan.from_data(welcome.plan)
        self.metrics_on = bool(plan.config.get(METRICS_ENABLED, True))  # CPU, RSS per report
        self.config = plan.config  # the topology options (checkpoints: runtime.state.started)
        ex: TaskExecutor
        if plan.task(self.task).component == ACKER:
            ex = AckerExecutor(plan, self.task, self._send, run_dir=self.boot["run_dir"],
                               drains=True)
        else:
            specs = cloudpickle.loads(welcome.bundle)  # verified: sealed with our secret
            ex = self._user_executor(plan, specs)
        ex.on_error = self.report_error
        ex.output_waiting = self.pending_emits  # a held spout stops calling next_tuple
        endpoint = self.boot["sm_spouts"] if ex.kind == "spout" else self.boot["sm"]
        self.data = _dealer(self.zctx, endpoint, b"t%d" % self.task, hwm=QUEUE_FRAMES)
        self.data.send_multipart([wire.data_header(wire.HELLO, 0, 0, self.task), b""])
        return ex

    def _user_executor(self, plan: PhysicalPlan, specs) -> TaskExecutor:
        """The task's executor; with checkpoints on, inside its side of the protocol (or
        the checkpoint spout's own)."""
        def build() -> Executor:
            return Executor(plan, specs, self.task, self._send, run_dir=self.boot["run_dir"],
                            drains=True)  # drain_data calls drained()
        if not checkpointing(plan.config):
            return build()
        return executor_for(plan, specs, self.task, self._send, self.boot["run_dir"],
                            self.incarnation, build)

    def _send(self, header: bytes, body: bytes) -> None:
        if not self.pending_emits:
            try:
                return send_pair(self.data, header, body)
            except zmq.Again:
                pass
        self.pending_emits.append((header, body))

    def drain_pending_emits(self) -> bool:
        """Send what waits, in order; True when nothing is left waiting."""
        pending = self.pending_emits
        while pending:
            try:
                send_pair(self.data, *pending[0])
            except zmq.Again:
                return False
            pending.popleft()
        return True

    def report_error(self, where: str, err: BaseException) -> None:
        """A recoverable error: log it and tell the master; the instance keeps going."""
        self.executor.errors += 1
        tb = "".join(traceback.format_exception(err))
        log.error("%s: %s\n%s", where, err, tb)
        self.tell(wire.ExceptionReport(task=self.task, incarnation=self.incarnation,
                                       error=f"{where}: {err}", traceback=tb, time=time.time(),
                                       fatal=False))

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> int:
        self.executor = ex = self.handshake()
        tune_interpreter()
        try:
            ex.start()
            started(ex, self.config)  # a StatefulBolt's state, without checkpoints
            user = getattr(ex, "user", None)  # none for the acker and the checkpoint spout
            fixed = (fixed_parallelism(user) if ex.kind == "spout"
                     else fixed_windows(ex, self.config))
            self.tell(wire.Ready(task=self.task, incarnation=self.incarnation,
                                 task_kind=ex.kind, fixed=fixed))
            self.loop(ex)
        except UserCodeError as exc:
            return self.crash(exc)
        ex.stop()
        self.send_the_rest()
        self.send_stats("stopped")
        return 0

    def loop(self, ex: TaskExecutor) -> None:
        poller = zmq.Poller()
        poller.register(self.data, zmq.POLLIN)
        poller.register(self.ctl, zmq.POLLIN)
        spout = ex.kind == "spout"
        wait_ms = max(1, int(float(ex.config[SPOUT_WAIT]) * 1000))
        heartbeat = Heartbeat(self, float(ex.config[STATS_INTERVAL]))
        heartbeat.start()
        try:
            self._loop(ex, poller, spout, wait_ms)
        finally:
            heartbeat.stop()

    def _loop(self, ex: TaskExecutor, poller: zmq.Poller, spout: bool, wait_ms: int) -> None:
        """Step (a spout), then the timers (a flush due sends what the step emitted at
        once), then wait for input (:func:`sleep_ms`)."""
        calls, budget = 1, float(ex.config[FLUSH_INTERVAL])
        clear = True
        while not self.stopping:
            if clear != self.drain_pending_emits():
                clear = not clear
                poller.modify(self.data, _data_events(spout, clear))
                self.held(not clear, time.monotonic())
            wait = None  # until the timers' next call
            if spout and self.active and clear:
                started = time.monotonic()
                emitted = ex.step(calls)
                took = time.monotonic() - started
                ex.busy_seconds += took
                held = emitted < calls and ex.spout_held()  # (only asked when it matters)
                calls, wait = next_run(calls, emitted, held, took, budget, wait_ms)
            elif clear and ex.leftover:  # input set aside while held (or by checkpoints)
                ex.run_leftover()
                ex.drained()  # its acks go now, as a drain's do
                wait = 0
            now = time.monotonic()
            timeout = sleep_ms(wait, ex.on_timer(now) - now)
            for sock, events in poller.poll(timeout):
                if sock is self.ctl:
                    self.drain_ctl()
                elif events & zmq.POLLIN:
                    self.drain_data(ex, budget)

    def held(self, on: bool, now: float) -> None:
        """Output started (or stopped) waiting: a spout is held by backpressure, a bolt
        reads no input. Timed per change, never per tuple."""
        if on:
            self.held_since = now
        elif self.held_since is not None:
            self.held_seconds += now - self.held_since
            self.held_since = None

    def held_record(self) -> dict:
        """Time held so far (the current hold included) and the frames waiting now."""
        since = self.held_since
        ongoing = time.monotonic() - since if since is not None else 0.0
        return {"held_seconds": self.held_seconds + ongoing,
                "pending_emits": len(self.pending_emits)}

    def drain_data(self, ex: TaskExecutor, budget: float) -> None:
        """Handle waiting frames (:meth:`read_data`), then tell the executor the drain
        ended: the acks those frames owe go now, one frame for the drain, not one a frame
        (``drained``; docs/internals/performance-log.md, "Issue 17, seventh pass"). A bolt
        that read all its input flushes what it made: nothing more will join the batches
        before the next frame, and waiting for the timer would cost a wake-up of its own
        and up to a flush interval of latency (docs/internals/performance-log.md, "Issue 17,
        fourth pass")."""
        bolt = ex.kind == "bolt"
        if bolt and (self.pending_emits or ex.leftover):
            return  # read no more input until what it caused has been sent
        if self.read_data(ex, bolt, time.monotonic() + budget):
            ex.flush()
        ex.drained()

    def read_data(self, ex: TaskExecutor, bolt: bool, deadline: float) -> bool:
        """Handle waiting frames: at most ``MAX_DRAIN``, and none after ``deadline``, so
        that flushes, ticks and reports (the heartbeat) stay on time; a bolt stops once
        output waits. True when a bolt read all its input."""
        for frames in messages(self.data, MAX_DRAIN):
            self.on_data(ex, frames)
            if bolt and (self.pending_emits or ex.leftover):
                return False
            if time.monotonic() > deadline:
                return False
        return bolt and not self.data.get(zmq.EVENTS) & zmq.POLLIN

    def on_data(self, ex: TaskExecutor, frames: list[zmq.Frame]) -> None:
        """One message from the stream manager: ``[header, body]``, or dropped."""
        if len(frames) != 2:
            return self._drop(f"data message of {len(frames)} parts")
        try:
            ex.on_frame(frames[0].bytes, frames[1].bytes)
        except UserCodeError:
            raise
        except Exception as exc:  # WireError, or a frame the executor cannot take
            self._drop(f"{type(exc).__name__}: {exc}")

    def _drop(self, why: str) -> None:
        if self.executor is not None:  # before the welcome, nothing counts them yet
            self.executor.dropped += 1
        log.warning("dropped a malformed frame: %s", why)

    def drain_ctl(self) -> None:
        """Hand each waiting control message to its handler (one table, built once)."""
        while (msg := self._receive_ctl(0)) is not None:
            handler = self.handlers.get(type(msg))
            if handler is None:
                self._drop(f"unexpected control message {msg.KIND!r}")
            else:
                handler(msg)

    def on_setting(self, msg: wire.Setting) -> None:
        if msg.key == MAX_SPOUT_PENDING and self.executor.kind == "spout":
            self.executor.set_max_spout_pending(msg.value)
            self.live[MAX_SPOUT_PENDING] = msg.value
        elif msg.key == TRACE and self.executor.kind == "spout":
            self.live[TRACE] = check_trace(msg.value)
            self.executor.set_trace(self.live[TRACE])

    def on_tap(self, msg: wire.Tap) -> None:
        self.executor.tap(msg.stream, int(msg.n), float(msg.seconds))

    def on_recording(self, msg: wire.Recording) -> None:
        self.executor.set_recording(msg.stream, bool(msg.on))

    def on_switch(self, msg: wire.Switch) -> None:
        """A rebalance in place: send on the new plan's routing from now on (what waits
        in ``pending_emits`` was encoded for the old one, and goes first); the checkpoint
        task then moves the keyed state and rolls everyone back. Answered either way."""
        plan = PhysicalPlan.from_data(msg.plan)
        if self.task in plan.task_containers():
            self.executor.retarget(plan)
        else:  # rebalanced away: it stops soon; what it batched goes on the old routing,
            self.executor.retire()  # and a spout commits and gives back its partitions
        moved = None
        if msg.counts is not None and hasattr(self.executor, "rebalance"):
            moved = self.executor.rebalance(msg.counts)
        self.tell(wire.Switched(task=self.task, incarnation=self.incarnation,
                                epoch=plan.epoch, moved=moved))

    def set_active(self, active: bool) -> None:
        """Activate or deactivate (pause) this instance. A spout calls its ``activate``
        or ``deactivate`` hook on each change, as Storm's do; while inactive it calls no
        ``next_tuple`` but still reads its acks and fails, flushes and reports."""
        if active == self.active:
            return
        self.active = active
        self.executor.activate(active)

    def stats_message(self, state: str) -> list[bytes]:
        usage = _procs.own_usage() if self.metrics_on else {}
        record = {**self.executor.report(), **usage, **self.held_record(), "pid": os.getpid(),
                  "live": self.live, "state": state, "incarnation": self.incarnation,
                  "reported": time.time()}
        return wire.seal(self.secret, wire.Stats(task=self.task, incarnation=self.incarnation,
                                                 record=record))

    def samples_messages(self) -> list[list[bytes]]:
        """One sealed ``samples`` message per tapped stream (none while nothing is tapped)."""
        return [wire.seal(self.secret, wire.Samples(
                    task=self.task, incarnation=self.incarnation, stream=stream,
                    samples=samples))
                for stream, samples in self.executor.tap_samples().items()]

    def trace_messages(self) -> list[list[bytes]]:
        """One sealed ``traces`` message with the trace records waiting (none if none)."""
        tracer = getattr(self.executor, "tracer", None)
        records = tracer.drain() if tracer is not None and tracer.records else None
        if not records:
            return []
        return [wire.seal(self.secret, wire.TraceReport(
            task=self.task, incarnation=self.incarnation, records=records))]

    def send_stats(self, state: str) -> None:
        self.ctl.send_multipart(self.stats_message(state))
        for msg in self.trace_messages():  # the last ones, as it stops or fails
            self.ctl.send_multipart(msg)

    def crash(self, exc: UserCodeError) -> int:
        """Log the traceback, tell the master, send what was already emitted, and exit."""
        tb = "".join(traceback.format_exception(exc.cause))
        log.error("%s\n%s", exc, tb)
        self.executor.errors += 1
        self.tell(wire.ExceptionReport(task=self.task, incarnation=self.incarnation,
                                       error=str(exc), traceback=tb, time=time.time(),
                                       fatal=True))
        with contextlib.suppress(UserCodeError):
            self.executor.flush()
        self.executor.close_recordings()  # what it recorded is written
        self.send_stats("failed")
        return EXIT_USER_ERROR

    def close(self) -> None:
        self.ctl.close(linger=2000)
        if self.data is not None:
            self.data.close(linger=2000)
        self.zctx.term()

    def send_the_rest(self, seconds: float = 1.0) -> None:
        """On the way out: give what still waits up to ``seconds`` to be taken."""
        deadline = time.monotonic() + seconds
        while not self.drain_pending_emits() and time.monotonic() < deadline:
            self.data.poll(10, zmq.POLLOUT)


def _dealer(zctx: zmq.Context, endpoint: str, identity: bytes, hwm: int | None = None,
            keys: _curve.TopologyKeys | None = None) -> zmq.Socket:
    """A DEALER connected to ``endpoint`` as ``identity`` (a CURVE client if ``keys``)."""
    sock = _curve.client(zctx.socket(zmq.DEALER), keys)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 2000)
    if hwm is not None:  # before connect: zmq sizes a pipe when it creates it
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
    sock.connect(endpoint)
    return sock


GC_THRESHOLD = 50_000  # allocations between two young-generation collections (default 700)
SWITCH_INTERVAL = 0.0005  # seconds a thread waiting for the GIL waits before asking for it


def tune_interpreter() -> None:
    """Keep the cyclic garbage collector off the tuple path, and the heartbeat on time.

    Every tuple allocates a few containers, and a long-lived runtime state (in-flight
    roots, the acker's ledger) makes each full collection scan more. Objects from
    start-up are frozen out of collection, and young collections run ~70 times less
    often; cycles made by user code are still collected.

    The heartbeat thread gives up the GIL at each of its system calls (reading /proc for
    CPU and RSS, sending) and then waits a whole switch interval to get it back from a
    busy main thread: with the default 5 ms, a report took up to 0.8 s to build and
    supervision saw a busy bolt as hung. A 0.5 ms interval costs nothing while only the
    main thread runs.
    """
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 20, 100)
    sys.setswitchinterval(SWITCH_INTERVAL)


class Heartbeat(threading.Thread):
    """Reports the executor's statistics every ``interval`` seconds, from a thread of its
    own with a socket of its own (Heron's gateway thread, in miniature), so a bolt deep
    in a long batch of slow tuples still heart-beats. A stopped (SIGSTOP) or dead process
    does not, and that is what the master's supervision looks for."""

    def __init__(self, instance: Instance, interval: float) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.instance, self.interval = instance, interval
        self.halt = threading.Event()
        self.sock = _curve.client(instance.zctx.socket(zmq.DEALER), instance.keys)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(instance.boot["tm"])

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            try:
                self.sock.send_multipart(self.instance.stats_message("running"))
                for msg in self.instance.samples_messages():
                    self.sock.send_multipart(msg)
                for msg in self.instance.trace_messages():
                    self.sock.send_multipart(msg)
            except Exception:  # a report may fail; the heartbeat must not stop for it
                log.exception("could not send a statistics report")

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.sock.close()


def _data_events(spout: bool, clear: bool) -> int:
    """What the loop waits for on the data socket: input, unless a bolt has output
    waiting (it reads nothing until that is sent); and writability while output waits.
    A spout always reads, so that acks and fails keep flowing under backpressure."""
    reading = zmq.POLLIN if (spout or clear) else 0
    return reading | (0 if clear else zmq.POLLOUT)


def next_run(calls: int, emitted: int, held: bool, took: float, budget: float,
             wait_ms: int) -> tuple[int, int]:
    """After a spout's run of ``calls`` calls that ``emitted`` tuples in ``took`` seconds
    (``held``: ``max_spout_pending`` or unsent output stops it now): the next run's
    calls (:func:`paced`), and how long the loop waits for input first (ms; the least:
    :func:`sleep_ms` waits on to the next flush). It waits
    ``wait_ms`` (``spout_wait``) when the run emitted nothing, or ran dry: some of its
    calls emitted nothing though nothing held the spout, so its source has no more for
    now. Otherwise the next run starts at once (a held one emits nothing, then waits).

    >>> next_run(500, 500, False, 0.001, 0.002, 1)  # emitting on every call: go on
    (500, 0)
    >>> next_run(500, 7, False, 0.0002, 0.002, 1)  # ran dry after 7: wait, then 14 calls
    (14, 1)
    >>> next_run(500, 7, True, 0.0002, 0.002, 1)  # held at its limit: keeps its size
    (500, 0)
    >>> next_run(8, 0, False, 0.00001, 0.002, 1)  # idle: wait, then one call
    (1, 1)
    """
    dry = emitted < calls and not held
    return paced(calls, took, budget, dry, emitted), wait_ms if dry or not emitted else 0


def sleep_ms(wait: int | None, until_due: float) -> int:
    """How long the loop waits for input (ms), ``until_due`` seconds before its timers
    want their next call: not at all when ``wait`` is 0 (a spout emitting on every call,
    input set aside to run), else until the timers are due, and a spout whose run ran dry
    (``wait``: ``spout_wait``) at least ``wait``. A dry spout used to wake every
    ``spout_wait`` (1 ms) though what it emitted then went only at the next flush (every
    ``flush_interval``, 2 ms): it now wakes for the flush (or an ack), and emits just
    before it, so a tuple waits at most a flush interval instead of a ``spout_wait`` and
    a flush interval (docs/internals/performance-log.md, "Issue 17, fourth pass").

    >>> sleep_ms(0, 0.0015), sleep_ms(None, 0.0015), sleep_ms(1, 0.0015), sleep_ms(5, 0.0015)
    (0, 2, 2, 5)
    >>> sleep_ms(None, -0.001), sleep_ms(1, -0.001)  # overdue: at once, or spout_wait
    (0, 1)
    """
    if wait == 0:
        return 0
    return max(wait or 0, int(until_due * 1000) + 1 if until_due > 0 else 0)


def paced(calls: int, took: float, budget: float, dry: bool = False, emitted: int = 0) -> int:
    """How many ``next_tuple`` calls to make in the next run, given that ``calls`` took
    ``took`` seconds: a run should not outlast ``budget`` (the flush interval), so that a
    spout whose ``next_tuple`` blocks a while still flushes, reports and hears a kill.

    A run that ran ``dry`` (it ``emitted`` fewer tuples than it made calls, though
    nothing held the spout: its source had no more for now) is followed by the
    ``spout_wait`` sleep and a run of twice as many calls as it emitted (one at least,
    at most as many as it made): what a spout that emits on every other call fills,
    and little more; a spout that emits again grows back by doubling, with no sleep
    between runs. Storm's spout waits after any ``nextTuple`` that emits nothing. Before,
    only a run that emitted nothing was followed by a sleep: a spout that kept ahead of a
    source with a tuple due in nearly every run of ``SPOUT_CALLS`` (500) calls never
    slept, and could make up to 500 calls a tuple, beside the bolts it competes with for
    the CPU (docs/internals/performance-log.md, "The half-rate tail"). An idle spout (nothing
    emitted) makes one call a wake-up: grown to 500, it spent about 16 % of a core doing
    nothing. A spout held by ``max_spout_pending`` or by its unsent output keeps its size
    for when it is let go.

    >>> paced(1, 0.00001, 0.002), paced(500, 0.00001, 0.002)
    (2, 500)
    >>> paced(500, 5.0, 0.002), paced(100, 0.004, 0.002), paced(100, 0.0015, 0.002)
    (1, 50, 100)
    >>> paced(500, 0.00001, 0.002, dry=True), paced(500, 0.00001, 0.002, True, 7)
    (1, 14)
    """
    if dry:
        return max(1, min(2 * emitted, calls))
    if took > budget:
        return max(1, int(calls * budget / took))
    if took < budget / 2:
        return min(SPOUT_CALLS, calls * 2)
    return calls


def main() -> None:
    boot = _procs.read_boot()
    _procs.die_with_parent(boot.get("parent"))
    _procs.log_to(boot.get("log_path"))  # a warm spare's output went to the spare's log
    _procs.setup_logging("")
    log.info("task %d, incarnation %d: started (pid %d)", boot["task"], boot["incarnation"],
             os.getpid())
    sys.path[:0] = [p for p in boot.get("sys_path", []) if p not in sys.path]
    instance = Instance(boot)
    signal.signal(signal.SIGTERM, lambda *_: setattr(instance, "stopping", True))
    code = instance.run()
    instance.close()
    sys.exit(code)


if __name__ == "__main__":
    main()
