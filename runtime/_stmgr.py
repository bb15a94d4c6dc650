"""A container: its stream manager, and the instance processes it starts and supervises.

The stream manager routes data frames by the destination task in their header, never
decoding the tuples inside: to a local instance over its ROUTER socket, or to the
stream manager of another container over a PUSH socket. A frame for a local instance
that is not connected (yet, or any more) waits in a bounded queue until it says hello.

It also plays Heron's executor role: it starts one process per local task, and
restarts a process that exits, with a growing back-off when it keeps failing.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import zmq

from . import _procs, wire
from ._constants import RESTART_BACKOFF_MAX
from ._plan import PhysicalPlan

log = logging.getLogger("tupleflow.stmgr")

SUPERVISE_EVERY = 0.05  # seconds between looks at the instance processes
STABLE_AFTER = 30.0  # seconds an incarnation must live for the back-off to reset
WELCOME_TIMEOUT = 30.0  # seconds to wait for the master's welcome
PENDING_LIMIT = 10_000  # frames held for one absent destination before the oldest is dropped


@dataclass
class Child:
    task: int
    proc: subprocess.Popen | None = None
    incarnation: int = 0
    restarts: int = 0
    streak: int = 0  # restarts in a row without a stable run in between
    started: float = 0.0
    restart_at: float | None = None
    pending: deque = field(default_factory=lambda: deque(maxlen=PENDING_LIMIT))
    connected: bool = False


class StreamManager:
    def __init__(self, boot: dict) -> None:
        self.boot = boot
        self.secret: bytes = boot["secret"]
        self.container: int = boot["container"]
        self.run_dir: str = boot["run_dir"]
        self.stopping = False
        self.dropped = 0
        self.zctx = zmq.Context()
        self.local = self._bind(zmq.ROUTER, "local")
        self.local.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.local.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.inbound = self._bind(zmq.PULL, "in")
        self.ctl = self.zctx.socket(zmq.DEALER)
        # a restarted container gets a new identity: the master's ROUTER would refuse one
        # it still holds for the dead stream manager
        self.generation: int = boot.get("generation", 0)
        self.ctl.setsockopt(zmq.IDENTITY, b"s%d.%d" % (self.container, self.generation))
        self.ctl.setsockopt(zmq.LINGER, 1000)
        self.ctl.connect(boot["tm"])

    def _bind(self, kind: int, name: str) -> zmq.Socket:
        sock = self.zctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        path = os.path.join(self.run_dir, f"sm-{self.container}-{name}.sock")
        sock.bind(f"ipc://{path}")
        return sock

    def endpoint(self, sock: zmq.Socket) -> str:
        return sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    # -- control ------------------------------------------------------------------------
    def tell(self, kind: str, **fields) -> None:
        self.ctl.send_multipart(wire.seal(self.secret, wire.control(kind, **fields)))

    def handshake(self) -> None:
        self.tell("hello", role="sm", id=self.container, incarnation=self.generation,
                  pid=os.getpid(), inbound=self.endpoint(self.inbound))
        deadline = time.monotonic() + WELCOME_TIMEOUT
        while not self.stopping:  # a kill (or SIGTERM) may come before the welcome
            if time.monotonic() > deadline:
                raise SystemExit(f"container {self.container}: no answer from the master")
            msg = self._unseal(self.ctl.recv_multipart()) if self.ctl.poll(100) else None
            if msg is not None and msg["t"] == "welcome":
                return self._wire(msg)
            if msg is not None and msg["t"] == "kill":
                break
        raise SystemExit(0)

    def _unseal(self, frames) -> dict | None:
        try:
            return wire.unseal(self.secret, frames)
        except wire.WireError as exc:
            log.warning("dropped a control message: %s", exc)
            return None

    def _wire(self, welcome: dict) -> None:
        self.plan = PhysicalPlan.from_data(welcome["plan"])
        containers = self.plan.task_containers()
        self.peers = {}
        for c, ep in welcome["inbound"].items():
            if int(c) != self.container:
                self.peers[int(c)] = self._push(ep)
        self.route = {t: (None if c == self.container else self.peers[c])
                      for t, c in containers.items()}
        incarnations = self.boot.get("incarnations", {})
        self.children = {t.task: Child(t.task, incarnation=incarnations.get(t.task, 0))
                         for t in self.plan.tasks_in(self.container)}

    def _push(self, endpoint: str) -> zmq.Socket:
        sock = self.zctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        return sock

    # -- instances ----------------------------------------------------------------------
    def start(self, child: Child) -> None:
        boot = {"secret": self.secret, "tm": self.boot["tm"], "sm": self.endpoint(self.local),
                "task": child.task, "incarnation": child.incarnation, "run_dir": self.run_dir,
                "sys_path": self.boot.get("sys_path", [])}
        info = self.plan.task(child.task)
        path = os.path.join(_procs.log_dir(self.run_dir), f"{info.component}-{child.task}.log")
        child.proc = _procs.spawn("runtime._instance", boot, log_path=path)
        child.started, child.restart_at, child.connected = time.monotonic(), None, False

    def supervise(self, now: float) -> None:
        for child in self.children.values():
            if child.proc is not None and child.proc.poll() is not None:
                self._schedule_restart(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                self.start(child)

    def _schedule_restart(self, child: Child, now: float) -> None:
        code = child.proc.returncode
        _procs.close_pipe(child.proc)
        child.proc, child.connected = None, False  # hold its frames until the next hello
        if now - child.started > STABLE_AFTER:
            child.streak = 0
        cap = float(self.plan.config[RESTART_BACKOFF_MAX])
        child.restart_at = now + min(cap, 0.05 * 2**child.streak)
        child.streak += 1
        child.restarts += 1
        child.incarnation += 1
        reason = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
        log.warning("task %d %s; restarting (restart %d)", child.task, reason, child.restarts)
        self.tell("restarted", task=child.task, incarnation=child.incarnation,
                  restarts=child.restarts, reason=reason)

    # -- routing ------------------------------------------------------------------------
    def from_local(self) -> None:
        for _ in range(256):
            try:
                frames = self.local.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3:
                self._drop(f"local message of {len(frames)} parts")
                continue
            self._route(frames[1], frames[2])

    def from_peers(self) -> None:
        for _ in range(256):
            try:
                frames = self.inbound.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                self._drop(f"peer message of {len(frames)} parts")
                continue
            self._route(frames[0], frames[1])

    def _route(self, header, body) -> None:
        try:
            h = wire.parse_header(header)
        except wire.WireError as exc:
            return self._drop(str(exc))
        if h.kind == wire.HELLO:
            return self._connected(h.src)
        if h.dest not in self.route:
            return self._drop(f"frame for unknown task {h.dest}")
        peer = self.route[h.dest]
        if peer is None:
            self._to_local(h.dest, header, body)
        else:
            peer.send_multipart([header, body])

    def _to_local(self, task: int, header, body) -> None:
        child = self.children[task]
        if child.pending or not child.connected:
            child.pending.append((header, body))
            return
        try:
            self.local.send_multipart([b"t%d" % task, header, body], zmq.NOBLOCK)
        except zmq.ZMQError:  # not connected (EHOSTUNREACH) or its queue is full (EAGAIN)
            child.pending.append((header, body))

    def _connected(self, task: int) -> None:
        child = self.children.get(task)
        if child is None:
            return self._drop(f"hello from task {task}, which is not in this container")
        child.connected = True
        self.flush_pending(child)

    def flush_pending(self, child: Child) -> None:
        ident = b"t%d" % child.task
        while child.pending:
            header, body = child.pending[0]
            try:
                self.local.send_multipart([ident, header, body], zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            child.pending.popleft()

    def _drop(self, why: str) -> None:
        self.dropped += 1
        log.warning("dropped a frame: %s", why)

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.handshake()
        for child in self.children.values():
            self.start(child)
        poller = zmq.Poller()
        for sock in (self.local, self.inbound, self.ctl):
            poller.register(sock, zmq.POLLIN)
        next_look = 0.0
        while not self.stopping:
            for sock, _ in poller.poll(int(SUPERVISE_EVERY * 1000)):
                self._on_readable(sock)
            now = time.monotonic()
            if now >= next_look:
                self.supervise(now)
                for child in self.children.values():
                    if child.pending and child.connected:
                        self.flush_pending(child)
                next_look = now + SUPERVISE_EVERY
        self.shutdown()

    def _on_readable(self, sock: zmq.Socket) -> None:
        if sock is self.local:
            self.from_local()
        elif sock is self.inbound:
            self.from_peers()
        else:
            self.from_master()

    def from_master(self) -> None:
        while self.ctl.poll(0):
            msg = self._unseal(self.ctl.recv_multipart())
            if msg is not None and msg["t"] == "kill":
                self.stopping = True

    def shutdown(self) -> None:
        procs = [c.proc for c in self.children.values() if c.proc is not None]
        _procs.terminate(procs, timeout=1.0)
        self.tell("bye", role="sm", id=self.container)
        for sock in (self.local, self.inbound, *self.peers.values()):
            sock.close(linger=0)
        self.ctl.close(linger=1000)
        self.zctx.term()


def main() -> None:
    boot = _procs.read_boot()
    _procs.die_with_parent(boot.get("parent"))
    _procs.setup_logging("")
    sm = StreamManager(boot)
    signal.signal(signal.SIGTERM, lambda *_: setattr(sm, "stopping", True))
    sm.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
