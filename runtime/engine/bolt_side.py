"""The bolt's side of one task: frames of tuples turned into ``process`` calls, the acks
and fails of its inputs, the tuples it emits anchored to them, and its ticks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from itertools import count, islice, repeat
from sys import getrefcount

from runtime import wire
from runtime.acking._ledger import SELF_INIT, new_id
from runtime.model.api import BasicBolt, Bolt, FailedException, OneFieldTuple, Tuple, TupleSource
from runtime.model.constants import SYSTEM, TICK
from runtime.model.plan import PhysicalPlan
from runtime.model.topology import ComponentSpec

from .acks import AckOut, roots_of
from .errors import UserCodeError, call_user
from .outbound import StreamOut
from .stats import TaskCounts

_ID_TYPES = {int, dict}


class BoltSide:
    """One bolt task's input: where each frame came from (its sources), the input set
    aside while output waited (``leftover``), and a BasicBolt's input being processed
    (``current``, which its emits anchor to)."""

    def __init__(self, user: Bolt, plan: PhysicalPlan, specs: Mapping[str, ComponentSpec],
                 spec: ComponentSpec, counts: TaskCounts, acks: AckOut, acking: bool,
                 batch_size: int) -> None:
        self.user, self.plan, self.specs, self.counts = user, plan, specs, counts
        self.acks, self.acking, self.batch_size = acks, acking, batch_size
        self.name, self.comp = spec.class_name, spec.id  # for error messages
        self.basic = isinstance(user, BasicBolt)
        self._sources: dict[tuple[int, int], TupleSource] = {}
        self.current: list[Tuple | None] = [None]  # a BasicBolt's input being processed
        # input set aside while output waited: (entries, source, ids) (execute)
        self.leftover: tuple = ()

    # -- frames -------------------------------------------------------------------------
    def on_frame(self, h: wire.Header, body: bytes, waiting: Sized) -> None:
        """A DATA, TRACKED or RUN frame: ``process`` its tuples; the acks of a tracked
        frame go at once."""
        self.counts.frame_arrived()
        batch = wire.decode_batch(body)
        source = self._source(h.src, h.stream)
        if h.kind == wire.DATA:
            return self.execute(batch, source, None, waiting)
        entries, ids = (_run_parts if h.kind == wire.RUN else _tracked_parts)(batch)
        try:
            return self.execute(entries, source, ids, waiting)
        finally:  # they are few frames, and waiting for the flush timer would add to
            self.acks.flush()  # complete latency

    def _source(self, src: int, stream: int) -> TupleSource:
        key = (src, stream)
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = self._new_source(src, stream)
        return source

    def _new_source(self, src: int, stream: int) -> TupleSource:
        try:
            comp, name = self.plan.streams[stream]
            info = self.plan.task(src)
        except IndexError:
            raise wire.WireError(f"frame from unknown task {src} or stream {stream}") from None
        if info.component != comp:
            raise wire.WireError(f"task {src} does not belong to {comp!r}")
        return TupleSource.of(comp, src, name, self.specs[comp].streams[name])

    def execute(self, entries: list, source: TupleSource, ids: Iterable | None,
                waiting: Sized) -> None:
        """``process`` each entry of a frame's batch as a Tuple from ``source`` (``ids``:
        the entries' tracking ids in order, None for untracked ones). A BasicBolt's input
        is acked when ``process`` returns, failed when it raises FailedException, and
        its emits anchor to it.

        Once output waits unsent (``waiting``), the rest is set aside in ``leftover`` (a
        bolt emitting 10,000 tuples per input must not turn a whole frame of inputs into
        output at once); :meth:`run_leftover` takes it up again.

        Each Tuple is made as its entry comes, and one that ``process`` did not keep is
        made again for the next entry: when nothing but this loop holds it (its
        reference count is what it was when it was made), nobody can see it change, so
        its fields are set anew instead of a new Tuple being allocated, as CPython's
        ``zip`` and ``enumerate`` reuse their result tuples. A bolt that keeps its input
        (to ack later, or in a window) gets a new Tuple each time. In-process, with the
        word count's bolt: ~150-200 ns a tuple less (docs/internals/performance.md,
        "Tuples made once")."""
        process, basic, current = self.user.process, self.basic, self.current
        bare = len(source.fields) == 1  # its entries are bare values (wire.py)
        make = OneFieldTuple if bare else Tuple
        tids = repeat(None) if ids is None else iter(ids)
        tup, alone, done = None, 0, 0
        started = self.counts.started_batch()
        try:
            for entry, tid in zip(entries, tids):
                if tup is not None and getrefcount(tup) == alone:  # nobody kept it
                    tup.values = [entry] if bare else entry
                    tup.ids, tup.ack_val = tid, 0
                else:
                    tup = make(entry, source, tid)
                    alone = getrefcount(tup)
                if basic:
                    current[0] = tup
                    try:
                        process(tup)
                    except FailedException:
                        self.fail(tup)
                    else:
                        self.ack(tup)
                    current[0] = None
                else:
                    process(tup)
                done += 1
                if waiting:
                    break
        except Exception as exc:
            raise UserCodeError(f"{self.name}.process", exc) from exc
        finally:
            current[0] = None
            self.counts.ended_batch(started, done)
        self._set_aside(entries, source, ids, tids, done)

    def _set_aside(self, entries: list, source: TupleSource, ids, tids: Iterator,
                   done: int) -> None:
        rest = len(entries) - done
        if rest:  # zip took no more ids than it gave out: the rest are the next ones
            self.leftover = (entries[done:], source,
                             None if ids is None else list(islice(tids, rest)))

    def run_leftover(self, waiting: Sized) -> None:
        """Process the input set aside while output waited (the driver calls this once
        nothing waits any more, before it reads another frame)."""
        leftover, self.leftover = self.leftover, ()
        if leftover:
            self.execute(*leftover, waiting)

    def tick(self, every) -> None:
        source = TupleSource.of(SYSTEM, 0, TICK, ["freq"])
        call_user(f"{self.name}.process_tick", self.user.process_tick,
                  Tuple([every], source))

    # -- acks and fails of its input ----------------------------------------------------
    def ack(self, tup: Tuple) -> None:
        """Ack an input: per root, its edge id XOR its ``ack_val`` goes to the acker (or
        a one-tuple tree's root on the leaves). The user's ``ack`` is this with its
        commonest case written out (``runtime.engine.wiring``)."""
        self.counts.acked += 1
        ids = tup.ids
        if ids is None or not self.acking:
            return
        tup.ids = None  # a second ack of the same tuple changes nothing
        if type(ids) is int:  # a spout tuple's only copy: its root is its edge id
            if tup.ack_val:
                self.acks.queue(wire.ACK_ACK, ids, ids ^ tup.ack_val)
            else:  # ...and it anchored nothing: the whole tree, complete
                self.acks.leaves.append(ids)
            return
        ack_val = tup.ack_val
        for root, edge in ids.items():
            self.acks.queue(wire.ACK_ACK, root, edge ^ ack_val)

    def fail(self, tup: Tuple) -> None:
        self.counts.failed += 1
        ids, tup.ids = tup.ids, None
        if ids and self.acking:
            self.acks.fail(ids)

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tree this tuple belongs to. The acker holds the
        root from now on, so a one-tuple tree's ack must go to it too, not straight to
        the spout: the int ids become their ``{root: root}`` map."""
        if tup.ids and self.acking:
            if type(tup.ids) is int:
                tup.ids = {tup.ids: tup.ids}
            for root in roots_of(tup.ids):
                self.acks.queue(wire.ACK_RESET, root, 0)

    # -- anchored emits -----------------------------------------------------------------
    def emit_anchored(self, out: StreamOut, values, anchors, direct: int | None = None) -> bool:
        """A tuple joining its anchors' trees; False when no anchor is tracked."""
        if isinstance(anchors, Tuple):
            anchors = [anchors]
        tracked = [a for a in anchors if a is not None and a.ids]
        if not tracked:
            return False
        size, entry = 2 * self.batch_size, out.entry(values, self.comp)
        for batch in out.tracked_copies(values, direct):
            batch.append(entry)
            batch.append(_edges(tracked))
            if len(batch) >= size:
                out.flush_tracked()
        out.emitted += 1
        if out.recorder is not None:  # a tuple of several trees is recorded with its first
            out.recorder.tracked(values, next(iter(roots_of(tracked[0].ids))))
        return True


def _edges(anchors: list[Tuple]) -> dict[int, int]:
    """One copy's ids: a new edge id per anchor, XORed into the anchor's ``ack_val`` and
    into the copy's id of each of the anchor's roots."""
    ids: dict[int, int] = {}
    for anchor in anchors:
        edge = new_id()
        anchor.ack_val ^= edge
        for root in roots_of(anchor.ids):
            ids[root] = ids.get(root, 0) ^ edge
    return ids


def _tracked_parts(batch: list) -> tuple[list, Iterator]:
    """A TRACKED batch, ``entry, ids, entry, ids, ...``, as its entries and their ids:
    ``ids`` is ``{root: edge}``, or an int root that is its own edge id (a spout tuple's
    only copy)."""
    ids = batch[1::2]
    if len(batch) % 2 or not set(map(type, ids)) <= _ID_TYPES:
        raise wire.WireError("a tracked batch must hold values, ids pairs (ids: int or map)")
    return batch[::2], iter(ids)


def _run_parts(batch: list) -> tuple[list, Iterator]:
    """A RUN batch, ``[first, [entry, ...]]``, as its entries and their ids: the n-th
    tuple's is the self-initialising root ``first + n``, its own edge id."""
    if (len(batch) != 2 or type(batch[0]) is not int or type(batch[1]) is not list
            or batch[0] < SELF_INIT or batch[0] + len(batch[1]) > 1 << 64):
        raise wire.WireError("a run must be [first self-initialising root, [values, ...]]")
    first, entries = batch
    return entries, count(first)
