"""The client's side of the control channel, against a socket that plays the master."""

from __future__ import annotations

import os
import threading

import zmq

from runtime import Topology, wire
from runtime.processes.client import RunningTopology
from runtime.testing import ListSink, ListSpout

SECRET = b"s" * 32


class Alive:
    """A stand-in for the master's Popen: always running (its pid is this process's)."""

    pid = os.getpid()

    def poll(self) -> None:
        return None


def test_a_question_is_a_record_and_a_bad_answer_is_read_past(tmp_path):
    topology = Topology("client")
    topology.spout("numbers", ListSpout([[1]]))
    topology.bolt("sink", ListSink).shuffle_grouping("numbers")
    ctx = zmq.Context()
    master = ctx.socket(zmq.ROUTER)
    master.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path}/tm.sock"
    master.bind(endpoint)
    asked = []

    def answer() -> None:
        ident, *frames = master.recv_multipart()
        asked.append(wire.unseal(SECRET, frames))
        for bad in ([b"junk"], wire.seal(b"x" * 32, wire.Reply(id=1, ok=True, value="forged")),
                    wire.seal(SECRET, wire.Reply(id=99, ok=True, value="another's"))):
            master.send_multipart([ident, *bad])
        master.send_multipart([ident, *wire.seal(SECRET, wire.Reply(id=1, ok=True,
                                                                    value={"state": "x"}))])

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    running = RunningTopology("client", topology.physical_plan(1), str(tmp_path), SECRET,
                              endpoint, Alive(), 0.0)
    try:
        assert running.status() == {"state": "x"}
        assert asked == [wire.AskStatus(id=1)]
    finally:
        thread.join(10)
        running._link.sock.close(linger=0)
        running._link.zctx.term()
        master.close()
        ctx.term()


class SlowOnce:
    """A stand-in for the master link: the first question of each kind goes unanswered
    for its whole timeout (a master starved on a loaded machine), later ones are
    answered."""

    def __init__(self, answers: dict) -> None:
        self.answers, self.asked = answers, []

    def ask(self, question, timeout, **fields):
        self.asked.append(question)
        if self.asked.count(question) == 1:
            raise TimeoutError(f"no answer to {question.KIND!r}")
        return self.answers[question]


def test_a_wait_asks_again_when_the_master_answers_late(tmp_path):
    """wait_until and wait_active wait as long as their own bound, not a question's 5 s:
    a chaos test waiting up to 60 s for its first acks failed at 5 s on one unanswered
    question."""
    topology = Topology("client")
    topology.spout("numbers", ListSpout([[1]]))
    topology.bolt("sink", ListSink).shuffle_grouping("numbers")
    running = RunningTopology("client", topology.physical_plan(1), str(tmp_path), SECRET,
                              f"ipc://{tmp_path}/tm.sock", Alive(), 0.0)
    link, running._link = running._link, SlowOnce(
        {wire.AskStatistics: [], wire.AskStatus: {"state": "running"}})
    try:
        assert running.wait_until(lambda stats: True, timeout=30) == []
        running.wait_active(timeout=30)
        assert running._link.asked == [wire.AskStatistics] * 2 + [wire.AskStatus] * 2
    finally:
        link.sock.close(linger=0)
        link.zctx.term()
