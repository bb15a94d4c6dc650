"""A stream manager's supervision: the instance processes of its container.

It plays Heron's executor role: it starts one process per local task, and restarts a
process that exits, with a growing back-off when it keeps failing. When the master
presumes an instance hung (no heartbeat), it sends ``restart``: the process is SIGKILLed
(a stopped one too) and restarted the same way. It also reads the end of an instance's
log for the master (a remote container's logs are on its executor's host only).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from runtime import _procs, wire
from runtime.model.constants import RESTART_BACKOFF_MAX
from runtime.model.plan import PhysicalPlan

log = logging.getLogger("tupleflow.stmgr")

STABLE_AFTER = 30.0  # seconds an incarnation must live for the back-off to reset
FIRST_BACKOFF = 0.05  # seconds before a dead instance is restarted; doubles while it keeps dying
# seconds after an instance starts before the next warm spare is started: its imports must
# not compete for the CPU with the start it is meant to make faster
SPARE_AFTER = 2.0


@dataclass
class Child:
    """One local task's instance process and its restart history."""

    task: int
    proc: subprocess.Popen | None = None
    incarnation: int = 0
    restarts: int = 0
    streak: int = 0  # restarts in a row without a stable run in between
    started: float = 0.0
    restart_at: float | None = None
    kill_reason: str | None = None  # why the master had it killed, if it did


