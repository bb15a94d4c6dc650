"""What one task counted, and the plain dict an instance reports of it
(:meth:`runtime.engine.executor.Executor.report`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runtime.observe.metrics import LatencyHistogram
from runtime.observe.user_metrics import UserMetrics

from .outbound import StreamOut


class TaskCounts:
    """The counters of one task (tuples executed, acked, failed, dropped; errors; time
    busy) and its latency histograms, one record per batch (docs/internals/metrics.md).
    Every room of the executor adds to these; only this object reads the clocks for
    them."""

    __slots__ = ("executed", "acked", "failed", "dropped", "errors", "busy_seconds",
                 "first_executed", "last_executed", "execute_latency", "process_latency",
                 "arrived", "monotonic", "wall")

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

    def frame_arrived(self) -> None:
        """A frame was taken off the socket (read only with metrics on)."""
        if self.execute_latency is not None:
            self.arrived = self.monotonic()

    def started_batch(self) -> float:
        """When a batch starts (one clock read per batch, never per tuple)."""
        if self.first_executed is None:
            self.first_executed = self.wall()
        return self.monotonic()

    def ended_batch(self, started: float, done: int) -> None:
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
        waited = started - self.arrived if self.arrived else 0.0
        self.process_latency.record(waited + took * (done + 1) / (2 * done), done)

    def report(self) -> dict:
        return {"executed": self.executed, "acked": self.acked, "failed": self.failed,
                "busy_seconds": self.busy_seconds,
                "dropped": self.dropped, "errors": self.errors,
                "first_executed": self.first_executed, "last_executed": self.last_executed}

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
def window_report(user: object) -> dict:
    """A windowed bolt's windows, under ``window`` (docs/windows.md, "Seeing windows
    live"); nothing for any other task. Asked of the user's object by name, since
    ``runtime.windows`` is a floor above the engine."""
    report = getattr(user, "window_report", None)
    return {"window": report()} if callable(report) else {}
