"""A master that may die: what lets a topology's processes outlive their master, and a
new master adopt them (docs/reliability.md, "A master that may die").

- The run directory remembers where the master listens (``master.endpoint``) and each
  container's stream manager (``containers/sm-C.json``: pid and generation). A new master
  binds the same address, so every stream manager's and instance's control socket
  reconnects by itself (zmq retries a lost connection), and knows whom to ask.
- :class:`Adoption` is the new master's: it asks every container what it runs
  (:class:`~runtime.wire.Adopt`) until all have answered (:class:`~runtime.wire.Running`),
  then rebuilds supervision from the answers, with the plan they report; a container
  whose stream manager died meanwhile is started again.
- :class:`Orphan` is a stream manager this master did not start, watched by its pid.
- :func:`running_report` is the stream manager's answer, :class:`SubmitterWatch` what
  ends a container once the submitting process is gone (what a master did at the end of
  its stdin, when the master itself may be gone).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psutil

from runtime import wire
from runtime.model.constants import CHECKPOINTER

from .rebalance import START_BOUND, SWITCH_BOUND, SplitOrder, split_counts, split_stopped

log = logging.getLogger("tupleflow.adoption")

ENDPOINT_FILE = "master.endpoint"
ASK_EVERY = 0.5  # seconds between two asks to a container that has not answered
ADOPT_WAIT = 20.0  # seconds a live but silent stream manager is waited for
WATCH_EVERY = 1.0  # seconds between a stream manager's looks at its submitter


# -- the run directory --------------------------------------------------------------------

def write_endpoint(run_dir: str, endpoint: str) -> None:
    _write(os.path.join(run_dir, ENDPOINT_FILE), endpoint)


def read_endpoint(run_dir: str) -> str:
    with open(os.path.join(run_dir, ENDPOINT_FILE)) as f:
        return f.read().strip()


def write_container(run_dir: str, container: int, pid: int, generation: int) -> None:
    """Remember a started stream manager, for a master that may replace this one."""
    folder = os.path.join(run_dir, "containers")
    os.makedirs(folder, exist_ok=True)
    _write(os.path.join(folder, f"sm-{container}.json"),
           json.dumps({"pid": pid, "generation": generation}))


def read_containers(run_dir: str, containers: int) -> dict[int, dict]:
    """Container -> ``{"pid", "generation"}`` of its last started stream manager."""
    found = {}
    for c in range(containers):
        path = os.path.join(run_dir, "containers", f"sm-{c}.json")
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            found[c] = json.load(f)
    return found


def _write(path: str, text: str) -> None:
    """Write whole or not at all (a reader never sees half a file)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


# -- a process started by another master ----------------------------------------------------

class Orphan:
    """The part of :class:`subprocess.Popen` supervision uses, for a stream manager a dead
    master started: watched by pid (psutil checks its start time, so a reused pid is not
    taken for it). Its exit code is not ours to read: ``returncode`` is -1 once gone."""

    stdin = None

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None
        try:
            self._proc: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._proc, self.returncode = None, -1

    def poll(self) -> int | None:
        if self.returncode is None and not self._runs():
            self.returncode = -1
        return self.returncode

    def _runs(self) -> bool:
        try:  # a zombie runs nothing: its parent (init) has not reaped it yet
            return self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.02)  # polling a process that is not our child: no waitpid
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(psutil.Error):
                self._proc.send_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def sm_ident(container: int, generation: int) -> bytes:
    """A stream manager's control identity (as ``stmgr.StreamManager`` sets it)."""
    return b"s%d.%d" % (container, generation)


def instance_ident(task: int, incarnation: int) -> bytes:
    """An instance's control identity (as ``instance.Instance`` sets it)."""
    return b"i%d.%d" % (task, incarnation)


# -- the adopting master ----------------------------------------------------------------------

