"""A traced call's window (runtime/engine/tracing.py): what waits in its task's pending
lists is left in place, only their lengths noted, so that what the call adds is their tails,
sent apart and caught."""

from __future__ import annotations

from runtime import wire

from .outbound import Send, StreamOut

__all__ = ["Window"]


class Window:
    """A traced call's view of its task's live streams: each one's pending lists and
    their lengths when the call began (the heads: untraced tuples, left in place), and
    what the streams sent while the call ran (only when it filled a batch), caught."""

    __slots__ = ("marks", "early", "notes", "flat")

    def __init__(self, live: list[StreamOut]) -> None:
        self.early: list[tuple[StreamOut, bytes, bytes]] = []
        self.notes: list[list[int]] = []  # per unit shared, every list's length
        self.flat: list[list] | None = None  # every pending list, the streams' in order
        self.marks = []
        early = self.early.append
        for out in live:
            lists = out.pending()
            self.marks.append((out, lists, list(map(len, lists)), out.send))
            out.send = lambda h, b, out=out: early((out, h, b))

    def note(self) -> None:
        """A unit of a shared window is done (a spout's tuple, a bolt's traced input and
        its ack): the pending lists' lengths now, which tell its tuples from the next's."""
        flat = self.flat
        if flat is None:  # (one list of lists: one C call a note)
            flat = self.flat = [part for _, lists, _, _ in self.marks for part in lists]
        if len(flat) == 2:  # the batch and one tracked list (a stream to one task, acking
            # off, or a bolt's under acking): two len()s, ~1,000 instructions below the map
            self.notes.append([len(flat[0]), len(flat[1])])
        else:
            self.notes.append(list(map(len, flat)))

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
