"""The master's outbox (runtime/processes/outbox.py) on real zmq sockets: a message to a
peer not connected yet waits for it, in order, instead of being dropped by the ROUTER;
a peer that never comes loses its messages after WAIT seconds, counted."""

from __future__ import annotations

import pytest
import zmq

from runtime.processes import outbox
from runtime.processes.outbox import Outbox
from runtime.testing import wait_for


@pytest.fixture
def router():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}", ctx
    ctx.destroy(linger=0)


def dealer(ctx, endpoint: str, ident: bytes) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, ident)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def received(sock: zmq.Socket) -> list[list[bytes]]:
    got = []
    while sock.poll(0):
        got.append(sock.recv_multipart())
    return got


def test_a_message_to_a_peer_not_yet_connected_waits_and_goes_in_order(router):
    sock, endpoint, ctx = router
    box = Outbox(sock)
    box.send(b"spout", [b"deactivate"], now=0.0)
    box.send(b"spout", [b"activate"], now=0.1)
    assert len(box.waiting) == 2  # a plain ROUTER would have dropped both
    peer = dealer(ctx, endpoint, b"spout")
    peer.send(b"hello")  # the ROUTER knows the identity once the peer has connected
    wait_for(lambda: sock.poll(0) and sock.recv_multipart(), 10, "the peer's hello")
    box.retry(now=1.0)
    assert not box.waiting
    frames: list = []
    wait_for(lambda: frames.extend(received(peer)) or len(frames) >= 2, 10, "the kept ones")
    assert frames == [[b"deactivate"], [b"activate"]]
    box.send(b"spout", [b"now"], now=2.0)  # connected: goes at once
    assert not box.waiting
    assert wait_for(lambda: peer.poll(100) and received(peer), 10, "a direct send") == [[b"now"]]


def test_a_peer_that_never_comes_loses_its_messages_after_the_wait(router):
    sock, _, _ = router
    box = Outbox(sock)
    box.send(b"gone", [b"activate"], now=0.0)
    box.retry(now=outbox.WAIT / 2)
    assert len(box.waiting) == 1 and box.dropped == 0
    box.retry(now=outbox.WAIT)
    assert not box.waiting and box.dropped == 1


def test_a_message_behind_a_waiting_one_to_the_same_peer_waits_too(router):
    sock, endpoint, ctx = router
    box = Outbox(sock)
    box.send(b"spout", [b"first"], now=0.0)
    peer = dealer(ctx, endpoint, b"spout")
    peer.send(b"hello")
    wait_for(lambda: sock.poll(0) and sock.recv_multipart(), 10, "the peer's hello")
    box.send(b"spout", [b"second"], now=0.5)  # routable now, but must not overtake
    assert [frames for _, _, frames in box.waiting] == [[b"first"], [b"second"]]
    box.retry(now=1.0)
    frames: list = []
    wait_for(lambda: frames.extend(received(peer)) or len(frames) >= 2, 10, "both")
    assert frames == [[b"first"], [b"second"]]