class Adoption:
    """Owns a new master's adoption: the stream managers it knows of from the run
    directory, the answers received, when each silent one was last asked, and whether it
    is done. ``master`` is the :class:`~runtime.processes.master.TopologyMaster`; its
    parts are rebuilt (with the reported plan) and filled in at the end."""

    def __init__(self, master: Any, restarts: int, now: float) -> None:
        self.master, self.restarts = master, restarts
        self.known = read_containers(master.boot["run_dir"], master.plan.containers)
        self.reports: dict[int, tuple[bytes, wire.Running]] = {}
        self.asked: dict[int, float] = {}
        self.began, self.deadline = now, now + ADOPT_WAIT
        self.done = False
        # the epoch every container must run, once the answers showed a rebalance in
        # place cut short (some switched, or started and not switched): None until then
        self.target: int | None = None
        # adopted tasks whose first report is still to be compared with the live settings
        self.unchecked: set[int] = set()
        # instances restarted meanwhile: welcomed at the end, on the plan adopted
        self.hellos: list[tuple[bytes, wire.Hello]] = []
        master.supervision.state = "adopting"  # "running" once every container answered

    def tick(self, now: float) -> None:
        """Ask whoever has not answered (or not yet on the plan decided); decide once
        everyone did or cannot, then finish."""
        if self.done:
            return
        silent = [c for c in range(self.master.plan.containers) if not self._answered(c)]
        gone = [c for c in silent if self._gone(c, now)]
        for c in silent:
            if c not in gone and now - self.asked.get(c, -ASK_EVERY) >= ASK_EVERY:
                self.asked[c] = now
                self.master.send(sm_ident(c, self.known[c]["generation"]),
                                 wire.Adopt(master_pid=os.getpid(), epoch=self.target))
        if len(gone) < len(silent):
            return
        if self.target is None and not agreed(self.reports.values()):
            self.target = decide(self.reports.values())
            self.asked.clear()  # ask the ones that disagree again, at once
            log.warning("adopting: a rebalance in place was cut short; every container "
                        "runs the plan of epoch %d", self.target)
            return
        self.finish(gone, now)

    def _answered(self, c: int) -> bool:
        """Container ``c`` answered, and (once a plan was decided) runs that plan."""
        if c not in self.reports:
            return False
        return self.target is None or runs(self.reports[c][1], self.target)

    def _gone(self, c: int, now: float) -> bool:
        """Never started, dead, or silent for too long (then it is killed)."""
        if c not in self.known:
            return True
        sm = Orphan(self.known[c]["pid"])
        if sm.poll() is None and now > self.deadline:
            log.warning("container %d (pid %d) did not answer in %.0f s: killing it", c,
                        sm.pid, ADOPT_WAIT)
            sm.kill()
            return True
        return sm.poll() is not None

    def on_running(self, ident: bytes, msg: wire.Running) -> bool:
        """Keep a container's report; False if it comes too late or makes no sense."""
        if self.done or not sensible(msg, self.master.plan.containers):
            return False
        self.reports[msg.container] = (ident, msg)
        return True

    def counts(self, task: int) -> bool:
        """Whether a report of ``task`` counts yet: not before it is adopted, unless it
        said hello to this master (its counts were nobody's)."""
        record = self.master.tasks.get(task)
        return self.done or bool(record and record["ready"])

    def agree(self, task: int, record: dict) -> list[wire.Control]:
        """An adopted instance's first report: the live settings saved (a client got its
        reply) that it does not run, because the master that died never delivered them;
        once per task. A setting it runs already is not told again: ``"auto"`` told
        again would restart its tuner."""
        if task not in self.unchecked:
            return []
        self.unchecked.discard(task)
        component = self.master.tasks[task]["component"]
        told = self.master.settings.differing(component, record)
        if told:
            self.master.observation.event(
                "settings_told_again", task=task, component=component,
                settings=[m.key if isinstance(m, wire.Setting) else f"recording {m.stream}"
                          for m in told])
        return told

    def hold_hello(self, ident: bytes, msg: wire.Hello) -> bool:
        """An instance's hello before the end: kept, and answered by :meth:`finish` once
        the plan the containers run is known. Welcomed at once it got the boot's plan,
        which is the one the containers were last started on, older than theirs after a
        rebalance in place: it then routed on the old plan for good, and under
        checkpoints, restarted between a switch and its split, said ``NEW`` for the old
        plan, which the checkpoint task answers with a plain rollback (seen in a scratch
        run of the split-death test with a counter killed in the hold). True if kept."""
        if self.done:
            return False
        self.hellos.append((ident, msg))
        return True

    def finish(self, gone: list[int], now: float) -> None:
        """Take the reported plan, adopt what answered, start again what did not."""
        self.done = True
        master = self.master
        for c in gone:  # it answered, then died before the plan was settled
            self.reports.pop(c, None)
        plans = [msg.plan for _, msg in self.reports.values()]
        if plans:
            master.take_plan(newest(plans))
        sup = master.supervision
        # restarted while no master ran, and ready for this one: never told to activate
        fresh = [t for t, record in master.tasks.items() if record["ready"]]
        for ident, msg in self.reports.values():
            adopt_container(sup, ident, msg)
        for task, record in master.tasks.items():
            if record["ready"] and task not in fresh:
                master.observation.metrics.adopted(task, record["incarnation"])
                self.unchecked.add(task)
        # nothing runs (local: every stream manager's pid is gone; a silent Spark task may
        # still run): the store is this master's to split
        if gone and not self.reports and not master.remote:
            split_stopped(master, split_counts(master, master.carry.cut_short_counts()))
        for c in gone:
            sup.generations[c] = self.known.get(c, {}).get("generation", -1)
            sup.start_container(c)
        for record in master.tasks.values():
            record["master_restarts"] = self.restarts
        for ident, hello in self.hellos:  # on the adopted plan; activated once ready
            master.supervision.on_instance_hello(ident, hello)
        sup.state = "running"
        # the spouts were activated by the master that died, unless it was pausing them
        # for a rebalance it never finished (activating an active spout does nothing)
        if not sup.paused:
            sup.tell_ready(wire.Activate())
        cut_short(master)
        master.observation.event(
            "master_restarted", pid=os.getpid(), restarts=self.restarts,
            adopted=sorted(self.reports), started_again=sorted(gone),
            seconds=round(now - self.began, 3))


