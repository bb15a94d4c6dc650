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

from runtime import wire

from .traces import HOP_OUTCOMES, TRACE_STATUSES, TRANSIT, Hop, Trace

__all__ = ["TraceStore"]


class _Tree:
    """What the store knows of one traced tree, as reported: its records filed as they
    came, each a tuple (the collector stops tracking a tuple of atoms at its first pass:
    a store of 10,000 trees is ~2 tracked containers a tree, and each full collection of
    the master traverses them all), read per hop only when the tree is assembled."""

    # Every field's default is the class's, shared: a tree is made without a call of
    # ``__init__`` (which set nine slots and made a dict: ~1.2 k instructions of the
    # ~32 k a traced tree's filing took; tracing-log.md, "2026-11-28, afternoon").

    # the spout's start: (msg_id, component, task, values, started, tracked), values
    # None when its sent frames hold them (read by _assemble)
    start: tuple | None = None
    status: str | None = None  # the spout's outcome (tracked trees)
    complete_ms: float | None = None
    # copies sent, a frame's at a time: (hops, parent, dest, stream, values, emitted),
    # hops and values (one tuple of fields a copy) tuples; a tuple, not a list, grown
    # by a copy (two or three frames a tree): the collector lets it go too. A frame
    # is filed as its "sent" record made a tuple ("sent", trace, first hop, parent,
    # dest, stream, body, bare, emitted, kind), its body as sent, until the tree is
    # first read (_read)
    frames: tuple[tuple, ...] = ()
    unread = False  # some frame's body is not read yet
    # copies processed, a traced frame's at a time: (task, incarnation, its "hops"
    # record made a tuple: ("hops", trace, first hop, queued µs, executed µs,
    # outcome code, ...)), or a run's entry's span of them: (task, incarnation, the
    # entry's record ("hops", trace, first hop, spans, ...), shared by its trees,
    # the span's offset in it, its tuples), read by _Hops (_own_hops)
    runs: tuple[tuple, ...] = ()
    # hop -> a later ack or fail of a held copy; None until the first (rare) one
    outcomes: dict[int, str] | None = None
    # whether every copy sent ran (an untracked tree's status), None until asked
    # again after a record came
    settled: bool | None = None
    # a tree carried over from the master before: the restarts that master knew of
    # its copies' tasks (None: the store's own, as it learns them)
    restarts: dict[int, list[float]] | None = None


class _Hops:
    """A tree read per hop, for its assembly: the latest record of each hop, as the store
    kept them until 2026-11-27 (wt-tracemaster) and as ``_held_by`` reads them."""

    __slots__ = ("start", "complete_ms", "sent", "ran", "outcomes", "restarts")

    def __init__(self, tree: _Tree, restarts: dict[int, list[float]]) -> None:
        self.start, self.complete_ms = tree.start, tree.complete_ms
        self.outcomes = tree.outcomes or _NO_OUTCOMES
        self.restarts = restarts if tree.restarts is None else tree.restarts
        # hop -> (parent, dest, stream, values, emitted)
        self.sent: dict[int, tuple] = {}
        for hops, parent, dest, stream, values, emitted in tree.frames:
            for hop, value in zip(hops, values):
                self.sent[hop] = (parent, dest, stream, value, emitted)
        # hop -> (task, incarnation, queued_ms, executed_ms, outcome)
        self.ran: dict[int, tuple] = {}
        for task, incarnation, record, *span in tree.runs:
            hop, lo, hi = _own_hops(record, span)
            for at in range(lo, hi, 3):
                self.ran[hop] = (task, incarnation, record[at] / 1e3, record[at + 1] / 1e3,
                                 _OUTCOMES.get(record[at + 2]))
                hop += 1


