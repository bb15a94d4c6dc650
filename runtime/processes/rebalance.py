"""The topology master's side of a rebalance (issue 22; docs/internals/rebalance.md).

This first slice restarts the containers on the new plan, keeping what the notebook holds
on to: the master (its endpoint and secret), the run directory, the handle, the events,
the exceptions and the live settings. In steps, one tick of the master at a time:

1. **pause**: every spout is deactivated (as ``running.pause()`` does);
2. **drain**, at most ``DRAIN_BOUND`` seconds: under acking until every spout reports no
   pending tuple; with checkpoints until a checkpoint newer than the pause commits;
   otherwise until the stream managers hold no frame. Past the bound it goes on: what was
   in flight is replayed (at least once: the spouts' committed offsets; checkpoints: the
   rollback);
3. **switch**: every container is stopped, a StatefulBolt's committed state is split over
   its new tasks through a new checkpoint (``runtime.state.repartition``), and the
   containers start on the new plan (new stream managers, new routing, from the start);
4. **resume**: once every new instance is ready the spouts are activated (unless the
   topology was paused before), a ``rebalanced`` event is recorded and the client's
   question answered with the new plan.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from runtime import state as _state
from runtime import wire
from runtime.model.constants import ACKERS, STATE_STORE
from runtime.model.plan import check_rebalance

log = logging.getLogger("tupleflow.rebalance")

DRAIN_BOUND = 5.0  # seconds the spouts wait, paused, for tuples in flight to finish


class Rebalance:
    """One rebalance in progress (at most one: :meth:`TopologyMaster.on_rebalance` guards):
    the client waiting for it, the new plan, the step it is at and when each began."""

    def __init__(self, master: Any, ident: bytes, msg: wire.AskRebalance) -> None:
        self.master, self.ident, self.id = master, ident, msg.id
        old = master.plan
        if master.remote:
            raise ValueError(f"rebalance of {old.topology!r}: not on the Spark scheduler yet")
        spouts = _spouts(master.tasks, master.kinds, old.topology, msg.parallelism)
        check_rebalance(old, msg.parallelism, msg.containers, spouts)
        self.changes = {c: n for c, n in msg.parallelism.items() if old.parallelism()[c] != n}
        self.plan = old.rebalanced(msg.parallelism, msg.containers)
        self.started = master.clock()
        self.wall = time.time()
        self.was_paused = master.supervision.paused
        self.checkpoint = self._committed()
        self.step: Callable[[float], bool] = self._drain
        self.drained: bool | None = None
        self.moved: dict | None = None
        self.switched = self.drain_end = self.started
        master.supervision.tell_ready(wire.Deactivate())

    # -- the steps, each called on every tick until it says it is done ------------------------
    def tick(self, now: float) -> bool:
        """Advance; True once the rebalance is over (the client has been answered)."""
        return self.step(now)

    def _drain(self, now: float) -> bool:
        done = self._drained()
        if done or now - self.started > DRAIN_BOUND:
            self.drained, self.drain_end = done, now
            self._switch()
            self.step = self._resume
        return False

    def _drained(self) -> bool:
        config, records = self.master.plan.config, list(self.master.tasks.values())
        fresh = [r for r in records if (r.get("reported") or 0) > self.wall]
        if len(fresh) < len(records):
            return False  # a report from before the pause says nothing about now
        if _state.checkpointing(config):
            return (self._committed() or 0) > (self.checkpoint or 0)
        if int(config.get(ACKERS, 0)):
            return all(not r.get("pending") for r in records if r["kind"] == "spout")
        return all(not r.get("sm_queued_frames") for r in records)

    def _switch(self) -> None:
        """Stop every container, move keyed state, start the containers on the new plan."""
        master = self.master
        master.supervision.stop()
        master.settle()
        if _state.checkpointing(self.plan.config):
            with contextlib.closing(self._store()) as store:
                self.moved = _state.repartition(store, self.changes)
        master.replan(self.plan)
        master.supervision.paused = True  # activated in _resume, when every task is ready
        master.supervision.start_containers()
        self.switched = master.clock()

    def _resume(self, now: float) -> bool:
        master = self.master
        if master.supervision.state != "running":
            return False
        if not self.was_paused:
            master.supervision.paused = False
            master.supervision.tell_ready(wire.Activate())
        event = self._event(now)
        master.observation.event("rebalanced", **event)
        master.send(self.ident, wire.Reply(id=self.id, ok=True,
                                           value={"plan": self.plan.to_data(), "event": event}))
        return True

    # -- what it reports ------------------------------------------------------------------
    def _event(self, now: float) -> dict:
        return {"seconds": round(now - self.started, 3),
                "paused_seconds": round(now - self.started, 3),  # spouts emit nothing
                "drain_seconds": round(self.drain_end - self.started, 3),
                "restart_seconds": round(now - self.switched, 3),
                "drained": self.drained, "parallelism": self.changes,
                "containers": self.plan.containers, "keys_moved": self.moved}

    def _committed(self) -> int | None:
        if not _state.checkpointing(self.master.plan.config):
            return None
        with contextlib.closing(self._store()) as store:
            committed = store.committed()
        return None if committed is None else committed[0]

    def _store(self):
        return _state.open_store(str(self.master.plan.config[STATE_STORE]),
                                 self.master.boot_run_dir)


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
