"""One task's share of tracing (issue 20; docs/internals/tracing.md): the sampled spout
tuples it marks, the marked tuples it receives, the marked children it sends, and the
records of all three it owes the master.

Only traced tuples pay. A task sends a traced tuple the usual way, into its stream's
batches, but alone: what waits on the stream is flushed first, and the tuple's own frames
are caught as they leave (``StreamOut.send`` is swapped for that one flush) and sent as
TRACED frames, each the untouched inner frame plus the mark (trace id, the hop id of this
copy, the emit time). The untraced path, its closures and its decoders, is not touched.

A receiving task processes the inner frame as any other, with the user's ``process``,
``emit``, ``emit_direct``, ``ack`` and ``fail`` wrapped for that one call, so that the
children the tuple spawns are sent traced (anchored to it under acking; every emit under
no acking), and its outcome is seen. A traced tuple a bolt keeps and acks later is watched
by identity until it is acked, failed or forgotten (``HELD_FOR`` message timeouts).

Records (plain lists, msgpack-ready; ``runtime.observe.tracestore`` reads them):

=====================================================================  =======================
``["start", trace, msg_id, component, task, values, started, tracked]``  a spout traced a tuple
``["sent", trace, hop, parent, dest, stream, values, emitted]``          a copy left for ``dest``
``["hop", trace, hop, queued_ms, executed_ms, outcome]``                 a copy was processed
``["outcome", trace, hop, outcome]``                                     a held copy was settled
``["done", trace, status, complete_ms]``                                 the spout's outcome
=====================================================================  =======================

``parent`` is 0 for the spout's own copies (hop ids are random, never 0).
"""

from __future__ import annotations

import contextlib
import random
from collections import deque
from collections.abc import Callable, Mapping
from math import log as _ln
from typing import Any

from runtime import wire
from runtime.model.api import Tuple
from runtime.model.constants import DEFAULT_STREAM

from .outbound import StreamOut

HELD_FOR = 3.0  # message timeouts a watched tuple (spout root, held input) is kept for
MAX_WATCHED = 10_000  # traced roots or held inputs one task watches at most
MAX_RECORDS = 50_000  # records waiting for a report at most (the oldest are dropped)
_STATUS = {wire.ACKED_OK: "acked", wire.ACKED_FAILED: "failed",
           wire.ACKED_TIMEOUT: "timed_out"}


def new_mark() -> int:
    """A trace or hop id: random, 63 bits, never 0 (0 is 'the spout' as a parent)."""
    return random.getrandbits(63) or 1


def gap(rate: float) -> int:
    """Spout tuples to let pass before the next traced one: geometric, mean 1 / rate."""
    if rate >= 1.0:
        return 0
    return int(_ln(1.0 - random.random()) / _ln(1.0 - rate))


