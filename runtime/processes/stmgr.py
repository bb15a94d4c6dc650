"""A container: its stream manager, and the instance processes it starts and supervises.

The stream manager routes data frames by the destination task in their header, never
decoding the tuples inside: to a local instance over a ROUTER socket, or to the stream
manager of another container over a PUSH socket. It never blocks on a send: a frame a
destination cannot take yet (not connected, or its queue full) waits in that
destination's :class:`Link`, and the bytes waiting are held to water marks. When a
destination crosses the high mark, every stream manager stops reading from its local
spouts until it drains below the low mark (Heron's spout backpressure; see
``docs/internals/backpressure.md``). Spouts connect to a socket of their own for this,
and every other task to one of its own: while backpressure is on, only this container's
causes among the local bolts are read (a fan-out bolt must not keep filling the queue
in front of a slow one).

It also plays Heron's executor role: it starts one process per local task, and
restarts a process that exits, with a growing back-off when it keeps failing. When the
master presumes an instance hung (no heartbeat), it sends ``restart``: the stream manager
SIGKILLs that process (a stopped one too) and restarts it the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from runtime import _procs, wire
from runtime.model.constants import (
    BACKPRESSURE_HIGH,
    BACKPRESSURE_LOW,
    RESTART_BACKOFF_MAX,
    STATS_INTERVAL,
)
from runtime.model.plan import PhysicalPlan

from . import curve as _curve
from .backpressure import START, Backpressure, WaterMarks
from .zmqio import MORE, NOBLOCK, messages

log = logging.getLogger("tupleflow.stmgr")

SUPERVISE_EVERY = 0.05  # seconds between looks at the instance processes
STABLE_AFTER = 30.0  # seconds an incarnation must live for the back-off to reset
WELCOME_TIMEOUT = 30.0  # seconds to wait for the master's welcome
QUEUE_FRAMES = 16  # frames a zmq pipe to one instance or peer may hold before sends refuse
ANNOUNCE_EVERY = 1.0  # seconds between repeats of a backpressure announcement while it lasts
ANNOUNCE_TTL = 3.0  # seconds a peer's announcement holds unless repeated


@dataclass(eq=False)  # compared and hashed by identity: links are kept in a set
class Link:
    """The frames on their way to one destination: a local task, or a peer container.

    ``sock`` and ``ident`` say where to send (a ROUTER needs the instance's identity); a
    local link has neither until its instance says hello.
    """

    key: object  # the task id, or ("container", c) for a peer
    sock: zmq.Socket | None = None
    ident: bytes | None = None
    pending: deque = field(default_factory=deque)

    def send(self, header: bytes, body: bytes | zmq.Frame) -> None:
        """Hand one frame to zmq; zmq.Again (queue full) or ZMQError (gone) if it can't.

        Part by part with plain int flags: pyzmq's send_multipart computes its flags
        with Python-level enum operations, which cost more than the sends here. The body
        is usually the zmq frame it came in as: zmq passes it on without a copy."""
        sock = self.sock
        if self.ident is not None:
            sock.send(self.ident, MORE)  # a refused first part sends nothing at all
        sock.send(header, MORE)
        sock.send(body, NOBLOCK, copy=False)


class Reads:
    """Which instance sockets the poller reads: every one that backpressure does not
    hold. Without backpressure, with every socket read (the commonest case, after every
    frame), :meth:`update` looks at none of them."""

    def __init__(self, poller: zmq.Poller, socks: tuple[zmq.Socket, ...]) -> None:
        self.poller, self.socks = poller, socks
        self.unread: set[zmq.Socket] = set()

    def update(self, held: Callable[[zmq.Socket], bool], pressure: bool) -> None:
        """``held(sock)``: whether backpressure holds it now; ``pressure``: whether any
        backpressure is on (none held then)."""
        if not pressure and not self.unread:
            return
        for sock in self.socks:
            now = held(sock)
            if now != (sock in self.unread):
                self.poller.modify(sock, 0 if now else zmq.POLLIN)
                (self.unread.add if now else self.unread.discard)(sock)


@dataclass
class Child:
    task: int
    link: Link
    proc: subprocess.Popen | None = None
    incarnation: int = 0
    restarts: int = 0
    streak: int = 0  # restarts in a row without a stable run in between
    started: float = 0.0
    restart_at: float | None = None
    kill_reason: str | None = None  # why the master had it killed, if it did


class StreamManager:
    def __init__(self, boot: dict) -> None:
        self.boot = boot
        self.secret: bytes = boot["secret"]
        self.container: int = boot["container"]
        self.run_dir: str = boot["run_dir"]
        self.stopping = False
        self.dropped = 0
        self.zctx = zmq.Context()
        # remote (the Spark scheduler): CURVE on the TCP sockets, and the refusals counted
        self.keys = _curve.keys_of(boot)
        self.gate = _curve.Gatekeeper(self.zctx, self.keys) if self.keys is not None else None
        self.task_socks: dict[int, zmq.Socket] = {}  # a ROUTER per local task (see _wire)
        self.local = self._bind_router("local")  # none of ours: a stray peer, held as a bolt
        self.spouts = self._bind_router("spouts")  # not read while backpressure is on
        self.inbound = self._bind_inbound()
        self.backlog: set[Link] = set()  # links with frames waiting
        self.backpressure = Backpressure(ANNOUNCE_TTL)
        self.next_announce = 0.0
        self.next_report = 0.0  # when to send the master the next sm_stats
        self.ctl = self.zctx.socket(zmq.DEALER)
        # a restarted container gets a new identity: the master's ROUTER would refuse one
        # it still holds for the dead stream manager
        self.generation: int = boot.get("generation", 0)
        self.ctl.setsockopt(zmq.IDENTITY, b"s%d.%d" % (self.container, self.generation))
        self.ctl.setsockopt(zmq.LINGER, 1000)
        _curve.client(self.ctl, self.keys)
        self.ctl.connect(boot["tm"])

    def _socket(self, kind: int) -> zmq.Socket:
        sock = _curve.limit(self.zctx.socket(kind))
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, QUEUE_FRAMES)  # set before bind: zmq sizes each pipe as
        sock.setsockopt(zmq.RCVHWM, QUEUE_FRAMES)  # it creates it, and what waits is bounded
        return sock

    def _bind(self, kind: int, name: str) -> zmq.Socket:
        sock = self._socket(kind)
        path = os.path.join(self.run_dir, f"sm-{self.container}-{name}.sock")
        sock.bind(f"ipc://{path}")
        return sock

    def _bind_inbound(self) -> zmq.Socket:
        """Where peers push: this container's ipc path, or, remote, a CURVE server on
        ``bind_host``, on the port of the previous generation if there was one (peers
        reconnect to it by themselves) or a new one (the master tells them)."""
        if self.keys is None:
            return self._bind(zmq.PULL, "in")
        sock = _curve.serve(self._socket(zmq.PULL), self.keys, self.gate, "inbound")
        host, port = self.boot["bind_host"], self.boot.get("inbound_port")
        try:
            sock.bind(f"tcp://{host}:{port}") if port else sock.bind_to_random_port(
                f"tcp://{host}")
        except zmq.ZMQError as exc:
            log.warning("could not bind port %s again (%s): a new one", port, exc)
            sock.bind_to_random_port(f"tcp://{host}")
        return sock

    def inbound_endpoint(self) -> str:
        """The address peers reach the inbound socket at (remote: the advertised host)."""
        bound = self.endpoint(self.inbound)
        if self.keys is None:
            return bound
        return f"tcp://{self.boot['advertise_host']}:{bound.rsplit(':', 1)[1]}"

    def _bind_router(self, name: str) -> zmq.Socket:
        sock = self._bind(zmq.ROUTER, name)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # refuse, rather than drop, what can't go
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted instance takes its identity back
        return sock

    def endpoint(self, sock: zmq.Socket) -> str:
        return sock.getsockopt(zmq.LAST_ENDPOINT).decode()

    # -- control ------------------------------------------------------------------------
    def tell(self, kind: str, **fields) -> None:
        self.ctl.send_multipart(wire.seal(self.secret, wire.control(kind, **fields)))

    def handshake(self) -> None:
        self.tell("hello", role="sm", id=self.container, incarnation=self.generation,
                  pid=os.getpid(), inbound=self.inbound_endpoint(), run_dir=self.run_dir)
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
        self.peer_endpoints = {int(c): ep for c, ep in welcome["inbound"].items()}
        self.peers = {int(c): Link(("container", int(c)), self._push(ep))
                      for c, ep in welcome["inbound"].items() if int(c) != self.container}
        # remote: the master says, as a restarted container cannot know
        incarnations = welcome.get("incarnations") or self.boot.get("incarnations", {})
        self.children = {t.task: Child(t.task, Link(t.task),
                                       incarnation=incarnations.get(t.task, 0))
                         for t in self.plan.tasks_in(self.container)}
        self.route = {t: self.children[t].link if c == self.container else self.peers[c]
                      for t, c in containers.items()}
        # each bolt (and acker) task sends on a socket of its own, so that under
        # backpressure the ones feeding the congestion can be left unread (Backpressure.holds)
        self.task_socks = {t: self._bind_router(f"t{t}") for t in self.children}
        self.sock_task = {sock: t for t, sock in self.task_socks.items()}
        config = self.plan.config
        self.marks = WaterMarks(int(config[BACKPRESSURE_HIGH]), int(config[BACKPRESSURE_LOW]))

    def _push(self, endpoint: str) -> zmq.Socket:
        sock = _curve.client(self.zctx.socket(zmq.PUSH), self.keys)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, QUEUE_FRAMES)
        sock.connect(endpoint)
        return sock

    def rewire(self, inbound: dict) -> None:
        """A welcome while running (a peer container was restarted): reconnect to a peer
        whose address changed; what waits for it is kept and sent there."""
        for c, ep in ((int(c), ep) for c, ep in inbound.items()):
            if c == self.container or self.peer_endpoints.get(c) == ep or c not in self.peers:
                continue
            log.info("container %d moved to %s", c, ep)
            self.peer_endpoints[c] = ep
            self.peers[c].sock.close(linger=0)
            self.peers[c].sock = self._push(ep)

    # -- instances ----------------------------------------------------------------------
    def start(self, child: Child) -> None:
        boot = {"secret": self.secret, "tm": self.boot["tm"],
                "sm": self.endpoint(self.task_socks[child.task]),
                "sm_spouts": self.endpoint(self.spouts),
                "task": child.task, "incarnation": child.incarnation, "run_dir": self.run_dir,
                "sys_path": self.boot.get("sys_path", []), "keys": self.boot.get("keys")}
        info = self.plan.task(child.task)
        path = os.path.join(_procs.log_dir(self.run_dir), f"{info.component}-{child.task}.log")
        child.proc = _procs.spawn("runtime.processes.instance", boot, log_path=path)
        child.started, child.restart_at, child.link.sock = time.monotonic(), None, None

    def supervise(self, now: float) -> None:
        for child in self.children.values():
            if child.proc is not None and child.proc.poll() is not None:
                self._schedule_restart(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                self.start(child)

    def _schedule_restart(self, child: Child, now: float) -> None:
        code = child.proc.returncode
        _procs.close_pipe(child.proc)
        child.proc, child.link.sock = None, None  # hold its frames until the next hello
        if now - child.started > STABLE_AFTER:
            child.streak = 0
        cap = float(self.plan.config[RESTART_BACKOFF_MAX])
        child.restart_at = now + min(cap, 0.05 * 2**child.streak)
        child.streak += 1
        child.restarts += 1
        child.incarnation += 1
        reason = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
        reason, child.kill_reason = child.kill_reason or reason, None
        log.warning("task %d %s; restarting (restart %d)", child.task, reason, child.restarts)
        self.tell("restarted", task=child.task, incarnation=child.incarnation,
                  restarts=child.restarts, reason=reason)

    # -- routing ------------------------------------------------------------------------
    def held(self, sock: zmq.Socket) -> bool:
        """Whether backpressure says not to read this instance socket now."""
        if sock is self.spouts:
            return self.backpressure.holds_spouts()
        return self.backpressure.holds(self.sock_task.get(sock))

    def from_instances(self, sock: zmq.Socket) -> None:
        if self.held(sock):
            return
        for frames in messages(sock, 256):
            if len(frames) != 3:
                self._drop(f"local message of {len(frames)} parts")
            else:
                self._route(frames[1].bytes, frames[2], sock, frames[0])
            if self.held(sock):  # at once: 256 frames could hold far more than the high mark
                return

    def from_peers(self) -> None:
        for frames in messages(self.inbound, 256):
            if len(frames) != 2:
                self._drop(f"peer message of {len(frames)} parts")
            else:
                self._route(frames[0].bytes, frames[1], None, None)

    def _route(self, header: bytes, body: zmq.Frame, sock: zmq.Socket | None,
               ident: zmq.Frame | None) -> None:
        """Forward one frame by its header; ``sock``/``ident`` say where it came from
        (None for a peer stream manager)."""
        try:
            h = wire.parse_header(header)
        except wire.WireError as exc:
            return self._drop(str(exc))
        if h.kind == wire.HELLO and sock is not None:
            if ident.bytes != b"t%d" % h.src:  # only task N's instance may say "route N to me"
                return self._drop(f"hello for task {h.src} from another connection")
            return self._connected(h.src, sock)
        if h.kind == wire.BACKPRESSURE and sock is None:
            return self.backpressure.announced(h.src, wire.bp_transition(h), time.monotonic())
        link = self.route.get(h.dest)
        if link is None or h.kind not in wire.ROUTED:
            return self._drop(f"frame of kind {h.kind} for task {h.dest} cannot be routed")
        self.deliver(link, header, body)

    def deliver(self, link: Link, header: bytes, body: bytes | zmq.Frame) -> None:
        if not link.pending and link.sock is not None:
            try:
                return link.send(header, body)
            except zmq.ZMQError:  # queue full (EAGAIN) or instance gone (EHOSTUNREACH)
                pass
        link.pending.append((header, body))
        self.backlog.add(link)
        if self.marks.add(link.key, len(body)) == START:
            self._pressure_on(link.key)

    def drain(self, link: Link) -> None:
        """Hand over what waits for ``link``, in order, until it refuses or is empty."""
        while link.pending and link.sock is not None:
            header, body = link.pending[0]
            try:
                link.send(header, body)
            except zmq.ZMQError:
                return
            link.pending.popleft()
            if self.marks.remove(link.key, len(body)) is not None:
                self._pressure_off(link.key)
        if not link.pending:
            self.backlog.discard(link)

    def _connected(self, task: int, sock: zmq.Socket) -> None:
        child = self.children.get(task)
        if child is None:
            return self._drop(f"hello from task {task}, which is not in this container")
        child.link.sock, child.link.ident = sock, b"t%d" % task
        self.drain(child.link)

    # -- backpressure -------------------------------------------------------------------
    def _pressure_on(self, key) -> None:
        self.backpressure.local.add(key)
        log.warning("backpressure on: %s crossed the high water mark", key)
        self.tell("backpressure", container=self.container, on=True, cause=_cause(key))
        self.next_announce = 0.0  # announce at once

    def _pressure_off(self, key) -> None:
        self.backpressure.local.discard(key)
        log.info("backpressure off: %s drained below the low water mark", key)
        self.tell("backpressure", container=self.container, on=False, cause=_cause(key))
        if isinstance(key, int):
            self._announce(key, on=False)

    def announce(self, now: float) -> None:
        """Tell every peer which local tasks are over the high mark (repeated while they are)."""
        if now < self.next_announce:
            return
        self.next_announce = now + ANNOUNCE_EVERY
        for key in self.backpressure.local:
            if isinstance(key, int):
                self._announce(key, on=True)

    def report(self, now: float) -> None:
        """Every ``stats_interval``: the bytes and frames queued towards each destination
        and the time this container's spouts were held (``sm_stats`` to the master)."""
        if now < self.next_report:
            return
        self.next_report = now + float(self.plan.config[STATS_INTERVAL])
        self.tell("sm_stats", container=self.container, record=self.queue_record(now))

    def queue_record(self, now: float) -> dict:
        bp = self.backpressure.statistics(now)
        local = {t: c.link for t, c in self.children.items()}
        return {"queued_bytes": {t: self.marks.queued.get(t, 0) for t in local},
                "queued_frames": {t: len(link.pending) for t, link in local.items()},
                "peer_queued_bytes": {c: self.marks.queued.get(p.key, 0)
                                      for c, p in self.peers.items()},
                "backpressure_active": bp.active, "backpressure_seconds": bp.seconds,
                "backpressure_episodes": bp.episodes, "dropped": self.dropped,
                **({"refusals": dict(self.gate.refusals.counts)} if self.gate else {})}

    def _announce(self, task: int, on: bool) -> None:
        header = wire.bp_header(task, on)
        for peer in self.peers.values():
            with contextlib.suppress(zmq.ZMQError):  # a peer that can't take it hears the repeat
                peer.send(header, b"")

    def _drop(self, why: str) -> None:
        self.dropped += 1
        log.warning("dropped a frame: %s", why)

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.handshake()
        for child in self.children.values():
            self.start(child)
        poller = zmq.Poller()
        instances = (*self.task_socks.values(), self.local, self.spouts)
        for sock in (*instances, self.inbound, self.ctl):
            poller.register(sock, zmq.POLLIN)
        reads = Reads(poller, instances)
        next_look = 0.0
        while not self.stopping:
            timeout = 1 if self.backlog else int(SUPERVISE_EVERY * 1000)
            for sock, _ in poller.poll(timeout):
                self._on_readable(sock)
            if self.backlog:
                for link in list(self.backlog):
                    self.drain(link)
            now = time.monotonic()
            self.announce(now)
            self.report(now)
            self.backpressure.active(now)  # expires old announcements, times the episode
            reads.update(self.held, self.backpressure.holds_spouts())
            if now >= next_look:
                self.supervise(now)
                next_look = now + SUPERVISE_EVERY
        self.shutdown()

    def _on_readable(self, sock: zmq.Socket) -> None:
        if sock is self.inbound:
            self.from_peers()
        elif sock is self.ctl:
            self.from_master()
        else:
            self.from_instances(sock)

    def from_master(self) -> None:
        while self.ctl.poll(0):
            msg = self._unseal(self.ctl.recv_multipart())
            if msg is not None and msg["t"] == "kill":
                self.stopping = True
            elif msg is not None and msg["t"] == "restart":
                self.kill_hung(msg["task"], msg.get("incarnation"), msg["reason"])
            elif msg is not None and msg["t"] == "welcome":
                self.rewire(msg["inbound"])
            elif msg is not None and msg["t"] == "logs":
                self.send_log(msg)

    def send_log(self, msg: dict) -> None:
        """The end of one of this container's instances' logs, for the master to pass on
        to a client (a remote container's logs are on its executor's host only)."""
        task, component = msg["task"], msg["component"]
        children = getattr(self, "children", {})  # none before the master's welcome
        if task not in children or self.plan.task(task).component != component:
            ok, value = False, f"task {task} of {component!r} is not in container {self.container}"
        else:
            path = os.path.join(self.run_dir, "logs", f"{component}-{task}.log")
            try:
                ok, value = True, read_tail(path, int(msg["limit"]))
            except OSError as exc:
                ok, value = False, f"{path} on container {self.container}'s host: {exc.strerror}"
        self.tell("logs_reply", request=msg["request"], ok=ok, value=value)

    def kill_hung(self, task: int, incarnation: int | None, reason: str) -> None:
        """SIGKILL an instance the master presumes hung (SIGKILL ends a stopped process
        too); :meth:`supervise` then restarts it as it would any process that died."""
        child = self.children.get(task)
        if child is None or child.proc is None or child.proc.poll() is not None:
            return  # not ours, or already dead: its restart is under way
        if incarnation is not None and incarnation != child.incarnation:
            return  # the master means an incarnation that has already been replaced
        log.warning("task %d: %s; killing it", task, reason)
        child.kill_reason = reason
        child.proc.kill()

    def shutdown(self) -> None:
        procs = [c.proc for c in self.children.values() if c.proc is not None]
        _procs.terminate(procs, timeout=1.0)
        self.tell("bye", role="sm", id=self.container)
        for sock in (*self.task_socks.values(), self.local, self.spouts, self.inbound,
                     *(p.sock for p in self.peers.values())):
            sock.close(linger=0)
        self.ctl.close(linger=1000)
        if self.gate is not None:
            self.gate.stop()
        self.zctx.term()


def read_tail(path: str, limit: int) -> str:
    """The last ``limit`` bytes of a text file, from a whole line on, saying what it left
    out."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - limit))
        data = f.read(limit)
    if size <= limit:
        return data.decode("utf-8", "replace")
    cut = data.find(b"\n") + 1
    return (f"[... the first {size - len(data) + cut:,} bytes are left out]\n"
            + data[cut:].decode("utf-8", "replace"))


def _cause(key) -> str | int:
    """A backpressure cause for the master: a task id, or "container N" for a peer link."""
    return key if isinstance(key, int) else f"container {key[1]}"


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
