"""CURVE on real sockets over TCP loopback: only the topology's own client gets in.

Each case binds a CURVE server with a Gatekeeper and connects one kind of client. A
refused client's message can never arrive: once the refusal is counted, its handshake is
over. A client that *is* admitted proves the server is listening, so a refusal is not an
accident of timing.
"""

from __future__ import annotations

import zmq

from runtime.processes.curve import (
    MAX_MESSAGE_BYTES,
    Gatekeeper,
    TopologyKeys,
    make_client,
    make_server,
)
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


def _run(intruder):
    """Bind, connect the client ``intruder(ctx, endpoint, keys)`` makes and then our own;
    return (the gatekeeper's refusals, what the server got)."""
    keys = TopologyKeys.generate()
    ctx = zmq.Context()
    gate = Gatekeeper(ctx, keys)
    server, endpoint = _server(ctx, keys)
    gate.watch(server, "test-server")
    try:
        bad = intruder(ctx, endpoint, keys)
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
    def stranger(ctx, endpoint, keys):  # knows the server key, but has a key of its own
        other = TopologyKeys.generate()
        return _dealer(ctx, endpoint, TopologyKeys(keys.server_public, b"", other.client_public,
                                                   other.client_secret))

    refusals, got = _run(stranger)
    assert refusals == {"unknown client key": 1}
    assert got == [[b"from our own"]]


def test_a_client_without_curve_is_refused_and_counted():
    refusals, got = _run(lambda ctx, endpoint, keys: _dealer(ctx, endpoint))
    assert sum(refusals.values()) >= 1 and "unknown client key" not in refusals
    assert got == [[b"from our own"]]


def test_a_client_that_does_not_know_the_server_key_is_refused():
    other_topology = TopologyKeys.generate()
    refusals, got = _run(lambda ctx, endpoint, keys: _dealer(ctx, endpoint, other_topology))
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


# -- the remote topology's bookkeeping, without Spark -----------------------------------------

def _two_container_plan():
    from runtime import Topology
    from runtime.testing import ListSink, ListSpout

    topo = Topology("remote-bookkeeping")
    topo.spout("numbers", ListSpout([[1]]))
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return topo.physical_plan(2)


def _sm_hello(container: int, generation: int, port: int):
    from runtime import wire

    return wire.Hello(role="sm", id=container, incarnation=generation, pid=1,
                      inbound=f"tcp://127.0.0.1:{port}")


def test_the_master_takes_a_newer_generation_as_a_restarted_container(tmp_path):
    from runtime.processes.master import TopologyMaster

    plan, keys = _two_container_plan(), TopologyKeys.generate()
    master = TopologyMaster({"secret": b"s" * 32, "run_dir": str(tmp_path), "bundle": b"",
                             "plan": plan.to_data(), "remote": {
                                 "keys": keys.to_data(), "bind_host": "127.0.0.1",
                                 "advertise_host": "127.0.0.1"}})
    master.sent = []
    master.send = lambda ident, msg: master.sent.append((ident, msg.KIND, msg.fields()))
    try:
        assert master.endpoint.startswith("tcp://127.0.0.1:")
        master.supervision.start_containers()  # Spark starts them, not the master
        assert master.supervision.containers == {}
        master.handle(b"s0.0", _sm_hello(0, 0, 1000))
        master.handle(b"s1.0", _sm_hello(1, 0, 1001))
        assert [(ident, kind) for ident, kind, _ in master.sent] == [
            (b"s0.0", "welcome"), (b"s1.0", "welcome")]
        master.sent.clear()

        master.handle(b"s1.1", _sm_hello(1, 1, 1002))  # restarted, on a new port
        moved = {t.task for t in plan.tasks_in(1)}
        assert {t: info["incarnation"] for t, info in master.tasks.items()} == {
            t.task: int(t.task in moved) for t in plan.tasks}
        assert [e["container"] for e in master.observation.events
                if e["kind"] == "container_restarted"] == [1]
        assert [(ident, kind) for ident, kind, _ in master.sent] == [
            (b"s1.0", "kill"), (b"s0.0", "welcome"), (b"s1.1", "welcome")]
        welcome = master.sent[1][2]
        assert welcome["inbound"] == {"0": "tcp://127.0.0.1:1000", "1": "tcp://127.0.0.1:1002"}
        assert welcome["incarnations"] == {t: int(t in moved) for t in master.tasks}
        master.sent.clear()

        master.handle(b"s1.0", _sm_hello(1, 0, 1001))  # a late hello of the old one
        assert master.sent == [] and master.supervision.sms[1]["ident"] == b"s1.1"
        assert master.answer_status(None)["refusals"] == {"master": {}}
    finally:
        master.sock.close(linger=0)
        master.gate.stop()
        master.zctx.term()


def test_a_stream_manager_follows_a_peer_that_moved(tmp_path):
    from runtime import wire
    from runtime.processes.stmgr import StreamManager

    plan, keys = _two_container_plan(), TopologyKeys.generate()
    sm = StreamManager({"secret": b"s" * 32, "container": 0, "run_dir": str(tmp_path),
                        "tm": "tcp://127.0.0.1:9", "keys": keys.to_data(),
                        "bind_host": "127.0.0.1", "advertise_host": "127.0.0.1"})
    try:
        assert sm.router.inbound_endpoint().startswith("tcp://127.0.0.1:")
        assert sm.router.inbound.get(zmq.MECHANISM) == zmq.CURVE
        assert sm.router.inbound.get(zmq.MAXMSGSIZE) == MAX_MESSAGE_BYTES
        sm._wire(wire.Welcome(plan=plan.to_data(), inbound={"0": sm.router.inbound_endpoint(),
                                                             "1": "tcp://127.0.0.1:1001"}))
        peer = sm.router.peers[1]
        peer.pending.append((wire.data_header(wire.DATA, 1, 2, 1), b"kept"))
        sm.router.rewire({"0": sm.router.inbound_endpoint(), "1": "tcp://127.0.0.1:1002"})
        assert peer.sock.get(zmq.LAST_ENDPOINT) == b"tcp://127.0.0.1:1002"
        assert peer.sock.get(zmq.MECHANISM) == zmq.CURVE  # still a CURVE client
        assert [body for _, body in peer.pending] == [b"kept"]
        sm.router.rewire({"1": "tcp://127.0.0.1:1002"})  # unchanged: the same socket is kept
        assert peer.sock.get(zmq.LAST_ENDPOINT) == b"tcp://127.0.0.1:1002"
    finally:
        sm.gate.stop()
        sm.zctx.destroy(linger=0)
