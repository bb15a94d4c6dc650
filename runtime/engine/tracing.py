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
Until 2026-11-27 (wt-trace8) hop ids went one by one, a ``hops`` record held a tuple
``(hop, queued_ms, executed_ms, outcome)`` per copy and ``start`` the values too: a
traced sentence's report was 820 bytes. The records are tuples, most of atoms: the
collector stops tracking such a tuple at its first pass, so the records waiting for a
report (up to a report interval's) are not traversed again and again.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from itertools import count
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


def gap(rate: float) -> int:
    """Spout tuples to let pass before the next traced one: geometric, mean 1 / rate."""
    if rate >= 1.0:
        return 0
    return int(_ln(1.0 - random.random()) / _ln(1.0 - rate))


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
        # spout tuples to let pass before the next traced one, and the gap after that
        # one (drawn when the emit is armed, so the spout's turn needs no cut after it)
        self.rate, self.skip, self.after = 0.0, 0, 0
        self.set_rate(rate)
        # a spout's traced roots: root -> (trace, started); msg_id -> root (timeouts)
        self.roots: dict[int, tuple[int, float]] = {}
        self.by_msg: dict[Any, int] = {}
        # a bolt's traced inputs held past their process call: id -> (tuple, trace, hop, since)
        self.held: dict[int, tuple[Tuple, int, int, float]] = {}
        # the traced input being processed: its call's window (_Window), its trace,
        # hop and whether only anchored children count (caught by _close)
        self.open: tuple[_Window, int, int, bool] | None = None

    def set_rate(self, rate: float) -> None:
        """Trace this fraction of the spout's tuples from now on (0.0: none)."""
        self.rate = float(rate)
        self.skip = gap(self.rate) if self.rate > 0 else 0
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
    def arm(self, emitted: int) -> None:
        """After a spout's turn that emitted ``emitted`` tuples: once the gap is used up,
        the next emit is traced (the user's ``emit`` is swapped for one call)."""
        self.skip -= emitted
        if self.skip <= 0 and self.rate > 0 and self.spout and self.user is not None:
            self._arm_once()

    def _arm_once(self) -> None:
        user = self.user
        base = user.emit
        if getattr(base, "traced", False):
            return
        self.after = gap(self.rate)

        def emit(values, stream=DEFAULT_STREAM, msg_id=None):
            # the spout's piece is this tuple and the gap after it (arm subtracts the
            # piece's tuples, this one among them)
            self.skip = self.after + 1 if self.rate > 0 else 1
            if self.after > 0 or self.rate <= 0:  # the next one is not due yet: one shot
                user.emit = base
            else:  # the next one is due too: armed still, with the gap after it
                self.after = gap(self.rate)
            out = self.streams.get(stream)
            if out is None:
                return base(values, stream, msg_id)
            trace = new_mark()
            started = self.wall()
            window = self.set_aside()  # what waits stays for the usual flush
            try:
                base(values, stream, msg_id)
            finally:  # a bad emit raises (and is reported): what waits is put back
                inner = self.catch(window, trace, 0, only_anchored=False)
            tracked = self.acking and msg_id is not None
            # the values are in the spout's sent body, if a frame was caught
            self.records.append(("start", trace, _plain(msg_id), started, tracked)
                                if inner else ("start", trace, _plain(msg_id), started,
                                               tracked, list(values)))
            if tracked:
                self._watch_root(inner, trace, msg_id, started)
            return None

        emit.traced, emit.base = True, base
        user.emit = emit

    def _watch_root(self, inner: list[tuple[int, bytes]], trace: int, msg_id,
                    started: float) -> None:
        root = _root_of(inner)
        if root is None:
            return
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
        kind, inner, trace, _, _ = entries[-1]
        if trace:  # none rode (a rider is last, trace id 0): entry by entry, acks at once
            # (once output waits, the entries after are set aside by the bolt's execute)
            for kind, inner, trace, first, emitted in entries:
                self._entry(bolt, wire.Header(kind, h.stream, h.dest, h.src), inner,
                            trace, first, emitted, waiting, True)
            return
        done = [self._segment(bolt, *entry) for entry in entries[:-1]]
        try:  # the frame that rode last, the traced ones before it, in one execute
            bolt.on_frame(wire.Header(kind, h.stream, h.dest, h.src), inner, waiting,
                          before=done)
        finally:  # each entry's hops recorded, children caught, if execute stopped first
            for _, _, _, after in done:
                after()

    def _segment(self, bolt, kind: int, inner: bytes, trace: int, first: int,
                 emitted: float) -> tuple[int, bytes, Callable, Callable[[], None]]:
        """One traced entry of a TRACED frame as ``BoltSide.on_frame`` takes it before
        the frame it rode: its kind and body, the user's ``process`` wrapped for it, and
        what to do once its last tuple is done (once: the frame's end calls it again)."""
        # the wrapper is handed to this frame's execute, not set on the user's object:
        # patching it (or reading its __dict__) makes CPython 3.11 give up the inline
        # attribute loads of that object for good, and every untraced tuple after it
        # pays (its own ``self.counts``, ``self.emit``: ~40 % slower each)
        done: list[int] = []  # queued µs, executed µs, outcome code per tuple processed
        chunk = [first]  # the hop of done's first tuple (hop ids are consecutive)
        process = self._traced_process(bolt, self.user.process, trace, first, emitted,
                                       done)

        def after() -> None:
            if done:  # one record for the entry's tuples (its trace id once, one record
                # for the master to file), flat, of atoms: the collector lets it go
                self.records.append(("hops", trace, chunk[0], *done))
                chunk[0] += len(done) // 3
                done.clear()
            self._close()  # the last traced input's children, its ack folded in

        return kind, inner, process, after

    def _entry(self, bolt, h: wire.Header, inner: bytes, trace: int, first: int,
               emitted: float, waiting, ack_now: bool) -> None:
        _, _, process, after = self._segment(bolt, h.kind, inner, trace, first, emitted)
        try:
            bolt.on_frame(h, inner, waiting, ack_now=ack_now, process=process)
        finally:
            after()

    def _traced_process(self, bolt, process, trace: int, first: int, emitted: float,
                        done: list):
        # called once per traced tuple (ten per sentence at a counter): what it needs is
        # bound here, and a sink (no subscribed stream) skips the catching altogether;
        # ``done`` takes each tuple's times and outcome for the frame's "hops" record
        wall, counts, live = self.wall, bolt.counts, self.live
        basic, acking, record, hops = bolt.basic, self.acking, done.extend, count(first)

        def traced(tup):
            hop = next(hops)
            if self.open is not None:  # the previous traced input's children (it is
                self._close()  # acked now)
            tracked, failed = tup.ids is not None, counts.failed
            if live:  # a sink (a counter, per word) has no children to catch
                self.open = (self.set_aside(), trace, hop, acking and tracked)
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
                if outcome == 0 and tracked:
                    self._hold(tup, trace, hop)

        return traced

    def _close(self) -> None:
        """Catch the children of the traced input processed last, if not yet done: after
        its ``process`` call *and* its ack, so that a BasicBolt's ack folded into its
        last child (acker.md, "An ack folded into a child") travels with it."""
        if self.open is not None:
            window, trace, hop, only_anchored = self.open
            self.open = None
            self.catch(window, trace, hop, only_anchored)

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

    __slots__ = ("marks", "early")

    def __init__(self, live: list[StreamOut]) -> None:
        self.early: list[tuple[StreamOut, bytes, bytes]] = []
        self.marks = []
        early = self.early.append
        for out in live:
            lists = out.pending()
            self.marks.append((out, lists, list(map(len, lists)), out.send))
            out.send = lambda h, b, out=out: early((out, h, b))

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
