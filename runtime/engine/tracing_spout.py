"""A spout's share of tracing (:class:`~runtime.engine.tracing.Tracer`, docs/internals/
tracing.md, "How the mark travels"): its turn cut where a run of traced tuples is due, the
emit armed for the run, the run's frames caught in one window (one trace a tuple), and the
traced roots it waits on until the acker's word or its own timeout says how they ended."""

from __future__ import annotations

from runtime import wire
from runtime.model.constants import DEFAULT_STREAM

from .outbound import StreamOut
from .trace_ids import MAX_WATCHED, RUN, STATUS, gap, new_first, new_mark
from .trace_window import Window

__all__ = ["Run", "SpoutTracing"]


class SpoutTracing:
    """A mixin of :class:`~runtime.engine.tracing.Tracer`, whose ``__init__`` sets what
    it reads (``rate``, ``skip``, ``owed``, ``after``, ``seen``, ``run``, ``stepping``,
    ``roots``, ``by_msg``) and which gives it ``set_aside``, ``catch`` and
    ``catch_units``."""

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
                run = self.run = Run(self.set_aside(), out, tracked,
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
        if len(covered) < len(tuples):  # (rare) a tuple of no frame: its values recorded
            for n, (msg_id, started, values) in enumerate(tuples):
                self._started(trace + n, msg_id, started, None if n in covered else values,
                              run.tracked, roots.get(n))
            return
        # one record for the run's starts (a record a tuple before 2026-11-28, midday)
        msg_ids, starts = [t[0] for t in tuples], [t[1] for t in tuples]
        self.records.append(("starts", trace, run.tracked, _plain_all(msg_ids), starts))
        if run.tracked and roots:
            if self.roots:  # the old roots looked at once, against the run's newest start
                self._expire_roots(starts[-1])
            for n, msg_id in enumerate(msg_ids):
                root = roots.get(n)
                if root is not None:
                    self._watch(root, trace + n, msg_id, starts[n])

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
        self._watch(root, trace, msg_id, started)

    def _watch(self, root: int, trace: int, msg_id, started: float) -> None:
        """Watch ``root`` (the old roots expired before: a run's once, not a root at a
        time, ~2,500 instructions a tracked traced tuple until 2026-11-28, afternoon;
        the roots expire by start time, oldest first, so looking once against the run's
        newest start forgets what looking at each start did)."""
        if len(self.roots) >= MAX_WATCHED:
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
            if root in roots and outcome in STATUS:
                self._done(root, STATUS[outcome])

    def on_completed(self, body: list) -> None:
        """A COMPLETED frame, ``[first, count, ..., [root, ...]]``: trees acked. Each
        watched root is first tested against the stretches' bounds (most are outside:
        roots still in flight), and one stretch, the usual case, needs no other test: a
        generator over the stretches for every watched root at every frame cost ~11 µs
        a frame with 48 roots watched, ~1.7 µs now (tracing-log.md, "2026-11-28, late
        morning")."""
        if len(body) < 3 or not len(body) % 2 or not set(map(type, body[:-1])) <= {int}:
            return
        firsts, counts = body[0:-1:2], body[1:-1:2]
        lo, hi = min(firsts), max(map(int.__add__, firsts, counts))
        if len(firsts) == 1:
            done = [r for r in self.roots if lo <= r < hi]
        else:
            spans = list(zip(firsts, counts))
            done = [r for r in self.roots
                    if lo <= r < hi and any(f <= r < f + c for f, c in spans)]
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


def _plain(msg_id):
    """A msg_id as the reports carry it: itself if msgpack can, else its repr."""
    return msg_id if wire.encodable(msg_id) else repr(msg_id)


def _plain_all(msg_ids: list) -> list:
    """A run's msg_ids as the reports carry them: one test for the whole list, and only
    when it fails, each its own (:func:`_plain`)."""
    return msg_ids if wire.encodable(msg_ids) else list(map(_plain, msg_ids))


def _root_of(inner: list[tuple[int, bytes]]) -> int | None:
    """The root a spout's traced tuple was given, read back from its own frames (their
    kinds and bodies: the first tracked one is decoded, the rest are not read)."""
    for kind, body in inner:
        if kind in (wire.RUN, wire.TRACKED):
            root = _root_at(kind, wire.decode_batch(body), 0)
            if root is not None:
                return root
    return None


class Run:
    """A spout's traced tuples sharing one window: its stream, whether they are tracked,
    whether they may share it (:meth:`SpoutTracing._takes_whole`), and each tuple's msg_id,
    emit time and values."""

    __slots__ = ("window", "out", "tracked", "whole", "tuples")

    def __init__(self, window: Window, out: StreamOut, tracked: bool, whole: bool) -> None:
        self.window, self.out, self.tracked, self.whole = window, out, tracked, whole
        self.tuples: list[tuple] = []


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
