"""The checkpoint spout: the ``__checkpoint`` system component (one task), which drives
checkpoints and rollbacks through the topology (docs/internals/checkpoints.md).

Every ``checkpoint_interval`` seconds it draws a new checkpoint id from the store and sends
``PREPARE`` to every spout task; once every spout and bolt task has said ``PREPARED`` for
that id (its part saved in the store), it commits the id in the store: one write. When
it starts, and whenever a restarted task says ``NEW``, it draws a new epoch and sends every
task ``ROLLBACK`` to the last committed id; a checkpoint in progress is abandoned.

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
                            {c: spec.max_parallelism for c, spec in self.specs.items()})
        self.rollback("rebalanced")
        return moved

    def start(self) -> None:
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
        for task in self.tasks:
            self.send(*p.frame(p.ROLLBACK, self.epoch, cid, task, self.task))
        self.next_at = self.monotonic() + self.interval

    def on_frame(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        if h.kind != wire.CHECKPOINT:
            raise wire.WireError(f"frame kind {h.kind} is not for the checkpoint spout")
        op, epoch, cid = p.parse(body)
        if op == p.NEW:
            return self.rollback(f"task {h.src} restarted")
        if op == p.PREPARED and epoch == self.epoch and cid == self.current:
            self.pending.discard(h.src)
            if not self.pending:
                self.commit()

    def commit(self) -> None:
        now = self.monotonic()
        cid, took = self.current, now - self.started
        self.store.commit(cid, {"epoch": self.epoch, "duration": took, "time": self.wall()})
        self.last, self.committed = (cid, took, self.wall()), self.committed + 1
        for task in self.spouts:  # a spout that cannot rewind acks what it holds now
            self.send(*p.frame(p.COMMITTED, self.epoch, cid, task, self.task))
        self.current = None
        self.next_at = max(now, self.started + self.interval)

    def on_timer(self, now: float) -> float:
        if self.current is None and now >= self.next_at:
            self.current, self.started = self.store.next("checkpoint"), now
            self.pending = set(self.tasks)
            for task in self.spouts:
                self.send(*p.frame(p.PREPARE, self.epoch, self.current, task, self.task))
        return now + min(0.05, self.interval) if self.current is not None else self.next_at

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