class TraceStore:
    """Traces by id, oldest first, at most ``capacity``; the task -> component map
    names the tasks; ``timeout`` (seconds) ends an untracked tree that never finished."""

    def __init__(self, components: Mapping[int, str], *, capacity: int = 10_000,
                 timeout: float = 30.0) -> None:
        self.components, self.capacity, self.timeout = dict(components), capacity, timeout
        self._trees: OrderedDict[int, _Tree] = OrderedDict()
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

    def _tree(self, trace: int) -> _Tree | None:
        """The tree of ``trace``, made if new; None if it was dropped already."""
        tree = self._trees.get(trace)
        return tree if tree is not None else self._new(trace)

    def _new(self, trace: int) -> _Tree | None:
        """A new tree for ``trace``, which has none (the filing of a run's records looks
        its traces up first, and calls this only for a new one: a lookup less a tree);
        None if it was dropped already."""
        if trace in self._gone:
            return None
        tree = self._trees[trace] = _Tree()
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
                key = _key(old.start[0])
                if self._by_msg.get(key) == dropped:
                    del self._by_msg[key]

    def _file(self, task: int, incarnation: int, record: list) -> None:
        """One record, kept as it came (a tuple): a hop's are read only when its tree is
        assembled, not at each report (docs/internals/tracing.md, wt-tracemaster)."""
        kind, trace = record[0], record[1]
        if type(trace) is not int:
            raise TypeError("a trace id is an int")
        tree = self._tree(trace)
        if tree is None:
            self.late += 1
            return
        if kind == "hops":  # a frame's copies processed: first hop, flat times and outcomes
            if len(record) % 3 == 1:  # a run's entry's: its spans filed in their own trees
                self._file_run_hops(tree, task, incarnation, record)
            else:
                _ran(tree, task, incarnation, record)
        elif kind == "sent":  # a frame's copies: first hop, ..., its body as sent
            if len(record) == _RUN_SENT:  # a run's: its spans filed in their own trees
                self._file_run(tree, record)
            else:
                _sent_frame(tree, record)
        elif kind == "start":
            self._start(tree, trace, task, record)
        elif kind == "starts":  # a spout's run: consecutive traces, in one record
            self._file_starts(tree, task, record)
        elif kind == "outcome":
            if tree.outcomes is None:
                tree.outcomes = {}
            tree.outcomes[record[2]] = str(record[3])
        elif kind == "done":
            status = record[2]
            if status not in TRACE_STATUSES:
                raise ValueError(f"unknown trace status {status!r}")
            tree.status, tree.complete_ms = status, float(record[3])
        else:
            raise ValueError(f"unknown trace record {kind!r}")

    def _file_run(self, tree: _Tree, record: list) -> None:
        """A run's frame (``("sent", trace, first, parents, ..., kind, spans)``: its tuples
        of several traces, ``spans`` flat ``[d, n, ...]``, a parent each): each span filed
        in the tree of trace ``trace + d`` as its part of the frame, the body shared
        (``(..., kind, offset, n)``: read when that tree is)."""
        _, trace, first, parents, dest, stream, body, bare, emitted, kind, spans = record
        if (type(parents) is not list or type(spans) is not list or type(first) is not int
                or len(spans) != 2 * len(parents) or not _ints(spans)
                or type(body) is not bytes):
            raise TypeError("a run's sent frame has a parent and a span [d, n] a trace")
        at, trees = 0, self._trees
        for parent, d, n in zip(parents, spans[0::2], spans[1::2]):
            # (a tree is looked up before it is made: _new, a call, only for a new one)
            ours = trace + d
            mine = tree if d == 0 else trees.get(ours) or self._new(ours)
            if mine is None:
                self.late += 1
            else:  # (_sent_frame's record, checked above for every part)
                mine.frames += (("sent", ours, first + at, parent, dest, stream, body,
                                 bare, emitted, kind, at, n),)
                mine.unread, mine.settled = True, None
            at += n

    def _file_starts(self, tree: _Tree, task: int, record: list) -> None:
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
            by_msg[msg_id if type(msg_id) in _ATOMS else _key(msg_id)] = ours

    def _start(self, tree: _Tree, trace: int, task: int, record: list) -> None:
        """A spout tuple's start: its tree is the newest now (newest first means by the
        spout's emit)."""
        msg_id, started, tracked = record[2], record[3], record[4]
        tree.start = (msg_id, self.components.get(task, "?"), task,
                      tuple(record[5]) if len(record) > 5 else None, float(started),
                      bool(tracked))
        self._trees.move_to_end(trace)
        self._by_msg[_key(msg_id)] = trace

    def _file_run_hops(self, tree: _Tree, task: int, incarnation: int,
                       record: list) -> None:
        """A run's entry's copies processed (``("hops", trace, first, spans, ...)``: its
        tuples of several traces, ``spans`` flat ``[d, n, ...]``): the record is kept
        once, whole, and each span filed in the tree of trace ``trace + d`` as its place
        in it (read when that tree is). One record an entry rather than one a span: the
        master unpacked, checked and filed sixteen (tracing-log.md, "2026-11-28,
        midday")."""
        trace, first, spans = record[1], record[2], record[3]
        if (type(first) is not int or type(spans) is not list
                or not _ints(spans) or len(spans) % 2
                or 3 * sum(spans[1::2]) != len(record) - 4
                or min(spans[1::2], default=-1) < 0):
            raise TypeError("a run's processed copies are a first hop, spans [d, n], and "
                            "(queued, executed, outcome) each")
        times = record[4:]
        _numbers(times)
        # a tuple of atoms and one of ints: the collector lets it go (as _ran's)
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

    def _plain(self, tree: _Tree, status: str) -> list:
        """A finished tree as :meth:`refile` reads it, with its ``status`` (an untracked
        tree's is the store's reading, none of the spout's: without it, until
        2026-11-28, midday, :meth:`refile` refused every untracked tree it was given)."""
        restarts = tree.restarts
        if restarts is None:  # the ones of its copies' tasks (usually none at all)
            mine = self._restarts
            dests = map(_dest, tree.frames)
            restarts = {dest: mine[dest] for dest in dests
                        if type(dest) is int and dest in mine} if mine else {}
        if any(len(run) == 5 for run in tree.runs):  # a run's span: its own record, for
            tree.runs = tuple(map(_own_run, tree.runs))  # the file (once: saved again)
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
                tree = _unplain(plain)
                hash(_key(tree.start[0]))
            except (TypeError, ValueError, KeyError):
                continue
            self._carried += 1
            key = -self._carried  # (reported trace ids are > 0)
            self._trees[key] = tree
            self._trees.move_to_end(key, last=False)  # each older than the one before
            self._by_msg.setdefault(_key(tree.start[0]), key)
            filed += 1
        return filed

    def _read(self, tree: _Tree, bodies: dict | None = None) -> None:
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
            if len(frame) in _UNREAD:
                _, _, first, parent, dest, stream, body, bare, emitted, kind = frame[:_SENT]
                values = _decoded(body, bare, kind, bodies)
                if values is None:
                    self.malformed += 1
                    tree.settled = None  # (counted by its span until now: _settled)
                    continue
                if len(frame) == _PART:  # a run's frame: this trace's tuples of it
                    values = values[frame[10]:frame[10] + frame[11]]
                hops = tuple(range(first, first + len(values)))
                frame = (hops, parent, dest, stream, values, emitted)
            frames.append(frame)
        tree.frames, tree.unread = tuple(frames), False

    def _newest(self, now: float) -> Iterator[tuple[_Tree, str]]:
        """The trees whose spout's start was filed, newest first, with their status."""
        trees = self._trees
        for trace in reversed(trees):
            tree = trees[trace]
            if tree.start is not None:
                yield tree, self._status(tree, now)

    def lineage(self, msg_id: Any, *, now: float) -> Trace | None:
        """The newest trace of the spout tuple ``msg_id``, or None if none was traced."""
        try:
            trace = self._by_msg.get(_key(msg_id))
        except TypeError:
            return None
        tree = self._trees.get(trace) if trace is not None else None
        if tree is None or tree.start is None:
            return None
        return self._assemble(tree, self._status(tree, now))

    def _status(self, tree: _Tree, now: float) -> str:
        if tree.start[5]:  # tracked: the spout's word
            return tree.status or "pending"
        if tree.settled is None:  # (a run's frames are counted unread: _settled)
            if tree.unread and any(len(frame) == _SENT for frame in tree.frames):
                self._read(tree)
            tree.settled = _settled(tree)
        if tree.settled:
            return "acked"
        return "timed_out" if now - tree.start[4] > self.timeout else "pending"

    # -- assembly -----------------------------------------------------------------------
    def _assemble(self, filed: _Tree, status: str, bodies: dict | None = None) -> Trace:
        self._read(filed, bodies)
        tree = _Hops(filed, self._restarts)
        msg_id, component, task, values, started, _tracked = tree.start
        if values is None:  # the spout's copies hold them (each the same)
            values = next((copy[3] for copy in tree.sent.values() if copy[0] == 0), ())
        order = _causal(tree.sent)
        index = {hop: i for i, hop in enumerate(order)}
        hops = tuple(self._hop(tree, hop, index) for hop in order)
        complete = tree.complete_ms
        if complete is None and status == "acked":
            complete = _finished_ms(hops, started)
        return Trace(msg_id=msg_id, component=component, task=task, status=status,
                     complete_ms=complete, hops=hops,
                     held_by=self._held_by(tree, status) if status in ("failed", "timed_out")
                     else None, started=started, values=tuple(values))

    def _hop(self, tree: _Hops, hop: int, index: dict[int, int]) -> Hop:
        parent, dest, stream, values, emitted = tree.sent[hop]
        ran = tree.ran.get(hop)
        queued, executed, outcome = ran[2:5] if ran is not None else (None, None, None)
        outcome = tree.outcomes.get(hop, outcome)
        return Hop(component=self.components.get(dest, "?"), task=dest, stream=stream,
                   values=tuple(values), parent=index.get(parent), queued_ms=queued,
                   executed_ms=executed, outcome=outcome, emitted_at=emitted)

    def _held_by(self, tree: _Hops, status: str) -> tuple[str, int | None] | None:
        order = _causal(tree.sent)
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

    def _late(self, tree: _Hops) -> tuple[str, int] | None:
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
    def _end(tree: _Hops, hop: int) -> float:
        queued, executed = tree.ran[hop][2:4]
        return tree.sent[hop][4] + ((queued or 0.0) + (executed or 0.0)) / 1000.0

    def _named(self, task: int) -> tuple[str, int]:
        return (self.components.get(task, "?"), task)


