"""The in-memory twin of the runtime (public as :mod:`runtime.testing`'s
:class:`InMemoryCluster`, with its :class:`FakeClock` and :func:`read_sink`): a whole
topology run in one thread, every task's :class:`~runtime.engine.executor.Executor` the
very one an instance process runs, wired by an in-memory queue of encoded frames. Its
frames are encoded and decoded by :mod:`runtime.wire`, so a topology that works here
differs from the multiprocess run only in scheduling."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import cloudpickle

from runtime.acking._acker import AckerExecutor
from runtime.engine.driven import TaskExecutor
from runtime.engine.errors import UserCodeError
from runtime.engine.executor import Executor
from runtime.model.api import Bolt, Spout
from runtime.model.constants import ACKER, MESSAGE_TIMEOUT, STATE_STORE, TRACE_STORE
from runtime.model.controls import check_trace
from runtime.observe.traces import Trace
from runtime.observe.tracestore import TraceStore
from runtime.processes.scheduler import pickle_components
from runtime.state import (
    check_submit,
    checkpointing,
    committed_state,
    executor_for,
    open_store,
    started,
)
from runtime.state._store import forget_memory

from . import wire

log = logging.getLogger("tupleflow.testing")

START_ATTEMPTS = 10  # failed open/prepare calls in a row before the twin gives up on a task


class FakeClock:
    """A clock that moves only when told to. Call it (or ``now()``) to read it.

    >>> clock = FakeClock(100.0)
    >>> clock.advance(2.5)
    >>> clock()
    102.5
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    __call__ = now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds


def read_sink(run_dir: str, component: str, *, with_source: bool = False) -> list:
    """Every tuple a :class:`ListSink` component recorded, task by task.

    With ``with_source``, each item is ``(values, source_component, source_task,
    stream, sink_task)``.
    """
    out = []
    folder = os.path.join(run_dir, "sinks")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        comp, _, rest = name.rpartition("-")
        if comp != component:
            continue
        task = int(rest.split(".")[0])
        with open(os.path.join(folder, name), "rb") as f:
            for values, src, src_task, stream in wire.iter_records(f):
                out.append((values, src, src_task, stream, task) if with_source else values)
    return out


