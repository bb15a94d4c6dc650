"""One task's share of tracing (issue 20; docs/internals/tracing.md): the sampled spout
tuples it marks, the marked tuples it receives, the marked children they spawn, and the
records of all three it owes the master.

Only traced tuples pay. A task sends traced tuples the usual way, into its streams'
batches, but apart: before a traced emit (a spout) or a traced ``process`` call (a bolt)
the length of every pending list is noted (what waits there stays, uncopied), and after
it only the lists' tails, the call's tuples, are sent (``StreamOut.send_tails``), with
``StreamOut.send`` swapped for a list, so the frames caught hold only that call's
tuples; the heads leave at the usual flush (no batch is cut). A batch the call fills is
caught too, and split at its head's length. A bolt's traced children are caught once
its input is acked too (before the next traced input, or when the frame is done), so
that a BasicBolt's ack folded into its last child travels with it. They are kept
untouched, marked (trace id, a hop id per tuple, the time they left), as entries of a
TRACED frame for their task, which rides the next frame the task's stream sends there:
that frame goes inside it, as an entry of trace id 0 (``riders.py``); what found no
frame by the executor's flush goes alone then. The untraced path, its closures and its
decoders, is not touched.

Sampling is in runs (since 2026-11-28, wt-runs20): once a gap is used up, a spout traces
the next :data:`RUN` tuples in one window, and a bolt's traced inputs of one TRACED entry
share one window too, each tuple (a *unit*) its own trace: tuple ``n`` of a run is trace
``t + n``, a child the trace of its input. The lengths of the pending lists are noted
after each unit; a frame caught holds one list's tail in order, so their growth says
which unit each of its tuples came from: its entry and its ``sent`` record carry these
*spans*. Where a frame would not hold a list's tail (a grouping that splits an untracked
batch by value) or an untraced emit could fall into the window (a spout's live direct
stream), each unit has a window of its own, as before runs; a batch filled inside a run
ends the run there.

A receiving task processes each inner frame as any other, in the same ``execute`` as the
frame it rode, with the user's ``process`` wrapped for that inner frame's tuples (the
wrapper switched per frame, ``BoltSide.on_frame``'s ``before``): each tuple's hop is
timed and recorded, and what it emitted is
caught as its children (under acking, only what was anchored: an unanchored emit travels
untraced). A traced tuple a bolt keeps and acks later is watched by identity until it is
acked, failed or forgotten (``HELD_FOR`` message timeouts).

Records (plain lists and tuples, msgpack-ready; ``runtime.observe.tracestore`` reads
them):

======================================================================  ====================
``("start", trace, msg_id, started, tracked[, values])``                  a spout traced
``("starts", trace, tracked, msg_ids, started)``                          a spout's run traced
``("sent", trace, first, parent, dest, stream, body, bare, emitted, kind)``  copies left
``("sent", trace, first, parents, dest, ..., kind, spans)``               a run's copies left
``("hops", trace, first, queued_us, executed_us, outcome, ...)``          copies processed
``("hops", trace, first, spans, queued_us, executed_us, outcome, ...)``   a run's processed
``("outcome", trace, hop, outcome)``                                      a held copy settled
``("done", trace, status, complete_ms)``                                  the spout's outcome
======================================================================  ====================

``parent`` is 0 for the spout's own copies (hop ids are random, never 0). A frame's hop
ids are consecutive: its n-th tuple's is ``first + n``, on the wire (a TRACED entry
carries ``first`` alone) and in the records. A ``sent`` record covers one frame: its
``kind`` and ``body`` untouched (its values, and so how many copies it holds, are read
by the master's store, ``wire.batch_values``: bare values when ``bare``). A ``hops``
record covers the tuples of one traced frame a task processed, from hop ``first`` on:
per tuple, flat, its wait and its call in whole microseconds and its outcome's code
(:data:`~runtime.observe.traces.HOP_OUTCOMES`). ``start`` names neither the spout's
component nor its task (the report's task is the spout's) and carries the values only
when no frame of the tuple was caught (the spout's ``sent`` body holds them otherwise).
A run's frame (a window several units shared) has ``spans``, flat ``[d, n, ...]``: its
first ``n`` tuples are of trace ``trace + d``, the next ones of the next span's, with a
parent a span in ``parents``; its TRACED entry carries the same spans as a sixth field,
and the receiver writes one ``hops`` record for the entry, with the spans of the tuples it
covers (relative to its own trace id, the first tuple's). A spout's run whose every tuple
is in a frame caught is one ``starts`` record, its ``n``-th msg_id and start time those of
trace ``trace + n`` (since 2026-11-28, midday, wt-off20: a ``start`` a tuple and a ``hops``
a span before, each packed, unsealed and filed alone). Until 2026-11-27 (wt-trace8) hop ids
went one by one, a ``hops`` record held a tuple ``(hop, queued_ms, executed_ms,
outcome)`` per copy and ``start`` the values too: a traced sentence's report was 820
bytes. The records are tuples, most of atoms: the
collector stops tracking such a tuple at its first pass, so the records waiting for a
report (up to a report interval's) are not traversed again and again.

The parts: this module holds the :class:`Tracer` (what a task's tracing keeps, and the
shared windows' frames sorted by unit); ``trace_window.py`` the window that catches a
traced call's frames; ``tracing_spout.py`` a spout's sampling and
its traced roots, ``tracing_bolt.py`` a bolt's traced inputs, ``trace_ids.py`` the ids and
limits all three share.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from runtime import wire
from runtime.model.api import Tuple

from .outbound import Send, StreamOut
from .riders import Riders
from .trace_ids import HELD_FOR, MAX_RECORDS, RUN, gap, new_first
from .trace_window import Window
from .tracing_bolt import BoltTracing
from .tracing_spout import Run, SpoutTracing

__all__ = ["RUN", "Tracer"]


class Tracer(SpoutTracing, BoltTracing):
    """One task's tracing: its rate (spouts), the records waiting for the report, the
    traced roots a spout waits on, the traced inputs a bolt holds."""

    def __init__(self, comp: str, task: int, streams: Mapping[str, StreamOut], send: Send,
                 acking: bool, rate: float, timeout: float,
                 wall: Callable[[], float], spout: bool = False) -> None:
        self.comp, self.task, self.streams, self.acking = comp, task, streams, acking
        self.send = send  # the task's own (the driver's)
        # the streams someone subscribes to (wired before this): only they send, and a
        # sink's traced calls catch nothing
        self.live = [out for out in streams.values() if out.outlets or out.direct]
        # the traced frames kept, to ride the next frame to their task (riders.py)
        self.riders = Riders(send)
        self.spout = spout  # only a spout samples (arms its emit)
        self.wall, self.keep = wall, HELD_FOR * timeout
        self.records: deque[list] = deque(maxlen=MAX_RECORDS)  # the heartbeat pops them
        self.user: Any = None  # the user's object, once bound (start)
        # spout tuples to let pass before the next run, the tuples the run under way still
        # owes, the gap after it (drawn when the run starts, so that the spout's turn
        # needs no cut after it), and the traced tuples of the turn's current piece
        self.rate, self.skip, self.owed, self.after, self.seen = 0.0, 0, 0, 0, 0
        self.run: Run | None = None  # the spout's open window of traced tuples
        self.stepping = False  # a piece of the spout's turn is under way (piece, arm)
        self.set_rate(rate)
        # a spout's traced roots: root -> (trace, started); msg_id -> root (timeouts)
        self.roots: dict[int, tuple[int, float]] = {}
        self.by_msg: dict[Any, int] = {}
        # a bolt's traced inputs held past their process call: id -> (tuple, trace, hop, since)
        self.held: dict[int, tuple[Tuple, int, int, float]] = {}
        # the traced inputs being processed: their calls' window (Window), each one's
        # trace and hop, whether only anchored children count, and the entry they are
        # of (its ``done`` list: a window is shared within one entry; caught by _close)
        self.open: tuple[Window, list[tuple[int, int]], bool, list] | None = None

    def set_rate(self, rate: float) -> None:
        """Trace this fraction of the spout's tuples from now on (0.0: none)."""
        self.rate = float(rate)
        self.skip = gap(self.rate, RUN) if self.rate > 0 else 0
        self.owed = self.seen = 0
        if self.rate > 0:
            self.arm(0)
        elif self.user is not None and getattr(self.user.emit, "traced", False):
            self.user.emit = self.user.emit.base  # off: the armed emit goes

    def drain(self) -> list[list]:
        """The records waiting, oldest first (the heartbeat thread calls this)."""
        out, records = [], self.records
        while records:
            out.append(records.popleft())
        return out

    # -- sending traced tuples ----------------------------------------------------------
    def set_aside(self) -> Window:
        """Open a traced call's window: what waits in the streams' pending lists (untraced
        tuples) stays there, in place; only their lengths are noted, so that what the
        call adds is their tails. A stream nobody subscribes to sends nothing, and is
        left alone."""
        return Window(self.live)

    def catch(self, window: Window, trace: int, parent: int,
              only_anchored: bool) -> list[tuple[int, list]]:
        """Close ``window``: send the tails of the pending lists, catching the frames
        (``StreamOut.send_tails``, ``StreamOut.send`` swapped for a list): they hold
        only the tuples emitted since :meth:`set_aside`, each a child of ``parent``;
        the heads stay for the usual flush. Each frame caught is kept, marked, to
        ride (:class:`Riders`); with ``only_anchored``, an untracked frame (an emit not
        anchored, under acking) is no descendant and is sent as it is. Returns each
        kept frame's kind and body."""
        caught = window.close(self.send)
        kept = []
        for out, header, body in caught:
            h = wire.parse_header(header)
            if only_anchored and h.kind == wire.DATA:
                self.send(header, body)
            else:
                self._mark(out, header, h, body, trace, parent)
                kept.append((h.kind, body))
        return kept

    def catch_units(self, window: Window, trace: int, units: list[tuple[int, int]],
                    only_anchored: bool) -> list[tuple[int, bytes, list[tuple[int, int]]]]:
        """Close a window several traced units shared (a spout's run, a bolt's traced
        inputs of one entry), ``units`` their ``(trace - trace, parent hop)`` in order, its
        ``notes`` the pending lists' lengths after each: as :meth:`catch`, and each kept
        frame marked with its spans (which unit each of its tuples came from, from the
        notes: a frame holds one list's tail, in order), sent as a run's entry and
        record. Returns each kept frame's kind, body and ``(unit, tuples)`` spans."""
        notes, heads = window.notes, [h for _, _, hs, _ in window.marks for h in hs]
        early = bool(window.early)  # a batch filled: the last unit's counts are the rest
        caught = window.close(self.send)
        places: dict[int, dict] = {}
        index, at = {}, 0  # a stream's first list's place in the notes
        for out, lists, _, _ in window.marks:
            index[id(out)] = at
            at += len(lists)
        left: dict[bytes, list[int]] = {}  # header -> what each unit has left in its list
        sizes = _sizes(caught) if early else None
        kept = []
        for out, header, body in caught:
            h = wire.parse_header(header)
            if only_anchored and h.kind == wire.DATA:
                self.send(header, body)
                continue
            counts = left.get(header)
            if counts is None:
                place = places.get(id(out))
                if place is None:
                    place = places[id(out)] = out.places()
                lists, stride, _ = place[header]
                i = index[id(out)] + lists[0]
                counts = left[header] = _unit_counts(notes, heads[i], i, stride)
                if early:  # the last unit's: whatever its frames hold past the others'
                    counts[-1] = max(sum(sizes[header]) - sum(counts[:-1]), 0)
            spans = _take(counts, sizes[header].pop(0) if early else None)
            flat, parents = [], []
            for n, c in spans:
                flat += (units[n][0], c)
                parents.append(units[n][1])
            now, first = self.wall(), new_first()
            self.riders.keep(out, header, [h.kind, body, trace, first, now, flat])
            self.records.append(("sent", trace, first, parents, h.dest, out.name, body,
                                 out.bare, now, h.kind, flat))
            kept.append((h.kind, body, spans))
        return kept

    def _mark(self, out: StreamOut, header: bytes, h: wire.Header, body: bytes,
              trace: int, parent: int) -> None:
        """Keep a caught frame, marked, to ride, and record its copies. The body is
        neither decoded nor counted here: its hop ids are consecutive from ``first``
        (the receiver numbers its tuples on from it), and the record carries the body
        itself (bytes, as the report encodes them) for the master's store to read, once.
        """
        now, first = self.wall(), new_first()
        self.riders.keep(out, header, [h.kind, body, trace, first, now])
        # one record for the frame (the store splits it), a tuple of atoms
        self.records.append(("sent", trace, first, parent, h.dest, out.name, body,
                             out.bare, now, h.kind))


