"""A container: its stream manager process, which routes data frames and supervises the
instance processes of its container.

This module is the process: its control socket to the master, its handshake, its loop,
and the one table that hands each control message to its handler. Routing (frames,
links, water marks, backpressure) is :class:`~runtime.processes.routing.Router`'s; the
instance processes (starts, restarts, back-off, kills, logs) are
:class:`~runtime.processes.children.Children`'s.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import zmq

from runtime import _procs, wire
from runtime.model.constants import STATS_INTERVAL
from runtime.model.plan import PhysicalPlan

from . import adoption as _adoption
from . import curve as _curve
from . import detached as _detached
from .children import STABLE_AFTER, Child, Children, Spare, read_tail
from .routing import QUEUE_FRAMES, Reads, Router, endpoint

__all__ = ["QUEUE_FRAMES", "STABLE_AFTER", "StreamManager", "read_tail"]

log = logging.getLogger("tupleflow.stmgr")

SUPERVISE_EVERY = 0.05  # seconds between looks at the instance processes
WELCOME_TIMEOUT = 30.0  # seconds to wait for the master's welcome


class StreamManager:
    """The stream manager process. Owns its control socket (and, remote, its
    gatekeeper), when it next reports to the master, and whether it is stopping; its
    router and its children own the rest."""

    def __init__(self, boot: dict) -> None:
        self.boot = boot
        self.secret: bytes = boot["secret"]
        self.container: int = boot["container"]
        self.run_dir: str = boot["run_dir"]
        self.stopping = False
        self.next_report = 0.0  # when to send the master the next sm_stats
        self.zctx = zmq.Context()
        # remote (the Spark scheduler): CURVE on the TCP sockets, and the refusals counted
        self.keys = _curve.keys_of(boot)
        self.gate = _curve.Gatekeeper(self.zctx, self.keys) if self.keys is not None else None
        self.router = Router(self.zctx, boot, self.keys, self.gate, self.tell)
        self.ctl = self.zctx.socket(zmq.DEALER)
        # a restarted container gets a new identity: the master's ROUTER would refuse one
        # it still holds for the dead stream manager
        self.generation: int = boot.get("generation", 0)
        self.ctl.setsockopt(zmq.IDENTITY, b"s%d.%d" % (self.container, self.generation))
        self.ctl.setsockopt(zmq.LINGER, 1000)
        _curve.client(self.ctl, self.keys)
        self.ctl.connect(boot["tm"])
        self.handlers: dict[type, Callable[[Any], None]] = {
            wire.Kill: self.on_kill, wire.Restart: lambda msg: self.children.kill_hung(msg),
            wire.Welcome: lambda msg: self.router.rewire(msg.inbound or {}),
            wire.Logs: lambda msg: self.children.send_log(msg, self.run_dir),
            wire.Replan: self.on_replan, wire.Adopt: self.on_adopt}
        # ``switched``: the plan every local instance runs on, the one a master re-adopting
        # this container learns (its ``epoch`` is in every sm_stats); ``plan``: the newest,
        # whose added tasks may still be starting (a rebalance in place)
        self.switched: PhysicalPlan | None = None
        # it outlives its master (a new one adopts it), but not the submitter
        self.submitter = _adoption.SubmitterWatch(boot.get("submitter"), self.stop)
        # detached: it may have to start a new master (runtime/processes/detached.py)
        self.keeper = (_detached.MasterKeeper(self.run_dir, self.container, boot.get("watcher"))
                       if boot.get("detached") else None)

    # -- control ------------------------------------------------------------------------
    def tell(self, msg: wire.Control) -> None:
        self.ctl.send_multipart(wire.seal(self.secret, msg))

    def handshake(self) -> None:
        self.tell(wire.Hello(role="sm", id=self.container, incarnation=self.generation,
                             pid=os.getpid(), inbound=self.router.inbound_endpoint(),
                             run_dir=self.run_dir))
        deadline = time.monotonic() + WELCOME_TIMEOUT
        while not self.stopping:  # a kill (or SIGTERM) may come before the welcome
            if time.monotonic() > deadline:
                raise SystemExit(f"container {self.container}: no answer from the master")
            msg = self._unseal(self.ctl.recv_multipart()) if self.ctl.poll(100) else None
            if isinstance(msg, wire.Welcome):
                return self._wire(msg)
            if isinstance(msg, wire.Kill):
                break
        raise SystemExit(0)

    def _unseal(self, frames) -> wire.Control | None:
        try:
            return wire.unseal(self.secret, frames)
        except wire.WireError as exc:
            self.router.drop(f"control message: {exc}")
            return None

    def _wire(self, welcome: wire.Welcome) -> None:
        self.plan = PhysicalPlan.from_data(welcome.plan)
        self.switched = self.previous = self.plan  # (re)started after a rebalance: its plan
        log.info("container %d: welcomed by the master", self.container)
        self.router.wire(self.plan, welcome.inbound or {})
        # remote: the master says, as a restarted container cannot know
        incarnations = welcome.incarnations or self.boot.get("incarnations", {})
        self.children = Children(self.plan, self.container, incarnations,
                                 lambda child: self.start(child), self.router.disconnect,
                                 self.tell, Spare(self.start_spare))

    def start_spare(self) -> subprocess.Popen:
        """An instance interpreter that waits for its task (see :class:`Spare`)."""
        path = os.path.join(_procs.log_dir(self.run_dir), f"spare-{self.container}.log")
        return _procs.start("runtime.processes.instance", log_path=path)

    def start(self, child: Child) -> subprocess.Popen | None:
        """Start the instance process of ``child``'s task: hand it to the warm spare if
        one waits, else start a new one."""
        boot = {"secret": self.secret, "tm": self.boot["tm"],
                "sm": endpoint(self.router.task_socks[child.task]),
                "sm_spouts": endpoint(self.router.spouts),
                "task": child.task, "incarnation": child.incarnation, "run_dir": self.run_dir,
                "sys_path": self.boot.get("sys_path", []), "keys": self.boot.get("keys")}
        info = self._task_info(child.task)
        path = os.path.join(_procs.log_dir(self.run_dir), f"{info.component}-{child.task}.log")
        spare = self.children.spare.take()
        if spare is None:
            return _procs.spawn("runtime.processes.instance", boot, log_path=path)
        log.info("task %d: handed to the warm spare (pid %d)", child.task, spare.pid)
        _procs.send_boot(spare, {**boot, "log_path": path})
        return spare

    def _task_info(self, task: int):
        """The task in the newest plan, or (removed by a rebalance not yet switched: it
        runs until the switch, and is restarted if it dies meanwhile) in the one before."""
        try:
            return self.plan.task(task)
        except IndexError:
            return self.previous.task(task)

    def from_master(self) -> None:
        while self.ctl.poll(0):
            msg = self._unseal(self.ctl.recv_multipart())
            if msg is None:
                continue
            handler = self.handlers.get(type(msg))
            if handler is None:
                self.router.drop(f"unexpected control message {msg.KIND!r}")
            else:
                handler(msg)

    def on_replan(self, msg: wire.Replan) -> None:
        """A rebalance in place (docs/internals/rebalance.md): "start" routes to the new
        plan's tasks and starts the local ones; "switch" (every instance runs on it now)
        stops the local tasks it dropped and their routes."""
        plan = PhysicalPlan.from_data(msg.plan)
        if msg.step == "start":
            self.previous, self.plan = self.plan, plan
            for sock in self.router.extend(plan):
                self.poller.register(sock, zmq.POLLIN)
            self.reads.socks = self.router.instance_socks()
            now = time.monotonic()
            for t in plan.tasks_in(self.container):
                if t.task not in self.children.children:
                    self.children.add(plan, t.task, now)
        elif msg.step == "switch":
            self.switch_to(plan)

    def switch_to(self, plan: PhysicalPlan) -> None:
        """Every instance runs on ``plan`` now: stop the local tasks it dropped and their
        routes (told by the master, or by a new one settling a rebalance cut short)."""
        for task in self.router.shrink(plan):
            self.children.remove(task)
        self.plan = self.switched = plan
        log.info("container %d: switched to the plan of epoch %d", self.container,
                 plan.epoch)

    def _left(self, task: int) -> None:
        """A removed task's instance has exited: close its socket."""
        sock = self.router.forget(task)
        if sock is not None:
            self.poller.unregister(sock)
            self.reads.unread.discard(sock)
            self.reads.socks = self.router.instance_socks()
            sock.close(linger=0)

    def on_kill(self, msg: wire.Kill) -> None:
        self.stopping = True

    def stop(self) -> None:
        self.stopping = True

    def on_adopt(self, msg: wire.Adopt) -> None:
        """A new master (the one before died): tell it what runs here; asked with an
        epoch, once a rebalance its predecessor left half done has settled on that plan
        and the tasks it stopped have exited (it asks again until then)."""
        if msg.epoch is not None and not _adoption.settle(self, msg.epoch):
            return
        log.info("container %d: adopted by a new master (pid %d)", self.container,
                 msg.master_pid)
        self.tell(_adoption.running_report(self))

    def report(self, now: float) -> None:
        """Every ``stats_interval``: the bytes and frames queued towards each destination
        and the time this container's spouts were held (``sm_stats`` to the master)."""
        if now < self.next_report:
            return
        self.next_report = now + float(self.plan.config[STATS_INTERVAL])
        self.tell(wire.SmStats(container=self.container,
                               record={**self.router.queue_record(now), "epoch": self.epoch}))

    @property
    def epoch(self) -> int:
        """The epoch of the plan it last switched to."""
        return self.switched.epoch if self.switched is not None else 0

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.handshake()
        self.children.start_all(time.monotonic())
        self.children.left = self._left
        router = self.router
        self.poller = poller = zmq.Poller()
        for sock in (*router.instance_socks(), router.inbound, self.ctl):
            poller.register(sock, zmq.POLLIN)
        self.reads = reads = Reads(poller, router.instance_socks())
        next_look = 0.0
        while not self.stopping:
            timeout = 1 if router.backlog else int(SUPERVISE_EVERY * 1000)
            for sock, _ in poller.poll(timeout):
                self._on_readable(sock)
            if router.backlog:
                router.drain_backlog()
            now = time.monotonic()
            router.announce(now)
            self.report(now)
            router.backpressure.active(now)  # expires old announcements, times the episode
            reads.update(router.held, router.backpressure.holds_spouts())
            if now >= next_look:
                self.children.supervise(now)
                self.submitter.look(now)
                if self.keeper is not None:
                    self.keeper.look(now)
                next_look = now + SUPERVISE_EVERY
        self.shutdown()

    def _on_readable(self, sock: zmq.Socket) -> None:
        if sock is self.router.inbound:
            self.router.from_peers()
        elif sock is self.ctl:
            self.from_master()
        else:
            self.router.from_instances(sock)

    def shutdown(self) -> None:
        self.children.stop()
        self.tell(wire.Bye(role="sm", id=self.container))
        self.router.close()
        self.ctl.close(linger=1000)
        if self.gate is not None:
            self.gate.stop()
        self.zctx.term()


def main() -> None:
    boot = _procs.read_boot()
    if "submitter" not in boot:  # a Spark task's: it dies with that task
        _procs.die_with_parent(boot.get("parent"))
    _procs.setup_logging("")
    log.info("container %d, generation %d: started (pid %d)", boot["container"],
             boot.get("generation", 0), os.getpid())
    sm = StreamManager(boot)
    signal.signal(signal.SIGTERM, lambda *_: setattr(sm, "stopping", True))
    sm.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
