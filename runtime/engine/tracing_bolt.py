"""A bolt's share of tracing (:class:`~runtime.engine.tracing.Tracer`, docs/internals/
tracing.md, "How the mark travels"): a TRACED frame's entries processed with the user's
``process`` wrapped (each tuple's hop timed and recorded, its children caught in a window
the entry's traced inputs share), and the traced inputs it holds past their ``process``
call watched until acked or failed."""

from __future__ import annotations

from collections.abc import Callable
from math import floor
from operator import sub

from runtime import wire
from runtime.model.api import FailedException, Tuple

from .trace_ids import ACKED, ACKS_HELD, FAILED, MAX_WATCHED

__all__ = ["BoltTracing"]


class BoltTracing:
    """A mixin of :class:`~runtime.engine.tracing.Tracer`, whose ``__init__`` sets what
    it reads (``open``, ``held``, ``live``, ``acking``, ``keep``) and which gives it
    ``set_aside``, ``catch`` and ``catch_units``."""

    # -- a bolt's traced inputs ---------------------------------------------------------
    def on_traced(self, bolt, h: wire.Header, body: bytes, waiting,
                  ack_now: bool = True) -> None:
        """A TRACED frame: process each traced inner frame with the user's ``process``
        wrapped (each tuple's hop recorded, the children it emitted caught and marked,
        kept to ride this task's next frames), and the untraced frame they rode, if any,
        as any other, all in one ``execute`` (``BoltSide.on_frame``'s ``before``: one
        batch of statistics, the wrapper switched per entry, not tested per tuple). The
        traced entries' acks go with that frame's; when none rode (the entries found no
        frame by the sender's flush) each entry's go as it is done, as a frame's would:
        such a frame may hold a flush interval's traced calls (all of them at
        ``trace=1.0``), and acks held back for all of it would time out trees whose
        every hop had acked in time. ``ack_now`` (False when the driver calls
        ``drained`` after each drain of its input, as an instance does): whether the
        acks of a frame that rode go at once or, as any frame's, at the drain's end.
        Sent at once, they cost the counter a COMPLETED frame a TRACED frame, and the
        spout a wake-up for it (tracing-log.md, "2026-11-28, late morning")."""
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
                          ack_now=ack_now, before=done)
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
        stamps: list[float] = []  # a sink's: its clock reads (_sink_process)
        outcomes: dict[int, int] = {}  # a sink's: the outcomes not its default, by tuple
        default = 0  # a sink's tuples' outcome unless ``outcomes`` says otherwise
        if self.live or (ack_each and spans is not None):
            process = self._traced_process(bolt, self.user.process, trace, first,
                                           emitted, done, spans, chunk, ack_each)
        else:  # a sink: nothing to catch, no acks to send between traces
            process, default = self._sink_process(bolt, trace, first, spans, chunk,
                                                  kind != wire.DATA, stamps, outcomes)

        def after() -> None:
            if stamps:  # a sink's tuples' times, from its clock reads, once an entry
                done[:] = _hop_times(stamps, emitted, outcomes, default)
                stamps.clear()
                outcomes.clear()
            if done:  # one record for the entry's tuples (its trace id once, one record
                # for the master to file), flat, of atoms: the collector lets it go
                if spans is None:
                    self.records.append(("hops", trace, chunk[0], *done))
                else:  # a run's: one record, its spans (the master files each span)
                    self.records.append(_run_hops(trace, spans, chunk[0] - first,
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
                        done: list, spans: list | None, chunk: list, ack_each: bool):
        # called once per traced tuple (ten per sentence at a counter): what it needs is
        # bound here, and a sink (no subscribed stream) skips the catching altogether;
        # ``done`` takes each tuple's times and outcome for the frame's "hops" record, and
        # with ``chunk`` (the hop of done's first) says the tuple's place in the entry,
        # so its hop and trace are reckoned only when needed (a child's parent, a held
        # input), not counted a tuple; read inline, not by a call (two calls a traced
        # input at the split, ~1,000 instructions, until 2026-11-28, afternoon)
        wall, counts, live = self.wall, bolt.counts, self.live
        basic, acking, record = bolt.basic, self.acking, done.extend
        whole = bool(live) and all(o.fixed is not None for out in live for o in out.outlets)
        # a run's entry: each tuple's trace, as an offset from ``trace``
        offsets = _offsets(spans) if spans is not None and live else None
        # a run's entry processed alone: the acks so far go as the next trace's first
        # tuple begins, as they would after an entry of one tree, once the entry has run
        # ACKS_HELD since they last went. Held for the whole entry (eight trees), a slow
        # bolt's acks of its first trees left seconds late and those trees timed out,
        # every hop acked in time (the lead's check, tracing-log.md, 2026-11-28, early
        # morning); sent at every tree of a fast bolt's entry, they cost a COMPLETED
        # frame of one root each, and the spout a wake-up each (tracing-log.md,
        # 2026-11-28, late morning)
        starts = _starts(spans) if ack_each and spans is not None else None
        flush, flushed = bolt.acks.flush, [wall()] if starts is not None else None

        def traced(tup):
            tracked, failed = tup.ids is not None, counts.failed
            at = chunk[0] - first + len(done) // 3  # its place in the entry
            if starts is not None and at in starts:
                now = wall()  # (after the previous tuple's ack: a BasicBolt's comes late)
                if now - flushed[0] >= ACKS_HELD:
                    flush()
                    flushed[0] = now
            if live:  # a sink (a counter, per word) has no children to catch
                if offsets is not None:  # (a run's entry: each tuple's trace listed)
                    self._open(trace + offsets[at], first + at, acking and tracked, whole,
                               done)
                else:
                    self._open(*_mark(trace, first, spans, at), acking and tracked, whole,
                               done)
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
                    outcome = FAILED if counts.failed > failed else ACKED
                else:
                    outcome = 0
                queued = (started - emitted) * 1e6  # whole µs: 1-3 bytes packed, not 9
                record((int(queued + 0.5) if queued > 0.0 else 0,
                        int((ended - started) * 1e6 + 0.5), outcome))
                if outcome == 0 and tracked:
                    self._hold(tup, *_mark(trace, first, spans, at))

        return traced

    def _sink_process(self, bolt, trace: int, first: int, spans: list | None,
                      chunk: list, tracked: bool, stamps: list, outcomes: dict,
                      ) -> tuple[Callable, int]:
        """The user's ``process`` wrapped for a sink's traced entry (no stream anyone
        subscribes to: a counter, ten calls a sentence), and the outcome its tuples have
        unless ``outcomes`` says otherwise. Per tuple it reads the clock once, after the
        call, into ``stamps`` (the first tuple's start is read before its call): a
        tuple's start is the end of the one before it in the entry, and ``_hop_times``
        makes the hops' times of the reads once the entry is done. Nothing is caught,
        and no tuple is built a call: an outcome other than the default (a failed
        input, one held past its call) is noted by its place."""
        wall, counts, process, hold = self.wall, bolt.counts, self.user.process, self._hold

        def held(tup, at: int) -> None:  # an input not settled by its call: watched
            outcomes[at] = 0
            hold(tup, *_mark(trace, first, spans, chunk[0] - first + at))

        if not (bolt.basic or tracked):  # acking off, or an unanchored input: no outcome
            def traced(tup):
                if not stamps:
                    stamps.append(wall())
                try:
                    return process(tup)
                finally:
                    stamps.append(wall())
            return traced, 0
        basic = bolt.basic

        def traced(tup):  # settled by its call: a BasicBolt's input as the call returns
            # (failed if it raised), a plain bolt's if its ids are gone (else held)
            if not stamps:
                stamps.append(wall())
            failed = counts.failed
            try:
                return process(tup)
            except FailedException:  # failed, whatever the count says (a plain bolt's
                outcomes[len(stamps) - 1] = FAILED  # input is an error: held, below)
                raise
            finally:
                stamps.append(wall())
                if tup.ids is not None and not basic:
                    held(tup, len(stamps) - 2)
                elif counts.failed > failed:
                    outcomes[len(stamps) - 2] = FAILED
        return traced, ACKED

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


def _hop_times(stamps: list[float], emitted: float, outcomes: dict[int, int],
               default: int) -> list[int]:
    """A sink's entry's hops as ``done`` holds them (flat queued µs, executed µs,
    outcome per tuple), from its clock reads: ``stamps[0]`` the first tuple's start,
    ``stamps[n + 1]`` the n-th's end and the next one's start. Each read is made whole
    µs since the entry left (its ``emitted``), and a call is the difference of two:
    a tuple's wait and call add up to the next one's wait, each within 1 µs of the
    times rounded one by one.

    >>> _hop_times([10.000002, 10.000005, 10.000006], 10.0, {1: 2}, 1)
    [2, 3, 1, 5, 1, 2]
    """
    us = [floor((t - emitted) * 1e6 + 0.5) for t in stamps]
    n = len(us) - 1
    done = [default] * (3 * n)
    done[0::3] = us[:-1] if us[0] >= 0 else [max(u, 0) for u in us[:-1]]
    done[1::3] = list(map(sub, us[1:], us[:-1]))
    for at, outcome in outcomes.items():
        done[3 * at + 2] = outcome
    return done


def _mark(trace: int, first: int, spans: list | None, at: int) -> tuple[int, int]:
    """The trace and hop of an entry's ``at``-th tuple (a run's entry: from its spans).

    >>> _mark(100, 50, [0, 2, 1, 3], 3)
    (101, 53)
    """
    if spans is None:
        return trace, first + at
    return _traces(trace, spans)[at], first + at


def _run_hops(trace: int, spans: list, at: int, hop: int, done: list) -> tuple:
    """The ``hops`` record of a run's entry's tuples processed from its ``at``-th on
    (hop ``hop``), ``done`` their flat (queued, executed, outcome) triples: one record
    for the entry's traces, ``("hops", trace', hop, spans', *done)``, its spans those
    of these tuples (``[d, n, ...]``, as the entry's, from ``trace'``, the first one's
    trace), which the master's store files a span to a tree
    (``TraceStore._file_run_hops``). Until 2026-11-28, midday, a record a span: 16 an
    entry of a run, each unpacked, checked and filed by the master alone.

    >>> _run_hops(100, [0, 2, 1, 3], 1, 11, [5, 5, 0, 6, 6, 0, 7, 7, 0])
    ('hops', 100, 11, [0, 1, 1, 2], 5, 5, 0, 6, 6, 0, 7, 7, 0)
    >>> _run_hops(100, [0, 2, 1, 3], 2, 12, [6, 6, 0])
    ('hops', 101, 12, [0, 1], 6, 6, 0)
    >>> _run_hops(100, [0, 1, 1, 1], 0, 11, [5, 5, 0, 6, 6, 0])
    ('hops', 100, 11, [0, 1, 1, 1], 5, 5, 0, 6, 6, 0)
    """
    n, start, mine = len(done) // 3, 0, []
    if not at and spans and spans[0] == 0 and sum(spans[1::2]) == n:  # the whole entry:
        return ("hops", trace, hop, spans, *done)  # its own spans (~1 µs, not ~8)
    for d, count_ in zip(spans[0::2], spans[1::2]):
        end = start + count_
        lo, hi = max(start, at), min(end, at + n)  # the span's tuples done now
        if lo < hi:
            mine += (d, hi - lo)
        start = end
        if start >= at + n:
            break
    if not mine:  # (spans that do not cover the entry: nothing to file)
        return ("hops", trace, hop)
    base, covered = mine[0], sum(mine[1::2])
    mine[0::2] = [d - base for d in mine[0::2]]
    return ("hops", trace + base, hop, mine, *done[:3 * covered])


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


def _offsets(spans: list) -> list[int]:
    """A run's entry's trace of each tuple as an offset from the entry's, from its spans:
    when each tuple is a trace of its own (a spout's run at its first bolt, the usual),
    the spans' offsets as they are (one slice, not a list built a span: ~1,700
    instructions a traced input at the split until 2026-11-28, afternoon).

    >>> _offsets([0, 1, 1, 1, 3, 1]), _offsets([0, 2, 1, 1])
    ([0, 1, 3], [0, 0, 1])
    """
    offsets = spans[0::2]
    if sum(spans[1::2]) == len(offsets):
        return offsets
    return _traces(0, spans)


def _traces(trace: int, spans: list) -> list[int]:
    """A run's entry's trace of each tuple, from its spans ``[d, n, ...]``."""
    traces: list[int] = []
    for d, n in zip(spans[0::2], spans[1::2]):
        traces += [trace + d] * n
    return traces