class Spare:
    """A warm spare: an instance interpreter started ahead of need, its imports done,
    waiting on its stdin for a task's boot. A restart hands the boot to it, so the time
    from a death to a working replacement is not spent importing (measured in
    docs/reliability.md, "Where recovery time goes"). Owns that one process and when the
    next may be started; ``make()`` starts one."""

    def __init__(self, make: Callable[[], subprocess.Popen]) -> None:
        self.make = make
        self.proc: subprocess.Popen | None = None
        self.due = 0.0  # not before: a start is still under way

    def take(self) -> subprocess.Popen | None:
        """The spare, now yours, if one waits alive; else None (start one afresh)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is not None:
            _procs.close_pipe(proc)
            return None
        return proc

    def later(self, now: float) -> None:
        """An instance is starting: the next spare waits until it has had the CPU."""
        self.due = now + SPARE_AFTER

    def keep(self, now: float) -> None:
        """Start a spare if none waits and no start is under way."""
        if self.proc is not None and self.proc.poll() is not None:
            self.take()  # it died waiting: another, but not at once (one that cannot even
            self.later(now)  # import must not be started every 50 ms)
        if self.proc is None and now >= self.due:
            self.proc = self.make()

    def stop(self) -> list[subprocess.Popen]:
        """The spare to terminate with the instances (none if none waits)."""
        proc = self.take()
        return [] if proc is None else [proc]


class Children:
    """Owns this container's instance processes: each task's process, incarnation,
    restart count, back-off streak and pending restart, and why the master had it
    killed. ``spawn(child)`` starts a process; ``gone(task)`` tells routing that a
    task's instance is gone (its frames wait for the next one)."""

    def __init__(self, plan: PhysicalPlan, container: int, incarnations: dict,
                 spawn: Callable[[Child], subprocess.Popen | None],
                 gone: Callable[[int], None], tell: Callable[[wire.Control], None],
                 spare: Spare | None = None) -> None:
        self.plan, self.container = plan, container
        self.spawn, self.gone, self.tell, self.spare = spawn, gone, tell, spare
        self.children = {t.task: Child(t.task, incarnation=incarnations.get(t.task, 0))
                         for t in plan.tasks_in(container)}
        # instances of tasks a rebalance removed, told to stop, and what to call once each
        # has exited (its socket is read until then: it flushes as it stops)
        self.leaving: dict[int, subprocess.Popen] = {}
        self.left: Callable[[int], None] = lambda task: None

    def start_all(self, now: float) -> None:
        for child in self.children.values():
            self.start(child, now)

    def start(self, child: Child, now: float) -> None:
        self.gone(child.task)
        child.proc = self.spawn(child)
        child.started, child.restart_at = now, None
        if self.spare is not None:
            self.spare.later(now)

    # -- a rebalance in place (docs/internals/rebalance.md) ----------------------------------
    def add(self, plan: PhysicalPlan, task: int, now: float) -> None:
        """A task the new ``plan`` puts here: start its instance (the warm spare, if one
        waits)."""
        self.plan = plan
        child = self.children[task] = Child(task)
        self.start(child, now)

    def remove(self, task: int) -> None:
        """A task the new plan no longer has: SIGTERM its instance, which flushes and
        stops; :meth:`supervise` reaps it (never restarts it) and calls ``left``."""
        child = self.children.pop(task, None)
        if child is None or child.proc is None:
            return self.left(task)
        _procs.signal_quietly(child.proc, signal.SIGTERM)
        self.leaving[task] = child.proc

    def _reap_leaving(self) -> None:
        for task, proc in list(self.leaving.items()):
            if proc.poll() is not None:
                _procs.close_pipe(proc)
                del self.leaving[task]
                self.left(task)

    def supervise(self, now: float) -> None:
        if self.leaving:
            self._reap_leaving()
        for child in self.children.values():
            if child.proc is not None and child.proc.poll() is not None:
                self._schedule_restart(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                self.start(child, now)
        self._keep_spare(now)

    def _keep_spare(self, now: float) -> None:
        """A warm spare, unless a restart is pending (it would take the CPU from it)."""
        if self.spare is not None and all(c.restart_at is None for c in self.children.values()):
            self.spare.keep(now)

    def _schedule_restart(self, child: Child, now: float) -> None:
        code = child.proc.returncode
        _procs.close_pipe(child.proc)
        child.proc = None
        self.gone(child.task)  # hold its frames until the next hello
        if now - child.started > STABLE_AFTER:
            child.streak = 0
        cap = float(self.plan.config[RESTART_BACKOFF_MAX])
        child.restart_at = now + min(cap, FIRST_BACKOFF * 2**child.streak)
        child.streak += 1
        child.restarts += 1
        child.incarnation += 1
        reason = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
        reason, child.kill_reason = child.kill_reason or reason, None
        log.warning("task %d %s; restarting (restart %d)", child.task, reason, child.restarts)
        self.tell(wire.Restarted(task=child.task, incarnation=child.incarnation,
                                 restarts=child.restarts, reason=reason))

    def kill_hung(self, msg: wire.Restart) -> None:
        """SIGKILL an instance the master presumes hung (SIGKILL ends a stopped process
        too); :meth:`supervise` then restarts it as it would any process that died."""
        child = self.children.get(msg.task)
        if child is None or child.proc is None or child.proc.poll() is not None:
            return  # not ours, or already dead: its restart is under way
        if msg.incarnation != child.incarnation:
            return  # the master means an incarnation that has already been replaced
        log.warning("task %d: %s; killing it", msg.task, msg.reason)
        child.kill_reason = msg.reason
        child.proc.kill()

    def send_log(self, msg: wire.Logs, run_dir: str) -> None:
        """The end of one of this container's instances' logs, for the master to pass on
        to a client."""
        if msg.task not in self.children or self.plan.task(msg.task).component != msg.component:
            ok, value = False, (f"task {msg.task} of {msg.component!r} is not in container "
                                f"{self.container}")
        else:
            path = os.path.join(run_dir, "logs", f"{msg.component}-{msg.task}.log")
            try:
                ok, value = True, read_tail(path, msg.limit)
            except OSError as exc:
                ok, value = False, f"{path} on container {self.container}'s host: {exc.strerror}"
        self.tell(wire.LogsReply(request=msg.request, ok=ok, value=value))

    def stop(self) -> None:
        spare = self.spare.stop() if self.spare is not None else []
        _procs.terminate([c.proc for c in self.children.values() if c.proc is not None]
                         + list(self.leaving.values()) + spare, timeout=1.0)


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
