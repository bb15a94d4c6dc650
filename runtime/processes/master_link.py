"""The submitter's end of the control channel to a topology master: one DEALER socket,
every message sealed with the topology's secret, one question at a time."""

from __future__ import annotations

import contextlib
import logging
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from runtime import _procs, wire

log = logging.getLogger("tupleflow.client")


class TopologyDead(RuntimeError):
    """The topology master is gone (killed, or crashed): the topology is not running."""


class MasterLink:
    """Owns the socket to the master, the master's process handle and whether this end
    was closed. ``secure`` turns a fresh DEALER into the kind of client the master
    accepts (size-limited on loopback, a CURVE client on Spark)."""

    def __init__(self, name: str, endpoint: str, secret: bytes, process: subprocess.Popen,
                 secure: Callable[[Any], Any]) -> None:
        import zmq  # here, not at the top: importing runtime to define a topology needs none

        self.name, self.secret, self.process = name, secret, process
        self.zmq, self.zctx = zmq, zmq.Context()
        self.lock = threading.Lock()
        self.ids = 0
        self.closed = False
        self.sock = secure(self.zctx.socket(zmq.DEALER))
        self.sock.setsockopt(zmq.IDENTITY, b"c" + secrets.token_hex(8).encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    @property
    def alive(self) -> bool:
        """Whether the topology master process is still running."""
        return self.process.poll() is None

    def ask(self, question: type[wire.Question], timeout: float, **fields: Any) -> Any:
        """Ask the master one question (a record of :mod:`runtime.wire`, made here with
        the next id) and return the value of its reply; RuntimeError if it refused."""
        with self.lock:
            if self.closed or not self.alive:
                raise TopologyDead(f"topology {self.name!r} is not running")
            self.ids += 1
            msg = question(id=self.ids, **fields)
            self.sock.send_multipart(wire.seal(self.secret, msg))
            return self._await_reply(msg, time.monotonic() + timeout)

    def _await_reply(self, question: wire.Question, deadline: float) -> Any:
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(int(min(left, 0.1) * 1000) + 1):
                if not self.alive:
                    raise TopologyDead(f"topology {self.name!r} died")
                continue
            try:
                msg = wire.unseal(self.secret, self.sock.recv_multipart())
            except wire.WireError as exc:  # not from our master, or malformed: not an answer
                log.warning("dropped a control message: %s", exc)
                continue
            if isinstance(msg, wire.Reply) and msg.id == question.id:
                if not msg.ok:
                    raise RuntimeError(msg.value)
                return msg.value
        raise TimeoutError(f"topology {self.name!r}: no answer to {question.KIND!r}")

    def close(self, timeout: float) -> bool:
        """Wait for the master to end, sweep its process group, close the socket; False
        if this end was closed already. Safe while another thread asks: the socket is
        closed under the lock, and that thread's next question raises TopologyDead."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
            self._sweep()
            _procs.close_pipe(self.process)
            self.sock.close(linger=0)
            self.zctx.term()
            return True

    def _sweep(self) -> None:
        """Whatever the master left behind in its process group goes too."""
        _procs.kill_group(self.process.pid, timeout=1.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(1.0)
