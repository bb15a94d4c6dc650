"""A public test kit: a list spout, a list sink, a fake clock, and an in-memory twin of
the runtime that runs a whole topology in one thread.

The twin drives the very same :class:`~runtime.engine.executor.Executor` objects as the
instance processes, and its frames are encoded and decoded by :mod:`runtime.wire`, so
a topology that works here differs from the multiprocess run only in scheduling.

>>> from runtime import Topology
>>> topo = Topology("double")
>>> _ = topo.spout("numbers", ListSpout([[1], [2], [3]], fields=["n"]))
>>> _ = topo.bolt("double", Doubler).shuffle_grouping("numbers")
>>> _ = topo.bolt("sink", ListSink).shuffle_grouping("double")
>>> with InMemoryCluster(topo) as cluster:
...     cluster.run_until_idle()
...     sorted(cluster.sink("sink"))
[[2], [4], [6]]
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shutil
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import cloudpickle

from runtime._sequence import SequenceChecker, SequenceReport
from runtime.acking._acker import AckerExecutor
from runtime.engine.driven import TaskExecutor
from runtime.engine.errors import UserCodeError
from runtime.engine.executor import Executor
from runtime.model.api import Bolt, Context, Spout
from runtime.model.constants import ACKER, MESSAGE_TIMEOUT, STATE_STORE, TRACE_STORE
from runtime.model.controls import check_trace
from runtime.observe.traces import Trace
from runtime.observe.tracestore import TraceStore
from runtime.processes.scheduler import pickle_components
from runtime.sources import LogSpout
from runtime.sources._retry import Backoff, ReplaySchedule
from runtime.state import (
    StatefulBolt,
    check_submit,
    checkpointing,
    committed_state,
    executor_for,
    open_store,
    started,
)
from runtime.state._store import forget_memory

__all__ = ["Doubler", "FakeClock", "InMemoryCluster", "KeepsWord", "ListSink", "ListSpout",
           "PacedLogSpout", "PacedSpout", "PassOn", "SequenceChecker", "SequenceReport",
           "SlowBolt", "SplitSentence", "StatefulWordCount", "WordCount", "gone", "open_routed",
           "read_sink", "replaced", "wait_for"]

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


class ListSpout(Spout):
    """Emits the given tuples once each, split over its tasks (tuple ``i`` goes to task
    index ``i % parallelism``), each with ``msg_id=i``. Failed tuples are replayed when
    ``replay`` is true: at once, or with ``retry_delay`` (seconds) after an exponential
    backoff capped at ``retry_delay_max`` (`runtime.sources.ReplaySchedule`). With
    ``rate``, each task emits at most that many tuples a second from its first
    ``next_tuple`` on (so that a long list outlives a test); ``sent`` counts what it
    emitted. With ``rate_until``, the name of a file in the topology's run directory,
    the rate holds only until that file exists, then the tasks emit as fast as max spout
    pending lets them: a test holds the spout slow up to its fault, so that what is in
    flight across the fault is a paced run's, and the rest of the list takes no longer
    than it must.
    """

    def __init__(self, tuples: Iterable[list], fields: list[str] = ("value",),
                 *, replay: bool = False, rate: float | None = None,
                 rate_until: str | None = None,
                 retry_delay: float = 0.0, retry_delay_max: float = 10.0) -> None:
        self.tuples = [list(t) for t in tuples]
        self.outputs = list(fields)
        self.replay = replay
        self.rate = rate
        self.rate_until = rate_until
        self.backoff = Backoff(retry_delay, retry_delay_max)
        self.clock = time.monotonic  # seconds; the replay times are on it (a test sets it)

    def open(self, config, context):
        mine = range(context.task_index, len(self.tuples), context.parallelism)
        self.todo = deque(mine)
        self.acked: set[int] = set()
        self.failed: list[int] = []
        self.sent, self._t0 = 0, None
        self._go = _go_file(context, self.rate_until)
        self._retries = ReplaySchedule(self.backoff)
        self._failures: dict[int, int] = {}  # msg id -> times it failed

    def next_tuple(self):
        if self._retries:
            self.todo.extendleft(reversed(self._retries.due(self.clock())))
        if self._paced() and self._ahead():
            return
        if self.todo:
            i = self.todo.popleft()
            self.sent += 1
            self.emit(self.tuples[i], msg_id=i)

    def _paced(self) -> bool:
        """Whether ``rate`` still holds (once the ``rate_until`` file is seen, never again)."""
        if self._go is not None and os.path.exists(self._go):
            self._go, self.rate = None, None
        return self.rate is not None

    def _ahead(self) -> bool:
        """Whether this task has emitted its ``rate``'s worth for the time since its start."""
        if self._t0 is None:
            self._t0 = time.monotonic()
        return self.sent >= (time.monotonic() - self._t0) * self.rate

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)
        failures = self._failures[msg_id] = self._failures.get(msg_id, 0) + 1
        if self.replay and self.backoff.first > 0:
            self._retries.add(msg_id, failures, self.clock())
        elif self.replay:
            self.todo.append(msg_id)


