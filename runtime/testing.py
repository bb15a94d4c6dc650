"""A public test kit: a list spout, a list sink, a fake clock, and an in-memory twin of
the runtime that runs a whole topology in one thread (:class:`InMemoryCluster`, written
in ``runtime/_twin.py``).

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

import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from runtime._sequence import SequenceChecker, SequenceReport
from runtime._twin import FakeClock, InMemoryCluster, read_sink
from runtime.model.api import Bolt, Context, Spout
from runtime.sources import LogSpout
from runtime.sources._retry import Backoff, ReplaySchedule
from runtime.state import StatefulBolt

__all__ = ["Doubler", "FakeClock", "InMemoryCluster", "KeepsWord", "ListSink", "ListSpout",
           "PacedLogSpout", "PacedSpout", "PassOn", "SequenceChecker", "SequenceReport",
           "SlowBolt", "SplitSentence", "StatefulWordCount", "WordCount", "gone", "open_routed",
           "read_sink", "replaced", "wait_for"]

from . import wire


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
