"""The master's traces (issue 20): it files the trace records instances report, notes
the restarts that lose copies in transit, and answers ``running.traces()`` and
``running.lineage()`` from its :class:`~runtime.observe.tracestore.TraceStore`."""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime import wire
from runtime.model.constants import MESSAGE_TIMEOUT, TRACE_STORE
from runtime.model.plan import PhysicalPlan
from runtime.observe.traces import TRACE_STATUSES
from runtime.observe.tracestore import TraceStore, trace_to_plain

from .tasks import TaskTable


class MasterTraces:
    """Owns the store; ``current(task, incarnation)`` says whether a report is from a
    live incarnation (a late one from a dead incarnation is filed all the same: what it
    held is what "who held it" is about)."""

    def __init__(self, plan: PhysicalPlan, tasks: TaskTable,
                 wall: Callable[[], float] = time.time) -> None:
        self.tasks, self.wall = tasks, wall
        self.store = TraceStore({t.task: t.component for t in plan.tasks},
                                capacity=int(plan.config[TRACE_STORE]),
                                timeout=float(plan.config[MESSAGE_TIMEOUT]))

    def on_report(self, ident: bytes, msg: wire.TraceReport) -> None:
        if self.tasks.get(msg.task) is not None:
            self.store.add(msg.task, msg.incarnation, msg.records, self.wall())

    def restarted(self, task: int) -> None:
        """``task`` has a new incarnation: copies sent to it before now are lost."""
        self.store.restarted(task, self.wall())

    def answer(self, msg: wire.AskTraces) -> list[dict] | dict | None:
        """The newest traces as plain data, or (``by_msg``) the one of ``msg_id``."""
        now = self.wall()
        if msg.by_msg:
            trace = self.store.lineage(msg.msg_id, now=now)
            return None if trace is None else trace_to_plain(trace)
        if msg.status is not None and msg.status not in TRACE_STATUSES:
            raise ValueError(f"status must be one of {TRACE_STATUSES} or None, "
                             f"not {msg.status!r}")
        return [trace_to_plain(t) for t in self.store.traces(msg.status, msg.limit, now=now)]

    def counts(self) -> dict:
        """For the status: traces kept, dropped (oldest first), malformed records."""
        store = self.store
        return {"traces": len(store), "traces_dropped": store.dropped,
                "trace_records_malformed": store.malformed}
