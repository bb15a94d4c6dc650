"""The checkpoint spout: the ``__checkpoint`` system component (one task), which drives
checkpoints and rollbacks through the topology (docs/internals/checkpoints.md).

Every ``checkpoint_interval`` seconds it draws a new checkpoint id from the store and sends
``PREPARE`` to every spout task; once every spout and bolt task has said ``PREPARED`` for
that id (its part saved in the store), it commits the id in the store: one write. When
it starts, and whenever a restarted task says ``NEW``, it draws a new epoch and sends every
task ``ROLLBACK`` to the last committed id; a checkpoint in progress is abandoned.

Between a rebalance's switch and its split (:meth:`CheckpointSpout.rebalance`) that
rollback would restore the old split of the keyed state onto the new routing. So a
``NEW`` from a task that started on a newer plan than this task's, and this task's own
start on a newer plan than the committed checkpoint's, make it wait for the split
(``awaiting_split``): no checkpoint, no rollback; the split's rollback takes every task
back, the restarted one included (docs/internals/rebalance.md).

It is driven like any executor (:class:`runtime.engine.driven.TaskExecutor`); what only
spouts and bolts do it does as nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from runtime import wire
from runtime.acking._acker import SystemTask
from runtime.model.constants import CHECKPOINT_INTERVAL, CHECKPOINTER
from runtime.model.plan import PhysicalPlan
from runtime.observe.stats import InstanceStats

from . import _protocol as p
from ._rebalance import repartition

log = logging.getLogger("tupleflow.state")

# seconds a checkpoint task started on a newer plan than the committed checkpoint's waits
# for the master's split (its Switch); then it splits over its own plan. Past the
# master's bounds for a switch (rebalance.SWITCH_BOUND) and an added task's start.
SPLIT_WAIT = 90.0

Send = Callable[[bytes, bytes], None]


class CheckpointSpout(SystemTask):
    """The one checkpoint task: its epoch, the checkpoint in progress, the last committed."""

    kind = "checkpoint"

    def __init__(self, plan: PhysicalPlan, specs: Mapping, task: int, send: Send, store, *,
                 monotonic=time.monotonic, wall=time.time) -> None:
        self.plan, self.task, self.send, self.store = plan, task, send, store
        self.info = plan.task(task)
        self.config = dict(plan.config)
        self.interval = float(self.config[CHECKPOINT_INTERVAL])
        self.monotonic, self.wall = monotonic, wall
        self.specs = specs
        self._targets(plan)
        self.epoch = 0
        self.current: int | None = None  # checkpoint id in progress
        self.pending: set[int] = set()  # tasks yet to say PREPARED for it
        self.started = self.next_at = 0.0
        self.last: tuple[int, float, float] | None = None  # id, duration s, wall time
        self.committed = self.rollbacks = self.errors = self.dropped = 0
        self.busy_seconds = 0.0
        # a switch began and the split has not come: no checkpoint, a NEW is no rollback;
        # until the monotonic time ``split_by``, then it splits over its own plan (when
        # it started on a plan newer than the committed checkpoint's: ``split_here``) or
        # rolls back as before (its plan is the old one: a NEW said a newer one began)
        self.awaiting_split = self.split_here = False
        self.split_by: float | None = None

    def _targets(self, plan: PhysicalPlan) -> None:
        """The spout tasks it prepares, and every task it rolls back and awaits."""
        tasks, specs = plan.component_tasks(), self.specs
        self.spouts = tuple(t for c, s in specs.items() if s.kind == "spout" for t in tasks[c])
        self.tasks = tuple(sorted(t for c in specs for t in tasks[c]))

    def on_error(self, where: str, err: BaseException) -> None:
        log.error("%s: %s", where, err)

    def retarget(self, plan: PhysicalPlan) -> None:
        """A rebalance switched the topology to ``plan``: the checkpoint under way is
        abandoned (it was prepared on the old tasks); :meth:`rebalance` follows once
        every task has switched."""
        self.plan = plan
        self._targets(plan)
        self.current, self.pending = None, set()

    def rebalance(self, counts: Mapping[str, int]) -> dict | None:
        """Every task runs on the new plan: split the committed state of the rebalanced
        components over their new tasks in a new checkpoint (:func:`repartition`), and
        roll every task back to it. Returns the keys moved per stateful component."""
        self.current, self.pending = None, set()
        moved = repartition(self.store, counts,
                            {c: spec.max_parallelism for c, spec in self.specs.items()},
                            plan_epoch=self.plan.epoch)
        self.rollback("rebalanced")
        return moved

    def start(self) -> None:
        committed = self.store.committed()
        made_for = committed[1].get("plan") if committed else None
        if made_for is not None and made_for < self.plan.epoch:
            # restarted between a switch and its split: the committed keyed state is split
            # for an older plan; the master tells this task to split once all switched
            log.info("started on plan %d, checkpoint %d is of plan %d: awaiting the split",
                     self.plan.epoch, committed[0], made_for)
            self.awaiting_split = self.split_here = True
            self.split_by = self.monotonic() + SPLIT_WAIT
            return
        self.rollback("started")

    def stop(self) -> None:
        pass

    def flush(self) -> None:
        pass  # it sends each message at once

    # -- the protocol ---------------------------------------------------------------------
    def rollback(self, why: str) -> None:
        """A new epoch: every task goes back to the last committed checkpoint."""
        self.epoch = self.store.next("epoch")
        committed = self.store.committed()
        cid = committed[0] if committed else None
        log.info("epoch %d: rollback to checkpoint %s (%s)", self.epoch, cid, why)
        self.rollbacks += 1
        self.current, self.pending = None, set()
        self.awaiting_split = self.split_here = False
        self.split_by = None
        for task in self.tasks:
            self.send(*p.frame(p.ROLLBACK, self.epoch, cid, task, self.task))
        self.next_at = self.monotonic() + self.interval

    def on_frame(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        if h.kind != wire.CHECKPOINT:
            raise wire.WireError(f"frame kind {h.kind} is not for the checkpoint spout")
        op, epoch, cid = p.parse(body)
        if op == p.NEW and (self.awaiting_split or (cid or 0) > self.plan.epoch):
            return self._await_split(h.src, cid)
        if op == p.NEW:
            return self.rollback(f"task {h.src} restarted")
        if op == p.PREPARED and epoch == self.epoch and cid == self.current:
            self.pending.discard(h.src)
            if not self.pending:
                self.commit()

    def _await_split(self, task: int, plan_epoch: int | None) -> None:
        """Task ``task`` restarted on plan ``plan_epoch`` while a switch is under way: a
        rollback to the committed checkpoint would put the old split of the keyed state on
        the new routing. The restarted task does nothing until its first epoch (a spout
        emits nothing, a bolt drops its input), and the split's rollback, which takes every
        task back to the split checkpoint, gives it one. No checkpoint meanwhile; if no
        split comes within ``SPLIT_WAIT`` (the rebalance went on without this task), a
        rollback as before, so that checkpoints never stop for good."""
        log.info("task %d restarted on plan %s during a switch: awaiting the split", task,
                 plan_epoch)
        self.awaiting_split = True
        if self.split_by is None:
            self.split_by = self.monotonic() + SPLIT_WAIT
        self.current, self.pending = None, set()

    def commit(self) -> None:
        now = self.monotonic()
        cid, took = self.current, now - self.started
        self.store.commit(cid, {"epoch": self.epoch, "duration": took, "time": self.wall(),
                                "plan": self.plan.epoch})
        self.last, self.committed = (cid, took, self.wall()), self.committed + 1
        for task in self.spouts:  # a spout that cannot rewind acks what it holds now
            self.send(*p.frame(p.COMMITTED, self.epoch, cid, task, self.task))
        self.current = None
        self.next_at = max(now, self.started + self.interval)

    def on_timer(self, now: float) -> float:
        if self.split_by is not None and now >= self.split_by and self.split_here:
            self._split_unasked()
        elif self.split_by is not None and now >= self.split_by:
            self.rollback(f"no split came in {SPLIT_WAIT:.0f} s")
        if self.awaiting_split:
            return now + min(1.0, self.interval)
        if self.current is None and now >= self.next_at:
            self.current, self.started = self.store.next("checkpoint"), now
            self.pending = set(self.tasks)
            for task in self.spouts:
                self.send(*p.frame(p.PREPARE, self.epoch, self.current, task, self.task))
        return now + min(0.05, self.interval) if self.current is not None else self.next_at

    def _split_unasked(self) -> None:
        """Started on a newer plan than the committed checkpoint's and told nothing for
        ``SPLIT_WAIT``: the master's bounds for the switch passed long ago (or it never
        saw this task ready to tell), so split every component over this plan's tasks
        (a component already split so is dealt again the same) and roll back."""
        log.warning("no split asked in %.0f s on plan %d: splitting over it", SPLIT_WAIT,
                    self.plan.epoch)
        self.rebalance({c: n for c, n in self.plan.parallelism().items() if c in self.specs
                        and c != CHECKPOINTER})

    # -- statistics -----------------------------------------------------------------------
    def report(self) -> dict:
        last = self.last or (None, None, None)
        return {"component": CHECKPOINTER, "task": self.task, "kind": self.kind,
                "container": self.info.container, "emitted": 0, "transferred": 0,
                "executed": self.committed, "dropped": self.dropped, "errors": self.errors,
                "busy_seconds": self.busy_seconds, "checkpoint": {
                    "id": last[0], "seconds": last[1], "time": last[2],
                    "committed": self.committed, "rollbacks": self.rollbacks,
                    "epoch": self.epoch}}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.report(), "state": "running"})
