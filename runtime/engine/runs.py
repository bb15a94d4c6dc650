"""A spout's tracked tuples on its default stream, numbered in runs of consecutive roots
(docs/internals/acker.md, "Runs of roots").

Each target task has a run of consecutive self-initialising roots, from a random start of
its own. A tuple waits, its batch entry only, in its target's run, its msg_id and emit
time beside it; when the runs end (one is full, or they are flushed) each is sent as one
RUN frame, ``[first root, entries]``, and the tracker keeps it whole
(``SpoutTracker.add_run``). Per tuple that leaves the grouping's choice and three
appends: no random draw, no pending entry, no root on the wire. The emit functions that
fill the runs are made in :mod:`runtime.engine.wiring`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from runtime.acking._ids import RootIds
from runtime.acking._tracking import SpoutTracker
from runtime.model.constants import DEFAULT_STREAM

from .outbound import StreamOut


class Runs:
    """The runs waiting to be sent, one per target task of the stream's one subscriber:
    their entries, msg_ids, emit times and first roots, and the emit time of what the
    spout emits now (``stamp``). The tracker counts their tuples as in flight already."""

    __slots__ = ("entries", "msg_ids", "stamps", "stamp", "_headers", "_bases", "_end",
                 "_roots", "_tracker", "_clock")

    def __init__(self, out: StreamOut, roots: RootIds, tracker: SpoutTracker,
                 clock: Callable[[], float], size: int) -> None:
        (outlet,) = out.outlets
        targets = range(len(outlet.tasks))
        self.entries: list[list] = [[] for _ in targets]  # per target: its run's entries
        self.msg_ids: list[list] = [[] for _ in targets]
        self.stamps: list[list[float]] = [[] for _ in targets]
        self._headers = list(zip(outlet.run_headers, outlet.tracked_headers))
        self._roots, self._tracker, self._clock = roots, tracker, clock
        self._bases = [roots.run_start() for _ in targets]
        self._end = roots.run_end - size
        self.stamp = clock()  # the emit time of what the spout emits now (see mark)
        tracker.count_unsent(self.entries)

    @classmethod
    def on_default_stream(cls, streams: Mapping[str, StreamOut], roots: RootIds,
                          tracker: SpoutTracker | None, clock: Callable[[], float],
                          size: int) -> Runs | None:
        """Runs for a tracking spout's default stream, attached to it, when it has one
        subscriber, which takes each tuple on one of its tasks; None otherwise."""
        out = streams.get(DEFAULT_STREAM)
        if (tracker is None or out is None or len(out.outlets) != 1
                or out.outlets[0].pick is None):
            return None
        runs = cls(out, roots, tracker, clock, size)
        out.attach_runs(runs)
        return runs

    def mark(self) -> None:
        """Read the clock for the emits to come: each chunk of ``next_tuple`` calls, and
        each other call into the spout, starts with one (STEP_CHUNK)."""
        self.stamp = self._clock()

    def queued(self) -> int:
        return sum(map(len, self.entries))

    def pending(self) -> list[list]:
        """The lists the emits fill: each run's entries, msg_ids and emit times. A
        traced emit's tail of them is sent alone (``StreamOut.send_tails``) as a run at
        the base the waiting run would have had, and the waiting run is numbered from
        the next root when it goes: a root is given when its run is sent."""
        return [*self.entries, *self.msg_ids, *self.stamps]

    def put(self, i: int, part: list) -> None:
        """Put ``part`` where the ``i``-th of :meth:`pending`'s lists sits
        (``StreamOut.send_tails``)."""
        n = len(self.entries)
        (self.entries, self.msg_ids, self.stamps)[i // n][i % n] = part

    def end(self, out: StreamOut) -> None:
        """Send each run as one RUN frame on ``out``, its first root and its entries, and
        hand its msg_ids and emit times to the tracker."""
        for i, run in enumerate(self.entries):
            if run:
                self._end_one(out, i, run)

    def send_tails(self, out: StreamOut, heads: list[int]) -> None:
        """Send what each run holds past its length in ``heads`` (a traced emit's tuples,
        ``StreamOut.send_tails``; the lengths of the entries' lists first, as
        :meth:`pending`) as a run of its own, at the base the waiting run would have had;
        the waiting run, left in place, is numbered from the next root when it goes.
        The same runs as the stream's flush of the tails alone sends, without putting
        the lists' tails in their place and back (docs/internals/tracing-log.md, "2026-11-27,
        evening")."""
        for i, run in enumerate(self.entries):
            if len(run) > heads[i]:
                self._end_one(out, i, run, heads[i])

    def _end_one(self, out: StreamOut, i: int, run: list, head: int = 0) -> None:
        """Send ``run`` from its ``head``-th entry on (what was before stays)."""
        base, k = self._bases[i], len(run) - head
        out.ship_run(*self._headers[i], base, run[head:] if head else run)
        del run[head:]  # before add_run counts them in flight: a report read between
        ids, stamps = self.msg_ids[i], self.stamps[i]  # must not count twice
        self._tracker.add_run(base, ids[head:], stamps[head:])
        del ids[head:]
        del stamps[head:]
        self._bases[i] = base + k if base + k < self._end else self._roots.run_start()
