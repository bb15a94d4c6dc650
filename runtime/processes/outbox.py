"""The master's outgoing control messages: sent at once when the peer is connected, kept
for a while when it is not.

A ROUTER socket drops a message to an identity it has no connection for, silently.
After a master is replaced (docs/internals/adoption.md), every instance's control socket
reconnects to the new one on its own schedule, so a message sent in the meantime (the
``Activate`` of a ``resume()`` made as soon as the new master answers) was lost, and the
spouts stayed paused for good. With ``ROUTER_MANDATORY`` the socket says so instead
(``EHOSTUNREACH``, or ``EAGAIN`` for a peer whose queue is full: the master never blocks
on one), and the message waits here, behind any older one to the same peer, until it
goes or :data:`WAIT` seconds pass (then it is dropped with a log line: the peer is dead).
"""

from __future__ import annotations

import logging
from collections import deque

import zmq

log = logging.getLogger(__name__)

WAIT = 30.0  # seconds a message waits for its peer to (re)connect


class Outbox:
    """Sends ``[identity, *frames]`` on a ROUTER socket, keeping what cannot go yet."""

    def __init__(self, sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock = sock
        self.waiting: deque[tuple[float, bytes, list[bytes]]] = deque()  # (until, ident, frames)
        self.dropped = 0  # messages whose peer never came

    def send(self, ident: bytes, frames: list[bytes], now: float) -> None:
        """Send now, or keep it for :meth:`retry` (always behind older ones to ``ident``,
        so that a Deactivate and the Activate after it keep their order)."""
        behind = any(waiting == ident for _, waiting, _ in self.waiting)  # mostly empty
        if behind or not self._try(ident, frames):
            self.waiting.append((now + WAIT, ident, frames))

    def retry(self, now: float) -> None:
        """Send what waits, oldest first; a peer still away keeps its messages' order."""
        waiting, self.waiting = self.waiting, deque()
        away: set[bytes] = set()
        for until, ident, frames in waiting:
            if now >= until:
                self.dropped += 1
                log.warning("dropped a control message to %r: not connected for %.0f s",
                            ident, WAIT)
            elif ident in away or not self._try(ident, frames):
                away.add(ident)
                self.waiting.append((until, ident, frames))

    def _try(self, ident: bytes, frames: list[bytes]) -> bool:
        try:
            self.sock.send_multipart([ident, *frames], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                return False
            raise
        return True
