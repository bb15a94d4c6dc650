"""The topology master's side of a rebalance (issue 22; docs/internals/rebalance.md).

**In place** (the same containers): the containers, their stream managers and every
instance that keeps its task go on running; only the added tasks start and the removed
ones stop. One tick of the master at a time:

1. **start**: the master runs on the new plan (the next ``epoch``: kept tasks keep their
   ids, added ones get new ids); each stream manager routes to the new tasks too and
   starts the local ones (``Replan`` "start"; a warm spare takes the first). Nobody sends
   to them yet, and the spouts still run;
2. **pause**, once every new instance is ready: every spout is deactivated;
3. **drain**, at most ``DRAIN_BOUND`` seconds, once every task has reported after the
   pause: under acking until every spout has nothing pending, without acking or
   checkpoints until the stream managers hold no frame. With checkpoints there is no
   drain: the switch ends in a rollback, which replays what was in flight;
4. **switch**: every instance flushes on the old routing and wires its streams to the
   new plan's tasks (``Switch``, answered ``Switched``); then the stream managers stop the
   removed tasks and their routes (``Replan`` "switch"; a late frame for one is dropped
   and counted); with checkpoints the checkpoint task then splits the committed keyed
   state over the new tasks and rolls every task back to it;
5. **resume**: the spouts are activated (unless paused before), the ``rebalanced``
   event is recorded and the client answered with the new plan.

**With a new number of containers** every container is restarted on a new plan (tasks
numbered again); the master keeps its endpoint, secret, events and settings. On the Spark
scheduler the master waits for every stream manager's ``bye`` (its barrier task then
ends), and the driver submits the barrier job again with the new number of tasks
(``spark_scheduler.ContainerJob.resize``), whose stream managers say hello to this master.

**A spout's parallelism** changes too when its class says ``resizable``: the added spout
tasks start paused, and at the switch each spout task's ``rebalanced`` hook hands its
partitions over at the committed offsets (the queue spouts need nothing: one consumer
each); see docs/internals/rebalance.md, "Spouts".
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from runtime import state as _state
from runtime import wire
from runtime.model.constants import ACKERS, CHECKPOINTER, MAX_PARALLELISMS, STATE_STORE
from runtime.model.plan import PhysicalPlan, check_rebalance, check_root_ids

log = logging.getLogger("tupleflow.rebalance")

DRAIN_BOUND = 1.0  # seconds the spouts wait, paused, for tuples in flight to finish
RESTART_DRAIN_BOUND = 5.0  # the same before the containers restart (a longer pause anyway)
SWITCH_BOUND = 10.0  # seconds to wait for every instance's ``switched``; then go on
# seconds to wait for the added instances to be ready; then the switch goes on without them
# (their stream managers keep their frames until they are), so that an added task that
# cannot start never holds the guard
START_BOUND = 60.0


class SplitOrder:
    """A rebalance's split, told to the checkpoint task, and the incarnation of it each
    telling reached. One restarted before it answered starts on the new plan and waits
    for a split it was never told (``CheckpointSpout.start``): it must be told again
    once it is ready. Kept by a rebalance's last step (:meth:`Rebalance._splitting`) and
    by a cut-short one's (``adoption.Splitting``), each with its own bounds."""

    def __init__(self, switch: wire.Switch) -> None:
        self.switch = switch  # the plan, with the rebalanced components' counts
        self.told: dict[int, int] = {}  # task -> incarnation told

    def tell(self, master: Any, tasks: list[int]) -> list[int]:
        """Tell ``tasks`` (those ready: ``Supervision.tell_ready``); the tasks told."""
        told = master.supervision.tell_ready(self.switch, tasks)
        self.told.update({t: master.tasks[t]["incarnation"] for t in told})
        return told

    def restarted(self, master: Any, awaited: set[int]) -> list[int]:
        """The tasks of ``awaited`` (told, not yet answered) that restarted since."""
        return [t for t in awaited if master.tasks[t]["incarnation"] != self.told.get(t)]


