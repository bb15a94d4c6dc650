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

from copy import deepcopy
from dataclasses import dataclass
from typing import Any

__all__ = ["ATOMS", "HOP_OUTCOMES", "Hop", "Trace", "TRACE_STATUSES", "TRANSIT",
           "trace_from_plain", "trace_to_plain"]

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


def trace_to_plain(trace: Trace) -> dict:
    """A Trace as plain data (a Reply's value, and what the master keeps for the one that
    may replace it, every couple of seconds while traces come): what
    ``dataclasses.asdict`` makes, equal and as deep a copy, but from each record's own
    ``__dict__`` (C copies) rather than its recursion, which deep-copies every field of
    every hop one Python call at a time: ~100 µs a sentence's trace of 11 hops against
    ~15, and 200 traces each time the master keeps them (docs/internals/tracing.md)."""
    plain = dict(trace.__dict__)
    plain["msg_id"] = _copied(trace.msg_id)
    plain["values"] = _copied(trace.values)
    plain["held_by"] = _copied(trace.held_by)
    plain["hops"] = tuple(map(_hop_to_plain, trace.hops))
    return plain


def _hop_to_plain(hop: Hop) -> dict:
    plain = dict(hop.__dict__)
    plain["values"] = _copied(hop.values)
    return plain


# the immutable scalars a msg_id or a value may be (msgpack's, no list or tuple): kept as
# they are, and a dict key as they are (the store's msg_key)
ATOMS = frozenset({str, int, float, bool, bytes, type(None)})


def _copied(value: Any) -> Any:
    """``value`` as ``asdict`` copies a field: itself when it is an atom or a tuple of
    atoms (immutable: a copy would be equal and no safer), else a deep copy."""
    if type(value) in ATOMS:
        return value
    if type(value) is tuple and set(map(type, value)) <= ATOMS:
        return value
    return deepcopy(value)


def trace_from_plain(data: dict) -> Trace:
    """A Trace back from :func:`trace_to_plain`'s data (lists become tuples)."""
    hops = tuple(Hop(**{**h, "values": tuple(h["values"])}) for h in data["hops"])
    held = data.get("held_by")
    return Trace(**{**data, "hops": hops, "values": tuple(data.get("values") or ()),
                    "held_by": tuple(held) if held is not None else None})