def _unplain(plain: list) -> _Tree:
    """A tree back from :meth:`TraceStore.kept`'s data (msgpack made its tuples lists)."""
    start, status, complete_ms, frames, runs, outcomes, restarts = plain
    msg_id, component, task, values, started, tracked = start
    if status not in TRACE_STATUSES or type(component) is not str:
        raise ValueError("not a kept trace")
    tree = _Tree()
    tree.start = (msg_id, component, task, None if values is None else tuple(values),
                  float(started), bool(tracked))
    tree.status = status
    tree.complete_ms = None if complete_ms is None else float(complete_ms)
    tree.frames = tuple(map(_unplain_frame, frames))
    tree.unread = any(len(frame) in _UNREAD for frame in tree.frames)
    tree.runs = ()
    for task, incarnation, record in runs:
        _ran(tree, task, incarnation, record)
    tree.outcomes = {hop: str(outcome) for hop, outcome in outcomes.items()}
    tree.restarts = {task: [float(at) for at in ats] for task, ats in restarts.items()}
    return tree


def _unplain_frame(frame: list) -> tuple:
    """A frame back from :meth:`TraceStore.kept`'s data: read, or its record as sent."""
    if len(frame) in _UNREAD:
        if frame[0] != "sent" or type(frame[2]) is not int or type(frame[6]) is not bytes:
            raise ValueError("an unread frame is its sent record")
        return tuple(frame)
    hops, parent, dest, stream, values, emitted = frame
    return (tuple(hops), parent, dest, stream, tuple(map(tuple, values)), float(emitted))