class Rebalance:
    """One rebalance in progress (at most one: :meth:`TopologyMaster.on_rebalance` guards):
    the client waiting for it, the old and new plans, the step it is at and when each
    began, and the instances yet to say they switched."""

    def __init__(self, master: Any, ident: bytes, msg: wire.AskRebalance) -> None:
        self.master, self.ident, self.id = master, ident, msg.id
        self.old = old = master.plan
        spouts = _spouts(master.tasks, master.kinds, old.topology, msg.parallelism)
        check_rebalance(old, msg.parallelism, msg.containers, _fixed(master, spouts))
        self.changes = {c: n for c, n in msg.parallelism.items() if old.parallelism()[c] != n}
        self.plan = old.rebalanced(msg.parallelism, msg.containers)
        check_root_ids(self.plan, spouts)
        self.spouts_change = bool(spouts & set(self.changes))
        if self.spouts_change and _state.checkpointing(old.config) and self._committed() is None:
            comp = min(spouts & set(self.changes))
            raise ValueError(f"rebalance of {old.topology!r}: component {comp!r}: with "
                             "checkpoints a spout's parallelism changes only once a first "
                             "checkpoint has committed (its positions move with its "
                             "partitions); ask again in a moment")
        old_ids, new_ids = set(old.task_containers()), set(self.plan.task_containers())
        self.added, self.removed = sorted(new_ids - old_ids), sorted(old_ids - new_ids)
        self.in_place = self.plan.containers == old.containers
        self.started = self.paused_at = self.drain_end = self.switched = master.clock()
        self.wall = time.time()
        self.was_paused = master.supervision.paused
        self.drained: bool | None = None
        self.moved: dict | None = None
        self.awaiting: set[int] = set()  # tasks yet to say they switched
        self.byes: set[int] = set()  # remote containers yet to say they stopped
        self.dropped_before = 0
        # kept before the first step is told: a new master must know it was cut short, and
        # which components' keyed state may need splitting again (adoption.cut_short)
        master.carry.rebalancing(old.epoch, self.changes)
        if self.in_place:
            self._start()
        else:
            self.checkpoint = self._committed()
            self._pause()
        self.step: Callable[[float], bool] = self._starting if self.in_place else self._drain

    # -- the steps, each called on every tick until it says it is done ------------------------
    def tick(self, now: float) -> bool:
        """Advance; True once the rebalance is over (the client has been answered)."""
        return self.step(now)

    def _start(self) -> None:
        """Run on the new plan, and have the stream managers start the new tasks. When a
        spout's parallelism changes, a spout ready from now on starts paused (the running
        ones go on until the pause): an added spout task must not read partitions that
        their old owners still read; it takes them after the switch."""
        adopt(self.master, self.plan)
        self.master.supervision.holding = self.spouts_change  # supervision.activate reads it
        self._tell_sms("start")

    def _starting(self, now: float) -> bool:
        ready = all(self.master.tasks[t]["ready"] for t in self.added)
        if not ready and now - self.started > START_BOUND:
            log.warning("rebalance: added tasks not ready in %.0f s; switching without them",
                        START_BOUND)
        if ready or now - self.started > START_BOUND:
            self._pause()
            self.step = self._drain
        return False

    def _pause(self) -> None:
        self.paused_at, self.wall = self.master.clock(), time.time()
        self.master.supervision.paused = True  # a spout ready meanwhile starts paused
        self.master.supervision.tell_ready(wire.Deactivate())

    def _drain(self, now: float) -> bool:
        bound = DRAIN_BOUND if self.in_place else RESTART_DRAIN_BOUND
        done = self._drained()
        if done or now - self.paused_at > bound:
            self.drained, self.drain_end = done, now
            self._switch()
        return False

    def _drained(self) -> bool:
        config, records = self.old.config, list(self.master.tasks.values())
        if _state.checkpointing(config):
            if self.in_place:
                return True  # the switch rolls back: what was in flight is replayed
            return (self._committed() or 0) > (self.checkpoint or 0)
        fresh = [r for r in records if (r.get("reported") or 0) > self.wall]
        if len(fresh) < len(records):
            return False  # a report from before the pause says nothing about now
        if int(config.get(ACKERS, 0)):
            return all(not r.get("pending") for r in records if r["kind"] == "spout")
        return all(not r.get("sm_queued_frames") for r in records)

    def _switch(self) -> None:
        self.switched = self.master.clock()
        if not self.in_place:
            self._stop()
            self.step = self._stopping
            if not self.byes:  # local: the containers have exited
                self._stopping(self.switched)
            return
        self.awaiting = {t.task for t in self.plan.tasks if t.component != CHECKPOINTER}
        self.awaiting |= set(self.removed)
        self.awaiting &= set(self.master.supervision.idents)
        told = self.master.supervision.tell_ready(wire.Switch(plan=self.plan.to_data()),
                                                  sorted(self.awaiting))
        self.awaiting &= set(told)
        self.step = self._switching

    def on_switched(self, msg: wire.Switched) -> None:
        if msg.epoch != self.plan.epoch:
            return  # a late answer to an older rebalance
        self.awaiting.discard(msg.task)
        if msg.moved is not None:
            self.moved = msg.moved

    def _switching(self, now: float) -> bool:
        if self.awaiting and now - self.switched < SWITCH_BOUND:
            return False
        if self.awaiting:
            log.warning("rebalance: tasks %s did not say they switched in %.0f s; going on",
                        sorted(self.awaiting), SWITCH_BOUND)
        self._tell_sms("switch")
        self._forget_removed()
        self.master.faults.hold("split")  # tests only (faults.py)
        self.split_asked = now  # since when (the split told: since it was told)
        self.split = SplitOrder(wire.Switch(plan=self.plan.to_data(), counts=self.changes))
        self.step = self._splitting
        return self._splitting(now)

    def _splitting(self, now: float) -> bool:
        """Tell the checkpoint task to split once it is ready: one restarting now (it
        starts on the new plan, and waits for this split rather than roll back to the old
        one: ``CheckpointSpout.start``) is waited for, at most ``START_BOUND``."""
        checkpointer = self.plan.component_tasks().get(CHECKPOINTER)
        if not checkpointer:
            return self._resume(now)
        if self.master.tasks[checkpointer[0]]["ready"]:
            self.split_asked = now
            self.awaiting = set(self.split.tell(self.master, checkpointer))
            self.step = self._rolling_back
            return False
        if now - self.split_asked < START_BOUND:
            return False
        log.warning("rebalance: the checkpoint task not ready in %.0f s; going on without "
                    "the split (a restarted one splits by itself after "
                    "CheckpointSpout.SPLIT_WAIT)", START_BOUND)
        return self._resume(now)

    def _rolling_back(self, now: float) -> bool:
        if self.split.restarted(self.master, self.awaiting):
            self.step = self._splitting  # it restarted before it answered: tell the new one
            return False
        if self.awaiting and now - self.split_asked < SWITCH_BOUND:
            return False
        return self._resume(now)

    def _stop(self) -> None:
        """A new number of containers: stop every container. A local one has exited when
        this returns; a remote one (a Spark task) says ``bye`` once its instances have."""
        sup = self.master.supervision
        self.byes = set(sup.sms) if self.master.remote else set()
        sup.stop()

    def on_bye(self, msg: wire.Bye) -> None:
        if msg.role == "sm":
            self.byes.discard(msg.id)

    def _stopping(self, now: float) -> bool:
        """Until every remote container said bye (at most ``SWITCH_BOUND``): the last
        reports of its instances must reach the old task table, not a new task of the
        same id, and the driver submits the job again only once its round has ended."""
        if self.byes and now - self.switched < SWITCH_BOUND:
            return False
        if self.byes:
            log.warning("rebalance: containers %s did not say they stopped in %.0f s; going "
                        "on", sorted(self.byes), SWITCH_BOUND)
        self._restart()
        self.step = self._restarting
        return False

    def _restart(self) -> None:
        """Move keyed state, then run on the new plan: the master starts the containers
        (local), or the driver submits the Spark job again with the new number of tasks,
        whose stream managers say hello to this master (remote)."""
        master = self.master
        master.settle()
        if _state.checkpointing(self.plan.config):
            self.moved = _split(master, self.plan, self.changes)
        master.faults.hold("restart")  # tests only (faults.py)
        master.replan(self.plan)
        master.supervision.paused = True  # activated in _resume, when every task is ready
        master.supervision.start_containers()

    def _restarting(self, now: float) -> bool:
        return self.master.supervision.state == "running" and self._resume(now)

    def _resume(self, now: float) -> bool:
        master = self.master
        master.supervision.holding = False
        if not self.was_paused:
            master.supervision.paused = False
            master.supervision.tell_ready(wire.Activate())
        event = self._event(now)
        master.observation.event("rebalanced", **event)
        master.send(self.ident, wire.Reply(id=self.id, ok=True,
                                           value={"plan": self.plan.to_data(), "event": event}))
        return True

    # -- the master's parts and the stream managers ---------------------------------------
    def _tell_sms(self, step: str) -> None:
        """One container after the other, in order. A master that dies between two
        "switch" leaves some switched and some not: the next one finishes the switch
        (adoption.decide)."""
        msg = wire.Replan(plan=self.plan.to_data(), step=step)
        for _, sm in sorted(self.master.supervision.sms.items()):
            self.master.send(sm["ident"], msg)
            if step == "switch":
                self.master.faults.after_first_switch()  # tests only (faults.py)

    def _forget_removed(self) -> None:
        """The removed tasks leave the task table (their last reports are ignored)."""
        for task in self.removed:
            self.master.tasks.remove(task)
            self.master.supervision.idents.pop(task, None)
            self.master.supervision.heard.pop(task, None)

    # -- what it reports ------------------------------------------------------------------
    def _event(self, now: float) -> dict:
        return {"seconds": round(now - self.started, 3),
                "paused_seconds": round(now - self.paused_at, 3),  # spouts emit nothing
                "start_seconds": round(self.paused_at - self.started, 3),
                "drain_seconds": round(self.drain_end - self.paused_at, 3),
                "switch_seconds": round(now - self.switched, 3),
                "in_place": self.in_place, "epoch": self.plan.epoch,
                "drained": self.drained, "parallelism": self.changes,
                "containers": self.plan.containers, "keys_moved": self.moved,
                "tasks_added": self.added if self.in_place else None,
                "tasks_removed": self.removed if self.in_place else None}

    def _committed(self) -> int | None:
        if not _state.checkpointing(self.master.plan.config):
            return None
        with contextlib.closing(self._store()) as store:
            committed = store.committed()
        return None if committed is None else committed[0]

    def _store(self):
        return _open_store(self.master, self.master.plan.config)


