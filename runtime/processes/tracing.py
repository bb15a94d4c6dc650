"""The master's traces (issue 20): it files the trace records instances report, notes
the restarts that lose copies in transit, and answers ``running.traces()`` and
``running.lineage()`` from its :class:`~runtime.observe.tracestore.TraceStore`.

It may die (issue 23): every :data:`SAVE_EVERY` seconds while new records come, it keeps
the newest :data:`KEEP` finished traces in ``run_dir/master/`` (:mod:`~runtime.processes.
carry`), as its store filed them (``TraceStore.kept``: nothing assembled); a master that
replaces it files them in a store of their own and answers them after the ones it
collected itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from runtime import wire
from runtime.model.constants import MESSAGE_TIMEOUT, TRACE_STORE
from runtime.model.plan import PhysicalPlan
from runtime.observe.traces import TRACE_STATUSES, trace_to_plain
from runtime.observe.tracestore import TraceStore

from .tasks import TaskTable

# finished traces kept on disk for the next master: a bounded file, ~0.5 MB acking off and
# ~1 MB on at the sentence topology (each tree's part of a run's frame holds its body)
KEEP = 200
SAVE_EVERY = 2.0  # seconds between two saves, and only when new records came


class MasterTraces:
    """Owns the store, the traces carried over from the master before (a store of their
    own, finished, as that master filed them) and when they were last saved;
    ``current(task, incarnation)`` says whether a report is from a live incarnation (a
    late one from a dead incarnation is filed all the same: what it held is what "who
    held it" is about)."""

    def __init__(self, plan: PhysicalPlan, tasks: TaskTable,
                 wall: Callable[[], float] = time.time) -> None:
        self.tasks, self.wall = tasks, wall
        components = {t.task: t.component for t in plan.tasks}
        timeout = float(plan.config[MESSAGE_TIMEOUT])
        self.store = TraceStore(components, capacity=int(plan.config[TRACE_STORE]),
                                timeout=timeout)
        self.carried = TraceStore(components, capacity=KEEP, timeout=timeout)
        self.filed = self.saved = 0  # reports filed, and how many when last saved
        self.next_save = 0.0

    def on_report(self, ident: bytes, msg: wire.TraceReport) -> None:
        if self.tasks.get(msg.task) is not None:
            self.store.add(msg.task, msg.incarnation, msg.records, self.wall())
            self.filed += 1

    def restarted(self, task: int) -> None:
        """``task`` has a new incarnation: copies sent to it before now are lost."""
        self.store.restarted(task, self.wall())

    def answer(self, msg: wire.AskTraces) -> list[dict] | dict | None:
        """The newest traces as plain data, or (``by_msg``) the one of ``msg_id``; the
        ones carried over from the master before come after this master's own."""
        now = self.wall()
        if msg.by_msg:
            trace = self.store.lineage(msg.msg_id, now=now)
            if trace is None:
                trace = self.carried.lineage(msg.msg_id, now=now)
            return None if trace is None else trace_to_plain(trace)
        if msg.status is not None and msg.status not in TRACE_STATUSES:
            raise ValueError(f"status must be one of {TRACE_STATUSES} or None, "
                             f"not {msg.status!r}")
        own = self.store.traces(msg.status, msg.limit, now=now)
        older = _older(own, self.carried.traces(msg.status, msg.limit, now=now), _trace_msg)
        return [trace_to_plain(t) for t in (own + older)[:msg.limit]]

    # -- for the master that may replace this one ----------------------------------------
    def keep(self, carry: Any, now: float) -> None:
        """Save the newest finished traces, as filed (``carry`` a :class:`~runtime.
        processes.carry.Carry`; ``now`` the master's clock), if records came since the
        last save and :data:`SAVE_EVERY` has passed."""
        if self.filed == self.saved or now < self.next_save:
            return
        self.saved, self.next_save = self.filed, now + SAVE_EVERY
        wall = self.wall()
        own = self.store.kept(KEEP, now=wall)
        older = self.carried.kept(KEEP, now=wall) if len(self.carried) else []
        carry.save_traces((own + _older(own, older, _tree_msg))[:KEEP])

    def carry_over(self, kept: list) -> None:
        """What the master before kept (newest first): each checked (one that is not a
        kept tree is left out)."""
        self.carried = TraceStore(self.carried.components, capacity=KEEP,
                                  timeout=self.carried.timeout)
        self.carried.refile(kept[:KEEP])

    def counts(self) -> dict:
        """For the status: traces kept, dropped (oldest first), malformed records,
        records of a trace dropped before they came, and traces carried over from the
        master before."""
        store = self.store
        return {"traces": len(store), "traces_dropped": store.dropped,
                "trace_records_malformed": store.malformed,
                "trace_records_late": store.late,
                "traces_carried": len(self.carried)}


def _older(own: list, carried: list, msg_id: Callable[[Any], Any]) -> list:
    """The carried traces (or kept trees) whose spout tuple, ``msg_id(t)``, has no newer
    trace in ``own``."""
    if not carried:
        return []
    mine = {_key(msg_id(t)) for t in own}
    return [t for t in carried if _key(msg_id(t)) not in mine]


def _trace_msg(trace: Any) -> Any:
    return trace.msg_id


def _tree_msg(tree: list) -> Any:
    return tree[0][0]  # (its start's msg_id: TraceStore.kept)


def _key(msg_id: Any) -> Any:
    """A msg_id as a set member (msgpack made its tuples lists; a map is taken by its
    text)."""
    if isinstance(msg_id, list | tuple):
        return tuple(_key(v) for v in msg_id)
    return repr(msg_id) if isinstance(msg_id, dict) else msg_id
