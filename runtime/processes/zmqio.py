"""The data path's zmq calls, made cheap: receiving whole messages, sending two parts.

Every frame of tuples crosses pyzmq three times (instance, stream manager, instance),
and pyzmq's conveniences cost more there than the routing itself: ``recv_multipart``
asks the socket after each part whether more follow (a getsockopt, ~1 µs), draining
until ``zmq.Again`` raises and catches an exception (~3.5 µs) per wake-up, and
``send_multipart`` computes its flags with Python-level enum operations. Here a
received zmq frame says itself whether more parts follow, one getsockopt after a
message says whether another waits, and flags are plain ints.
"""

from __future__ import annotations

from collections.abc import Iterator

import zmq

NOBLOCK = int(zmq.NOBLOCK)
MORE = int(zmq.NOBLOCK | zmq.SNDMORE)  # a part that is not the last, never blocking
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def messages(sock: zmq.Socket, limit: int) -> Iterator[list[zmq.Frame]]:
    """The whole messages waiting on ``sock``, at most ``limit``, each as a list of zmq
    frames (not copied: ``frame.bytes`` copies, a frame sent with ``copy=False`` is
    passed on as it is).

    Meant for a socket a poller found readable: ``zmq.Again`` is only caught for a poll
    that woke for nothing. The parts of a message arrive together, so a part after the
    first never waits. The caller may stop between messages (backpressure, a deadline):
    what it did not take stays queued in zmq.
    """
    for _ in range(limit):
        try:
            part = sock.recv(NOBLOCK, copy=False)
        except zmq.Again:
            return
        parts = [part]
        while part.more:
            part = sock.recv(NOBLOCK, copy=False)
            parts.append(part)
        yield parts
        if not sock.get(_EVENTS) & _POLLIN:
            return


def send_pair(sock: zmq.Socket, header: bytes, body: bytes) -> None:
    """Send ``[header, body]`` without blocking; zmq.Again, with nothing sent, if the
    socket's queue is full (a refused first part sends nothing, and once the first part
    is taken the rest of the message always is)."""
    sock.send(header, MORE)
    sock.send(body, NOBLOCK)