def cut_short(master: Any) -> None:
    """A rebalance the master before died in: every instance goes back to the plan the
    stream managers report (an instance the dead master had told to ``Switch`` routes on
    the new plan, whose added tasks the stream managers have dropped); a ``Switch`` to
    the plan it runs on changes nothing but a flush. Under checkpoints the checkpoint task
    is told last (:class:`Splitting`: once every other instance answered), with the
    rebalanced components' counts in that plan: it splits the committed keyed state over
    them again and rolls every task back to it (what was in flight is replayed). With no
    counts (a rebalance that changed no parallelism) that is a copy of the checkpoint and
    a rollback, which a switched task needs all the same: it takes part in no checkpoint
    until its next rollback (``Checkpointed.unsplit``). Recorded as
    ``rebalance_cut_short`` then."""
    epoch = master.carry.cut_short()
    if epoch is None:
        return
    counts = split_counts(master, master.carry.cut_short_counts())
    plan = master.plan.to_data()
    last = master.plan.component_tasks().get(CHECKPOINTER, [])  # under checkpoints
    told = master.supervision.tell_ready(wire.Switch(plan=plan),
                                         [t for t in master.tasks if t not in last])
    master.splitting = Splitting(epoch, told, wire.Switch(plan=plan, counts=counts), last,
                                 master.clock() + SWITCH_BOUND)