def _go_file(context, rate_until: str | None) -> str | None:
    """The path of a spout's ``rate_until`` file in the topology's run directory."""
    return None if rate_until is None else os.path.join(context.run_dir, rate_until)


class ListSink(Bolt):
    """Records every tuple it receives to a file in the run directory, read back with
    :func:`read_sink` (or ``cluster.sink(...)``), and acks it."""

    outputs: list[str] = []

    def prepare(self, config, context):
        folder = os.path.join(context.run_dir, "sinks")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{context.component_id}-{context.task_id}.msgpack")
        self._file = open(path, "ab")  # noqa: SIM115 - closed in cleanup

    def process(self, tup):
        self._file.write(wire.pack([tup.values, tup.component, tup.task, tup.stream]))
        self._file.flush()
        self.ack(tup)

    def cleanup(self):
        self._file.close()


class Doubler(Bolt):
    """Emits ``2 * n`` for each input ``n`` (a tiny bolt for examples and tests)."""

    outputs = ["n"]

    def process(self, tup):
        self.emit([tup.values[0] * 2], anchors=[tup])
        self.ack(tup)


class SplitSentence(Bolt):
    """Emits one ``[word]`` per word of the ``sentence`` field, anchored to it, then acks
    it: the splitting half of the sentence topology."""

    outputs = ["word"]

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word], anchors=[tup])
        self.ack(tup)


class KeepsWord(Bolt):
    """Acks every ``word`` but ``kept``, which it keeps for ever and never acks (a bolt
    stalled on a call that never returns): its trees time out, held by this task."""

    outputs: list[str] = []

    def __init__(self, kept: str = "moon") -> None:
        self.kept_word = kept

    def prepare(self, config, context):
        self.kept: list = []

    def process(self, tup):
        if tup["word"] == self.kept_word:
            self.kept.append(tup)
        else:
            self.ack(tup)


class PacedSpout(Spout):
    """Emits ``[n]`` for n = 0, 1, 2, ..., at most ``rate`` tuples a second (for as long
    as it runs: a steady source for multiprocess tests and demonstrations)."""

    outputs = ["n"]

    def __init__(self, rate: int = 200) -> None:
        self.rate = rate

    def open(self, config, context):
        self.n, self.t0 = 0, time.monotonic()

    def next_tuple(self):
        due = int((time.monotonic() - self.t0) * self.rate) + 1
        while self.n < due:
            self.emit([self.n])
            self.n += 1


class WordCount(Bolt):
    """Counts the ``word`` field and emits ``[word, count so far]`` anchored to its input,
    then acks it (a no-op at most once): the counting half of the classic word count."""

    outputs = ["word", "count"]

    def prepare(self, config, context):
        self.counts: dict = {}

    def process(self, tup):
        word = tup["word"]
        self.counts[word] = count = self.counts.get(word, 0) + 1
        self.emit([word, count], anchors=[tup])
        self.ack(tup)


