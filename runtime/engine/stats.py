"""What one task counted, and the plain dict an instance reports of it
(:meth:`runtime.engine.executor.Executor.report`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from random import random

from runtime.model.api import Bolt, Spout
from runtime.observe.hotkeys import HotKeys
from runtime.observe.metrics import LatencyHistogram
from runtime.observe.user_metrics import UserMetrics

from .outbound import StreamOut

SAMPLE_SECONDS = 0.002  # busy time between two sampled tuples (and progress reports)
MAX_STRIDE = 1000  # at least one tuple in this many is sampled (before the jitter)


class TaskCounts:
    """The counters of one task (tuples executed, acked, failed, dropped; errors; time
    busy), its latency histograms and its hottest input keys (docs/internals/metrics.md).
    Every room of the executor adds to these; only this object reads the clocks for
    them.

    A bolt's batch is timed as a whole (busy time), and one tuple in about ``stride`` of
    it is timed alone, at a *checkpoint* (:meth:`checkpoint`). The checkpoint publishes
    the batch's progress (``executed`` and ``busy_seconds`` so far), so a report made in
    the middle of a long batch of slow tuples sees them move; the sample's execute and
    process latencies go into the histograms for it and the unsampled tuples before it
    (the tuples after a batch's last sample count with that sample's), so a histogram
    still counts every tuple, and one slow tuple among fast ones reaches p99 when it is
    sampled; its grouping key goes into the hot keys. The stride is chosen so that a
    checkpoint comes about every :data:`SAMPLE_SECONDS` of busy time: every tuple of a
    10 ms bolt, one in hundreds of a fast one (docs/internals/diagnosis.md)."""

    __slots__ = ("executed", "acked", "failed", "dropped", "errors", "busy_seconds",
                 "first_executed", "last_executed", "execute_latency", "process_latency",
                 "arrived", "monotonic", "wall",
                 # the sampler: tuples before the next checkpoint (-1: metrics off); the
                 # sample being timed (its start, 0.0: none) and its stride; tuples of the
                 # batch already in the histograms; the latest sample's time in process
                 # and its end; where the batch began (clock, executed, busy)
                 "left", "timing", "weight", "counted", "last_took", "last_ended",
                 "began", "base_executed", "base_busy", "keys", "keyer")

    def __init__(self, monotonic: Callable[[], float], wall: Callable[[], float],
                 metrics_on: bool) -> None:
        self.monotonic, self.wall = monotonic, wall
        self.executed = self.acked = self.failed = self.dropped = self.errors = 0
        self.busy_seconds = 0.0  # in process() (bolts) or next_tuple (spouts, timed by the driver)
        self.first_executed: float | None = None
        self.last_executed: float | None = None
        # None: metrics off
        self.execute_latency = LatencyHistogram() if metrics_on else None
        self.process_latency = LatencyHistogram() if metrics_on else None
        self.arrived = 0.0  # when the frame being executed was taken off the socket
        self.left = 0 if metrics_on else -1  # the first tuple is sampled
        self.timing, self.weight, self.counted = 0.0, 1, 0
        self.last_took = self.last_ended = 0.0
        self.began, self.base_executed, self.base_busy = 0.0, 0, 0.0
        self.keys = HotKeys() if metrics_on else None
        self.keyer: Callable | None = None  # the batch's grouping key of an entry, or None

    def frame_arrived(self) -> None:
        """A frame was taken off the socket (read only with metrics on)."""
        if self.execute_latency is not None:
            self.arrived = self.monotonic()

    def started_batch(self, keyer: Callable | None = None) -> float:
        """When a batch starts (one clock read per batch, never per tuple); ``keyer``
        gives a sampled entry's grouping key (a fields-grouped input)."""
        if self.first_executed is None:
            self.first_executed = self.wall()
        self.keyer = keyer
        self.base_executed, self.base_busy = self.executed, self.busy_seconds
        self.began = self.monotonic()
        return self.began

    def checkpoint(self, done: int, entry) -> int:
        """Before the batch's tuple ``done``: end the sample being timed (publishing the
        progress), start one if it is due; returns where the next checkpoint is."""
        now = self.monotonic()
        if self.timing:
            self._end_sample(now, done)
            self.executed = self.base_executed + done
            self.busy_seconds = self.base_busy + (now - self.began)
            stride = self._stride((now - self.began) / done)
            if stride > 1:
                return done + stride - 1
        self.timing = now
        if self.keyer is not None:
            self.keys.add(self.keyer(entry), self.weight)
        return done + 1

    def _end_sample(self, now: float, done: int) -> None:
        """The sampled tuple ended at ``now``: it counts for the batch's tuples up to it."""
        took, tuples = now - self.timing, done - self.counted
        self.timing, self.counted = 0.0, done
        self.last_took, self.last_ended = took, now
        self.execute_latency.record(took, tuples)
        self.process_latency.record(now - (self.arrived or self.began), tuples)

    def _stride(self, per_tuple: float) -> int:
        """How many tuples apart the next sample is: about :data:`SAMPLE_SECONDS` of
        work, jittered by ±50 % so that a slow tuple that comes every n-th is not always
        missed (or always hit) by a stride that divides n."""
        stride = MAX_STRIDE if per_tuple <= 0 else int(SAMPLE_SECONDS / per_tuple)
        if stride > 1:
            stride = stride // 2 + 1 + int(random() * min(stride, MAX_STRIDE))
        self.weight = stride = max(1, min(MAX_STRIDE, stride))
        return stride

    def ended_batch(self, started: float, done: int, mark: int = -1) -> None:
        """The batch ended after ``done`` tuples; ``mark`` is where its next checkpoint
        would have been (-1: none, metrics off)."""
        ended = self.monotonic()
        self.busy_seconds = self.base_busy + (ended - started)
        self.executed = self.base_executed + done
        self.last_executed = self.wall()
        if mark < 0:
            return
        if self.timing:  # the sample was the batch's last tuple (mark - 1)
            self._end_sample(ended, done)
            mark += self._stride((ended - started) / max(1, done)) - 1
        elif done > self.counted:
            self._tail(started, ended, done - self.counted)
        self.counted = 0
        self.left = max(0, mark - done)

    def _tail(self, started: float, ended: float, tuples: int) -> None:
        """The tuples after the batch's last sample: that sample's time in process (the
        batch's mean if none was ever taken), and as process latency the middle of their
        stretch of the batch."""
        took = self.last_took or (ended - started) / (self.counted + tuples)
        self.execute_latency.record(took, tuples)
        middle = (max(started, self.last_ended) + ended) / 2
        self.process_latency.record(middle - (self.arrived or started), tuples)

    def report(self) -> dict:
        out = {"executed": self.executed, "acked": self.acked, "failed": self.failed,
               "busy_seconds": self.busy_seconds,
               "dropped": self.dropped, "errors": self.errors,
               "first_executed": self.first_executed, "last_executed": self.last_executed}
        if self.keys is not None and self.keys.total:
            out["hot_keys"] = self.keys.report()
        return out

    def latency_report(self, complete: LatencyHistogram | None) -> dict:
        """Latency histograms (cumulative, sparse buckets: the master windows them) and
        their summaries since this incarnation started; nothing with metrics off
        (``complete``: a tracking spout's complete latency)."""
        if self.execute_latency is None:
            return {}
        hists = {"execute": self.execute_latency, "process": self.process_latency}
        if complete is not None:
            hists["complete"] = complete
        return {"histograms": {k: h.sparse() for k, h in hists.items()},
                "latency_ms": {k: h.summary() for k, h in hists.items()}}


def streams_report(streams: Mapping[str, StreamOut]) -> dict:
    """What the task's streams sent, and which are tapped or recorded."""
    outs = streams.values()
    return {"emitted": sum(o.emitted for o in outs),
            "stream_emitted": {name: o.emitted for name, o in streams.items()},
            "transferred": sum(o.transferred for o in outs)}


def watched_report(streams: Mapping[str, StreamOut]) -> dict:
    return {"tapped": [name for name, o in streams.items() if o.tap is not None],
            "recording": [name for name, o in streams.items() if o.recorder is not None],
            "queued_tuples": sum(o.queued() for o in streams.values())}


def user_report(metrics: UserMetrics) -> dict:
    """The user's metrics (``context.register_metric``), only once one is registered:
    a task without any reports no extra key."""
    return {"user_metrics": metrics.report()} if metrics.metrics else {}


def window_report(user: Spout | Bolt) -> dict:
    """A windowed bolt's windows, under ``window`` (docs/windows.md, "Seeing windows
    live"); nothing for any other task. ``Bolt.window_report`` is the protocol (None by
    default), since ``runtime.windows`` is a floor above the engine."""
    report = user.window_report() if isinstance(user, Bolt) else None
    return {} if report is None else {"window": report}
