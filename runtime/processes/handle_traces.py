"""The running topology's questions about where tuples went: traced trees, one tuple's
lineage and a tap on an edge (docs/internals/tracing.md). A part of
:class:`~runtime.processes.client.RunningTopology`."""

from __future__ import annotations

import time
from typing import Any

from runtime import wire
from runtime.model import controls as _controls
from runtime.model.constants import TAP_SECONDS
from runtime.model.controls import check_keep, check_tap
from runtime.observe.traces import TRACE_STATUSES, Trace, trace_from_plain

__all__ = ["TraceQuestions"]


class TraceQuestions:
    """Traces and taps; needs the handle's ``plan`` and ``_ask``."""

    def set_trace(self, rate: float | str) -> list[int]:
        """Trace this fraction (0.0..1.0) of spout tuples from now on, in every spout; 0.0
        turns tracing off. Samples come in runs of consecutive spout tuples (8), each
        its own trace (docs/internals/tracing.md, "How the mark travels"). Text is read
        as ``%topology trace`` reads it. A restarted spout traces at it too. Records a
        ``trace`` event and returns the tasks told; ValueError for a rate outside
        0.0..1.0."""
        rate = _controls.check_trace(rate)
        return self._ask(wire.AskSetTrace, value=rate)

    def traces(self, status: str | None = None, limit: int = 100) -> list[Trace]:
        """The newest traced trees, newest first: :class:`~runtime.observe.traces.Trace`
        records (``.msg_id``, ``.status``, ``.complete_ms``, ``.hops``, ``.held_by``), of
        ``status`` ("acked", "failed", "timed_out", "pending") if given, at most
        ``limit``. Instances report with their statistics, so a tree shows up, and
        grows, every ``stats_interval``."""
        if status is not None and status not in TRACE_STATUSES:
            raise ValueError(f"status must be one of {TRACE_STATUSES} or None, not {status!r}")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int >= 1, not {limit!r}")
        return [trace_from_plain(t)
                for t in self._ask(wire.AskTraces, status=status, limit=limit)]

    def lineage(self, msg_id: Any) -> Trace | None:
        """The trace of the spout tuple ``msg_id`` (the newest, if it was replayed), or
        None if it was not traced (or was dropped from the store, oldest first), and
        for None: a tuple emitted without a msg_id is found by :meth:`traces` only."""
        found = self._ask(wire.AskTraces, msg_id=msg_id, by_msg=True)
        return None if found is None else trace_from_plain(found)

    def traces_frame(self, status: str | None = None, limit: int = 100, spark=None):
        """:meth:`traces` as a Spark DataFrame, one row per hop
        (``runtime.recording.frames.traces_frame``)."""
        from runtime.recording import frames

        return frames.traces_frame(self, status, limit, spark=spark)

    def sample(self, component: str, stream: str = "default", n: int = 100, *,
               wait: bool = False, timeout: float = 2.0,
               keep: float = TAP_SECONDS) -> list[dict]:
        """The newest ``n`` tuples the instances of ``component`` sent on ``stream``,
        newest last: a tap on that edge.

        Each is ``{"values", "fields", "task" (the sending task), "stream", "ids" ({root id:
        edge id} of a tracked tuple, else None), "to" (the tasks it was sent to),
        "time" (wall clock, when its batch was sent)}``. A tuple sent to two subscribers
        appears once for each.

        A stream is tapped only while someone asks: each call keeps the tap on for
        ``keep`` seconds (10 by default; a live view refreshing faster keeps it on), and
        the instances report what they saw with their statistics (every
        ``stats_interval``). So the first call usually returns ``[]``; with ``wait=True``
        it asks again until some tuple arrives or ``timeout`` seconds pass. Sampling
        costs the instances nothing once the tap is off. ValueError for an unknown
        component or stream (naming the closest), an ``n`` outside 1..10000, or a
        ``keep`` outside (0, 600].
        """
        check_tap(self.plan.streams, component, stream, n)
        check_keep(keep)
        deadline = time.monotonic() + timeout
        while True:
            found = self._ask(wire.AskSample, component=component, stream=stream, n=n, keep=keep)
            if found or not wait or time.monotonic() > deadline:
                return found
            time.sleep(0.05)  # the period of asking again, while instances report
