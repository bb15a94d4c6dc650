"""The topology master's supervision: the processes of a topology and their lives.

It starts the containers (and restarts one whose stream manager dies, with a growing
back-off), welcomes every process with the plan (and instances with the user code),
knows which incarnation of each task is current, activates the spouts once every
instance is ready (unless paused), and has an instance that stops heart-beating killed
and restarted by its stream manager. The decisions are the pure functions of
:mod:`runtime.observe.health`; this module only acts on them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from runtime import _procs, wire
from runtime.model.constants import HEARTBEAT_TIMEOUT, RESTART_BACKOFF_MAX
from runtime.model.plan import PhysicalPlan
from runtime.observe import health as _health

from . import adoption as _adoption
from .children import STABLE_AFTER
from .tasks import TaskTable

FIRST_BACKOFF = 0.1  # seconds before a dead container is restarted; doubles while it keeps dying

Send = Callable[[bytes, wire.Control], None]


class Supervision:
    """Owns the topology's processes and their lives: the containers it started (their
    generations, back-off streaks and restart times), each stream manager's and each
    instance's control identity, the heartbeats it watches and the incarnations it
    condemned as hung, whether the spouts were activated (``state``) or paused.
    Incarnations, readiness and restart counts are written to the :class:`TaskTable`."""

    def __init__(self, plan: PhysicalPlan, boot: dict, endpoint: str, tasks: TaskTable,
                 send: Send, event: Callable[..., None], clock: Callable[[], float],
                 forget: Callable[[int], None]) -> None:
        self.plan, self.boot, self.endpoint, self.tasks = plan, boot, endpoint, tasks
        self.send, self.event, self.clock, self.forget = send, event, clock, forget
        self.remote: dict | None = boot.get("remote")
        self.state = "starting"
        self.started = time.time()
        # spouts deactivated by the client (pause/resume); a master adopting the
        # processes of one that died is told by the submitting handle
        self.paused: bool = boot.get("paused", False)
        # a rebalance that changes a spout's parallelism: an instance ready meanwhile is
        # not activated (the rebalance activates every spout when it is over)
        self.holding = False
        self.sms: dict[int, dict[str, Any]] = {}  # container -> its stream manager's hello
        self.containers: dict[int, subprocess.Popen] = {}
        self.generations: dict[int, int] = {}  # container -> how many times it was started
        self.started_at: dict[int, float] = {}  # container -> when it was last started
        self.streaks: dict[int, int] = {}  # container -> deaths in a row without a stable run
        self.restart_at: dict[int, float] = {}  # dead container -> when to start it again
        self.idents: dict[int, bytes] = {}  # task -> its current instance's identity
        # None (also for 0 or nonsense): no heartbeat supervision
        self.heartbeat_timeout = _health.seconds(plan.config.get(HEARTBEAT_TIMEOUT))
        self.heard: dict[int, float] = {}  # watched task -> when it last reported (clock)
        self.condemned: dict[int, int] = {}  # task -> the incarnation the master had killed

    # -- containers ---------------------------------------------------------------------
    def start_containers(self) -> None:
        if self.remote:
            return  # each is a task of the Spark job (runtime/processes/spark_scheduler.py)
        for c in range(self.plan.containers):
            self.start_container(c)

    def start_container(self, c: int) -> None:
        """Start (or restart) container ``c``. Its instances start at the incarnation the
        master expects, so that a restarted container's instances are not taken for
        late ones; its generation keeps its control identity unique. Never a remote one:
        Spark starts those (a task of the job, started again by the driver)."""
        if self.remote:
            return
        generation = self.generations[c] = self.generations.get(c, -1) + 1
        incarnations = {t.task: self.tasks[t.task]["incarnation"]
                        for t in self.plan.tasks_in(c)}
        boot = {"secret": self.boot["secret"], "tm": self.endpoint, "container": c,
                "generation": generation, "incarnations": incarnations,
                "run_dir": self.boot["run_dir"], "sys_path": self.boot.get("sys_path", []),
                # it outlives this master, not the submitter (unless detached)
                "submitter": None if self.boot.get("detached") else self.boot.get("parent"),
                # detached: while the submitting process runs, its handle replaces a dead
                # master; once it is gone, a stream manager does (detached.MasterKeeper)
                "detached": bool(self.boot.get("detached")),
                "watcher": self.boot.get("submitter_pid")}
        path = os.path.join(_procs.log_dir(self.boot["run_dir"]), f"container-{c}.log")
        proc = self.containers[c] = _procs.spawn("runtime.processes.stmgr", boot, log_path=path)
        self.started_at[c] = time.monotonic()
        _adoption.write_container(self.boot["run_dir"], c, proc.pid, generation)

    def watch_containers(self, now: float) -> None:
        """Reap dead containers, and restart them after a back-off that grows while they
        keep dying (a container that cannot start must not spin the machine)."""
        for c, proc in list(self.containers.items()):
            if proc.poll() is not None:
                self._container_died(c, proc, now)
        for c, due in list(self.restart_at.items()):
            if now >= due:
                del self.restart_at[c]
                self.start_container(c)

    def _container_died(self, c: int, proc: subprocess.Popen, now: float) -> None:
        reason = f"stream manager exited with code {proc.returncode}"
        self.event("container_restarted", container=c, reason=reason)
        _procs.close_pipe(proc)
        del self.containers[c]
        self.sms.pop(c, None)
        self._restarted_with(c, f"container {c} restarted ({reason})")
        streak = 0 if now - self.started_at[c] > STABLE_AFTER else self.streaks.get(c, 0)
        self.streaks[c] = streak + 1
        cap = float(self.plan.config[RESTART_BACKOFF_MAX])
        self.restart_at[c] = now + min(cap, FIRST_BACKOFF * 2**streak)

    def _restarted_with(self, c: int, reason: str) -> None:
        """A container's instances died with it: each is restarted as a new incarnation."""
        for t in self.plan.tasks_in(c):
            self.restarted(t.task, self.tasks[t.task]["incarnation"] + 1, reason)

    # -- hellos ---------------------------------------------------------------------------
    def on_sm_hello(self, ident: bytes, msg: wire.Hello) -> None:
        if self.remote and not self._remote_container(ident, msg):
            return
        self.sms[msg.id] = {"ident": ident, "inbound": msg.inbound, "pid": msg.pid,
                            "generation": msg.incarnation, "run_dir": msg.run_dir}
        if self.remote:  # its identity, for a master that may replace this one
            _adoption.write_container(self.boot["run_dir"], msg.id, msg.pid, msg.incarnation)
        if len(self.sms) == self.plan.containers:
            self._welcome_containers()

    def _welcome_containers(self) -> None:
        inbound = {str(c): sm["inbound"] for c, sm in self.sms.items()}
        # remote: a restarted container learns its tasks' incarnations here (a local one
        # from its boot), and running ones learn a moved peer's address
        incarnations = ({t: info["incarnation"] for t, info in self.tasks.items()}
                        if self.remote else None)
        welcome = wire.Welcome(plan=self.plan.to_data(), inbound=inbound,
                               incarnations=incarnations)
        for sm in self.sms.values():
            self.send(sm["ident"], welcome)

    def _remote_container(self, ident: bytes, msg: wire.Hello) -> bool:
        """A remote container's hello: False for a late one from a replaced generation; a
        newer generation means the container was restarted (by its Spark task, or by
        Spark), so its instances died with the old one."""
        old = self.sms.get(msg.id)
        if old is None or old["ident"] == ident:
            return True
        if msg.incarnation < old["generation"]:
            return False
        reason = f"container {msg.id} restarted (generation {msg.incarnation})"
        self.event("container_restarted", container=msg.id, reason=reason)
        self.send(old["ident"], wire.Kill())  # if the old one still runs (Spark retried the
        # task while it lived on), it must not route for its orphaned instances
        self._restarted_with(msg.id, reason)
        return True

    def on_instance_hello(self, ident: bytes, msg: wire.Hello) -> None:
        task = self.tasks.get(msg.id)
        if task is None or msg.incarnation < task["incarnation"]:
            return  # unknown task, or a late hello from an older incarnation
        if msg.incarnation > task["incarnation"]:
            self._forget(msg.id)
        self.tasks.welcomed(msg.id, msg.incarnation, msg.pid)
        self.idents[msg.id] = ident
        self.send(ident, wire.Welcome(plan=self.plan.to_data(), bundle=self.boot["bundle"]))

    # -- incarnations -----------------------------------------------------------------------
    def current(self, task_id: Any, incarnation: int) -> dict | None:
        """The task's record if ``incarnation`` is its current one, None for a late
        message of one replaced, or of one the master asked to kill."""
        task = self.tasks.get(task_id)
        if task is None or incarnation != task["incarnation"]:
            return None
        if self.condemned.get(task_id) == incarnation:
            return None  # its stream manager is on it
        return task

    def on_ready(self, msg: wire.Ready) -> dict | None:
        """The task's record if its current incarnation is now ready, else None."""
        task = self.current(msg.task, msg.incarnation)
        if task is not None:
            self.tasks.made_ready(msg.task)
            self.heard[msg.task] = self.clock()
            self._back(msg.task, msg.incarnation)
        return task

    def _back(self, task_id: int, incarnation: int) -> None:
        """A restarted incarnation is ready: the event that closes its restart, so that
        the time from a fault to a working replacement can be read off the events."""
        if incarnation > 0:
            self.event("ready_again", task=task_id, incarnation=incarnation,
                       component=self.tasks[task_id]["component"])

    def activate(self, ident: bytes) -> None:
        """A new instance is ready: activate it, or everyone once all are ready (never
        while paused: a spout restarted while paused starts paused)."""
        if self.state == "running":
            if not self.paused and not self.holding:
                self.send(ident, wire.Activate())
        elif all(t["ready"] for t in self.tasks.values()):
            self.state = "running"
            self.event("activated", seconds=round(time.time() - self.started, 3))
            if not self.paused:
                self.tell_ready(wire.Activate())

    def heartbeat(self, task_id: int) -> None:
        """A statistics report is the instance's heartbeat, once it is ready."""
        if self.tasks[task_id]["ready"]:
            self.heard[task_id] = self.clock()

    def on_restarted(self, ident: bytes, msg: wire.Restarted) -> None:
        self.restarted(msg.task, msg.incarnation, msg.reason)

    def restarted(self, task_id: int, incarnation: int, reason: str) -> None:
        """Count a restart. The master keeps the count (a restarted container's stream
        manager starts counting afresh), and never moves an incarnation backwards: the
        new instance's hello may have overtaken its stream manager's message."""
        if self.tasks.restarted(task_id, incarnation):
            self._forget(task_id)
        task = self.tasks[task_id]
        self.event("restarted", task=task_id, component=task["component"], reason=reason,
                   restarts=task["restarts"])

    def _forget(self, task_id: int) -> None:
        """A new incarnation: not watched until it is ready (and observed afresh)."""
        self.heard.pop(task_id, None)
        self.forget(task_id)

    # -- heartbeats -----------------------------------------------------------------------
    def watch_heartbeats(self, now: float) -> None:
        """Have every instance that stopped heart-beating killed and restarted."""
        timeout = self.heartbeat_timeout
        if timeout is None:
            return
        for task_id, silent in _health.hung(self.heard, now, timeout).items():
            self._restart_hung(task_id, silent, timeout)

    def _restart_hung(self, task_id: int, seconds: float, timeout: float) -> None:
        """Condemn the current incarnation (its late messages are ignored from now on) and
        ask its stream manager to replace it; the restart is counted when it reports."""
        task = self.tasks[task_id]
        self.heard.pop(task_id, None)
        self.condemned[task_id] = task["incarnation"]
        self.tasks.condemned(task_id)
        self.event("hung", task=task_id, component=task["component"],
                   seconds=round(seconds, 2), incarnation=task["incarnation"])
        reason = f"hung: no heartbeat for {seconds:.1f} s (heartbeat_timeout {timeout:g} s)"
        sm = self.sms.get(task["container"])
        if sm is not None:  # otherwise its container is restarting, and the task with it
            self.send(sm["ident"], wire.Restart(task=task_id, reason=reason,
                                                incarnation=task["incarnation"]))

    # -- pause and resume -------------------------------------------------------------------
    def pause(self) -> bool:
        """Deactivate every spout (Storm's deactivate); False if they already were."""
        if self.paused:
            return False
        self.paused = True
        self.event("paused")
        self.tell_ready(wire.Deactivate())
        return True

    def resume(self) -> bool:
        """Activate the spouts again (once the topology is running); False if not paused."""
        if not self.paused:
            return False
        self.paused = False
        self.event("resumed")
        if self.state == "running":
            self.tell_ready(wire.Activate())
        return True

    def tell_ready(self, msg: wire.Control, tasks: Iterable[int] | None = None) -> list[int]:
        """Send a control message to every ready instance (of ``tasks``, if given); an
        instance not ready yet hears what it needs when it is."""
        told = [t for t in (self.tasks if tasks is None else tasks)
                if self.tasks[t]["ready"] and t in self.idents]
        for t in told:
            self.send(self.idents[t], msg)
        return told

    # -- status and the end -----------------------------------------------------------------
    def status(self) -> dict:
        """The state, when it started, and the containers' pids (remote: as they said)."""
        pids = ({c: sm["pid"] for c, sm in self.sms.items()} if self.remote
                else {c: p.pid for c, p in self.containers.items()})
        return {"state": self.state, "started": self.started, "pid": os.getpid(),
                "containers": pids, "paused": self.paused}

    def remote_status(self) -> dict:
        """Remote only: the containers' data endpoints and run directories."""
        return {"inbound": {c: sm["inbound"] for c, sm in self.sms.items()},
                "container_dirs": {c: sm["run_dir"] for c, sm in self.sms.items()}}

    def stop(self) -> None:
        """Kill every container: by message if it said hello, else by SIGTERM, then
        whatever is left."""
        self.state = "killed"
        for sm in self.sms.values():
            self.send(sm["ident"], wire.Kill())
        hello = {sm["pid"] for sm in self.sms.values()}
        procs = list(self.containers.values())
        for p in procs:  # one that has not said hello yet cannot hear a kill
            if p.pid not in hello:
                _procs.signal_quietly(p, signal.SIGTERM)
        deadline = time.monotonic() + 1.5
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
        _procs.terminate(procs, timeout=0.2)