def _unit_counts(notes: list, head: int, i: int, stride: int) -> list[int]:
    """Each unit's tuples in the ``i``-th pending list (of the window's, every stream's
    in order): its length's growth from the note before (``head`` at first) to the
    unit's own."""
    counts, before = [], head
    for note in notes:
        counts.append((note[i] - before) // stride)
        before = note[i]
    return counts


def _take(counts: list[int], size: int | None) -> list[tuple[int, int]]:
    """A frame's spans, ``(unit, tuples)``, taken from the front of ``counts`` (which it
    consumes): all of them, or the first ``size`` tuples (a list sent in several
    frames, when a batch filled)."""
    spans = []
    for n, c in enumerate(counts):
        if size is not None:
            c = min(c, size)
            size -= c
        if c > 0:
            spans.append((n, c))
            counts[n] -= c
    if not spans:  # (cannot be: a frame holds a tuple) the last unit's
        spans.append((len(counts) - 1, max(size or 1, 1)))
    return spans


def _sizes(caught: list[tuple[StreamOut, bytes, bytes]]) -> dict[bytes, list[int]]:
    """Each caught frame's tuples, per header in order (decoded: only when a batch filled
    inside a shared window, rare)."""
    sizes: dict[bytes, list[int]] = {}
    for _, header, body in caught:
        kind = wire.parse_header(header).kind
        sizes.setdefault(header, []).append(len(wire.batch_values(kind, body)))
    return sizes