class StatefulWordCount(StatefulBolt):
    """:class:`WordCount` with its counts in checkpointed state (issue 21): run it with
    ``submit(checkpoint_interval=...)``, read them with ``running.state(component)``."""

    outputs = ["word", "count"]

    def process(self, tup):
        word = tup["word"]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.emit([word, count], anchors=[tup])
        self.ack(tup)


class PacedLogSpout(LogSpout):
    """A :class:`~runtime.sources.LogSpout` reading at most ``rate`` records a second, so
    that the faults of a chaos run land mid-stream: for as long as it runs, or with
    ``rate_until`` only until that file exists in the run directory (as
    :class:`ListSpout`'s)."""

    def __init__(self, *args, rate: float, rate_until: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rate, self.rate_until = rate, rate_until

    def open(self, config, context) -> None:
        super().open(config, context)
        self._t0, self._taken = time.monotonic(), 0
        self._go = _go_file(context, self.rate_until)

    def next_tuple(self) -> None:
        if self._taking:  # partitions a rebalance gave it: their offsets were not read here
            self._take()
        if self._go is not None and os.path.exists(self._go):
            self._go, self.rate = None, math.inf
        if self._taken < (time.monotonic() - self._t0) * self.rate:
            before = self._position()
            super().next_tuple()
            self._taken += max(0, self._position() - before)  # a rewind reads again

    def _position(self) -> int:
        return sum(self.tracker.next_offset(p) for p in self.assigned)


class PassOn(Bolt):
    """Emits each input's first value again, on a stream of one field ``word``: a
    stateless step between a spout and a keyed bolt (so that bolt has many input tasks)."""

    outputs = ["word"]

    def process(self, tup):
        self.emit([tup.values[0]], anchors=[tup])
        self.ack(tup)


class SlowBolt(Bolt):
    """Spends ``seconds`` of CPU on each tuple (a busy wait, as real work would), then
    passes it on unchanged: a bottleneck for backpressure and latency experiments."""

    def __init__(self, seconds: float = 0.0005, fields: Iterable[str] = ("n",)) -> None:
        self.seconds = seconds
        self.outputs = list(fields)

    def process(self, tup):
        deadline = time.perf_counter() + self.seconds
        while time.perf_counter() < deadline:
            pass
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


def replaced(victim) -> Callable[[list], bool]:
    """A ``running.wait_until`` predicate: a newer incarnation of ``victim``'s task (an
    ``InstanceStats`` taken before it was killed or stopped) is running.

    >>> from runtime import InstanceStats
    >>> old = InstanceStats("c", 3, "bolt", 0, incarnation=0)
    >>> replaced(old)([old]), replaced(old)([InstanceStats("c", 3, "bolt", 0, incarnation=1,
    ...                                                    state="running")])
    (False, True)
    """
    return lambda stats: any(s.task == victim.task and s.incarnation > victim.incarnation
                             and s.state == "running" for s in stats)


def open_routed(spout, run_dir, tasks=(7, 8)) -> list:
    """Open a spout that routes with ``emit_direct`` (a Trident batch spout) as the only task
    of a topology whose ``count`` component has ``tasks``, outside any cluster: returns the
    list its ``emit_direct`` calls append ``(task, values, msg_id)`` to."""
    emitted: list = []
    spout.emit_direct = lambda task, values, msg_id=None: emitted.append((task, values,
                                                                         msg_id))
    spout.open({}, Context("t", "words", 1, 0, 1, {"count": tasks}, 0, str(run_dir)))
    return emitted


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate()`` every 20 ms until it returns something true, and return that;
    TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
    return result


def gone(proc) -> bool:
    """Whether a ``psutil.Process`` has exited (a zombie counts as gone)."""
    import psutil

    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


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
