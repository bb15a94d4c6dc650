"""The records of one traced tree as the master's store files them (issue 20;
docs/internals/tracing.md, "How the master assembles a trace"): a private part of
:mod:`runtime.observe.tracestore`, which keeps the trees, bounds them and answers the
queries. Here is what one tree holds and how its records are checked, filed, read per
hop (:class:`Hops`), ordered (:func:`causal`), settled (:func:`settled`, an untracked
tree's status) and carried to a next master and back (:func:`unplain`).

A record is kept as it came, a tuple (mostly of atoms: the collector stops tracking
such a tuple at its first pass); a frame's body is decoded when its tree is first read
(:func:`decoded`), a processed frame's numbers are checked once, when it is filed
(:func:`numbers`), so that reading a tree checks nothing.
"""

from __future__ import annotations

from typing import Any

from runtime import wire

from .traces import ATOMS, HOP_OUTCOMES, TRACE_STATUSES, Hop

__all__ = ["causal", "copies", "covered", "decoded", "file_ran", "file_sent",
           "finished_ms", "frame_dest", "Hops", "ints", "msg_key", "NO_OUTCOMES",
           "numbers", "OUTCOMES", "own_hops", "own_run", "PART", "RUN_SENT", "SENT",
           "settled", "Tree", "unplain", "unplain_frame", "UNREAD"]


class Tree:
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
    # the span's offset in it, its tuples), read by Hops (own_hops)
    runs: tuple[tuple, ...] = ()
    # hop -> a later ack or fail of a held copy; None until the first (rare) one
    outcomes: dict[int, str] | None = None
    # whether every copy sent ran (an untracked tree's status), None until asked
    # again after a record came
    settled: bool | None = None
    # a tree carried over from the master before: the restarts that master knew of
    # its copies' tasks (None: the store's own, as it learns them)
    restarts: dict[int, list[float]] | None = None


class Hops:
    """A tree read per hop, for its assembly: the latest record of each hop, as the store
    kept them until 2026-11-27 (wt-tracemaster) and as ``_held_by`` reads them."""

    __slots__ = ("start", "complete_ms", "sent", "ran", "outcomes", "restarts")

    def __init__(self, tree: Tree, restarts: dict[int, list[float]]) -> None:
        self.start, self.complete_ms = tree.start, tree.complete_ms
        self.outcomes = tree.outcomes or NO_OUTCOMES
        self.restarts = restarts if tree.restarts is None else tree.restarts
        # hop -> (parent, dest, stream, values, emitted)
        self.sent: dict[int, tuple] = {}
        for hops, parent, dest, stream, values, emitted in tree.frames:
            for hop, value in zip(hops, values):
                self.sent[hop] = (parent, dest, stream, value, emitted)
        # hop -> (task, incarnation, queued_ms, executed_ms, outcome)
        self.ran: dict[int, tuple] = {}
        for task, incarnation, record, *span in tree.runs:
            hop, lo, hi = own_hops(record, span)
            for at in range(lo, hi, 3):
                self.ran[hop] = (task, incarnation, record[at] / 1e3, record[at + 1] / 1e3,
                                 OUTCOMES.get(record[at + 2]))
                hop += 1


def unplain(plain: list) -> Tree:
    """A tree back from :meth:`TraceStore.kept`'s data (msgpack made its tuples lists)."""
    start, status, complete_ms, frames, runs, outcomes, restarts = plain
    msg_id, component, task, values, started, tracked = start
    if status not in TRACE_STATUSES or type(component) is not str:
        raise ValueError("not a kept trace")
    tree = Tree()
    tree.start = (msg_id, component, task, None if values is None else tuple(values),
                  float(started), bool(tracked))
    tree.status = status
    tree.complete_ms = None if complete_ms is None else float(complete_ms)
    tree.frames = tuple(map(unplain_frame, frames))
    tree.unread = any(len(frame) in UNREAD for frame in tree.frames)
    tree.runs = ()
    for task, incarnation, record in runs:
        file_ran(tree, task, incarnation, record)
    tree.outcomes = {hop: str(outcome) for hop, outcome in outcomes.items()}
    tree.restarts = {task: [float(at) for at in ats] for task, ats in restarts.items()}
    return tree


