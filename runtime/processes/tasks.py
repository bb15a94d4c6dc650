"""What the topology master knows of each task, as the client's ``statistics()`` shows it.

One record per task of the plan: its identity (component, container), its life
(incarnation, readiness, restarts, state) as supervision decides it, and the latest
report of its current incarnation as observation receives it. Each change has one
method here, so that every field has one writer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from runtime.model.plan import PhysicalPlan


class TaskTable:
    """Owns the per-task records the master answers ``statistics`` with."""

    def __init__(self, plan: PhysicalPlan) -> None:
        self.records: dict[int, dict[str, Any]] = {t.task: _blank(t) for t in plan.tasks}

    def __getitem__(self, task: int) -> dict[str, Any]:
        return self.records[task]

    def __iter__(self) -> Iterator[int]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def get(self, task: Any) -> dict[str, Any] | None:
        return self.records.get(task)

    def items(self):
        return self.records.items()

    def values(self):
        return self.records.values()

    # -- life (written by supervision) ----------------------------------------------------
    def welcomed(self, task: int, incarnation: int, pid: int) -> None:
        """An incarnation said hello: it is not ready until it says so."""
        if incarnation > self.records[task]["incarnation"]:  # it overtook the restart
            self._forget_report(task)
        self.records[task].update(incarnation=incarnation, pid=pid, ready=False)

    def made_ready(self, task: int) -> None:
        self.records[task].update(ready=True, state="running")

    def restarted(self, task: int, incarnation: int) -> bool:
        """Count a restart; True if ``incarnation`` is newer than the one known (an
        incarnation never moves backwards)."""
        record = self.records[task]
        record["restarts"] += 1
        if incarnation <= record["incarnation"]:
            return False
        self._forget_report(task)
        record.update(incarnation=incarnation, ready=False, state="restarting")
        return True

    def _forget_report(self, task: int) -> None:
        """A new incarnation: the dead one's report goes, so that no record pairs the new
        incarnation with the old one's numbers (``statistics()`` showed a restarted spout
        running, incarnation 1, with the dead one's cap and pending until its first
        report: a test read that as the new one's). What the task is stays."""
        record = self.records[task]
        for key in [k for k in record if k not in _LIFE]:
            del record[key]

    def condemned(self, task: int) -> None:
        """Presumed hung: no longer ready, and being restarted."""
        self.records[task].update(ready=False, state="restarting")

    # -- a rebalance in place (written by runtime/processes/rebalance.py) --------------------
    def add(self, info) -> None:
        """A task the new plan adds: starting, as at submit."""
        self.records.setdefault(info.task, _blank(info))

    def remove(self, task: int) -> None:
        """A task the rebalance removed and stopped: it leaves the statistics."""
        self.records.pop(task, None)

    # -- reports (written by observation) --------------------------------------------------
    def reported(self, task: int, record: dict) -> None:
        """The latest statistics of the current incarnation (the master keeps the
        restart count: a restarted container's stream manager counts afresh)."""
        self.records[task].update({k: v for k, v in record.items() if k != "restarts"})

    def queued(self, task: int, nbytes: int, frames: int) -> None:
        """What its stream manager holds for it, in bytes and frames."""
        self.records[task].update(sm_queued_bytes=nbytes, sm_queued_frames=frames)

    def view(self) -> list[dict]:
        """Every record as the client sees it."""
        return [{k: v for k, v in t.items() if k != "ready"} for t in self.records.values()]

    def kinds(self) -> dict[int, Any]:
        """Task -> its reported kind (None until it reports)."""
        return {t: info["kind"] for t, info in self.records.items()}


# what a task's record says of the task and its life, kept across its incarnations (every
# other field is its current incarnation's report, or its stream manager's queue)
_LIFE = frozenset({"component", "task", "container", "kind", "state", "incarnation",
                   "restarts", "ready", "master_restarts", "pid", "sm_queued_bytes",
                   "sm_queued_frames"})


def _blank(t) -> dict[str, Any]:
    return {"component": t.component, "task": t.task, "container": t.container,
            "kind": None, "state": "starting", "incarnation": 0, "restarts": 0,
            "ready": False, "master_restarts": 0}
