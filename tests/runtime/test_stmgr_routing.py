"""A real stream manager's loop, run in a thread, between sockets that play its instances.

Only the master's handshake and the starting of instance processes are left out; the
multiprocess tests (test_multiprocess, test_mp_hostile, test_mp_backpressure) cover the
rest. This one pins down the frame path: whole frames forwarded in order and unchanged,
frames for a task that has not said hello kept until it does, broken messages dropped
and counted without stopping anything.
"""

from __future__ import annotations

import threading

import pytest
import zmq

from runtime import Topology, wire
from runtime.processes.routing import endpoint
from runtime.processes.stmgr import StreamManager, read_tail
from runtime.testing import ListSink, ListSpout, wait_for


@pytest.fixture
def stream_manager(tmp_path):
    """A wired stream manager running its loop in a thread; stopped after the test."""
    topology = Topology("routing")
    topology.spout("numbers", ListSpout([[1]]))
    topology.bolt("sink", ListSink).shuffle_grouping("numbers")
    plan = topology.physical_plan(containers=1)
    ctx = zmq.Context()
    master = ctx.socket(zmq.ROUTER)  # takes the reports, as the master would
    master.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send before the peer is known raises
    master.bind(f"ipc://{tmp_path}/tm.sock")
    sm = StreamManager({"secret": b"s" * 32, "container": 0, "run_dir": str(tmp_path),
                        "tm": f"ipc://{tmp_path}/tm.sock"})
    sm._wire(wire.Welcome(plan=plan.to_data(), inbound={"0": sm.router.inbound_endpoint()}))
    sm.handshake = lambda: None  # wired above
    sm.start = lambda child: None  # the test plays the instances
    loop = threading.Thread(target=sm.run, name="stmgr", daemon=True)
    loop.start()
    sm.test_master = master  # a test may speak for the master (a rebalance's messages)
    yield sm, ctx, plan
    sm.stopping = True
    loop.join(10)
    master.close(linger=0)
    ctx.term()
    assert not loop.is_alive()


def instance(ctx: zmq.Context, endpoint: str, task: int) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"t%d" % task)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)  # a frame that never comes fails the test
    sock.connect(endpoint)
    return sock


def tell(sm, msg: wire.Control) -> None:
    """Send ``msg`` to the stream manager as its master would, once its control socket has
    connected (a ROUTER drops what it sends to a peer it does not know yet)."""
    frames = [b"s0.0", *wire.seal(b"s" * 32, msg)]

    def sent() -> bool:
        try:
            sm.test_master.send_multipart(frames)
        except zmq.error.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            return False
        return True
    wait_for(sent, 10, "the stream manager's control socket to connect")


def test_frames_are_forwarded_whole_in_order_and_broken_ones_dropped(stream_manager):
    sm, ctx, plan = stream_manager
    (spout,), (sink,) = plan.component_tasks()["numbers"], plan.component_tasks()["sink"]
    header = wire.data_header(wire.DATA, 0, sink, spout)
    bodies = [wire.encode_batch([[i, "x" * i]] * 50) for i in range(40)]
    spout_sock = instance(ctx, endpoint(sm.router.spouts), spout)
    sink_sock = instance(ctx, endpoint(sm.router.task_socks[sink]), sink)
    try:
        for body in bodies[:20]:  # before the sink says hello: kept for it
            spout_sock.send_multipart([header, body])
        spout_sock.send_multipart([header])  # two parts with the identity: dropped
        spout_sock.send_multipart([header, b"x", b"y"])  # four: dropped
        wait_for(lambda: sm.router.dropped == 2, 10, "the broken messages to be dropped")
        sink_sock.send_multipart([wire.data_header(wire.HELLO, 0, 0, sink), b""])
        for body in bodies[20:]:
            spout_sock.send_multipart([header, body])
        got = [sink_sock.recv_multipart() for _ in bodies]
        assert got == [[header, body] for body in bodies]
        assert sm.router.dropped == 2
        # the loop thread may still be between sending the last queued frame and taking
        # it off its queue: the queue empties, with nothing sent twice
        wait_for(lambda: sm.router.backlog == set(), 10, "the stream manager's backlog to empty")
        sink_sock.setsockopt(zmq.RCVTIMEO, 200)
        with pytest.raises(zmq.Again):
            sink_sock.recv_multipart()
    finally:
        spout_sock.close()
        sink_sock.close()