class Tracer:
    """One task's tracing: its rate (spouts), the records waiting for the report, the
    traced roots a spout waits on, the traced inputs a bolt holds."""

    def __init__(self, comp: str, task: int, streams: Mapping[str, StreamOut],
                 acking: bool, rate: float, timeout: float,
                 wall: Callable[[], float], spout: bool = False) -> None:
        self.comp, self.task, self.streams, self.acking = comp, task, streams, acking
        self.spout = spout  # only a spout samples (arms its emit)
        self.wall, self.keep = wall, HELD_FOR * timeout
        self.records: deque[list] = deque(maxlen=MAX_RECORDS)  # the heartbeat pops them
        self.user: Any = None  # the user's object, once bound (start)
        self.rate, self.skip = 0.0, 0
        self.set_rate(rate)
        # a spout's traced roots: root -> (trace, started); msg_id -> root (timeouts)
        self.roots: dict[int, tuple[int, float]] = {}
        self.by_msg: dict[Any, int] = {}
        # a bolt's traced inputs held past their process call: id -> (tuple, trace, hop, since)
        self.held: dict[int, tuple[Tuple, int, int, float]] = {}

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

    # -- sending a traced tuple -------------------------------------------------------
    def send_traced(self, out: StreamOut, emit: Callable[[], Any], trace: int,
                    parent: int, values) -> list[tuple[int, bytes]]:
        """Emit one tuple through ``emit`` (the usual collector), alone in its frames, and
        send those frames marked. Returns each copy's inner kind and body."""
        out.flush()  # what waits goes first, untraced
        emit()
        caught: list[tuple[bytes, bytes]] = []
        send, out.send = out.send, lambda header, body: caught.append((header, body))
        try:
            out.flush()
        finally:
            out.send = send
        now, values = self.wall(), list(values)
        inner = []
        for header, body in caught:
            h = wire.parse_header(header)
            hop = new_mark()
            send(wire.data_header(wire.TRACED, h.stream, h.dest, h.src),
                 wire.encode_traced(h.kind, body, trace, hop, now))
            self.records.append(["sent", trace, hop, parent, h.dest, out.name, values, now])
            inner.append((h.kind, body))
        return inner

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

        def emit(values, stream=DEFAULT_STREAM, msg_id=None):
            self.skip = gap(self.rate) if self.rate > 0 else 1
            if self.skip > 0:  # the next one is not due yet: one shot
                user.emit = base
            out = self.streams.get(stream)
            if out is None:
                return base(values, stream, msg_id)
            trace = new_mark()
            started = self.wall()
            inner = self.send_traced(out, lambda: base(values, stream, msg_id), trace, 0,
                                     values)
            tracked = self.acking and msg_id is not None
            self.records.append(["start", trace, _plain(msg_id), self.comp, self.task,
                                 list(values), started, tracked])
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
        self._expire_roots(started)
        self.roots[root] = (trace, started)
        with contextlib.suppress(TypeError):  # an unhashable msg_id: its timeout is
            self.by_msg[msg_id] = root  # not told apart from a failure

    def _expire_roots(self, now: float) -> None:
        if len(self.roots) >= MAX_WATCHED:
            for root in list(self.roots)[:len(self.roots) // 2]:
                del self.roots[root]
        stale = [r for r, (_, t) in self.roots.items() if now - t > self.keep]
        for root in stale:
            del self.roots[root]
        if not self.roots:
            self.by_msg.clear()

    def on_acked(self, batch: list) -> None:
        """An ACKED frame for this spout: the traced roots among its ``root, outcome``
        pairs are done."""
        roots = self.roots
        for root, outcome in zip(batch[0::2], batch[1::2]):
            if root in roots and outcome in _STATUS:
                self._done(root, _STATUS[outcome])

    def on_completed(self, body: list) -> None:
        """A COMPLETED frame, ``[first, count, [root, ...]]``: one-tuple trees acked."""
        if len(body) != 3 or type(body[0]) is not int or type(body[1]) is not int:
            return
        first, count, others = body
        done = [r for r in self.roots if first <= r < first + count]
        done += [r for r in others if r in self.roots] if type(others) is list else []
        for root in done:
            self._done(root, "acked")

    def on_expired(self, msg_ids: list) -> None:
        """msg_ids the spout's own tracker timed out."""
        for msg_id in msg_ids:
            try:
                root = self.by_msg.get(msg_id)
            except TypeError:
                continue
            if root is not None and root in self.roots:
                self._done(root, "timed_out")

    def _done(self, root: int, status: str) -> None:
        trace, started = self.roots.pop(root)
        self.records.append(["done", trace, status, (self.wall() - started) * 1000.0])

    # -- a bolt's traced inputs ---------------------------------------------------------
    def on_traced(self, bolt, h: wire.Header, body: bytes, waiting) -> None:
        """A TRACED frame: process its inner frame with the mark on, and record the hop."""
        kind, inner, trace, hop, emitted = wire.decode_traced(body)
        user, counts = self.user, bolt.counts
        seen: list[Tuple] = []
        times = [None, None]
        swapped = self._swap(user, bolt, seen, times, trace, hop)
        failed = counts.failed
        try:
            bolt.on_frame(wire.Header(kind, h.stream, h.dest, h.src), inner, waiting)
        finally:
            self._restore(user, swapped)
            if times[0] is not None and times[1] is None:
                times[1] = self.wall()
        self._hop(bolt, seen, trace, hop, emitted, times, counts.failed > failed)

    def _swap(self, user, bolt, seen: list, times: list, trace: int, hop: int) -> dict:
        """The user's functions for the one traced process call (the old ones returned)."""
        old = {name: user.__dict__.get(name) for name in ("process", "emit", "emit_direct")}
        process, emit, direct = user.process, user.emit, user.emit_direct
        wall = self.wall

        def traced_process(tup):
            seen.append(tup)
            times[0] = wall()
            try:
                return process(tup)
            finally:
                times[1] = wall()

        def traced_emit(values, stream=DEFAULT_STREAM, anchors=None):
            if not self._child(bolt, seen, anchors) or stream not in self.streams:
                return emit(values, stream, anchors)
            self.send_traced(self.streams[stream], lambda: emit(values, stream, anchors),
                             trace, hop, values)
            return None

        def traced_direct(task, values, stream=DEFAULT_STREAM, msg_id=None, anchors=None):
            if not self._child(bolt, seen, anchors) or stream not in self.streams:
                return direct(task, values, stream, msg_id, anchors)
            self.send_traced(self.streams[stream],
                             lambda: direct(task, values, stream, msg_id, anchors),
                             trace, hop, values)
            return None

        user.process, user.emit, user.emit_direct = traced_process, traced_emit, traced_direct
        return old

    @staticmethod
    def _restore(user, old: dict) -> None:
        for name, value in old.items():
            if value is None:
                user.__dict__.pop(name, None)
            else:
                setattr(user, name, value)

    def _child(self, bolt, seen: list, anchors) -> bool:
        """Whether an emit during the traced call is a child of the traced tuple: every
        emit without an acker, an anchored one with (a BasicBolt's anchors to it)."""
        if not self.acking or not seen:
            return True
        tup = seen[0]
        if anchors is None:
            return bolt.basic or tup.ids is None
        if isinstance(anchors, Tuple):
            return anchors is tup
        return any(a is tup for a in anchors)

    def _hop(self, bolt, seen: list, trace: int, hop: int, emitted: float, times: list,
             failed: bool) -> None:
        started, ended = times
        queued = None if started is None else max(0.0, (started - emitted) * 1000.0)
        executed = None if started is None else (ended - started) * 1000.0
        outcome = self._outcome(bolt, seen, failed)
        if outcome is None and seen and seen[0].ids is not None:
            self._hold(seen[0], trace, hop)
        self.records.append(["hop", trace, hop, queued, executed, outcome])

    def _outcome(self, bolt, seen: list, failed: bool) -> str | None:
        if not seen:
            return None
        if bolt.basic:
            return "failed" if failed else "acked"
        tup = seen[0]
        if tup.ids is None:  # acked or failed in process (or untracked: no word)
            return "failed" if failed else ("acked" if self.acking else None)
        return None

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
            self.records.append(["outcome", entry[1], entry[2], outcome])
        if not self.held:
            self.user.ack, self.user.fail = self._settlers


def _plain(msg_id):
    """A msg_id as the reports carry it: itself if msgpack can, else its repr."""
    return msg_id if wire.encodable(msg_id) else repr(msg_id)


def _root_of(inner: list[tuple[int, bytes]]) -> int | None:
    """The root a spout's traced tuple was given, read back from its own frames."""
    for kind, body in inner:
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
