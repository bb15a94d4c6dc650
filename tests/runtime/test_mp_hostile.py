"""Tier 3: malformed and hostile input at every port of a running topology.

Garbage goes to each stream manager's two ipc sockets (its instances' ROUTER and its
peers' PULL) and to the master's tcp port: wrong part counts, short headers, unknown
kinds, undecodable bodies, raw bytes that are not ZMTP, control messages sealed with a
wrong secret, and a pickle that would create a file if anything loaded it. Afterwards
every process must still be the same one, and the topology must still count.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import sys

import cloudpickle
import psutil
import pytest
import zmq

from runtime import Topology, wire
from runtime.processes.stmgr import QUEUE_FRAMES
from runtime.testing import ListSink, PacedSpout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Mkdir:
    """Unpickling this creates a directory: proof that a payload was loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def poisoned_pickle(marker: str) -> bytes:
    return pickle.dumps(Mkdir(marker))


def test_the_crafted_pickle_would_be_noticed(tmp_path):
    """The marker works: loading the payload (in a throwaway process) creates it."""
    marker = tmp_path / "loaded"
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", code], input=poisoned_pickle(str(marker)),
                   check=True, timeout=30)
    assert marker.exists()


# -- what to send ---------------------------------------------------------------------------

def data_garbage(plan, payload: bytes) -> tuple[list[list[bytes]], int]:
    """Malformed data messages, and how many of them reach a sink instance (and are
    dropped there: they are well routed, but the instance cannot read them). One more
    reaches the spout, which takes no data frames."""
    sinks = plan.component_tasks()["sink"]
    spout = plan.component_tasks()["numbers"][0]
    stream = plan.stream_ids()[("numbers", "default")]
    header = wire.data_header
    frames = [
        [b""],
        [b"one part"],
        [b"a", b"b", b"c"],
        [b"short", b"header"],
        [b"x" * 40, b"long header"],
        [header(77, stream, sinks[0], spout), b"unknown kind"],
        [header(wire.DATA, stream, 9999, spout), b"unknown task"],
        [header(wire.HELLO, 0, 0, 9999), b""],
        [header(wire.DATA, stream, spout, spout), wire.pack([[1]])],  # a spout takes none
    ]
    reach = []
    for task in sinks:
        reach += [
            [header(wire.DATA, stream, task, spout), b"\xc1\xc1\xc1"],  # never valid msgpack
            [header(wire.DATA, stream, task, spout), payload],
            [header(wire.DATA, stream, task, spout), wire.pack({"not": "a batch"})],
            [header(wire.DATA, 9999, task, spout), wire.pack([[1]])],  # unknown stream
            [header(wire.DATA, stream, task, 9999), wire.pack([[1]])],  # unknown source
            [header(wire.DATA, stream, task, 0), wire.pack([[1]])],  # there is no task 0
            [header(wire.DATA, 0, task, spout), wire.pack([[1]])],  # a forged tick stream
            [header(wire.TRACKED, stream, task, spout), payload],
        ]
    return frames + reach, len(reach)


def control_garbage(payload: bytes) -> list[list[bytes]]:
    """Messages for the master; none may be acted upon."""
    wrong = b"w" * 32
    return [
        [b"one part"],
        [b"a", b"b", b"c"],
        [payload],
        [payload, b"mac"],
        [b"", b""],
        wire.seal(wrong, wire.AskKill(id=1)),
        wire.seal(wrong, wire.control("hello", role="instance", id=1, incarnation=99,
                                      pid=1)),
        wire.seal(wrong, wire.Welcome(plan={}, bundle=payload)),
    ]


def sealed_nonsense(secret: bytes) -> list[list[bytes]]:
    """Well-signed messages with fields that make no sense: a bug in a process of this
    topology, not an attack, but it must not take the master down either."""
    return [wire.seal(secret, wire.MESSAGES[kind](**fields)) for kind, fields in [
        ("restarted", {"task": 9999, "incarnation": 1, "restarts": 1, "reason": "?"}),
        ("exception", {"task": 9999, "incarnation": 0, "error": "?", "traceback": "",
                       "time": 0.0}),
        ("stats", {"task": 1, "incarnation": 0, "record": "not a record"}),
    ]]