class Splitting:
    """A cut-short rebalance's last step, as :meth:`Rebalance._switching` takes it: the
    checkpoint task (``last``, if any) is told ``split`` once every instance told to
    switch answered ``Switched``, or ``SWITCH_BOUND`` passed. A spout the dead master had
    switched takes this ``Switch`` (to the plan it runs) as one that opened on the new
    plan (``fresh``): it gives up its partitions and takes them again at their committed
    offsets. Told in the same turn, a spout could take it after the split's rollback had
    rewound it, and read on from the commit files, past the checkpoint's positions: the
    split-death test lost a run of 50 words that way under load (twice in about 23
    rounds, wt-flake8). A checkpoint task not ready then (restarting: it starts on the
    adopted plan and waits for this split, ``CheckpointSpout.start``) is waited for, and
    once told, its answer is: one restarted, or ready (again) for this master, before it
    answered is told again. An instance still waiting for its welcome drops a
    ``Switch``, and one the stream managers reported running is taken as ready before
    its hello: a checkpoint task killed during the dead master's hold, its new
    incarnation welcomed by this master just after ``cut_short``, split by itself only
    after ``SPLIT_WAIT`` (3 scratch runs in 5). Both at most ``START_BOUND`` past
    ``due``. Owns the tasks awaited; a rebalance is refused meanwhile."""

    def __init__(self, epoch: int, told: list[int], split: wire.Switch, last: list[int],
                 due: float) -> None:
        self.epoch, self.told, self.last, self.due = epoch, told, last, due
        self.split = SplitOrder(split)
        self.awaiting = set(told) if last else set()
        self.split_told = False  # whether the checkpoint task was told (once due)

    def on_switched(self, msg: wire.Switched, epoch: int) -> None:
        if msg.epoch == epoch:  # not a late answer to the dead master's Switch
            self.awaiting.discard(msg.task)

    def tick(self, master: Any, now: float) -> bool:
        """Tell the checkpoint task once it is time, and record ``rebalance_cut_short``;
        then await its answer. True when done."""
        if not self.split_told:
            if self.awaiting and now < self.due:
                return False
            restarting = [t for t in self.last if not master.tasks[t]["ready"]]
            if restarting and now < self.due + START_BOUND:
                return False
            self.split_told = True
            split = self.split.tell(master, self.last)
            master.observation.event("rebalance_cut_short", from_epoch=self.epoch,
                                     epoch=master.plan.epoch, tasks=self.told + split,
                                     split_again=self.split.switch.counts or None)
            self.awaiting = set(split)
        elif self.awaiting and now < self.due + START_BOUND:
            again = [t for t in self.split.restarted(master, self.awaiting)
                     if master.tasks[t]["ready"]]
            if again:
                self.split.tell(master, again)
        if self.awaiting and now < self.due + START_BOUND:
            return False
        master.carry.rebalancing(None)
        return True

    def on_ready(self, master: Any, task: int) -> None:
        """``task`` said it is ready: if it is the checkpoint task and has not answered
        the split, tell it (again: what it was told before its welcome was dropped)."""
        if self.split_told and task in self.awaiting:
            self.split.tell(master, [task])


def epoch_of(plan: Any) -> int:
    return plan.get("epoch", 0) if isinstance(plan, dict) else 0


def runs(msg: wire.Running, epoch: int) -> bool:
    """Whether a container runs the plan of ``epoch`` and nothing newer is pending."""
    return msg.pending is None and epoch_of(msg.plan) == epoch


def agreed(reports: Any) -> bool:
    """Whether the containers' answers (``(ident, Running)`` pairs) name one plan, with
    nothing pending: no rebalance in place was cut short."""
    epochs = {epoch_of(msg.plan) for _, msg in reports}
    return len(epochs) <= 1 and all(msg.pending is None for _, msg in reports)


def decide(reports: Any) -> int:
    """The epoch every container must run after a rebalance in place cut short: the
    newest plan a container switched to. If one switched, every instance had switched
    before it was told (the instances are told first), so they route on the new plan: the
    others finish the switch. If none did, the pending plan's added tasks have received
    nothing yet: the others roll it back.

    >>> old, new = {"epoch": 3}, {"epoch": 4}
    >>> r = lambda plan, pending=None: (b"", wire.Running(0, 0, 1, "", "", plan, {}, pending))
    >>> decide([r(new), r(old, new)]), decide([r(old, new), r(old, new)])
    (4, 3)
    """
    return max(epoch_of(msg.plan) for _, msg in reports)


def sensible(msg: wire.Running, containers: int) -> bool:
    """Whether a report names a container of the plan and gives each task an int
    incarnation, restart count and pid."""
    return 0 <= msg.container < containers and all(
        type(task) is int and type(info) is dict
        and all(type(info.get(k)) is int for k in ("incarnation", "restarts", "pid"))
        for task, info in msg.tasks.items())


def newest(plans: list[dict]) -> dict:
    """The plan to take when stream managers report several (a rebalance was under way):
    the one with the highest ``epoch``, if plans carry one; else the first."""
    return max(plans, key=lambda p: p.get("epoch", 0) if isinstance(p, dict) else 0)


