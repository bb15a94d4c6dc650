"""CURVE on real sockets over TCP loopback: only the topology's own client gets in.

Each case binds a CURVE server with a Gatekeeper and connects one kind of client. A
refused client's message can never arrive: once the refusal is counted, its handshake is
over. A client that *is* admitted proves the server is listening, so a refusal is not an
accident of timing.
"""

from __future__ import annotations

import zmq

from runtime._curve import MAX_MESSAGE_BYTES, Gatekeeper, TopologyKeys, make_client, make_server
from runtime.testing import wait_for


def _server(ctx, keys):
    sock = make_server(ctx.socket(zmq.ROUTER), keys)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return sock, f"tcp://127.0.0.1:{port}"


def _receive(sock, timeout_ms=10_000):
    assert sock.poll(timeout_ms), "nothing arrived"
    return sock.recv_multipart()[1:]


def _dealer(ctx, endpoint, secure=None):
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if secure is not None:
        make_client(sock, secure)
    sock.connect(endpoint)
    return sock


def _run(bad_client_keys, *, null=False):
    """Bind, connect one bad client and one good one; return (gatekeeper refusals, what the
    server got)."""
    keys = TopologyKeys.generate()
    ctx = zmq.Context()
    gate = Gatekeeper(ctx, keys)
    server, endpoint = _server(ctx, keys)
    gate.watch(server, "test-server")
    try:
        bad = _dealer(ctx, endpoint, None if null else bad_client_keys)
        bad.send(b"from the intruder")
        wait_for(lambda: gate.refusals.total() >= 1, 10, "the intruder to be refused")
        good = _dealer(ctx, endpoint, keys)
        good.send(b"from our own")
        got = [_receive(server)]
        while server.poll(0):
            got.append(server.recv_multipart()[1:])
        return dict(gate.refusals.counts), got
    finally:
        gate.stop()
        ctx.destroy(linger=0)


def test_our_own_client_is_admitted_and_encrypted():
    keys = TopologyKeys.generate()
    ctx = zmq.Context()
    with Gatekeeper(ctx, keys) as gate:
        server, endpoint = _server(ctx, keys)
        gate.watch(server, "server")
        client = _dealer(ctx, endpoint, keys)
        client.send(b"hello")
        assert _receive(server) == [b"hello"]
        assert server.get(zmq.MECHANISM) == zmq.CURVE
        assert gate.refusals.total() == 0
    ctx.destroy(linger=0)


def test_a_client_with_a_wrong_key_is_refused_and_counted():
    stranger = TopologyKeys.generate()
    keys_of_stranger = TopologyKeys(  # knows the server key, but has its own client key
        server_public=b"", server_secret=b"", client_public=stranger.client_public,
        client_secret=stranger.client_secret)
    refusals, got = _run_with_server_key(keys_of_stranger)
    assert refusals == {"unknown client key": 1}
    assert got == [[b"from our own"]]


def _run_with_server_key(partial):
    """Like _run, but the bad client is given the real server public key."""
    keys = TopologyKeys.generate()
    ctx = zmq.Context()
    gate = Gatekeeper(ctx, keys)
    server, endpoint = _server(ctx, keys)
    gate.watch(server, "test-server")
    try:
        bad = ctx.socket(zmq.DEALER)
        bad.linger = 0
        bad.curve_serverkey = keys.server_public
        bad.curve_publickey = partial.client_public
        bad.curve_secretkey = partial.client_secret
        bad.connect(endpoint)
        bad.send(b"from the intruder")
        wait_for(lambda: gate.refusals.total() >= 1, 10, "the intruder to be refused")
        good = _dealer(ctx, endpoint, keys)
        good.send(b"from our own")
        got = [_receive(server)]
        while server.poll(0):
            got.append(server.recv_multipart()[1:])
        return dict(gate.refusals.counts), got
    finally:
        gate.stop()
        ctx.destroy(linger=0)


def test_a_client_without_curve_is_refused_and_counted():
    refusals, got = _run(None, null=True)
    assert sum(refusals.values()) >= 1 and "unknown client key" not in refusals
    assert got == [[b"from our own"]]


def test_a_client_that_does_not_know_the_server_key_is_refused():
    refusals, got = _run(TopologyKeys.generate())  # a whole other topology's keys
    assert sum(refusals.values()) >= 1
    assert got == [[b"from our own"]]


def test_an_oversized_message_is_dropped_and_the_server_goes_on():
    keys = TopologyKeys.generate()
    ctx = zmq.Context()
    with Gatekeeper(ctx, keys) as gate:
        server, endpoint = _server(ctx, keys)
        gate.watch(server, "server")
        big = _dealer(ctx, endpoint, keys)
        big.send(b"x" * (MAX_MESSAGE_BYTES + 1))
        small = _dealer(ctx, endpoint, keys)
        small.send(b"small")
        assert _receive(server) == [b"small"]
        assert not server.poll(200), "the oversized message got through"
    ctx.destroy(linger=0)
