"""The ack side of a bolt's task: the user's ``ack``, ``fail`` and ``reset_timeout`` of
its input, a BasicBolt's ack folded into its last child, and anchored emits (a tuple
joining its anchors' trees). A mixin of :class:`~runtime.engine.bolt_side.BoltSide`,
which runs the input: docs/internals/acker.md says what each id and value means."""

from __future__ import annotations

from runtime import wire
from runtime.acking._ids import new_id
from runtime.model.api import Tuple

from .acks import roots_of
from .outbound import StreamOut

__all__ = ["InputAcks"]


class InputAcks:
    """Needs :class:`~runtime.engine.bolt_side.BoltSide`'s ``counts``, ``acking``,
    ``acks``, ``last_child``, ``batch_size`` and ``comp``."""

    # -- acks and fails of its input ----------------------------------------------------
    def ack(self, tup: Tuple) -> None:
        """Ack an input: per root, its ack value goes to the acker (or a one-tuple
        tree's root on the leaves, counted as acked when they are sent: AckOut.flush):
        a tuple of one tree holds it whole in its ``ack_val``, one of several trees XORs
        its edge id of each root with it. The user's ``ack`` is this with its commonest
        cases written out (``runtime.engine.wiring``)."""
        ids = tup.ids
        if ids is None or not self.acking:
            self.counts.acked += 1
            return
        tup.ids = None  # a second ack of the same tuple changes nothing
        if tup.ack_val is ids:  # a spout tuple's only copy that anchored nothing: the
            self.acks.leaves.append(ids)  # whole tree
            return
        self.counts.acked += 1
        if type(ids) is int:  # one root: the ack value is ack_val (acker.md), combined
            acked = self.acks.acked  # with the task's other acks of the root
            acked[ids] = acked.get(ids, 0) ^ tup.ack_val
            return
        ack_val = tup.ack_val
        for root, edge in ids.items():
            self.acks.queue(wire.ACK_ACK, root, edge ^ ack_val)

    def ack_basic(self, tup: Tuple) -> None:
        """A BasicBolt's input, acked as ``process`` returns. When the last one-root
        child it went into a batch still holds is of the input's root, the input's ack
        value is XORed into that child's ``ack_val`` instead of being sent: the child's
        ack carries both (docs/internals/acker.md, "An ack folded into a child"). A full
        batch its children went into is sent now (the emit held it back)."""
        ids, (batch, out) = tup.ids, self.last_child
        if type(ids) is int and batch and batch[-2] == ids:
            self.counts.acked += 1
            tup.ids = None
            batch[-1] ^= tup.ack_val
        else:
            self.ack(tup)
        if batch is not None and len(batch) >= 3 * self.batch_size:
            out.flush_tracked()  # held back until the input was done (wiring's emit)

    def fail(self, tup: Tuple) -> None:
        self.counts.failed += 1
        ids, tup.ids = tup.ids, None
        if ids and self.acking:
            self.acks.fail(ids)

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tree this tuple belongs to. The acker holds the
        root from now on, so a one-tuple tree's ack must go to it too, not straight to
        the spout: the int ids become their map, ``{root: ack value so far}`` with
        ``ack_val`` 0 (a spout tuple's only copy: ``{root: root}``)."""
        if tup.ids and self.acking:
            if type(tup.ids) is int:
                tup.ids, tup.ack_val = {tup.ids: tup.ack_val}, 0
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
        size, entry = 3 * self.batch_size, out.entry(values, self.comp)
        copies = out.tracked_copies(values, direct)
        if len(copies) != 1:  # one copy counts as it is sent (flush_tracked)
            out.emitted += 1
            out.counted += len(copies)
        for batch in copies:
            ids = _edges(tracked)
            if len(ids) == 1:  # one root: flat, ``root, edge`` (wire.ANCHORED)
                ((root, edge),) = ids.items()
                batch += (entry, root, edge)
            else:
                batch += (entry, ids, 0)
            if len(batch) >= size:
                out.flush_tracked()
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