_SENT = 10  # the length of a "sent" record: a frame filed and not read yet
_RUN_SENT = 11  # a run's "sent" record: its parents a list, and its spans last
_PART = 12  # a run's frame as one trace files it: the record, its offset and its tuples
_UNREAD = (_SENT, _PART)


def _sent_frame(tree: _Tree, record: list) -> None:
    """A frame's copies sent, its record kept whole as a tuple (of atoms: untracked by
    the collector once it has seen it): its first hop id (the others follow it), and its
    body as sent, read when the tree first is (:meth:`TraceStore._read`: most trees
    never are)."""
    if (len(record) not in _UNREAD or type(record[2]) is not int
            or type(record[6]) is not bytes):
        raise TypeError("a sent frame is its first hop id, ..., its body, ...")
    tree.frames += (tuple(record),)
    tree.unread = True
    tree.settled = None


def _dest(frame: tuple) -> Any:
    """The task a frame, read or not, was sent to."""
    return frame[4] if len(frame) in _UNREAD else frame[2]


def _decoded(body: bytes, bare: Any, kind: Any, bodies: dict | None) -> tuple | None:
    """A frame's values (:func:`_copies`), None if its body is no batch; from
    ``bodies`` (body -> (bare, kind, values)) if it was decoded there before."""
    seen = bodies.get(body) if bodies is not None else None
    if seen is not None and seen[0] is bare and seen[1] == kind:
        return seen[2]
    try:
        values = _copies(wire.batch_values(kind, body), bare)
    except (TypeError, ValueError):  # (WireError: a ValueError)
        values = None
    if bodies is not None:
        bodies[body] = (bare, kind, values)
    return values