RAW = [b"\xff" * 64, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\xff" + b"\x00" * 8 + b"\x7f",
       os.urandom(512)]


def send_zmq(kind: int, endpoint: str, messages: list[list[bytes]]) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.setsockopt(zmq.SNDTIMEO, 5000)
    try:
        sock.connect(endpoint)
        for message in messages:
            sock.send_multipart(message)
    finally:
        sock.close()  # lingers until sent
        ctx.term()


def send_raw(family: int, address, blobs: list[bytes]) -> None:
    for blob in blobs:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(address)
            with contextlib.suppress(OSError):  # the peer may hang up first: a refusal too
                s.sendall(blob)


# -- the test -------------------------------------------------------------------------------

def one(stats, component):
    (s,) = [s for s in stats if s.component == component]
    return s


def total(stats, component: str, field: str) -> int:
    return sum(getattr(s, field) for s in stats if s.component == component)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_malformed_input_crashes_nothing_and_nothing_is_unpickled(tmp_path, without_spares):
    marker = str(tmp_path / "unpickled")
    payload = poisoned_pickle(marker)
    topo = Topology("hostile", spout_wait=0.005)
    topo.spout("numbers", PacedSpout(rate=200))
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        running.wait_until(lambda s: all(x.executed > 0 for x in s if x.component == "sink"),
                           timeout=20)
        master = psutil.Process(running.status()["pid"])
        procs = [master, *master.children(recursive=True)]
        assert len(without_spares(running, procs)) == 1 + 2 + 3
        dropped_before = running.status()["dropped"]

        frames, reaching = data_garbage(running.plan, payload)
        for c in range(2):
            for name, kind in (("local", zmq.DEALER), ("in", zmq.PUSH)):
                path = os.path.join(running.run_dir, f"sm-{c}-{name}.sock")
                send_raw(socket.AF_UNIX, path, RAW)
                # A stream manager queues QUEUE_FRAMES messages per connection; zmq drops
                # what a peer that hangs up right away had not yet handed over, so each
                # burst fits in that queue (real instances do not hang up mid-stream).
                for i in range(0, len(frames), QUEUE_FRAMES):
                    send_zmq(kind, f"ipc://{path}", frames[i:i + QUEUE_FRAMES])
        host, port = running.endpoint.removeprefix("tcp://").rsplit(":", 1)
        send_raw(socket.AF_INET, (host, int(port)), RAW)
        control = control_garbage(payload) + sealed_nonsense(running._secret)
        send_zmq(zmq.DEALER, running.endpoint, control)

        # every message that reached an instance was dropped there; the master refused
        # every control message; and tuples still flow
        sinks_before = total(running.statistics(), "sink", "executed")
        stats = running.wait_until(
            lambda s: total(s, "sink", "dropped") >= 4 * reaching
            and one(s, "numbers").dropped >= 4
            and total(s, "sink", "executed") > sinks_before + 50, timeout=20)
        status = running.status()
        logs = [running.logs("sink", t) for t in running.plan.component_tasks()["sink"]]
        container_logs = [read(os.path.join(running.run_dir, "logs", f"container-{c}.log"))
                          for c in range(2)]

        assert status["dropped"] >= dropped_before + len(control)
        assert status["state"] == "running"
        assert [p.pid for p in procs if not alive(p)] == []
        assert [(s.component, s.restarts, s.incarnation, s.errors) for s in stats] == [
            (s.component, 0, 0, 0) for s in stats]
        assert total(stats, "sink", "dropped") == 4 * reaching
        assert one(stats, "numbers").dropped == 4
    assert not os.path.exists(marker)
    assert all("dropped a malformed frame" in text for text in logs)
    assert "Traceback" not in "".join(logs)
    assert all("dropped a frame" in text for text in container_logs)
