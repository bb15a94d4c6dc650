"""A stream manager's routing: data frames to local instances and to peer containers.

Frames are routed by the destination task in their header, never decoding the tuples
inside: to a local instance over a ROUTER socket, or to the stream manager of another
container over a PUSH socket. Nothing blocks on a send: a frame a destination cannot
take yet (not connected, or its queue full) waits in that destination's :class:`Link`,
and the bytes waiting are held to water marks. When a destination crosses the high
mark, every stream manager stops reading from its local spouts until it drains below
the low mark (Heron's spout backpressure; see ``docs/internals/backpressure.md``).
Spouts connect to a socket of their own for this, and every other task to one of its
own: while backpressure is on, only this container's causes among the local bolts are
read (a fan-out bolt must not keep filling the queue in front of a slow one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from runtime import wire
from runtime.model.constants import BACKPRESSURE_HIGH, BACKPRESSURE_LOW
from runtime.model.plan import PhysicalPlan

from . import curve as _curve
from .backpressure import START, Backpressure, WaterMarks
from .zmqio import MORE, NOBLOCK, messages

log = logging.getLogger("tupleflow.stmgr")

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


class Router:
    """Owns the container's data sockets (one per local task, the spouts', a stray one,
    the inbound one and a PUSH per peer), the links and what waits in them, the route
    table, the water marks and backpressure state, and the count of frames dropped."""

    def __init__(self, zctx: zmq.Context, boot: dict, keys, gate,
                 tell: Callable[[wire.Control], None]) -> None:
        self.zctx, self.boot, self.keys, self.gate, self.tell = zctx, boot, keys, gate, tell
        self.container: int = boot["container"]
        self.run_dir: str = boot["run_dir"]
        self.dropped = 0
        self.task_socks: dict[int, zmq.Socket] = {}  # a ROUTER per local task (see wire)
        self.local = self._bind_router("local")  # none of ours: a stray peer, held as a bolt
        self.spouts = self._bind_router("spouts")  # not read while backpressure is on
        self.inbound = self._bind_inbound()
        self.peers: dict[int, Link] = {}
        self.links: dict[int, Link] = {}  # local task -> its link
        self.backlog: set[Link] = set()  # links with frames waiting
        self.backpressure = Backpressure(ANNOUNCE_TTL)
        self.next_announce = 0.0

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
        bound = endpoint(self.inbound)
        if self.keys is None:
            return bound
        return f"tcp://{self.boot['advertise_host']}:{bound.rsplit(':', 1)[1]}"

    def _bind_router(self, name: str) -> zmq.Socket:
        sock = self._bind(zmq.ROUTER, name)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # refuse, rather than drop, what can't go
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted instance takes its identity back
        return sock

    def wire(self, plan: PhysicalPlan, inbound: dict) -> None:
        """Links and sockets for the plan: one link per local task and per peer."""
        self.plan = plan
        self.peer_endpoints = {int(c): ep for c, ep in inbound.items()}
        self.peers = {int(c): Link(("container", int(c)), self._push(ep))
                      for c, ep in inbound.items() if int(c) != self.container}
        self.links = {t.task: Link(t.task) for t in plan.tasks_in(self.container)}
        self.route = {t: self.links[t] if c == self.container else self.peers[c]
                      for t, c in plan.task_containers().items()}
        # each bolt (and acker) task sends on a socket of its own, so that under
        # backpressure the ones feeding the congestion can be left unread (Backpressure.holds)
        self.task_socks = {t: self._bind_router(f"t{t}") for t in self.links}
        self.sock_task = {sock: t for t, sock in self.task_socks.items()}
        config = plan.config
        self.marks = WaterMarks(int(config[BACKPRESSURE_HIGH]), int(config[BACKPRESSURE_LOW]))

    def _push(self, address: str) -> zmq.Socket:
        sock = _curve.client(self.zctx.socket(zmq.PUSH), self.keys)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, QUEUE_FRAMES)
        sock.connect(address)
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

    # -- a rebalance in place (docs/internals/rebalance.md) ----------------------------------
    def extend(self, plan: PhysicalPlan) -> list[zmq.Socket]:
        """Route to ``plan``'s new tasks too (the old ones keep their routes until the
        switch); returns the sockets bound for the new local ones."""
        self.plan, new = plan, []
        for t, c in plan.task_containers().items():
            if t in self.route:
                continue
            if c != self.container:
                self.route[t] = self.peers[c]
                continue
            self.route[t] = self.links[t] = Link(t)
            sock = self.task_socks[t] = self._bind_router(f"t{t}")
            self.sock_task[sock] = t
            new.append(sock)
        return new

    def shrink(self, plan: PhysicalPlan) -> list[int]:
        """Stop routing to the tasks ``plan`` no longer has (a frame for one is dropped
        and counted from now on); returns the local ones among them."""
        gone = [t for t in self.route if t not in plan.task_containers()]
        for t in gone:
            del self.route[t]
        return [t for t in gone if t in self.links]

    def forget(self, task: int) -> zmq.Socket | None:
        """A removed local task's instance has exited: its link (what waited for it is
        dropped, counted) and its socket, returned to be unregistered and closed."""
        link = self.links.pop(task, None)
        if link is not None and link.pending:
            self.dropped += len(link.pending)
            log.warning("task %d was rebalanced away: %d frame(s) for it dropped", task,
                        len(link.pending))
            self.backlog.discard(link)
        if self.marks.clear(task) is not None:
            self._pressure_off(task)
        sock = self.task_socks.pop(task, None)
        if sock is not None:
            self.sock_task.pop(sock, None)
        return sock

    def disconnect(self, task: int) -> None:
        """Its instance is gone (or not started yet): hold its frames until its hello."""
        self.links[task].sock = None

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
                self.drop(f"local message of {len(frames)} parts")
            else:
                self._route(frames[1].bytes, frames[2], sock, frames[0])
            if self.held(sock):  # at once: 256 frames could hold far more than the high mark
                return

    def from_peers(self) -> None:
        for frames in messages(self.inbound, 256):
            if len(frames) != 2:
                self.drop(f"peer message of {len(frames)} parts")
            else:
                self._route(frames[0].bytes, frames[1], None, None)

    def _route(self, header: bytes, body: zmq.Frame, sock: zmq.Socket | None,
               ident: zmq.Frame | None) -> None:
        """Forward one frame by its header; ``sock``/``ident`` say where it came from
        (None for a peer stream manager)."""
        try:
            h = wire.parse_header(header)
        except wire.WireError as exc:
            return self.drop(str(exc))
        if h.kind == wire.HELLO and sock is not None:
            if ident.bytes != b"t%d" % h.src:  # only task N's instance may say "route N to me"
                return self.drop(f"hello for task {h.src} from another connection")
            return self._connected(h.src, sock)
        if h.kind == wire.BACKPRESSURE and sock is None:
            return self.backpressure.announced(h.src, wire.bp_transition(h), time.monotonic())
        link = self.route.get(h.dest)
        if link is None or h.kind not in wire.ROUTED:
            return self.drop(f"frame of kind {h.kind} for task {h.dest} cannot be routed")
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

    def drain_backlog(self) -> None:
        for link in list(self.backlog):
            self.drain(link)

    def _connected(self, task: int, sock: zmq.Socket) -> None:
        link = self.links.get(task)
        if link is None:
            return self.drop(f"hello from task {task}, which is not in this container")
        link.sock, link.ident = sock, b"t%d" % task
        self.drain(link)

    def drop(self, why: str) -> None:
        self.dropped += 1
        log.warning("dropped a frame: %s", why)

    # -- backpressure -------------------------------------------------------------------
    def _pressure_on(self, key) -> None:
        self.backpressure.local.add(key)
        log.warning("backpressure on: %s crossed the high water mark", key)
        self.tell(wire.BackpressureChange(container=self.container, on=True, cause=_cause(key)))
        self.next_announce = 0.0  # announce at once

    def _pressure_off(self, key) -> None:
        self.backpressure.local.discard(key)
        log.info("backpressure off: %s drained below the low water mark", key)
        self.tell(wire.BackpressureChange(container=self.container, on=False, cause=_cause(key)))
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

    def _announce(self, task: int, on: bool) -> None:
        header = wire.bp_header(task, on)
        for peer in self.peers.values():
            with contextlib.suppress(zmq.ZMQError):  # a peer that can't take it hears the repeat
                peer.send(header, b"")

    def queue_record(self, now: float) -> dict:
        """The bytes and frames queued towards each destination, and the time this
        container's spouts were held."""
        bp = self.backpressure.statistics(now)
        return {"queued_bytes": {t: self.marks.queued.get(t, 0) for t in self.links},
                "queued_frames": {t: len(link.pending) for t, link in self.links.items()},
                "peer_queued_bytes": {c: self.marks.queued.get(p.key, 0)
                                      for c, p in self.peers.items()},
                "backpressure_active": bp.active, "backpressure_seconds": bp.seconds,
                "backpressure_episodes": bp.episodes, "dropped": self.dropped,
                **({"refusals": dict(self.gate.refusals.counts)} if self.gate else {})}

    def instance_socks(self) -> tuple[zmq.Socket, ...]:
        return (*self.task_socks.values(), self.local, self.spouts)

    def close(self) -> None:
        for sock in (*self.instance_socks(), self.inbound, *(p.sock for p in self.peers.values())):
            sock.close(linger=0)


def endpoint(sock: zmq.Socket) -> str:
    return sock.getsockopt(zmq.LAST_ENDPOINT).decode()


def _cause(key) -> str | int:
    """A backpressure cause for the master: a task id, or "container N" for a peer link."""
    return key if isinstance(key, int) else f"container {key[1]}"
