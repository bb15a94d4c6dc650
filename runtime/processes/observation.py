"""The topology master's observation: what the instances and stream managers report.

It keeps the statistics of each task's current incarnation (in the :class:`TaskTable`),
the metrics over windows, the grouped exceptions, the events, the causes of
backpressure, the stream managers' queue figures and the tuples the taps caught; it
warns of replay storms and records the tuner's turns. It answers the client's questions
about all of these. It starts nothing and never decides a restart.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from runtime import wire
from runtime.model.constants import MESSAGE_TIMEOUT, TAP_SECONDS
from runtime.model.controls import check_keep, check_tap
from runtime.model.plan import PhysicalPlan
from runtime.observe import health as _health
from runtime.observe import series as _series
from runtime.observe.ackers import acker_state
from runtime.observe.exceptions import ExceptionLog

from .tasks import TaskTable

log = logging.getLogger("tupleflow.tmaster")

MAX_EXCEPTIONS = 1000  # distinct exceptions kept (the one seen longest ago is dropped)
MAX_EVENTS = 1000  # events kept


class Observation:
    """Owns what the master has been told: metrics, exceptions, events, spout health
    (replay-storm episodes, tuner turns), backpressure causes, container queue figures,
    and the taps (which are on, until when) with the samples they caught."""

    def __init__(self, plan: PhysicalPlan, tasks: TaskTable,
                 clock: Callable[[], float]) -> None:
        self.plan, self.tasks, self.clock = plan, tasks, clock
        self.component_tasks = plan.component_tasks()
        self.exceptions = ExceptionLog(MAX_EXCEPTIONS)  # grouped: one record per error
        self.events: deque[dict] = deque(maxlen=MAX_EVENTS)
        self.metrics = _series.MetricsStore()  # counters over windows, fed by the reports
        self.tuner_turns: dict[int, int] = {}  # spout task -> tuner turns seen
        self.storms: dict[int, bool] = {}  # spout task -> in a replay-storm episode
        self.ack_base: dict[int, tuple[float, int]] = {}  # spout task -> (clock, acked) first
        self.backpressure: dict[str, dict] = {}  # causes now over the high water mark
        self.container_stats: dict[int, dict] = {}  # container -> its latest sm_stats
        self.taps: dict[tuple[str, str], float] = {}  # (component, stream) -> on until (clock)
        self.samples: dict[tuple[int, str], list[dict]] = {}  # (task, stream) -> latest
        # keeps each event and exception report for a master that may replace this one
        # (a runtime.processes.carry.Carry; None: kept nowhere)
        self.journal: Any = None

    def event(self, kind: str, **fields) -> None:
        record = {"kind": kind, "time": time.time(), **fields}
        self.events.append(record)
        if self.journal is not None:
            self.journal.event(record)
        log.info("event %s %s", kind, fields)

    def forget(self, task_id: int) -> None:
        """A new incarnation: its tuner and its ack count start afresh."""
        self.tuner_turns.pop(task_id, None)
        self.ack_base.pop(task_id, None)

    # -- reports (the master has checked that they come from a current incarnation) ---------
    def on_stats(self, msg: wire.Stats) -> None:
        self.tasks.reported(msg.task, msg.record)
        self.metrics.add(msg.task, msg.incarnation, msg.record, self.clock())
        task = self.tasks[msg.task]
        if task["kind"] == "spout":
            self._watch_spout(task, msg.record)

    def _watch_spout(self, task: dict, record: dict) -> None:
        self._watch_storm(task, record)
        turn = _health.tuner_turn(self.tuner_turns.get(task["task"], 0), record)
        if turn is not None:
            self.tuner_turns[task["task"]] = turn["turns"]
            self.event("tuner", task=task["task"], component=task["component"], **turn)

    def _watch_storm(self, task: dict, record: dict) -> None:
        """Warn once per episode of a spout component: from when one of its tasks reaches
        the replay-storm threshold until all of them have fallen well below it."""
        t, component = task["task"], task["component"]
        timeout, now = self.plan.config.get(MESSAGE_TIMEOUT), self.clock()
        was = any(self.storms.get(x, False) for x in self.component_tasks[component])
        acked = record.get("acked")
        base = self.ack_base.setdefault(t, (now, acked if isinstance(acked, int) else 0))
        rate = _health.ack_rate(base, now, acked)
        ratio = _health.replay_ratio(record, timeout, rate)
        self.storms[t] = _health.storming(self.storms.get(t, False), ratio)
        if self.storms[t] and not was:
            pending = record["max_spout_pending"]
            self.event("replay_storm_warning", task=t, component=component,
                       ratio=round(ratio, 3), max_spout_pending=pending,
                       acks_per_s=round(rate, 1), wait_s=round(pending / rate, 2),
                       message_timeout=timeout,
                       message=_health.storm_message(component, record, timeout, rate))

    def on_samples(self, msg: wire.Samples) -> None:
        """An instance's tapped tuples; kept only while the master's tap is on."""
        component = self.tasks[msg.task]["component"]
        if self.taps.get((component, msg.stream), -1.0) >= self.clock():
            self.samples[(msg.task, msg.stream)] = msg.samples

    def on_exception(self, ident: bytes, msg: wire.ExceptionReport) -> None:
        info = self.plan.task(msg.task)
        report = {"component": info.component, "task": msg.task,
                  "incarnation": msg.incarnation, "error": msg.error,
                  "traceback": msg.traceback, "time": msg.time, "fatal": msg.fatal}
        self.exceptions.add(report)
        if self.journal is not None:
            self.journal.exception(report)

    def on_backpressure(self, ident: bytes, msg: wire.BackpressureChange) -> None:
        """A stream manager's destination crossed a water mark: the root cause, on or off."""
        cause = msg.cause
        component = self.plan.task(cause).component if isinstance(cause, int) else None
        if msg.on:
            self.backpressure[str(cause)] = {"cause": cause, "component": component,
                                            "container": msg.container, "since": time.time()}
        else:
            self.backpressure.pop(str(cause), None)
        self.event("backpressure_on" if msg.on else "backpressure_off", cause=cause,
                   component=component, container=msg.container)

    def on_sm_stats(self, ident: bytes, msg: wire.SmStats) -> None:
        """A stream manager's queues and time in backpressure; each local task gets the
        bytes and frames queued towards it (``sm_queued_bytes``, ``sm_queued_frames``)."""
        record = msg.record
        self.container_stats[msg.container] = record
        for t, nbytes in record["queued_bytes"].items():
            if self.tasks.get(int(t)) is not None:
                self.tasks.queued(int(t), nbytes, record["queued_frames"].get(t, 0))

    # -- answers to the client ------------------------------------------------------------
    def answer_statistics(self, msg: wire.AskStatistics) -> list[dict]:
        return self.tasks.view()

    def answer_metrics(self, msg: wire.AskMetrics) -> dict:
        """Per component and per instance over ``msg.window`` (see
        :meth:`RunningTopology.metrics`); ValueError for an unknown window."""
        return self.metrics.answer(self.tasks.records, msg.window, self.clock(),
                                   wall=time.time(), containers=self.container_stats)

    def answer_exceptions(self, msg: wire.AskExceptions) -> list[dict]:
        return self.exceptions.records()

    def answer_acker_state(self, msg: wire.AskAckerState) -> list[dict]:
        return acker_state(self.tasks.values())

    def answer_events(self, msg: wire.AskEvents) -> list[dict]:
        return list(self.events)

    def status(self) -> dict:
        """The causes of backpressure now."""
        return {"backpressure": list(self.backpressure.values())}

    def refusals(self) -> dict:
        """Remote: the connections each container's gatekeeper refused (its last report)."""
        return {f"container {c}": s.get("refusals", {}) for c, s in self.container_stats.items()}

    # -- taps -----------------------------------------------------------------------------
    def tap(self, msg: wire.AskSample) -> tuple[wire.Tap, tuple[int, ...]]:
        """(Re)start a tap for ``keep`` seconds: the message to tell the component's
        instances, and which they are. What was kept is stale if the tap was off."""
        n = check_tap(self.plan.streams, msg.component, msg.stream, msg.n)
        keep = check_keep(TAP_SECONDS if msg.keep is None else msg.keep)
        key, now = (msg.component, msg.stream), self.clock()
        tasks = self.component_tasks[msg.component]
        if self.taps.get(key, -1.0) < now:
            for t in tasks:
                self.samples.pop((t, msg.stream), None)
        self.taps[key] = now + keep
        return wire.Tap(stream=msg.stream, n=n, seconds=keep), tasks

    def sampled(self, msg: wire.AskSample, n: int) -> list[dict]:
        """The newest ``n`` tuples the taps of a component's stream caught, newest last."""
        tasks = self.component_tasks[msg.component]
        found = [s for t in tasks for s in self.samples.get((t, msg.stream), ())]
        found.sort(key=lambda s: s["time"])
        return found[-n:]