class InMemoryCluster:
    """Runs a topology in this thread: every task's executor, wired by an in-memory queue.

    ``run_until_idle()`` steps spouts and delivers frames until nothing moves; ``advance``
    moves the fake clock and fires due flushes and ticks. A user-code exception is
    recorded in ``exceptions`` and the task is restarted with a fresh object, as the
    multiprocess runtime does; a recoverable error (a value that cannot be sent) is
    recorded with ``fatal=False`` and the task keeps running.

    With ``eager_flush`` (the default) every partly filled batch is sent whenever frames
    are delivered, so ``run_until_idle`` leaves nothing behind. Pass ``eager_flush=False``
    to batch as the instance processes do: a batch leaves when it holds ``batch_size``
    tuples, or when ``advance`` moves the clock past its ``flush_interval``.
    """

    def __init__(self, topology, *, containers: int = 1, clock: FakeClock | None = None,
                 eager_flush: bool = True, **config: Any) -> None:
        self.plan = topology.physical_plan(containers, **config)
        check_submit(topology, self.plan.config, processes=False)
        self._bundle = pickle_components(topology)
        self.clock = clock or FakeClock()
        self.eager_flush = eager_flush
        self.run_dir = tempfile.mkdtemp(prefix="tf-mem-")
        self.frames: deque[tuple[bytes, bytes]] = deque()
        self.exceptions: list[dict] = []
        self.restarts: dict[int, int] = {t.task: 0 for t in self.plan.tasks}
        self.executors: dict[int, TaskExecutor] = {}
        self.trace_store = TraceStore({t.task: t.component for t in self.plan.tasks},
                                      capacity=int(self.plan.config[TRACE_STORE]),
                                      timeout=float(self.plan.config[MESSAGE_TIMEOUT]))
        try:
            for t in self.plan.tasks:
                self.executors[t.task] = self._start(t.task)
        except BaseException:
            self.close()
            raise

    def _executor(self, task: int) -> TaskExecutor:
        if self.plan.task(task).component == ACKER:
            return AckerExecutor(self.plan, task, self._send, run_dir=self.run_dir,
                                 monotonic=self.clock, wall=self.clock)
        specs = cloudpickle.loads(self._bundle)  # the trip user code takes to processes

        def build() -> Executor:
            return Executor(self.plan, specs, task, self._send, run_dir=self.run_dir,
                            monotonic=self.clock, wall=self.clock)
        if not checkpointing(self.plan.config):
            return build()
        return executor_for(self.plan, specs, task, self._send, self.run_dir,
                            self.restarts[task], build, clock=self.clock)

    def _start(self, task: int) -> TaskExecutor:
        """A new, started executor for ``task``; a failed open/prepare is retried."""
        for _ in range(START_ATTEMPTS):
            ex = self._executor(task)
            ex.on_error = functools.partial(self._report, task, ex)
            try:
                ex.start()
                started(ex, self.plan.config)  # a StatefulBolt's state, without checkpoints
                return ex
            except UserCodeError as exc:
                self._crashed(task, ex, exc)
        component = self.plan.task(task).component
        raise RuntimeError(f"task {task} ({component!r}): failed to start {START_ATTEMPTS} "
                           f"times in a row; last error: {self.exceptions[-1]['error']}")

    def _send(self, header: bytes, body: bytes) -> None:
        self.frames.append((header, body))

    def _guard(self, task: int, fn: Callable, *args) -> Any:
        try:
            return fn(*args)
        except UserCodeError as exc:
            self._restart(task, exc)
            return None

    def _restart(self, task: int, exc: UserCodeError) -> None:
        self._collect_traces(task, self.executors[task])
        self._crashed(task, self.executors[task], exc)
        self.trace_store.restarted(task, self.clock())
        self.executors[task] = self._start(task)

    def _crashed(self, task: int, ex: TaskExecutor, exc: UserCodeError) -> None:
        """Record a fatal error and send what the task emitted before it, as an instance
        process does before it exits."""
        self._record(task, str(exc), exc.cause, fatal=True)
        log.warning("task %d: %s (restarting)", task, exc)
        self.restarts[task] += 1
        with contextlib.suppress(UserCodeError):
            ex.flush()

    def _report(self, task: int, ex: TaskExecutor, where: str, err: BaseException) -> None:
        """``Executor.on_error``: a recoverable error; the task keeps running."""
        ex.errors += 1
        self._record(task, f"{where}: {err}", err, fatal=False)

    def _record(self, task: int, error: str, cause: BaseException, *, fatal: bool) -> None:
        self.exceptions.append({"task": task, "component": self.plan.task(task).component,
                                "error": error, "fatal": fatal,
                                "traceback": "".join(traceback.format_exception(cause))})

    # -- driving ----------------------------------------------------------------------------
    def step(self, spout_calls: int = 100) -> int:
        """One round: each spout's next_tuple ``spout_calls`` times, flush, deliver all.
        Returns the number of frames delivered plus tuples emitted by spouts."""
        moved = 0
        for task, ex in list(self.executors.items()):
            moved += self._guard(task, ex.step, spout_calls) or 0  # 0 but for spouts
        return moved + self.deliver()

    def deliver(self) -> int:
        """Flush every executor and deliver frames until the queue is empty."""
        delivered = 0
        while True:
            for task, ex in list(self.executors.items()):
                if self.eager_flush:
                    self._guard(task, ex.flush)
                else:  # as an instance's loop does after each poll
                    self._guard(task, ex.on_timer, self.clock())
            if not self.frames:
                return delivered
            while self.frames:
                header, body = self.frames.popleft()
                task = wire.dest_of(header)
                self._guard(task, self.executors[task].on_frame, header, body)
                delivered += 1

    def run_until_idle(self, max_rounds: int = 100_000) -> None:
        """Step until a round moves nothing."""
        for _ in range(max_rounds):
            if not self.step():
                return
        raise RuntimeError(f"topology still busy after {max_rounds} rounds")

    def advance(self, seconds: float) -> None:
        """Move the fake clock and fire due timers (flushes, ticks), then deliver."""
        self.clock.advance(seconds)
        now = self.clock()
        for task, ex in list(self.executors.items()):
            self._guard(task, ex.on_timer, now)
        self.deliver()

    # -- tracing (issue 20) -------------------------------------------------------------------
    def set_trace(self, rate) -> None:
        """Change the fraction of spout tuples traced (``running.set_trace``)."""
        rate = check_trace(rate)
        for ex in self.executors.values():
            if getattr(ex, "tracer", None) is not None and ex.kind == "spout":
                ex.set_trace(rate)

    def _collect_traces(self, task: int, ex: TaskExecutor) -> None:
        tracer = getattr(ex, "tracer", None)
        if tracer is not None and tracer.records:
            self.trace_store.add(task, self.restarts[task], tracer.drain(), self.clock())

    def _collect_all_traces(self) -> None:
        for task, ex in self.executors.items():
            self._collect_traces(task, ex)

    def traces(self, status: str | None = None, limit: int = 100) -> list[Trace]:
        """The newest traces, newest first (``running.traces``)."""
        self._collect_all_traces()
        return self.trace_store.traces(status, limit, now=self.clock())

    def lineage(self, msg_id) -> Trace | None:
        """The trace of one spout msg_id, if it was traced (``running.lineage``)."""
        self._collect_all_traces()
        return self.trace_store.lineage(msg_id, now=self.clock())

    # -- reading ----------------------------------------------------------------------------
    def statistics(self):
        return [_with_restarts(ex.statistics(), self.restarts[t])
                for t, ex in sorted(self.executors.items())]

    def sink(self, component: str, *, with_source: bool = False) -> list:
        return read_sink(self.run_dir, component, with_source=with_source)

    def kill(self, task: int) -> None:
        """A SIGKILL's twin: the task's executor is dropped as it is (nothing flushed) and
        a new incarnation started; frames on their way to it go to the new one."""
        self.restarts[task] += 1
        self.executors[task] = self._start(task)

    def state(self, component: str) -> dict:
        """A StatefulBolt component's last committed state, merged over its tasks."""
        store = open_store(str(self.plan.config[STATE_STORE]), self.run_dir)
        return committed_state(store, component)[1]

    def user_object(self, task: int) -> Spout | Bolt:
        """The live spout/bolt object of a task (for assertions on its state)."""
        return self.executors[task].user

    def close(self) -> None:
        try:
            for task, ex in self.executors.items():
                try:
                    ex.stop()
                except UserCodeError as exc:  # its last flush failed: record, stop the rest
                    self._record(task, str(exc), exc.cause, fatal=True)
        finally:
            forget_memory(self.run_dir)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> InMemoryCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _with_restarts(stats, restarts: int):
    return replace(stats, restarts=restarts)