def adopt(master: Any, plan: PhysicalPlan) -> None:
    """The master runs on ``plan`` from now on, its containers kept: every part reads the
    new plan, and the added tasks get records (the removed ones keep theirs until the
    switch: they still run until then)."""
    master.plan = plan
    master.component_tasks = plan.component_tasks()
    for part in (master.supervision, master.observation, master.settings):
        part.plan = plan
    master.observation.component_tasks = master.settings.component_tasks = \
        plan.component_tasks()
    for t in plan.tasks:
        master.tasks.add(t)
        master.traces.store.components.setdefault(t.task, t.component)


def _fixed(master: Any, spouts: frozenset[str]) -> dict[str, str]:
    """Component -> why a rebalance may not change its parallelism: a spout whose class
    does not say it can, or a WindowedBolt under checkpoints whose open windows cannot be
    split (``Ready.fixed``, ``runtime.windows.unsplittable``); or a spout
    none of whose tasks said either way since this master ran (it adopted running
    containers, say): refused rather than guessed."""
    said = master.fixed
    unknown = {c: "its tasks have not said whether its parallelism can change (they do "
                  "when they start); ask again once one has restarted" for c in spouts
               if c not in said}
    return {**unknown, **{c: why for c, why in said.items() if why is not None}}


def _spouts(tasks, kinds: dict[str, str], topology: str, asked: Any) -> frozenset[str]:
    """The spout components, as their tasks reported (remembered in ``kinds``, which
    outlives a rebalance's new task table); a component asked for whose kind is not known
    yet (no report since it started) is refused rather than guessed."""
    kinds.update((r["component"], r["kind"]) for r in tasks.values() if r["kind"] is not None)
    for comp in asked if isinstance(asked, dict) else ():
        if comp not in kinds and any(r["component"] == comp for r in tasks.values()):
            raise ValueError(f"rebalance of {topology!r}: component {comp!r}: its tasks have "
                             "not reported yet; ask again once they run")
    return frozenset(c for c, kind in kinds.items() if kind == "spout")