def unplain_frame(frame: list) -> tuple:
    """A frame back from :meth:`TraceStore.kept`'s data: read, or its record as sent."""
    if len(frame) in UNREAD:
        if frame[0] != "sent" or type(frame[2]) is not int or type(frame[6]) is not bytes:
            raise ValueError("an unread frame is its sent record")
        return tuple(frame)
    hops, parent, dest, stream, values, emitted = frame
    if not ints(hops):  # (hop ids: settled reads them as numbers)
        raise ValueError("a read frame's hops are ints")
    return (tuple(hops), parent, dest, stream, tuple(map(tuple, values)), float(emitted))


SENT = 10  # the length of a "sent" record: a frame filed and not read yet
RUN_SENT = 11  # a run's "sent" record: its parents a list, and its spans last
PART = 12  # a run's frame as one trace files it: the record, its offset and its tuples
UNREAD = (SENT, PART)


def file_sent(tree: Tree, record: list) -> None:
    """A frame's copies sent, its record kept whole as a tuple (of atoms: untracked by
    the collector once it has seen it): its first hop id (the others follow it), and its
    body as sent, read when the tree first is (:meth:`TraceStore._read`: most trees
    never are)."""
    if (len(record) not in UNREAD or type(record[2]) is not int
            or type(record[6]) is not bytes):
        raise TypeError("a sent frame is its first hop id, ..., its body, ...")
    tree.frames += (tuple(record),)
    tree.unread = True
    tree.settled = None


def frame_dest(frame: tuple) -> Any:
    """The task a frame, read or not, was sent to."""
    return frame[4] if len(frame) in UNREAD else frame[2]


def decoded(body: bytes, bare: Any, kind: Any, bodies: dict | None) -> tuple | None:
    """A frame's values (:func:`copies`), None if its body is no batch; from
    ``bodies`` (body -> (bare, kind, values)) if it was decoded there before."""
    seen = bodies.get(body) if bodies is not None else None
    if seen is not None and seen[0] is bare and seen[1] == kind:
        return seen[2]
    try:
        values = copies(wire.batch_values(kind, body), bare)
    except (TypeError, ValueError):  # (WireError: a ValueError)
        values = None
    if bodies is not None:
        bodies[body] = (bare, kind, values)
    return values


def copies(entries: Any, bare: bool) -> tuple:
    """A frame's values, one tuple of fields a copy."""
    if type(entries) is not list:
        raise ValueError("a sent frame's body is a batch")
    return tuple(zip(entries)) if bare else tuple(map(tuple, entries))


NO_OUTCOMES: dict[int, str] = {}  # a tree's without any (read, never written)
OUTCOMES = dict(enumerate(HOP_OUTCOMES))  # a code -> the outcome (an unknown one: None)


def file_ran(tree: Tree, task: int, incarnation: int, record: list) -> None:
    """A frame's copies processed, its ``hops`` record kept whole as a tuple (of atoms):
    from hop ``record[2]`` on, per copy, flat, its wait and its call in µs and its
    outcome's code (``runtime.engine.tracing``). Its types are checked here, by one C
    loop: numbers after its kind, or the whole record is refused (counted malformed),
    so that :class:`Hops` reads it without a check of its own."""
    if len(record) % 3 or type(record[1]) is not int or type(record[2]) is not int:
        raise ValueError("processed copies are a first hop and (queued, executed, "
                         "outcome) each")
    record = tuple(record)
    numbers(record[3:])
    if len(record) > 3:
        tree.runs += ((task, incarnation, record),)
        tree.settled = None


def ints(values: list) -> bool:
    """Whether every one of ``values`` (a run's spans) is an int (or a bool: taken as the
    number it is): their sum is an int only then, since a float among them makes it a
    float, and a text, None or a list raises (msgpack makes no other number). One C
    loop: ``set(map(type, spans)) <= {int}`` took ~9.7 k instructions for a run's 32
    (tracing-log.md, "2026-11-28, afternoon")."""
    try:
        return type(sum(values)) is int
    except TypeError:
        return False


