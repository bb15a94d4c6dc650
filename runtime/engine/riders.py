"""A task's traced entries waiting to ride the next frame to their task (issue 20;
docs/internals/tracing.md, "How the mark travels").

A traced call's frames are kept, marked, as entries of a TRACED frame for their task
(``runtime/engine/tracing.py`` makes them). They do not leave alone: until the
executor's flush, the next frame the same stream sends to that task goes inside their
TRACED frame, last, as an entry of trace id 0, so a traced tuple adds no frame and no
wake-up of its receiver when an untraced one goes there in the same flush interval. To
see those frames, each stream with entries waiting has its ``send`` swapped for a riding
one until :meth:`Riders.flush` (what found no frame goes alone then) or
:meth:`Riders.discard` (a checkpoint's rollback) puts it back.
"""

from __future__ import annotations

from runtime import wire

from .outbound import Send, StreamOut

__all__ = ["Riders"]

# a TRACED header's first byte, its kind (wire's data header: kind, pad, stream, dest, src)
_TRACED = wire.data_header(wire.TRACED, 0, 0, 0)[:1]


def traced_key(header: bytes) -> bytes:
    """The TRACED header for the task and stream of a data ``header``: its kind byte
    replaced, the rest as it is (``wire.data_header(TRACED, stream, dest, src)`` of the
    parsed header, without parsing it: ~3,500 instructions less a frame sent while
    entries wait)."""
    return _TRACED + header[1:]


class Riders:
    """The entries waiting per TRACED header, and the streams whose ``send`` they ride.
    ``riding`` is empty when nothing waits (the executor's flush looks at it)."""

    __slots__ = ("send", "pending", "riding")

    def __init__(self, send: Send) -> None:
        self.send = send  # the task's own (the driver's): for entries that found no frame
        self.pending: dict[bytes, list[list]] = {}  # TRACED header -> entries to send
        # id(stream) -> (stream, its own send, the riding send swapped in)
        self.riding: dict[int, tuple[StreamOut, Send, Send]] = {}

    def keep(self, out: StreamOut, header: bytes, entry: list) -> None:
        """Keep ``entry`` (``[kind, body, trace, first hop, emitted]``) of a frame ``out`` was
        to send under ``header``, to ride ``out``'s next frame to the same task."""
        self.pending.setdefault(traced_key(header), []).append(entry)
        if id(out) not in self.riding:
            self._ride(out)

    def _ride(self, out: StreamOut) -> None:
        own, pending = out.send, self.pending

        def send(header: bytes, body: bytes) -> None:
            if pending:  # (discard empties this very dict, and puts the sends back)
                key = traced_key(header)
                entries = pending.pop(key, None)
                if entries is not None:  # the frame rides last, as trace 0 (its kind: the
                    entries.append([header[0], body, 0, 0, 0.0])  # header's first byte)
                    return own(key, wire.encode_traced(entries))
            return own(header, body)

        self.riding[id(out)] = (out, own, send)
        out.send = send

    def flush(self) -> None:
        """Send the entries that found no frame to ride, one TRACED frame per task, and
        put the streams' sends back (the executor's flush, once its streams' batches are
        sent: they wait no longer than the untraced tuples beside them)."""
        for header, entries in self.discard().items():
            self.send(header, wire.encode_traced(entries))

    def discard(self) -> dict[bytes, list[list]]:
        """Forget the entries waiting (a checkpoint's rollback drops the batches, the
        same tuples' untraced neighbours: ``runtime/state/_gate.py``), put the streams'
        sends back; returns what was waiting."""
        for out, own, riding in self.riding.values():
            if out.send is riding:
                out.send = own
        self.riding.clear()
        pending = dict(self.pending)
        self.pending.clear()
        return pending
