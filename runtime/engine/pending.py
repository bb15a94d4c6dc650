"""A stream's pending lists as one ordered table (issue 20): what a traced call reads,
cuts and puts back so that only its own tuples leave in the frames it sends
(``runtime/engine/tracing.py``). A part of :class:`~runtime.engine.outbound.StreamOut`.

The order, the one all three methods follow: the untracked batch; the direct batches,
then the direct tracked ones; each outlet's tracked batches; a tracking spout's runs
(entries, then msg_ids, then emit times, a list a run each). The emit closures hold these
lists: they are emptied and filled in place, and replaced only while a traced call's tails
are sent (:meth:`PendingLists.send_tails`), when no emit runs.
"""

from __future__ import annotations

__all__ = ["PendingLists"]


class PendingLists:
    """Needs :class:`~runtime.engine.outbound.StreamOut`'s ``items``, ``direct``,
    ``direct_tracked``, ``outlets``, ``runs``, ``recorder``, ``stride``, ``emptied_at``
    and ``flush``."""

    __slots__ = ()

    def pending(self) -> list[list]:
        """Every list an emit appends to, in the module's order."""
        lists = [self.items]  # (each traced call reads them: no generators)
        if self.direct:  # (the direct and direct tracked batches are wired together)
            lists += [p for _, p in self.direct.values()]
            lists += [p for _, p in self.direct_tracked.values()]
        for outlet in self.outlets:
            lists += outlet.tracked
        if self.runs is not None:
            lists += self.runs.pending()
        return lists

    def places(self) -> dict[bytes, tuple[tuple[int, ...], int, bool]]:
        """Per header this stream sends frames under (the tracer's reading of a frame sent
        while a traced call ran, tracing.py): the indexes in :meth:`pending` of the
        lists its frame empties (the tuples' list first), the list's items per tuple, and
        whether a frame holds that list whole (False: a grouping's part of the batch)."""
        places: dict[bytes, tuple[tuple[int, ...], int, bool]] = {}
        for outlet in self.outlets:
            for header in outlet.headers:
                places[header] = ((0,), 1, outlet.fixed is not None)
        i = 1
        for held, stride in ((self.direct, 1), (self.direct_tracked, self.stride)):
            for header, _ in held.values():
                places[header] = ((i,), stride, True)
                i += 1
        for outlet in self.outlets:
            for header in outlet.tracked_headers:
                places[header] = ((i,), self.stride, True)
                i += 1
        if self.runs is not None:  # entries, then msg_ids, then emit times, a list a run each
            n = sum(len(outlet.run_headers) for outlet in self.outlets)
            for outlet in self.outlets:
                for header in outlet.run_headers:
                    places[header] = ((i, i + n, i + 2 * n), 1, True)
                    i += 1
        return places

    def send_tails(self, lists: list[list], heads: list[int]) -> None:
        """Send only what each of :meth:`pending`'s ``lists`` holds past its length in
        ``heads`` (a traced call's tuples), as :meth:`flush` sends a batch; what was
        there before stays in place, uncopied, for the usual flush. For the flush, a
        list with a head is cut and its tail put in its place, then it is put back;
        a tail only in the runs (:meth:`Runs.send_tails`) or only in the untracked
        batch is sent without."""
        if not any(heads):
            return self.flush()
        runs = self.runs  # a tracking spout's traced emit: only its runs have tails
        if runs is not None and self.recorder is None:
            k = len(lists) - 3 * len(runs.entries)  # (the runs' lists come last)
            if list(map(len, lists[:k])) == heads[:k]:
                return runs.send_tails(self, heads[k:])
        if self.recorder is None and list(map(len, lists[1:])) == heads[1:]:
            return self._send_untracked_tail(lists[0], heads[0])
        cut = [(i, part) for i, part in enumerate(lists) if heads[i]]
        for i, part in cut:
            tail = part[heads[i]:]
            del part[heads[i]:]
            self._put(i, tail)
        emptied_at = self.emptied_at  # the heads put back are as old as they were
        try:
            self.flush()
        finally:
            for i, part in cut:
                self._put(i, part)
            self.emptied_at = emptied_at

    def _send_untracked_tail(self, items: list, head: int) -> None:
        """Only the untracked batch has a tail (a spout's untracked traced emit, a bolt's
        traced call acking off): it goes as :meth:`flush` sends that batch, split by
        the outlets' groupings, without the list put in place and back nor the other
        lists looked at (~7 k instructions of a traced sentence at the spout)."""
        tail = items[head:]
        del items[head:]
        for outlet in self.outlets:
            outlet.take(tail, self)
        self.emitted += len(tail)
        self._reported.clear()

    def _put(self, i: int, part: list) -> None:
        """Put ``part`` where the ``i``-th of :meth:`pending`'s lists sits (the emit
        closures keep the lists they were made with: they are not called meanwhile)."""
        if i == 0:
            self.items = part
            return
        i -= 1
        for held in (self.direct, self.direct_tracked):
            if i < len(held):
                task = list(held)[i]
                held[task] = (held[task][0], part)
                return
            i -= len(held)
        for outlet in self.outlets:
            if i < len(outlet.tracked):
                outlet.tracked[i] = part
                return
            i -= len(outlet.tracked)
        self.runs.put(i, part)