def _copies(entries: Any, bare: bool) -> tuple:
    """A frame's values, one tuple of fields a copy."""
    if type(entries) is not list:
        raise ValueError("a sent frame's body is a batch")
    return tuple(zip(entries)) if bare else tuple(map(tuple, entries))


_NO_OUTCOMES: dict[int, str] = {}  # a tree's without any (read, never written)
_OUTCOMES = dict(enumerate(HOP_OUTCOMES))  # a code -> the outcome (an unknown one: None)


def _ran(tree: _Tree, task: int, incarnation: int, record: list) -> None:
    """A frame's copies processed, its ``hops`` record kept whole as a tuple (of atoms):
    from hop ``record[2]`` on, per copy, flat, its wait and its call in µs and its
    outcome's code (``runtime.engine.tracing``). Its types are checked here, by one C
    loop: numbers after its kind, or the whole record is refused (counted malformed),
    so that :class:`_Hops` reads it without a check of its own."""
    if len(record) % 3 or type(record[1]) is not int or type(record[2]) is not int:
        raise ValueError("processed copies are a first hop and (queued, executed, "
                         "outcome) each")
    record = tuple(record)
    _numbers(record[3:])
    if len(record) > 3:
        tree.runs += ((task, incarnation, record),)
        tree.settled = None


def _ints(values: list) -> bool:
    """Whether every one of ``values`` (a run's spans) is an int (or a bool: taken as the
    number it is): their sum is an int only then, since a float among them makes it a
    float, and a text, None or a list raises (msgpack makes no other number). One C
    loop: ``set(map(type, spans)) <= {int}`` took ~9.7 k instructions for a run's 32
    (tracing-log.md, "2026-11-28, afternoon")."""
    try:
        return type(sum(values)) is int
    except TypeError:
        return False


def _numbers(values: list | tuple) -> None:
    """Raise ValueError unless every one of ``values`` (a ``hops`` record's times and
    outcome codes, sliced off it) is a number, so that :class:`_Hops` reads them
    without a check of its own: one C ``sum`` over them, which a text, a list, a map or
    None makes raise (a bool is taken as the number it is: harmless where a time or a
    code is read). ``set(map(type, ...)) <= {int, float}`` called ``type`` once a field
    (tracing-log.md, "2026-11-28, midday"); ``sum`` over an ``islice`` of the record
    paid the islice's step an item (the slice is copied once, and kept)."""
    try:
        sum(values)
    except (TypeError, OverflowError):
        raise ValueError("a hops record holds numbers after its first hop") from None


