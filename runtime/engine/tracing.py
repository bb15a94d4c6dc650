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
``("sent", trace, first, parent, dest, stream, body, bare, emitted, kind)``  copies left
``("sent", trace, first, parents, dest, ..., kind, spans)``               a run's copies left
``("hops", trace, first, queued_us, executed_us, outcome, ...)``          copies processed
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
and the receiver writes a ``hops`` record a trace. Until 2026-11-27 (wt-trace8) hop ids
went one by one, a ``hops`` record held a tuple ``(hop, queued_ms, executed_ms,
outcome)`` per copy and ``start`` the values too: a traced sentence's report was 820
bytes. The records are tuples, most of atoms: the
collector stops tracking such a tuple at its first pass, so the records waiting for a
report (up to a report interval's) are not traversed again and again.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from math import log as _ln
from typing import Any

from runtime import wire
from runtime.model.api import FailedException, Tuple
from runtime.model.constants import DEFAULT_STREAM
from runtime.observe.traces import HOP_OUTCOMES

from .outbound import Send, StreamOut
from .riders import Riders

HELD_FOR = 3.0  # message timeouts a watched tuple (spout root, held input) is kept for
MAX_WATCHED = 10_000  # traced roots or held inputs one task watches at most
MAX_RECORDS = 50_000  # records waiting for a report at most (the oldest are dropped)
RUN = 8  # spout tuples traced in a row once a gap is used up (docs/internals/tracing.md)
_STATUS = {wire.ACKED_OK: "acked", wire.ACKED_FAILED: "failed",
           wire.ACKED_TIMEOUT: "timed_out"}
_ACKED, _FAILED = HOP_OUTCOMES.index("acked"), HOP_OUTCOMES.index("failed")


def new_mark() -> int:
    """A trace or hop id: random, 63 bits, never 0 (0 is 'the spout' as a parent)."""
    return random.getrandbits(63) or 1


def new_first() -> int:
    """The first hop id of one frame's tuples, whose ids are consecutive from it: random,
    62 bits (a frame's ids stay below 2**63), never 0; one draw per frame rather than per
    tuple, and no count of its tuples needed."""
    return random.getrandbits(62) + 1


def gap(rate: float, run: int = 1) -> int:
    """Spout tuples to let pass before the next run of ``run`` traced ones: geometric,
    mean ``run * (1 - rate) / rate``, so that ``rate`` of the tuples are traced (a run
    and its gap hold ``run / rate`` tuples on average)."""
    if rate >= 1.0:
        return 0
    p = rate / (rate + run * (1.0 - rate))  # the geometric's parameter for that mean
    return int(_ln(1.0 - random.random()) / _ln(1.0 - p))


class Tracer:
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
        self.run: _Run | None = None  # the spout's open window of traced tuples
        self.stepping = False  # a piece of the spout's turn is under way (piece, arm)
        self.set_rate(rate)
        # a spout's traced roots: root -> (trace, started); msg_id -> root (timeouts)
        self.roots: dict[int, tuple[int, float]] = {}
        self.by_msg: dict[Any, int] = {}
        # a bolt's traced inputs held past their process call: id -> (tuple, trace, hop, since)
        self.held: dict[int, tuple[Tuple, int, int, float]] = {}
        # the traced inputs being processed: their calls' window (_Window), each one's
        # trace and hop, whether only anchored children count, and the entry they are
        # of (its ``done`` list: a window is shared within one entry; caught by _close)
        self.open: tuple[_Window, list[tuple[int, int]], bool, list] | None = None

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
    def set_aside(self) -> _Window:
        """Open a traced call's window: what waits in the streams' pending lists (untraced
        tuples) stays there, in place; only their lengths are noted, so that what the
        call adds is their tails. A stream nobody subscribes to sends nothing, and is
        left alone."""
        return _Window(self.live)

    def catch(self, window: _Window, trace: int, parent: int,
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
                self._mark(out, h, body, trace, parent)
                kept.append((h.kind, body))
        return kept

    def catch_units(self, window: _Window, trace: int, units: list[tuple[int, int]],
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
            self.riders.keep(out, h, [h.kind, body, trace, first, now, flat])
            self.records.append(("sent", trace, first, parents, h.dest, out.name, body,
                                 out.bare, now, h.kind, flat))
            kept.append((h.kind, body, spans))
        return kept

    def _mark(self, out: StreamOut, h: wire.Header, body: bytes, trace: int,
              parent: int) -> None:
        """Keep a caught frame, marked, to ride, and record its copies. The body is
        neither decoded nor counted here: its hop ids are consecutive from ``first``
        (the receiver numbers its tuples on from it), and the record carries the body
        itself (bytes, as the report encodes them) for the master's store to read, once.
        """
        now, first = self.wall(), new_first()
        self.riders.keep(out, h, [h.kind, body, trace, first, now])
        # one record for the frame (the store splits it), a tuple of atoms
        self.records.append(("sent", trace, first, parent, h.dest, out.name, body,
                             out.bare, now, h.kind))

    # -- a spout's sampled tuples -------------------------------------------------------
    def piece(self) -> int:
        """The spout's calls to make before :meth:`arm` looks again: a run and the gap
        after it (armed), else the gap left. A piece is under way until :meth:`arm`."""
        self.stepping = True
        return max(self.owed + self.after if self.owed > 0 else self.skip, 1)

    def cut(self) -> None:
        """The piece ended early (its ``next_tuple`` raised): a run under way is caught,
        what waits put back."""
        self.stepping = False
        if self.run is not None:
            self._end_run()

    def arm(self, emitted: int) -> None:
        """After a piece of a spout's turn that emitted ``emitted`` tuples: a run the
        piece cut short is caught (the rest of it is owed, in a run of its own); once
        the gap is used up, a run of :data:`RUN` tuples starts at the next emit (the
        user's ``emit`` is swapped for one call)."""
        self.stepping = False
        if self.run is not None:
            self._end_run()
        self.skip -= emitted - self.seen  # (the traced ones are no part of a gap)
        self.seen = 0
        if self.rate <= 0 or not self.spout or self.user is None:
            return
        if self.owed <= 0 and self.skip <= 0:
            self.owed, self.after = RUN, gap(self.rate, RUN)
        if self.owed > 0:
            self._arm_once()

    def _arm_once(self) -> None:
        user = self.user
        base = user.emit
        if getattr(base, "traced", False):
            return

        def emit(values, stream=DEFAULT_STREAM, msg_id=None):
            out = self.streams.get(stream)
            if out is None:
                return base(values, stream, msg_id)
            tracked = self.acking and msg_id is not None
            run = self.run
            if run is not None and (run.out is not out or run.tracked != tracked):
                self._end_run()  # a run's tuples are of one stream and one kind
                run = None
            if run is None:  # what waits stays for the usual flush
                run = self.run = _Run(self.set_aside(), out, tracked,
                                      self._takes_whole(out, tracked))
            started = self.wall()
            try:
                base(values, stream, msg_id)
            except BaseException:  # a bad emit raises (and is reported): the run so far
                self._end_run()  # is caught, what waits is put back
                raise
            run.tuples.append((msg_id, started, values))
            if run.whole:
                run.window.note()  # the pending lists' lengths after this tuple
            self.seen += 1
            self.owed -= 1
            if self.owed <= 0:  # the run is whole: caught, and the gap after it begins
                self._end_run()
                self.skip = self.after
                if self.rate > 0 and self.after <= 0:  # the next run is due at once
                    self.owed, self.after = RUN, gap(self.rate, RUN)
                else:
                    user.emit = base
            elif not run.whole or run.window.early or not self.stepping:
                # one tuple a window (a grouping splits its frames by value), a batch
                # filled, or an emit outside the spout's turn (its ``fail`` replaying,
                # called on an ACKED frame or a timeout): the window must not outlive it
                self._end_run()
            return None

        emit.traced, emit.base = True, base
        user.emit = emit

    def _takes_whole(self, out: StreamOut, tracked: bool) -> bool:
        """Whether a run of the spout's tuples on ``out`` may share one window: each frame
        caught then holds the run's tuples in order (a tracked tuple's copies wait in
        per-task lists; an untracked one's batch is taken whole by every subscriber),
        and no direct stream is live (the spout's ``emit_direct``, never traced, would
        fall into the window)."""
        if any(o.direct for o in self.live):
            return False
        return tracked or all(o.fixed is not None for o in out.outlets)

    def _end_run(self) -> None:
        """Catch the spout's open run: one trace a tuple (consecutive ids), their frames
        caught once, a ``start`` record a tuple and its root watched (tracked)."""
        run, self.run = self.run, None
        tuples = run.tuples
        if len(tuples) <= 1:
            trace = new_mark()
            kept = self.catch(run.window, trace, 0, only_anchored=False)
            if tuples:
                msg_id, started, values = tuples[0]
                root = _root_of(kept) if run.tracked else None
                self._started(trace, msg_id, started, None if kept else values, run.tracked,
                              root)
            return
        trace = new_first()  # (62 bits: trace + n stays below 2**63)
        kept = self.catch_units(run.window, trace, [(n, 0) for n in range(len(tuples))],
                                only_anchored=False)
        roots = _roots_of(kept) if run.tracked else {}
        covered = {n for _, _, spans in kept for n, _ in spans}
        for n, (msg_id, started, values) in enumerate(tuples):
            self._started(trace + n, msg_id, started, None if n in covered else values,
                          run.tracked, roots.get(n))

    def _started(self, trace: int, msg_id, started: float, values, tracked: bool,
                 root: int | None) -> None:
        """A traced spout tuple's ``start`` record (its values only when no frame of it
        was caught: the spout's ``sent`` body holds them), and its root watched."""
        self.records.append(("start", trace, _plain(msg_id), started, tracked)
                            if values is None else
                            ("start", trace, _plain(msg_id), started, tracked, list(values)))
        if tracked and root is not None:
            self._watch_root(root, trace, msg_id, started)

    def _watch_root(self, root: int, trace: int, msg_id, started: float) -> None:
        if self.roots:
            self._expire_roots(started)
        self.roots[root] = (trace, started)
        try:  # (not contextlib.suppress: three Python calls a traced emit)  # noqa: SIM105
            self.by_msg[msg_id] = root
        except TypeError:  # an unhashable msg_id: its timeout is not told apart from a
            pass  # failure

    def _expire_roots(self, now: float) -> None:
        """Forget the roots watched longer than ``keep``: the oldest first, as they were
        added (their start times ascending), so the look stops at the first kept one
        instead of reading every root at every traced emit."""
        roots = self.roots
        if len(roots) >= MAX_WATCHED:
            for root in list(roots)[:len(roots) // 2]:
                del roots[root]
        stale = []
        for root, (_, started) in roots.items():
            if now - started <= self.keep:
                break
            stale.append(root)
        for root in stale:
            del roots[root]
        if not roots:
            self.by_msg.clear()

    def on_acked(self, batch: list) -> None:
        """An ACKED frame for this spout: the traced roots among its ``root, outcome``
        pairs are done."""
        roots = self.roots
        for root, outcome in zip(batch[0::2], batch[1::2]):
            if root in roots and outcome in _STATUS:
                self._done(root, _STATUS[outcome])

    def on_completed(self, body: list) -> None:
        """A COMPLETED frame, ``[first, count, ..., [root, ...]]``: trees acked."""
        if len(body) < 3 or not len(body) % 2 or not set(map(type, body[:-1])) <= {int}:
            return
        spans = list(zip(body[0:-1:2], body[1:-1:2]))
        done = [r for r in self.roots if any(f <= r < f + c for f, c in spans)]
        others = body[-1]
        done += [r for r in others if r in self.roots] if type(others) is list else []
        for root in done:
            self._done(root, "acked")

    def on_expired(self, msg_ids: list) -> None:
        """msg_ids the spout's own tracker timed out."""
        if not self.roots:  # nothing traced waits: the usual case, tracing off
            return
        for msg_id in msg_ids:
            try:
                root = self.by_msg.get(msg_id)
            except TypeError:
                continue
            if root is not None and root in self.roots:
                self._done(root, "timed_out")

    def _done(self, root: int, status: str) -> None:
        trace, started = self.roots.pop(root)
        self.records.append(("done", trace, status, (self.wall() - started) * 1000.0))

    # -- a bolt's traced inputs ---------------------------------------------------------
    def on_traced(self, bolt, h: wire.Header, body: bytes, waiting) -> None:
        """A TRACED frame: process each traced inner frame with the user's ``process``
        wrapped (each tuple's hop recorded, the children it emitted caught and marked,
        kept to ride this task's next frames), and the untraced frame they rode, if any,
        as any other, all in one ``execute`` (``BoltSide.on_frame``'s ``before``: one
        batch of statistics, the wrapper switched per entry, not tested per tuple). The
        traced entries' acks go with that frame's; when none rode (the entries found no
        frame by the sender's flush) each entry's go as it is done, as a frame's would:
        such a frame may hold a flush interval's traced calls (all of them at
        ``trace=1.0``), and acks held back for all of it would time out trees whose
        every hop had acked in time."""
        entries = wire.decode_traced(body)
        kind, inner, trace, _, _, _ = entries[-1]
        if trace:  # none rode (a rider is last, trace id 0): entry by entry, acks at once
            # (once output waits, the entries after are set aside by the bolt's execute)
            for kind, inner, trace, first, emitted, spans in entries:
                self._entry(bolt, wire.Header(kind, h.stream, h.dest, h.src), inner,
                            trace, first, emitted, spans, waiting, True)
            return
        done = [self._segment(bolt, *entry) for entry in entries[:-1]]
        try:  # the frame that rode last, the traced ones before it, in one execute
            bolt.on_frame(wire.Header(kind, h.stream, h.dest, h.src), inner, waiting,
                          before=done)
        finally:  # each entry's hops recorded, children caught, if execute stopped first
            for _, _, _, after in done:
                after()

    def _segment(self, bolt, kind: int, inner: bytes, trace: int, first: int,
                 emitted: float, spans: list | None = None, ack_each: bool = False,
                 ) -> tuple[int, bytes, Callable, Callable[[], None]]:
        """One traced entry of a TRACED frame as ``BoltSide.on_frame`` takes it before
        the frame it rode: its kind and body, the user's ``process`` wrapped for it, and
        what to do once its last tuple is done (once: the frame's end calls it again).
        A run's entry (``spans``) has a ``hops`` record a trace; ``ack_each``: its acks go
        as each trace's tuples are done, not at the entry's end."""
        # the wrapper is handed to this frame's execute, not set on the user's object:
        # patching it (or reading its __dict__) makes CPython 3.11 give up the inline
        # attribute loads of that object for good, and every untraced tuple after it
        # pays (its own ``self.counts``, ``self.emit``: ~40 % slower each)
        done: list[int] = []  # queued µs, executed µs, outcome code per tuple processed
        chunk = [first]  # the hop of done's first tuple (hop ids are consecutive)
        process = self._traced_process(bolt, self.user.process, trace, first, emitted,
                                       done, spans, chunk, ack_each)

        def after() -> None:
            if done:  # one record for the entry's tuples (its trace id once, one record
                # for the master to file), flat, of atoms: the collector lets it go
                if spans is None:
                    self.records.append(("hops", trace, chunk[0], *done))
                else:
                    self.records.extend(_span_hops(trace, spans, chunk[0] - first,
                                                   chunk[0], done))
                chunk[0] += len(done) // 3
                done.clear()
            self._close()  # the last traced input's children, its ack folded in

        return kind, inner, process, after

    def _entry(self, bolt, h: wire.Header, inner: bytes, trace: int, first: int,
               emitted: float, spans: list | None, waiting, ack_now: bool) -> None:
        _, _, process, after = self._segment(bolt, h.kind, inner, trace, first, emitted,
                                             spans, ack_now)
        try:
            bolt.on_frame(h, inner, waiting, ack_now=ack_now, process=process)
        finally:
            after()

    def _traced_process(self, bolt, process, trace: int, first: int, emitted: float,
                        done: list, spans: list | None = None, chunk: list | None = None,
                        ack_each: bool = False):
        # called once per traced tuple (ten per sentence at a counter): what it needs is
        # bound here, and a sink (no subscribed stream) skips the catching altogether;
        # ``done`` takes each tuple's times and outcome for the frame's "hops" record, and
        # with ``chunk`` (the hop of done's first) says the tuple's place in the entry,
        # so its hop and trace are reckoned only when needed (a child's parent, a held
        # input), not counted a tuple
        wall, counts, live = self.wall, bolt.counts, self.live
        basic, acking, record = bolt.basic, self.acking, done.extend
        whole = bool(live) and all(o.fixed is not None for out in live for o in out.outlets)
        at0 = (lambda: 0) if chunk is None else (lambda: chunk[0] - first)
        traces = _traces(trace, spans) if spans is not None and live else None
        # a run's entry processed alone: the acks so far go as the next trace's first
        # tuple begins, as they would after an entry of one tree. Held for the whole
        # entry (eight trees), a slow bolt's acks of its first trees left seconds late
        # and those trees timed out, every hop acked in time (the lead's check,
        # tracing-log.md, 2026-11-28, early morning)
        starts = _starts(spans) if ack_each and spans is not None else None
        flush = bolt.acks.flush

        def mark(at: int) -> tuple[int, int]:  # the trace and hop of the entry's at-th
            if spans is None:
                return trace, first + at
            return (traces[at] if traces is not None else _traces(trace, spans)[at],
                    first + at)

        def traced(tup):
            tracked, failed = tup.ids is not None, counts.failed
            if starts is not None and at0() + len(done) // 3 in starts:
                flush()  # (after the previous tuple's ack: a BasicBolt's comes late)
            if live:  # a sink (a counter, per word) has no children to catch
                self._open(*mark(at0() + len(done) // 3), acking and tracked, whole, done)
            elif self.open is not None:
                self._close()
            started = wall()
            try:
                return process(tup)
            except FailedException:
                failed = -1  # failed, whatever the count says
                raise
            finally:
                ended = wall()
                # settled: a BasicBolt's input as process returns, another bolt's once
                # its ids are gone (acked or failed inside process)
                if basic or (tracked and tup.ids is None):
                    outcome = _FAILED if counts.failed > failed else _ACKED
                else:
                    outcome = 0
                queued = (started - emitted) * 1e6  # whole µs: 1-3 bytes packed, not 9
                record((int(queued + 0.5) if queued > 0.0 else 0,
                        int((ended - started) * 1e6 + 0.5), outcome))
                if outcome == 0 and tracked:  # (its triple is recorded: the last)
                    self._hold(tup, *mark(at0() + len(done) // 3 - 1))

        return traced

    def _open(self, trace: int, hop: int, only_anchored: bool, whole: bool,
              segment: list) -> None:
        """A traced input's children are caught from here: in the window the entry's
        traced inputs before it opened, if it may be shared (its children's frames each
        hold one pending list's tail, in order: every subscriber takes the batch whole,
        or, under acking, they wait in per-task lists; no batch filled yet), else in one
        of its own. The previous input, acked now, is noted or caught."""
        open_ = self.open
        if open_ is not None:
            window, units, anchored, mine = open_
            if (mine is segment and anchored == only_anchored and (whole or anchored)
                    and not window.early):
                window.note()  # the previous input's children end here
                units.append((trace, hop))
                return
            self._close()
        self.open = (self.set_aside(), [(trace, hop)], only_anchored, segment)

    def _close(self) -> None:
        """Catch the children of the traced inputs processed last, if not yet done: after
        the last one's ``process`` call *and* its ack, so that a BasicBolt's ack folded
        into its last child (acker.md, "An ack folded into a child") travels with it."""
        if self.open is not None:
            window, units, only_anchored, _ = self.open
            self.open = None
            if len(units) == 1:
                trace, hop = units[0]
                self.catch(window, trace, hop, only_anchored)
                return
            window.note()
            base = units[0][0]
            self.catch_units(window, base, [(t - base, hop) for t, hop in units],
                             only_anchored)

    # -- held inputs: acked or failed after their process call --------------------------
    def _hold(self, tup: Tuple, trace: int, hop: int) -> None:
        now = self.wall()
        held = self.held
        for key in [k for k, (_, _, _, t) in held.items() if now - t > self.keep]:
            del held[key]
        if len(held) >= MAX_WATCHED:
            held.pop(next(iter(held)))
        held[id(tup)] = (tup, trace, hop, now)
        self._watch_settles()

    def _watch_settles(self) -> None:
        """Wrap the user's ``ack`` and ``fail`` while held inputs are watched."""
        user = self.user
        if getattr(user.ack, "traced", False):
            return
        ack, fail = user.ack, user.fail
        self._settlers = (ack, fail)

        def traced_ack(tup):
            self._settled(tup, "acked")
            return ack(tup)

        def traced_fail(tup):
            self._settled(tup, "failed")
            return fail(tup)

        traced_ack.traced = traced_fail.traced = True
        user.ack, user.fail = traced_ack, traced_fail

    def _settled(self, tup, outcome: str) -> None:
        entry = self.held.get(id(tup))
        if entry is not None and entry[0] is tup:
            del self.held[id(tup)]
            self.records.append(("outcome", entry[1], entry[2], outcome))
        if not self.held:
            self.user.ack, self.user.fail = self._settlers


class _Window:
    """A traced call's view of its task's live streams: each one's pending lists and
    their lengths when the call began (the heads: untraced tuples, left in place), and
    what the streams sent while the call ran (only when it filled a batch), caught."""

    __slots__ = ("marks", "early", "notes", "flat")

    def __init__(self, live: list[StreamOut]) -> None:
        self.early: list[tuple[StreamOut, bytes, bytes]] = []
        self.notes: list[list[int]] = []  # per unit shared, every list's length
        self.flat: list[list] | None = None  # every pending list, the streams' in order
        self.marks = []
        early = self.early.append
        for out in live:
            lists = out.pending()
            self.marks.append((out, lists, list(map(len, lists)), out.send))
            out.send = lambda h, b, out=out: early((out, h, b))

    def note(self) -> None:
        """A unit of a shared window is done (a spout's tuple, a bolt's traced input and
        its ack): the pending lists' lengths now, which tell its tuples from the next's."""
        flat = self.flat
        if flat is None:  # (one list of lists: one C call a note)
            flat = self.flat = [part for _, lists, _, _ in self.marks for part in lists]
        self.notes.append(list(map(len, flat)))

    def close(self, send: Send) -> list[tuple[StreamOut, bytes, bytes]]:
        """The frames of the call's tuples, caught; the sends put back. A frame sent
        while the call ran is split (:meth:`_early`): its head goes now, by ``send``."""
        caught: list[tuple[StreamOut, bytes, bytes]] = []
        if self.early:
            self._early(send, caught)
        try:  # the streams still send to ``early``: their tails come next
            for out, lists, heads, _ in self.marks:
                if list(map(len, lists)) != heads:
                    out.send_tails(lists, heads)
        finally:
            for out, _, _, own in self.marks:
                out.send = own
        caught += self.early
        return caught

    def _early(self, send: Send, caught: list) -> None:
        """The frames a batch filled while the call ran: one holding only heads is sent
        now, one holding only the call's tuples caught, and one holding both split at
        the head's length (a frame of a grouping that splits the batch among several
        tasks by value is sent whole, untraced: which of its tuples the call emitted is
        not known). The heads of the lists sent are gone: what they hold now is the
        call's."""
        places = [out.places() for out, _, _, _ in self.marks]
        index = {id(out): m for m, (out, _, _, _) in enumerate(self.marks)}
        seen: set[tuple[int, bytes]] = set()  # a header's later frame is the call's alone
        early, self.early[:] = self.early[:], []
        for out, header, body in early:
            m = index[id(out)]
            place = places[m].get(header)
            if place is None:  # not from a pending list (cannot be): as it is
                send(header, body)
                continue
            lists, stride, whole = place
            heads = self.marks[m][2]
            h = 0 if (m, header) in seen else heads[lists[0]] // stride
            seen.add((m, header))
            if h == 0:
                caught.append((out, header, body))
            elif not whole:
                send(header, body)
            else:
                head, tail = _cut(wire.parse_header(header).kind, body, h, stride)
                if head is not None:
                    send(header, head)
                if tail is not None:
                    caught.append((out, header, tail))
            for i in lists:
                heads[i] = 0  # sent: later frames of this list hold the call's alone


def _cut(kind: int, body: bytes, h: int, stride: int) -> tuple[bytes | None, bytes | None]:
    """A frame's body as two: its first ``h`` tuples and the rest (None: none)."""
    batch = wire.decode_batch(body)
    if kind == wire.RUN:  # [first root, entries]: the rest numbered on from the head
        first, entries = batch
        parts = ([first, entries[:h]], [first + h, entries[h:]])
        sizes = (len(entries[:h]), len(entries[h:]))
    else:
        parts = (batch[:h * stride], batch[h * stride:])
        sizes = (len(parts[0]), len(parts[1]))
    return tuple(wire.encode_batch(p) if n else None for p, n in zip(parts, sizes))


def _span_hops(trace: int, spans: list, at: int, hop: int, done: list) -> list[tuple]:
    """The ``hops`` records of a run's entry's tuples processed from its ``at``-th on
    (hop ``hop``), ``done`` their flat (queued, executed, outcome) triples: one a span,
    taken a span at a time (a comparison a word before: ~50 k instructions an entry of
    eight sentences' words).

    >>> _span_hops(100, [0, 2, 1, 3], 1, 11, [5, 5, 0, 6, 6, 0, 7, 7, 0])
    [('hops', 100, 11, 5, 5, 0), ('hops', 101, 12, 6, 6, 0, 7, 7, 0)]
    """
    n, start, records = len(done) // 3, 0, []
    for d, count_ in zip(spans[0::2], spans[1::2]):
        end = start + count_
        lo, hi = max(start, at), min(end, at + n)  # the span's tuples done now
        if lo < hi:
            records.append(("hops", trace + d, hop + lo - at,
                            *done[3 * (lo - at):3 * (hi - at)]))
        start = end
        if start >= at + n:
            break
    return records


def _starts(spans: list) -> frozenset[int]:
    """Where each trace of a run's entry after its first begins, from its spans.

    >>> sorted(_starts([0, 2, 1, 3, 2, 1]))
    [2, 5]
    """
    at, starts = 0, set()
    for n in spans[1::2]:
        at += n
        starts.add(at)
    starts.discard(at)  # the entry's end
    return frozenset(starts)


def _traces(trace: int, spans: list) -> list[int]:
    """A run's entry's trace of each tuple, from its spans ``[d, n, ...]``."""
    traces: list[int] = []
    for d, n in zip(spans[0::2], spans[1::2]):
        traces += [trace + d] * n
    return traces


def _plain(msg_id):
    """A msg_id as the reports carry it: itself if msgpack can, else its repr."""
    return msg_id if wire.encodable(msg_id) else repr(msg_id)


def _root_of(inner: list[tuple[int, bytes]]) -> int | None:
    """The root a spout's traced tuple was given, read back from its own frames (their
    kinds and bodies: a tracked one is decoded, the rest are not read)."""
    for kind, body in inner:
        if kind not in (wire.RUN, wire.TRACKED):
            continue
        batch = wire.decode_batch(body)
        if kind == wire.RUN and len(batch) == 2 and type(batch[0]) is int:
            return batch[0]
        if kind == wire.TRACKED and len(batch) == 2:
            ids = batch[1]
            if type(ids) is int:
                return ids
            if type(ids) is dict and ids:
                return next(iter(ids))
    return None


class _Run:
    """A spout's traced tuples sharing one window: its stream, whether they are tracked,
    whether they may share it (:meth:`Tracer._takes_whole`), and each tuple's msg_id,
    emit time and values."""

    __slots__ = ("window", "out", "tracked", "whole", "tuples")

    def __init__(self, window: _Window, out: StreamOut, tracked: bool, whole: bool) -> None:
        self.window, self.out, self.tracked, self.whole = window, out, tracked, whole
        self.tuples: list[tuple] = []


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


def _roots_of(kept: list[tuple[int, bytes, list[tuple[int, int]]]]) -> dict[int, int]:
    """Each unit's root (a spout's run, tracked), read back from its frames: a RUN's n-th
    tuple's is its first root + n, a TRACKED frame's is in its ids."""
    roots: dict[int, int] = {}
    for kind, body, spans in kept:
        if kind not in (wire.RUN, wire.TRACKED):
            continue
        batch, at = wire.decode_batch(body), 0
        for n, c in spans:
            if n not in roots:
                root = _root_at(kind, batch, at)
                if root is not None:
                    roots[n] = root
            at += c
    return roots


def _root_at(kind: int, batch: list, at: int) -> int | None:
    if kind == wire.RUN:
        return batch[0] + at if len(batch) == 2 and type(batch[0]) is int else None
    ids = batch[2 * at + 1] if 2 * at + 1 < len(batch) else None
    if type(ids) is int:
        return ids
    return next(iter(ids)) if type(ids) is dict and ids else None
