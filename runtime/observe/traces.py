"""Traces of whole tuple trees, as frozen data (issue 20; docs/internals/tracing.md).

A traced spout tuple carries a mark that every tuple anchored to it (or, without an acker,
emitted while processing it) inherits. Each task that receives a marked tuple reports one
:class:`Hop`; the topology master assembles the hops of one spout tuple into a
:class:`Trace`. These records are what ``running.traces()``, ``running.lineage()``, the
dashboard's lineage tab and ``%topology lineage`` read.

Times are milliseconds. ``queued_ms`` is from the emit that made the tuple to the start of
its ``process`` call (the wait in batches, stream managers and queues); ``executed_ms`` is
the ``process`` call itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HOP_OUTCOMES", "Hop", "Trace", "TRACE_STATUSES", "TRANSIT"]

TRACE_STATUSES = ("acked", "failed", "timed_out", "pending")
TRANSIT = "<transit>"  # held_by's component when a tuple of the tree never reached its task
# a hop's outcome by its code in the trace records (runtime/engine/tracing.py): 1 byte
HOP_OUTCOMES = (None, "acked", "failed")


@dataclass(frozen=True)
class Hop:
    """One delivery of a tuple of the tree: the task that received and processed it."""

    component: str
    task: int
    stream: str
    values: tuple[Any, ...]
    parent: int | None  # index in Trace.hops of the hop whose process() emitted it; None: spout
    queued_ms: float | None = None  # emit -> process start; None while not yet processed
    executed_ms: float | None = None  # process() duration; None while not yet processed
    outcome: str | None = None  # "acked", "failed", None (not acked yet, or untracked)
    emitted_at: float | None = None  # wall-clock seconds of the emit (for pictures)


@dataclass(frozen=True)
class Trace:
    """One traced spout tuple and every delivery of its tree, in causal order."""

    msg_id: Any
    component: str  # the spout component
    task: int  # the spout task
    status: str  # one of TRACE_STATUSES
    complete_ms: float | None  # spout emit -> completion; None while pending
    hops: tuple[Hop, ...]
    held_by: tuple[str, int | None] | None = None  # timed_out/failed: who held it; else None
    started: float | None = None  # wall-clock seconds of the spout's emit
    values: tuple[Any, ...] = ()  # the spout tuple's values

    def slowest(self) -> int | None:
        """Index of the hop with the largest queued + executed time, or None with no timed hop."""
        timed = [(h.queued_ms or 0.0) + (h.executed_ms or 0.0) for h in self.hops]
        if not any(h.executed_ms is not None for h in self.hops):
            return None
        return max(range(len(timed)), key=timed.__getitem__)
