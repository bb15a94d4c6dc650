"""The data path's zmq calls (runtime/processes/zmqio.py) on real zmq sockets."""

from __future__ import annotations

import pytest
import zmq

from runtime.processes.zmqio import messages, send_pair
from runtime.testing import wait_for


@pytest.fixture
def pair():
    """A DEALER -> ROUTER pair over inproc; closed after the test."""
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind("inproc://zmqio")
    dealer.setsockopt(zmq.IDENTITY, b"t7")
    dealer.connect("inproc://zmqio")
    yield dealer, router
    dealer.close(linger=0)
    router.close(linger=0)
    ctx.term()


def arrived(sock: zmq.Socket) -> bool:
    return bool(sock.poll(0))


def test_whole_messages_come_out_as_they_went_in(pair):
    dealer, router = pair
    sent = [[b"one"], [b"head", b"body" * 1000], [b"a", b"", b"c"]]
    for message in sent:
        dealer.send_multipart(message)
    wait_for(lambda: arrived(router), 5, "the first message")
    got = [[frame.bytes for frame in parts] for parts in messages(router, 10)]
    assert got == [[b"t7", *message] for message in sent]


def test_at_most_limit_messages_and_the_rest_stay_queued(pair):
    dealer, router = pair
    for i in range(5):
        dealer.send_multipart([b"h", b"%d" % i])
    wait_for(lambda: arrived(router), 5, "the first message")
    first = [parts[2].bytes for parts in messages(router, 2)]
    rest = [parts[2].bytes for parts in messages(router, 10)]
    assert (first, rest) == ([b"0", b"1"], [b"2", b"3", b"4"])


def test_a_caller_that_stops_early_leaves_the_next_message_whole(pair):
    dealer, router = pair
    for i in range(3):
        dealer.send_multipart([b"h", b"%d" % i])
    wait_for(lambda: arrived(router), 5, "the first message")
    for parts in messages(router, 10):
        assert parts[2].bytes == b"0"
        break
    assert [p.bytes for p in next(messages(router, 10))] == [b"t7", b"h", b"1"]


def test_nothing_waiting_gives_nothing(pair):
    _, router = pair
    assert list(messages(router, 10)) == []


def test_a_refused_pair_sends_nothing():
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)  # connected to no one yet: every send is refused
    router = ctx.socket(zmq.ROUTER)
    try:
        with pytest.raises(zmq.Again):
            send_pair(dealer, b"refused", b"body")
        router.bind("inproc://refused")
        dealer.connect("inproc://refused")
        send_pair(dealer, b"header", b"body")
        wait_for(lambda: arrived(router), 5, "the message")
        assert [p.bytes for p in next(messages(router, 10))][1:] == [b"header", b"body"]
        assert list(messages(router, 10)) == []
    finally:
        dealer.close(linger=0)
        router.close(linger=0)
        ctx.term()