def adopt_container(sup: Any, ident: bytes, msg: wire.Running) -> None:
    """Supervision's records of one container, from what its stream manager reports."""
    c = msg.container
    sup.sms[c] = {"ident": ident, "inbound": msg.inbound, "pid": msg.pid,
                  "generation": msg.generation, "run_dir": msg.run_dir}
    sup.generations[c] = msg.generation
    if not sup.remote:  # a Spark executor's pid is not on this host: Spark watches it
        sup.containers[c] = Orphan(msg.pid)
    sup.started_at[c] = time.monotonic()
    for task, info in msg.tasks.items():
        _adopt_task(sup, int(task), info)


def _adopt_task(sup: Any, task: int, info: dict) -> None:
    """A running instance is taken as ready (it was, for the master that died: it is not
    told to activate again); one being restarted says hello when it is."""
    record = sup.tasks.get(task)
    if record is None:
        return
    incarnation, pid = int(info["incarnation"]), int(info.get("pid") or 0)
    record.update(incarnation=incarnation, pid=pid or None,
                  restarts=int(info.get("restarts", 0)), ready=bool(pid),
                  state="running" if pid else "restarting")
    if pid:
        sup.idents[task] = instance_ident(task, incarnation)
        sup.heard[task] = sup.clock()


# -- the stream manager's side ------------------------------------------------------------------

def pending(sm: Any) -> Any:
    """The plan a rebalance in place told ``sm`` to start (``Replan`` "start") and never
    told it to switch to, because its master died; else None."""
    if sm.switched is None or sm.plan.epoch == sm.switched.epoch:
        return None
    return sm.plan


def settle(sm: Any, epoch: int) -> bool:
    """Run on the plan of ``epoch``, as the new master decided: finish the switch to the
    pending plan (another container switched to it, so instances route on it), or roll the
    pending plan back (no container switched: drop the tasks it added). True once nothing
    stopped is still exiting (the stream manager answers only then: a rebalance asked
    again must not meet a task of the same id on its way out)."""
    newer = pending(sm)
    if newer is not None and newer.epoch == epoch:
        log.warning("container %d: a rebalance to epoch %d was cut short after another "
                    "container switched: switching too", sm.container, epoch)
        sm.switch_to(newer)
    elif newer is not None and sm.switched.epoch == epoch:
        log.warning("container %d: a rebalance to epoch %d never switched: rolled back to "
                    "epoch %d", sm.container, newer.epoch, epoch)
        for task in sm.router.shrink(sm.switched):
            sm.children.remove(task)
        sm.plan = sm.previous = sm.router.plan = sm.children.plan = sm.switched
    elif sm.epoch != epoch:
        log.warning("container %d: asked to run the plan of epoch %d, which it was never "
                    "told; it runs epoch %d", sm.container, epoch, sm.epoch)
    return not sm.children.leaving


def running_report(sm: Any) -> wire.Running:
    """What the stream manager ``sm`` runs, for a master that adopts it: the plan its
    instances last switched to, and the newer one a rebalance in place told it to start
    and never switched to (its added tasks may still be starting)."""
    tasks = {}
    for task, child in sm.children.children.items():
        alive = child.proc is not None and child.proc.poll() is None
        tasks[task] = {"incarnation": child.incarnation, "restarts": child.restarts,
                       "pid": child.proc.pid if alive else 0}
    newer = pending(sm)
    return wire.Running(container=sm.container, generation=sm.generation, pid=os.getpid(),
                        inbound=sm.router.inbound_endpoint(), run_dir=sm.run_dir,
                        plan=(sm.switched or sm.plan).to_data(), tasks=tasks,
                        pending=None if newer is None else newer.to_data())


class SubmitterWatch:
    """Ends a container when the process that submitted the topology is gone, unless it
    was submitted detached. The master used to do it (and its containers died with it);
    now a stream manager outlives its master, so it looks itself. Owns when it next looks."""

    def __init__(self, pid: int | None, stop: Callable[[], None]) -> None:
        self.stop, self.next = stop, 0.0
        try:
            self.proc = psutil.Process(pid) if pid else None
        except psutil.Error:
            self.proc = None
            stop()

    def look(self, now: float) -> None:
        if self.proc is None or now < self.next:
            return
        self.next = now + WATCH_EVERY
        if not self._runs():
            log.info("the submitting process (pid %d) has gone: stopping", self.proc.pid)
            self.stop()

    def _runs(self) -> bool:
        try:
            return self.proc.is_running() and self.proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