def numbers(values: list | tuple) -> None:
    """Raise ValueError unless every one of ``values`` (a ``hops`` record's times and
    outcome codes, sliced off it) is a number, so that :class:`Hops` reads them
    without a check of its own: one C ``sum`` over them, which a text, a list, a map or
    None makes raise (a bool is taken as the number it is: harmless where a time or a
    code is read). ``set(map(type, ...)) <= {int, float}`` called ``type`` once a field
    (tracing-log.md, "2026-11-28, midday"); ``sum`` over an ``islice`` of the record
    paid the islice's step an item (the slice is copied once, and kept)."""
    try:
        sum(values)
    except (TypeError, OverflowError):
        raise ValueError("a hops record holds numbers after its first hop") from None


def own_hops(record: tuple, span: list) -> tuple[int, int, int]:
    """A processed frame's first hop and where its triples are in ``record``: all of a
    frame's record, or one span (``[offset, tuples]``) of a run's entry's."""
    if not span:
        return record[2], 3, len(record)
    at, n = span
    return record[2] + at, 4 + 3 * at, 4 + 3 * (at + n)


def own_run(run: tuple) -> tuple:
    """A tree's processed frame as a record of its own (a run's span made one)."""
    if len(run) == 3:
        return run
    task, incarnation, record, at, n = run  # (own_hops, written out: a call a run)
    lo = 4 + 3 * at
    return (task, incarnation, ("hops", record[1], record[2] + at) + record[lo:lo + 3 * n])


def settled(tree: Tree) -> bool:
    """Whether every copy of an untracked tree that was sent ran (a processed copy's
    record is made once its call returned). A run's frame not read yet counts as its
    span says (its first hop and tuples), unread: the master's saves ask every couple
    of seconds for the status of its newest 200 trees, and acking off each one's
    bodies were decoded for it (a run's shared bodies once a trace: ~1.5 k values for
    one tree's 11 copies; tracing-log.md, "2026-11-28, midday"). A frame whose body
    turns out malformed when it is read is dropped then, and the tree asked again.
    The hops are compared as ranges ``[first, end)``, a frame's or a record's each, not
    as sets of ids (~31 k instructions a tree a save, of ~59 k; tracing-log.md,
    "2026-11-28, afternoon")."""
    ran = []
    for run in tree.runs:  # (own_hops, written out: a call a run)
        first = run[2][2]
        if len(run) == 5:  # a run's span: (task, incarnation, record, offset, tuples)
            if run[4] > 0:
                ran.append((first + run[3], first + run[3] + run[4]))
        elif len(run[2]) > 3:  # a frame's: (task, incarnation, record)
            ran.append((first, first + (len(run[2]) - 3) // 3))
    sent = []
    for frame in tree.frames:
        if len(frame) == PART:  # ("sent", trace, first, ..., kind, offset, n)
            if frame[11] > 0:
                sent.append((frame[2], frame[2] + frame[11]))
        else:  # (read: its hops, ints, unplain_frame checks a carried one's)
            sent += [(hop, hop + 1) for hop in frame[0]]
    return bool(sent) and covered(sent, ran)


def covered(sent: list[tuple[int, int]], ran: list[tuple[int, int]]) -> bool:
    """Whether the ranges ``ran`` cover every one of the ranges ``sent`` (each
    ``(first, end)``, not empty). ``ran`` is sorted: a range is covered once its start
    has moved past its end, each of ``ran`` that holds it moving it to its own end."""
    ran.sort()
    for first, end in sent:
        for lo, hi in ran:
            if lo <= first < hi:
                first = hi
        if first < end:
            return False
    return True


def causal(sent: dict[int, tuple]) -> list[int]:
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


def finished_ms(hops: tuple[Hop, ...], started: float) -> float | None:
    """Spout emit to the end of the last hop (an untracked tree), in ms."""
    ends = [(h.emitted_at or started) * 1000.0 + (h.queued_ms or 0.0) + (h.executed_ms or 0.0)
            for h in hops if h.executed_ms is not None]
    return max(ends) - started * 1000.0 if ends else None


def msg_key(msg_id: Any) -> Any:
    """A msg_id as a dict key: lists (msgpack's tuples) as tuples. (An atom first, by
    its type: ``isinstance(msg_id, list | tuple)`` made the union each call,
    ~1.4 k instructions a traced tree of ~32 k filing it; tracing-log.md, "2026-11-28,
    afternoon".)"""
    if type(msg_id) in ATOMS:
        return msg_id
    if isinstance(msg_id, list | tuple):
        return tuple(msg_key(v) for v in msg_id)
    return msg_id