def test_a_rebalance_in_place_routes_to_added_tasks_and_drops_frames_for_removed_ones(
        stream_manager):
    """``replan`` start: a new local task gets a socket and a route at once; switch: its
    route goes, and a frame still sent to it is dropped and counted, nothing else."""
    sm, ctx, plan = stream_manager
    (spout,), (sink,) = plan.component_tasks()["numbers"], plan.component_tasks()["sink"]
    grown = plan.rebalanced({"sink": 2})
    (added,) = set(grown.component_tasks()["sink"]) - {sink}
    tell(sm, wire.Replan(plan=grown.to_data(), step="start"))
    wait_for(lambda: added in sm.router.task_socks, 10, "the added task's socket")
    spout_sock = instance(ctx, endpoint(sm.router.spouts), spout)
    added_sock = instance(ctx, endpoint(sm.router.task_socks[added]), added)
    try:
        added_sock.send_multipart([wire.data_header(wire.HELLO, 0, 0, added), b""])
        header = wire.data_header(wire.DATA, 0, added, spout)
        spout_sock.send_multipart([header, b"first"])
        assert added_sock.recv_multipart() == [header, b"first"]
        shrunk = grown.rebalanced({"sink": 1})
        for step in ("start", "switch"):
            tell(sm, wire.Replan(plan=shrunk.to_data(), step=step))
        wait_for(lambda: sm.epoch == shrunk.epoch, 10, "the switch")
        spout_sock.send_multipart([header, b"late"])
        wait_for(lambda: sm.router.dropped == 1, 10, "the late frame to be dropped")
        wait_for(lambda: added not in sm.router.task_socks, 10, "the removed task's socket")
        assert sm.plan == sm.switched == shrunk and not sm.stopping
    finally:
        spout_sock.close()
        added_sock.close()


def test_a_log_is_sent_whole_or_from_a_whole_line_of_its_end(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"first line\nsecond line\nthird \xe2\x98\x83\n")
    assert read_tail(str(path), 1000) == "first line\nsecond line\nthird \u2603\n"
    assert read_tail(str(path), 20) == "[... the first 23 bytes are left out]\nthird \u2603\n"
    with pytest.raises(FileNotFoundError):
        read_tail(str(tmp_path / "none.log"), 10)


def test_a_control_message_it_cannot_read_or_does_not_take_is_dropped_and_counted(tmp_path):
    ctx = zmq.Context()
    master = ctx.socket(zmq.ROUTER)
    master.bind(f"ipc://{tmp_path}/tm.sock")
    sm = StreamManager({"secret": b"s" * 32, "container": 0, "run_dir": str(tmp_path),
                        "tm": f"ipc://{tmp_path}/tm.sock"})
    try:
        sm.tell(wire.Bye(role="sm", id=0))  # so that the master's socket knows it
        assert master.poll(10_000) and master.recv_multipart()[0] == b"s0.0"
        for frames in ([b"junk"], wire.seal(b"x" * 32, wire.Kill()),
                       wire.seal(b"s" * 32, wire.Tap(stream="default", n=1, seconds=1.0)),
                       wire.seal(b"s" * 32, wire.Kill())):
            master.send_multipart([b"s0.0", *frames])
        wait_for(lambda: sm.from_master() or sm.stopping, 10,
                 "the kill after the three bad messages")
        assert sm.router.dropped == 3  # unreadable, forged, and a tap (for instances)
    finally:
        sm.router.close()
        sm.ctl.close(linger=0)
        sm.zctx.term()
        master.close(linger=0)
        ctx.term()
