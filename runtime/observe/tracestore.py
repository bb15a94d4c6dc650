"""The master's store of traces (issue 20; docs/internals/tracing.md): pure, bounded.

Tasks report what they saw of traced trees as records (``runtime.engine.tracing``: start,
sent, hops, outcome, done); the store files them by trace id, as they came (a frame's
body is decoded when its tree is first read, its copies taken one by one only when the
tree is assembled), keeps the newest
``capacity`` traces (the oldest are dropped and counted), and assembles a
:class:`~runtime.observe.traces.Trace` only when one is asked for, so a query of the
newest 100 out of 10,000 costs 100 assemblies. It takes ``now`` as an argument.

"Who held it" (``held_by``) for a failed or timed-out tree, in this order:

1. a task that failed a tuple of the tree;
2. (tracked trees) a task that processed a tuple of the tree and never acked it (the
   incarnation may since have died: it is still the task that held it);
3. a copy that was sent and never processed: ``("<transit>", None)`` when its task was
   restarted after the emit (the copy died with it), else that task (it waits in its
   queue: a slow bolt under backpressure, or one stuck in ``process``);
4. the task whose hop ended last, if it ended after the tree timed out (a slow bolt
   that processed and acked it, too late).

>>> from runtime import wire
>>> store = TraceStore({1: "spout", 2: "split"}, timeout=30.0)
>>> body = wire.encode_batch(["a b"])  # a frame of one bare value, sent to task 2
>>> store.add(1, 0, [("start", 7, "m1", 100.0, True),
...                  ("sent", 7, 70, 0, 2, "default", body, True, 100.0, wire.DATA)],
...           now=100.0)
>>> store.add(1, 0, [("done", 7, "timed_out", 30000.0)], now=130.0)
>>> t = store.lineage("m1", now=131.0)
>>> t.status, t.held_by, t.hops[0].component, t.hops[0].executed_ms, t.values
('timed_out', ('split', 2), 'split', None, ('a b',))
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from ._tracetree import (
    PART,
    RUN_SENT,
    SENT,
    UNREAD,
    Hops,
    Tree,
    causal,
    decoded,
    file_ran,
    file_sent,
    finished_ms,
    frame_dest,
    ints,
    msg_key,
    numbers,
    own_run,
    settled,
    unplain,
)
from .traces import ATOMS, TRACE_STATUSES, TRANSIT, Hop, Trace

__all__ = ["TraceStore"]


class TraceStore:
    """Traces by id, oldest first, at most ``capacity``; the task -> component map
    names the tasks; ``timeout`` (seconds) ends an untracked tree that never finished."""

    def __init__(self, components: Mapping[int, str], *, capacity: int = 10_000,
                 timeout: float = 30.0) -> None:
        self.components, self.capacity, self.timeout = dict(components), capacity, timeout
        self._trees: OrderedDict[int, Tree] = OrderedDict()
        self._by_msg: dict[Any, int] = {}
        self._restarts: dict[int, list[float]] = {}  # task -> wall times it was replaced
        self.dropped = 0  # traces dropped, oldest first, to stay within capacity
        # the last ``capacity`` trace ids dropped: a record of one filed later (its copies
        # were still on their way) is not filed, else it would make a tree without a
        # start that takes a real tree's place and is never shown
        self._gone: dict[int, None] = {}
        self.late = 0  # records of a dropped trace, not filed
        self._carried = 0  # trees refiled from a master before (keyed -1, -2, ...)
        self.malformed = 0  # records that could not be filed

    # -- filing -------------------------------------------------------------------------
    def add(self, task: int, incarnation: int, records: Iterable, now: float) -> None:
        """File one report's records (from ``task``'s ``incarnation``)."""
        for record in records:
            try:
                self._file(task, incarnation, record)
            except (TypeError, ValueError, IndexError, KeyError):  # (WireError: a ValueError)
                self.malformed += 1

    def restarted(self, task: int, at: float) -> None:
        """``task`` was replaced at wall time ``at``: copies sent to it before are lost."""
        self._restarts.setdefault(task, []).append(at)

    def _new(self, trace: int) -> Tree | None:
        """A new tree for ``trace``, which has none (the filing looks a trace up first,
        ``self._trees.get(trace) or self._new(trace)``, and calls this only for a new
        one: a call and a lookup less a record or a trace); None if it was dropped
        already."""
        if trace in self._gone:
            return None
        tree = self._trees[trace] = Tree()
        if len(self._trees) > self.capacity:
            self._drop()
        return tree

    def _drop(self) -> None:
        """Drop the oldest trees beyond the capacity, counted and remembered."""
        gone = self._gone
        while len(self._trees) > self.capacity:
            dropped, old = self._trees.popitem(last=False)
            self.dropped += 1
            gone[dropped] = None
            if len(gone) > self.capacity:  # (a dict keeps its keys in insertion order)
                del gone[next(iter(gone))]
            if old.start is not None:  # (a replayed msg_id's newer trace stays)
                key = msg_key(old.start[0])
                if self._by_msg.get(key) == dropped:
                    del self._by_msg[key]

    def _file(self, task: int, incarnation: int, record: list) -> None:
        """One record, kept as it came (a tuple): a hop's are read only when its tree is
        assembled, not at each report (docs/internals/tracing.md, wt-tracemaster)."""
        kind, trace = record[0], record[1]
        if type(trace) is not int:
            raise TypeError("a trace id is an int")
        tree = self._trees.get(trace) or self._new(trace)
        if tree is None:
            self.late += 1
            return
        if kind == "done":  # first: a tracked tree's every one has one (acking on)
            status = record[2]
            if status not in TRACE_STATUSES:
                raise ValueError(f"unknown trace status {status!r}")
            tree.status, tree.complete_ms = status, float(record[3])
        elif kind == "hops":  # a frame's copies processed: first hop, flat times and outcomes
            if len(record) % 3 == 1:  # a run's entry's: its spans filed in their own trees
                self._file_run_hops(tree, task, incarnation, record)
            else:
                file_ran(tree, task, incarnation, record)
        elif kind == "sent":  # a frame's copies: first hop, ..., its body as sent
            if len(record) == RUN_SENT:  # a run's: its spans filed in their own trees
                self._file_run(tree, record)
            else:
                file_sent(tree, record)
        elif kind == "start":
            self._start(tree, trace, task, record)
        elif kind == "starts":  # a spout's run: consecutive traces, in one record
            self._file_starts(tree, task, record)
        elif kind == "outcome":
            if tree.outcomes is None:
                tree.outcomes = {}
            tree.outcomes[record[2]] = str(record[3])
        else:
            raise ValueError(f"unknown trace record {kind!r}")

    def _file_run(self, tree: Tree, record: list) -> None:
        """A run's frame (``("sent", trace, first, parents, ..., kind, spans)``: its tuples
        of several traces, ``spans`` flat ``[d, n, ...]``, a parent each): each span filed
        in the tree of trace ``trace + d`` as its part of the frame, the body shared
        (``(..., kind, offset, n)``: read when that tree is)."""
        _, trace, first, parents, dest, stream, body, bare, emitted, kind, spans = record
        if (type(parents) is not list or type(spans) is not list or type(first) is not int
                or len(spans) != 2 * len(parents) or not ints(spans)
                or type(body) is not bytes):
            raise TypeError("a run's sent frame has a parent and a span [d, n] a trace")
        at, trees = 0, self._trees
        for parent, d, n in zip(parents, spans[0::2], spans[1::2]):
            # (a tree is looked up before it is made: _new)
            ours = trace + d
            mine = tree if d == 0 else trees.get(ours) or self._new(ours)
            if mine is None:
                self.late += 1
            else:  # (file_sent's record, checked above for every part)
                mine.frames += (("sent", ours, first + at, parent, dest, stream, body,
                                 bare, emitted, kind, at, n),)
                mine.unread, mine.settled = True, None
            at += n

    def _file_starts(self, tree: Tree, task: int, record: list) -> None:
        """A spout's run's starts (``("starts", trace, tracked, msg_ids, started)``: the
        tuple ``n`` of the run is trace ``trace + n``), each filed as its ``start``
        would be. One record a run rather than one a tuple: the spout made, and the
        master unpacked and dispatched, sixteen (tracing-log.md, "2026-11-28,
        midday")."""
        _, trace, tracked, msg_ids, starts = record
        if (type(msg_ids) is not list or type(starts) is not list
                or len(msg_ids) != len(starts)):
            raise TypeError("a run's starts are its msg_ids and start times, one a tuple")
        sum(starts)  # (numbers: a text or None raises TypeError, counted malformed)
        tracked, trees, component = bool(tracked), self._trees, self.components.get(task, "?")
        by_msg = self._by_msg
        for n, (msg_id, started) in enumerate(zip(msg_ids, starts)):
            ours = trace + n  # (once: three additions of a 63-bit int a tuple before)
            mine = tree if n == 0 else trees.get(ours) or self._new(ours)
            if mine is None:
                self.late += 1
                continue
            mine.start = (msg_id, component, task, None, float(started), tracked)
            trees.move_to_end(ours)
            if msg_id is not None:  # (a tuple emitted without one: found by traces())
                by_msg[msg_id if type(msg_id) in ATOMS else msg_key(msg_id)] = ours

    def _start(self, tree: Tree, trace: int, task: int, record: list) -> None:
        """A spout tuple's start: its tree is the newest now (newest first means by the
        spout's emit)."""
        msg_id, started, tracked = record[2], record[3], record[4]
        tree.start = (msg_id, self.components.get(task, "?"), task,
                      tuple(record[5]) if len(record) > 5 else None, float(started),
                      bool(tracked))
        self._trees.move_to_end(trace)
        if msg_id is not None:
            self._by_msg[msg_key(msg_id)] = trace

    def _file_run_hops(self, tree: Tree, task: int, incarnation: int,
                       record: list) -> None:
        """A run's entry's copies processed (``("hops", trace, first, spans, ...)``: its
        tuples of several traces, ``spans`` flat ``[d, n, ...]``): the record is kept
        once, whole, and each span filed in the tree of trace ``trace + d`` as its place
        in it (read when that tree is). One record an entry rather than one a span: the
        master unpacked, checked and filed sixteen (tracing-log.md, "2026-11-28,
        midday")."""
        trace, first, spans = record[1], record[2], record[3]
        if (type(first) is not int or type(spans) is not list
                or not ints(spans) or len(spans) % 2
                or 3 * sum(spans[1::2]) != len(record) - 4
                or min(spans[1::2], default=-1) < 0):
            raise TypeError("a run's processed copies are a first hop, spans [d, n], and "
                            "(queued, executed, outcome) each")
        times = record[4:]
        numbers(times)
        # a tuple of atoms and one of ints: the collector lets it go (as file_ran's)
        record, at, trees = (*record[:3], tuple(spans), *times), 0, self._trees
        for d, n in zip(spans[0::2], spans[1::2]):
            ours = trace + d
            mine = tree if d == 0 else trees.get(ours) or self._new(ours)
            if mine is None:
                self.late += 1
            elif n:
                mine.runs += ((task, incarnation, record, at, n),)
                mine.settled = None
            at += n

    # -- queries ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._trees)

    def traces(self, status: str | None = None, limit: int = 100, *,
               now: float) -> list[Trace]:
        """The newest traces, newest first (by when their spout's start was filed), of
        ``status`` if given."""
        if status is not None and status not in TRACE_STATUSES:
            raise ValueError(f"status must be one of {TRACE_STATUSES} or None, not {status!r}")
        found: list[Trace] = []
        bodies: dict = {}  # (a run's trees share their frames' bodies: _read)
        for tree, st in self._newest(now):
            if len(found) >= limit:
                break
            if status is None or st == status:
                found.append(self._assemble(tree, st, bodies))
        return found

    def finished(self, newest: int, *, now: float) -> list[Trace]:
        """Of the ``newest`` traces, the finished ones (not pending), newest first: what
        ``traces(None, newest)`` holds but the pending ones, which are not assembled (the
        master keeps these for the one that may replace it, every couple of seconds,
        when up to half of the newest are still pending)."""
        return [self._assemble(tree, st) for tree, st in islice(self._newest(now), newest)
                if st != "pending"]

    def kept(self, newest: int, *, now: float) -> list[list]:
        """Of the ``newest`` traces, the finished ones as filed, newest first, as plain
        data (what :meth:`refile` reads): the master keeps these for the one that may
        replace it every couple of seconds, and assembles none of them (each save
        assembled 200 traces and copied them, ~110 M instructions; docs/internals/
        tracing.md, wt-tracemaster)."""
        return [self._plain(tree, st) for tree, st in islice(self._newest(now), newest)
                if st != "pending"]

    def _plain(self, tree: Tree, status: str) -> list:
        """A finished tree as :meth:`refile` reads it, with its ``status`` (an untracked
        tree's is the store's reading, none of the spout's: without it, until
        2026-11-28, midday, :meth:`refile` refused every untracked tree it was given)."""
        restarts = tree.restarts
        if restarts is None:  # the ones of its copies' tasks (usually none at all)
            mine = self._restarts
            dests = map(frame_dest, tree.frames)
            restarts = {dest: mine[dest] for dest in dests
                        if type(dest) is int and dest in mine} if mine else {}
        if 5 in map(len, tree.runs):  # a run's span: its own record, for
            tree.runs = tuple(map(own_run, tree.runs))  # the file (once: saved again)
        return [tree.start, tree.status or status, tree.complete_ms, tree.frames,
                tree.runs, tree.outcomes or {}, restarts]

    def refile(self, kept: list) -> int:
        """File the trees :meth:`kept` made (newest first; by a master before this one),
        behind any already here; one that is not such a tree is left out. Returns how
        many were filed."""
        filed = 0
        for plain in kept:
            if len(self._trees) >= self.capacity:
                break
            try:
                tree = unplain(plain)
                hash(msg_key(tree.start[0]))
            except (TypeError, ValueError, KeyError):
                continue
            self._carried += 1
            key = -self._carried  # (reported trace ids are > 0)
            self._trees[key] = tree
            self._trees.move_to_end(key, last=False)  # each older than the one before
            if tree.start[0] is not None:
                self._by_msg.setdefault(msg_key(tree.start[0]), key)
            filed += 1
        return filed

    def _read(self, tree: Tree, bodies: dict | None = None) -> None:
        """Read the bodies of a tree's frames not read yet, once (its values until then
        are the frame's body as sent: the filing of a traced sentence decoded two bodies
        and made a tuple a copy, ~35 k instructions of ~157 k, for trees most of which are
        never asked for). A frame whose body is not one entry a hop is dropped and counted
        malformed, now rather than when it was filed. ``bodies`` (a dict, one a query or
        a save) keeps each body's values once decoded: a run's sixteen trees share their
        frames' bodies, each one decoded once rather than once a trace."""
        if not tree.unread:
            return
        frames = []
        for frame in tree.frames:
            if len(frame) in UNREAD:
                _, _, first, parent, dest, stream, body, bare, emitted, kind = frame[:SENT]
                values = decoded(body, bare, kind, bodies)
                if values is None:
                    self.malformed += 1
                    tree.settled = None  # (counted by its span until now: settled)
                    continue
                if len(frame) == PART:  # a run's frame: this trace's tuples of it
                    values = values[frame[10]:frame[10] + frame[11]]
                hops = tuple(range(first, first + len(values)))
                frame = (hops, parent, dest, stream, values, emitted)
            frames.append(frame)
        tree.frames, tree.unread = tuple(frames), False

    def _newest(self, now: float) -> Iterator[tuple[Tree, str]]:
        """The trees whose spout's start was filed, newest first, with their status."""
        trees = self._trees
        for trace in reversed(trees):
            tree = trees[trace]
            if tree.start is not None:
                yield tree, self._status(tree, now)

    def lineage(self, msg_id: Any, *, now: float) -> Trace | None:
        """The newest trace of the spout tuple ``msg_id``, or None if none was traced.
        A tuple emitted without a msg_id (None) has none to be found by: ``traces()``
        lists it, and ``lineage(None)`` is None, not whichever such tuple came last."""
        if msg_id is None:
            return None
        try:
            trace = self._by_msg.get(msg_key(msg_id))
        except TypeError:
            return None
        tree = self._trees.get(trace) if trace is not None else None
        if tree is None or tree.start is None:
            return None
        return self._assemble(tree, self._status(tree, now))

    def _status(self, tree: Tree, now: float) -> str:
        if tree.start[5]:  # tracked: the spout's word
            return tree.status or "pending"
        if tree.settled is None:  # (a run's frames are counted unread: settled)
            # (a frame not of a run, unread: read; ``in map``, no generator, a tree a save)
            if tree.unread and SENT in map(len, tree.frames):
                self._read(tree)
            tree.settled = settled(tree)
        if tree.settled:
            return "acked"
        return "timed_out" if now - tree.start[4] > self.timeout else "pending"

    # -- assembly -----------------------------------------------------------------------
    def _assemble(self, filed: Tree, status: str, bodies: dict | None = None) -> Trace:
        self._read(filed, bodies)
        tree = Hops(filed, self._restarts)
        msg_id, component, task, values, started, _tracked = tree.start
        if values is None:  # the spout's copies hold them (each the same)
            values = next((copy[3] for copy in tree.sent.values() if copy[0] == 0), ())
        order = causal(tree.sent)
        index = {hop: i for i, hop in enumerate(order)}
        hops = tuple(self._hop(tree, hop, index) for hop in order)
        complete = tree.complete_ms
        if complete is None and status == "acked":
            complete = finished_ms(hops, started)
        return Trace(msg_id=msg_id, component=component, task=task, status=status,
                     complete_ms=complete, hops=hops,
                     held_by=self._held_by(tree, status) if status in ("failed", "timed_out")
                     else None, started=started, values=tuple(values))

    def _hop(self, tree: Hops, hop: int, index: dict[int, int]) -> Hop:
        parent, dest, stream, values, emitted = tree.sent[hop]
        ran = tree.ran.get(hop)
        queued, executed, outcome = ran[2:5] if ran is not None else (None, None, None)
        outcome = tree.outcomes.get(hop, outcome)
        return Hop(component=self.components.get(dest, "?"), task=dest, stream=stream,
                   values=tuple(values), parent=index.get(parent), queued_ms=queued,
                   executed_ms=executed, outcome=outcome, emitted_at=emitted)

    def _held_by(self, tree: Hops, status: str) -> tuple[str, int | None] | None:
        order = causal(tree.sent)
        outcomes = {hop: tree.outcomes.get(hop, ran[4]) for hop, ran in tree.ran.items()}
        for hop in order:
            if outcomes.get(hop) == "failed":
                return self._named(tree.ran[hop][0])
        if tree.start[5]:  # tracked: processed and never acked, the deepest first
            for hop in reversed(order):
                if hop in tree.ran and outcomes[hop] is None:
                    return self._named(tree.ran[hop][0])
        for hop in order:
            if hop not in tree.ran:
                _, dest, _, _, emitted = tree.sent[hop]
                if any(at >= emitted for at in tree.restarts.get(dest, ())):
                    return (TRANSIT, None)
                return self._named(dest)
        return self._late(tree)

    def _late(self, tree: Hops) -> tuple[str, int] | None:
        """The task whose hop ended last, if after the tree's end (a slow bolt that had
        it when it timed out, and acked it too late)."""
        if tree.complete_ms is None:
            return None
        deadline = tree.start[4] + tree.complete_ms / 1000.0
        ends = [(self._end(tree, hop), ran[0]) for hop, ran in tree.ran.items()
                if hop in tree.sent and ran[3] is not None]
        end, task = max(ends, default=(None, None), key=lambda e: e[0] or 0.0)
        return self._named(task) if end is not None and end > deadline else None

    @staticmethod
    def _end(tree: Hops, hop: int) -> float:
        queued, executed = tree.ran[hop][2:4]
        return tree.sent[hop][4] + ((queued or 0.0) + (executed or 0.0)) / 1000.0

    def _named(self, task: int) -> tuple[str, int]:
        return (self.components.get(task, "?"), task)