def _own_hops(record: tuple, span: list) -> tuple[int, int, int]:
    """A processed frame's first hop and where its triples are in ``record``: all of a
    frame's record, or one span (``[offset, tuples]``) of a run's entry's."""
    if not span:
        return record[2], 3, len(record)
    at, n = span
    return record[2] + at, 4 + 3 * at, 4 + 3 * (at + n)


def _own_run(run: tuple) -> tuple:
    """A tree's processed frame as a record of its own (a run's span made one)."""
    if len(run) == 3:
        return run
    task, incarnation, record, at, n = run
    hop, lo, hi = _own_hops(record, [at, n])
    return (task, incarnation, ("hops", record[1], hop, *record[lo:hi]))


def _settled(tree: _Tree) -> bool:
    """Whether every copy of an untracked tree that was sent ran (a processed copy's
    record is made once its call returned). A run's frame not read yet counts as its
    span says (its first hop and tuples), unread: the master's saves ask every couple
    of seconds for the status of its newest 200 trees, and acking off each one's
    bodies were decoded for it (a run's shared bodies once a trace: ~1.5 k values for
    one tree's 11 copies; tracing-log.md, "2026-11-28, midday"). A frame whose body
    turns out malformed when it is read is dropped then, and the tree asked again."""
    ran = set()
    for _, _, record, *span in tree.runs:
        hop, lo, hi = _own_hops(record, span)
        ran.update(range(hop, hop + (hi - lo) // 3))
    sent = set()
    for frame in tree.frames:
        if len(frame) == _PART:  # ("sent", trace, first, ..., kind, offset, n)
            sent.update(range(frame[2], frame[2] + frame[11]))
        else:
            sent.update(frame[0])
    return bool(sent) and ran >= sent


def _causal(sent: dict[int, tuple]) -> list[int]:
    """Hop ids in causal order: the spout's copies, then each hop's children, breadth
    first, siblings by emit time; copies whose parent is unknown go last. (The master
    orders every trace it keeps, every couple of seconds: no sort of one child, and
    the orphans are sorted only when there are some.)"""
    children: dict[int, list[int]] = {}
    for hop, copy in sent.items():
        children.setdefault(copy[0], []).append(hop)
    for kids in children.values():
        if len(kids) > 1:
            kids.sort(key=lambda h: sent[h][4])
    order, queue, placed = [], [0], set()
    for parent in queue:  # (the queue grows as it is read: breadth first)
        for hop in children.get(parent, ()):
            if hop not in placed:
                placed.add(hop)
                order.append(hop)
                queue.append(hop)
    if len(order) < len(sent):
        order += [h for h in sorted(sent, key=lambda h: sent[h][4]) if h not in placed]
    return order


def _finished_ms(hops: tuple[Hop, ...], started: float) -> float | None:
    """Spout emit to the end of the last hop (an untracked tree), in ms."""
    ends = [(h.emitted_at or started) * 1000.0 + (h.queued_ms or 0.0) + (h.executed_ms or 0.0)
            for h in hops if h.executed_ms is not None]
    return max(ends) - started * 1000.0 if ends else None


def _key(msg_id: Any) -> Any:
    """A msg_id as a dict key: lists (msgpack's tuples) as tuples. (An atom first, by
    its type: ``isinstance(msg_id, list | tuple)`` made the union each call,
    ~1.4 k instructions a traced tree of ~32 k filing it; tracing-log.md, "2026-11-28,
    afternoon".)"""
    if type(msg_id) in _ATOMS:
        return msg_id
    if isinstance(msg_id, list | tuple):
        return tuple(_key(v) for v in msg_id)
    return msg_id


_ATOMS = frozenset({int, str, type(None), float, bytes, bool})  # (no list, no tuple)
