"""The ack messages one task owes: to the acker tasks (Storm's ``__ack_init``,
``__ack_ack``, ``__ack_fail`` and reset-timeout messages, as flat ``op, root, value``
triples in ACKS frames; a task's acks of one root XORed into one per flush), and the
trees found complete here, which it owes spout tasks directly (COMPLETED frames;
docs/internals/acker.md, "Leaves" and "Acks combined")."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from operator import lt

from runtime import wire
from runtime.acking._ids import root_task
from runtime.model.constants import ACKER
from runtime.model.plan import PhysicalPlan

from .hot import c_module
from .stats import TaskCounts

Send = Callable[[bytes, bytes], None]


class AckOut:
    """The ack messages waiting to be sent: one ACKS body per acker task, and the leaves
    (roots of one-tuple trees acked here). It owns them and their headers, and counts
    the user's acks of leaves and of one-root tuples in ``counts`` as it sends them (the
    bolt's ``ack`` does not: one counter update a flush, not an ack)."""

    def __init__(self, plan: PhysicalPlan, task: int, send: Send, counts: TaskCounts) -> None:
        self.task, self.send, self.counts = task, send, counts
        ackers = plan.component_tasks().get(ACKER, ())
        # per acker task, the ACKS body being filled: flat op, root, value triples
        self._out: dict[int, list] = {t: [] for t in ackers}
        self._headers = {t: wire.data_header(wire.ACKS, 0, t, task) for t in ackers}
        self._batches = list(self._out.values())  # by root % n
        # roots of one-tuple trees acked here, for the spout tasks written in them; the
        # acks that put them here are counted at the flush
        self.leaves: list[int] = []
        # root -> XOR of the ack values of this task's one-root tuples since the last
        # flush: one ACK per root per flush (docs/internals/acker.md, "Acks combined")
        self.acked: dict[int, int] = {}
        # the root of each such ack since the last flush, to count them there (a list's
        # append makes no int, as a counter's += does for each ack; AckOut.flush)
        self.combined: list[int] = []
        self._leaf_headers: dict[int, bytes] = {}
        self._task_bits = plan.root_bits()  # the task field of every root
        hot = c_module()  # whether the leaves are one run acked in order: C or Python
        self._consecutive = _consecutive if hot is None else hot.consecutive
        # the leaves the C ack took in order while ``leaves`` was empty, as their first
        # root and count (``_hot.LeafRun``): what ``leaves`` holds comes after them. None
        # with the Python ack, which puts every leaf on ``leaves``
        self.stretch = None if hot is None else hot.LeafRun()

    def queue(self, op: int, root: int, value: int) -> None:
        """Queue one message for the acker task that keeps ``root``: the root id mod the
        number of ackers picks it, as Storm's mod hashing does."""
        self._batches[root % len(self._batches)].extend((op, root, value))

    def fail(self, ids) -> None:
        """Fail every tree of a tracked tuple's ids (``{root: edge}``, or an int root)."""
        for root in roots_of(ids):
            self.queue(wire.ACK_FAIL, root, 0)

    def waiting(self) -> bool:
        """Whether any message waits for the next flush."""
        return bool(self.acked or self.leaves or self.stretch or any(self._batches))

    def flush(self) -> None:
        """Send the completed leaves to their spout tasks, and what was queued for each
        acker task."""
        stretch = self.stretch.take() if self.stretch is not None else None
        if stretch is not None:  # the user's acks of leaves count now (those _file_acked
            self.counts.acked += stretch[1]  # adds are counted already, or below)
        if self.leaves:
            self.counts.acked += len(self.leaves)
        if self.acked:
            self.counts.acked += len(self.combined)
            self.combined.clear()
            self._file_acked()
        if stretch is not None:
            self._send_stretch(*stretch)
        elif self.leaves:
            self._send_leaves()
        for task, messages in self._out.items():
            if messages:
                self.send(self._headers[task], wire.encode_batch(messages))
                messages.clear()

    def _file_acked(self) -> None:
        """One ACK per root for what was acked since the last flush, its values XORed:
        the acker would XOR them all into the root anyway. A value equal to a
        self-initialising root is the whole tree, complete (the implied init XORs it to
        0, and no other message of the tree can be missing but by a 2^-63 chance): it
        goes on the leaves, straight to the spout task (acker.md, "Acks combined")."""
        acked, leaves, batches = self.acked, self.leaves, self._batches
        n = len(batches)
        for root, value in acked.items():
            if value == root and root >> 63:
                leaves.append(root)
            else:
                batches[root % n] += (wire.ACK_ACK, root, value)
        acked.clear()

    def _send_leaves(self) -> None:
        """A one-tuple tree (a spout tuple's only copy, acked by a bolt that anchored
        nothing to it) is complete when that tuple is acked: nobody else holds anything
        of it, so its completion goes straight to the spout task written in its root, in
        a ``COMPLETED`` frame, and no acker is asked (docs/internals/acker.md, "Leaves")."""
        leaves, bits = self.leaves, self._task_bits
        first, last = leaves[0], leaves[-1]
        task = root_task(first, bits)
        if task is not None and root_task(last, bits) == task and self._consecutive(leaves):
            # the usual frame: a spout's run, acked in order; sent as first and count
            self.send(self._leaf_header(task), wire.encode_batch([first, len(leaves), []]))
            leaves.clear()
            return
        for task, roots in self._by_spout_task().items():
            self.send(self._leaf_header(task), wire.encode_batch([0, 0, roots]))
        leaves.clear()

    def _send_stretch(self, first: int, count: int) -> None:
        """The leaves the C ack took in order (``stretch``), then those on ``leaves``: the
        stretch alone, of one spout task (a run acked in order: the usual frame), goes as
        ``first, count`` without an int a root ever made; anything else as the Python
        ack's list would have gone, the stretch's roots first."""
        bits = self._task_bits
        task = root_task(first, bits)
        if not self.leaves and task is not None and root_task(first + count - 1, bits) == task:
            self.send(self._leaf_header(task), wire.encode_batch([first, count, []]))
            return
        self.leaves[:0] = range(first, first + count)
        self._send_leaves()

    def _by_spout_task(self) -> dict[int, list[int]]:
        """The leaves by the spout task written in each; an int id that is no
        self-initialising root goes to the acker, which decides."""
        leaves, bits = self.leaves, self._task_bits
        task = root_task(min(leaves), bits)
        if task is not None and root_task(max(leaves), bits) == task:
            return {task: leaves}  # one spout task's roots (and every root between)
        groups: dict[int, list[int]] = {}
        for root in leaves:
            task = root_task(root, bits)
            if task is None:
                self.queue(wire.ACK_ACK, root, root)
            else:
                groups.setdefault(task, []).append(root)
        return groups

    def _leaf_header(self, spout_task: int) -> bytes:
        header = self._leaf_headers.get(spout_task)
        if header is None:
            header = self._leaf_headers[spout_task] = wire.data_header(
                wire.COMPLETED, 0, spout_task, self.task)
        return header


def _consecutive(leaves: list[int]) -> bool:
    """Whether ``leaves`` (roots, ints in [0, 2**64)) count up by one from the first: a
    spout's run acked in order, sent as one ``first, count`` stretch. The spec of its C
    twin, ``_hot.consecutive``, which does the same in ~10 instructions a root instead of
    ~320 (docs/internals/performance-log.md, "Issue 17, thirteenth pass")."""
    return (leaves[-1] - leaves[0] == len(leaves) - 1
            and all(map(lt, leaves, islice(leaves, 1, None))))


def roots_of(ids) -> dict[int, int]:
    """A tracked tuple's ``{root: edge}`` (its ids, or ``{root: root}`` for an int root)."""
    return {ids: ids} if type(ids) is int else ids
