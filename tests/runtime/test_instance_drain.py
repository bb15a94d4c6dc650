"""An instance sends the acks of a drain's frames once, when the drain ends
(``Instance.drain_data``, ``drained``): a count task one ACKS frame for all the
ANCHORED frames it read without blocking, the acker one COMPLETED frame for all the
ACKS frames. Before, each frame's acks went as it was handled: at full rate with two
counters, an ACKS frame per ANCHORED frame and a COMPLETED frame per ACKS frame
(docs/internals/performance-log.md, "Issue 17, seventh pass"). The instance is real, its
data socket a real zmq socket whose other end, an inproc ROUTER in the instance's context,
stands for the stream manager: a frame sent there is readable at once."""

from __future__ import annotations

import cloudpickle
import pytest
import zmq

from runtime import Bolt, Topology, wire
from runtime.acking._ids import RootIds
from runtime.model.constants import ACKER
from runtime.processes.instance import Instance
from runtime.testing import ListSpout

FRAMES = 3  # frames waiting when the drain starts
SECRET = b"s" * 32


class Count(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        self.ack(tup)


@pytest.fixture
def drained(tmp_path):
    """``drained(component, frames)``: a started instance of the component's task, fed
    ``frames`` (header kind, src, body) before one ``drain_data``; the frames it sent."""
    topo = Topology("drain")
    topo.spout("feed", ListSpout([["a"]]))
    topo.bolt("count", Count).shuffle_grouping("feed")
    plan = topo.physical_plan(1, ackers=1)
    made: list = []

    def run(component: str, frames: list) -> list:
        (task,) = plan.component_tasks()[component]
        boot = {"secret": SECRET, "container": 0, "task": task, "incarnation": 0,
                "run_dir": str(tmp_path), "tm": f"ipc://{tmp_path}/tm.sock",
                "sm": "inproc://sm", "sm_spouts": "inproc://sm-spouts"}
        instance = Instance(boot)
        made.append(instance)
        router = instance.zctx.socket(zmq.ROUTER)
        router.bind("inproc://sm")
        made.append(router)
        ex = instance.executor = instance._executor(wire.Welcome(
            plan=plan.to_data(), bundle=cloudpickle.dumps(topo.components)))
        ex.start()
        ident, _, _ = router.recv_multipart()  # its hello
        for kind, src, body in frames:
            stream = plan.stream_ids()[("feed", "default")] if kind != wire.ACKS else 0
            router.send_multipart([ident, wire.data_header(kind, stream, task, src),
                                   wire.encode_batch(body)])
        instance.drain_data(ex, 1.0)
        sent = []
        while router.poll(0):
            _, header, body = router.recv_multipart()
            sent.append((wire.parse_header(header), wire.decode_batch(body)))
        return sent

    yield run, plan
    for thing in reversed(made):
        thing.close(**({"linger": 0} if isinstance(thing, zmq.Socket) else {}))


def test_a_bolt_sends_one_acks_frame_for_the_frames_of_a_drain(drained):
    run, plan = drained
    (feed,) = plan.component_tasks()["feed"]
    ids = RootIds(feed, plan.root_bits())
    roots = [ids.new() for _ in range(FRAMES * 2)]  # two a frame, of edges 5 and 7: not
    frames = [(wire.ANCHORED, feed, ["w", a, 5, "v", b, 7])  # whole trees, for the acker
              for a, b in zip(roots[::2], roots[1::2])]
    sent = run("count", frames)
    acks = [body for h, body in sent if h.kind == wire.ACKS]
    assert len(acks) == 1, sent
    assert sorted(acks[0][1::3]) == sorted(roots)


def test_the_acker_sends_one_completed_frame_for_the_frames_of_a_drain(drained):
    run, plan = drained
    (feed,) = plan.component_tasks()["feed"]
    (count,) = plan.component_tasks()["count"]
    ids = RootIds(feed, plan.root_bits())
    roots = [[ids.new() for _ in range(5)] for _ in range(FRAMES)]
    # each message completes a self-initialising root (its own id XORs it to 0), five a
    # frame: settled as a batch, the roots go in COMPLETED frames
    frames = [(wire.ACKS, count, [x for root in five for x in (wire.ACK_ACK, root, root)])
              for five in roots]
    sent = run(ACKER, frames)
    assert [h.kind for h, _ in sent] == [wire.COMPLETED], sent
    assert sorted(sent[0][1][2]) == sorted(root for five in roots for root in five)