# -- a rebalance its master died in (runtime/processes/adoption.py) ---------------------------
def split_counts(master: Any, changed: dict[str, int]) -> dict[str, int]:
    """Under checkpoints, the parallelism in the adopted plan of the components a cut-short
    rebalance changed (``changed``: what it asked); else (or none changed) empty. Whether
    the dead master split the keyed state for its new plan is not known (it may have died
    just before or just after): splitting the committed state again over the plan that runs
    is right either way, since a split for the counts it has is made again the same."""
    if not changed or not _state.checkpointing(master.plan.config):
        return {}
    now = master.plan.parallelism()
    return {c: now[c] for c in changed if c in now}


def split_stopped(master: Any, counts: dict[str, int]) -> dict | None:
    """Nothing runs (every container was stopped for a new number of containers): the
    master itself splits the committed keyed state over the plan it starts, as
    :meth:`Rebalance._restart` does. Returns the keys moved (None: nothing committed)."""
    if not _state.checkpointing(master.plan.config) or master.carry.cut_short() is None:
        return None
    return _split(master, master.plan, counts)  # no counts: the commit names the plan


def _split(master: Any, plan: PhysicalPlan, counts: dict[str, int]) -> dict | None:
    """Split the committed keyed state of ``counts``' components over their new numbers
    of tasks in ``plan`` (every task stopped), by its store and key groups: the keys
    moved, or None when nothing was committed."""
    config = plan.config
    with contextlib.closing(_open_store(master, config)) as store:
        return _state.repartition(store, counts, config.get(MAX_PARALLELISMS),
                                  plan_epoch=plan.epoch)


def _open_store(master: Any, config: dict):
    return _state.open_store(str(config[STATE_STORE]), master.boot_run_dir)
