"""The live settings of a running topology the master remembers, so that a restarted
instance is told them too: ``max_spout_pending`` set per spout component, and the
streams being recorded. Each is validated by its one function in
:mod:`runtime.model.controls` (or ``check_stream``) before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from runtime import wire
from runtime.model import controls as _controls
from runtime.model.constants import MAX_SPOUT_PENDING, TRACE
from runtime.model.plan import PhysicalPlan
from runtime.recording._parquet import check_stream

from .tasks import TaskTable

_UNSET = object()  # a setting never set live (None is a value: no limit)

Tell = Callable[[wire.Control, Iterable[int] | None], list[int]]


class LiveSettings:
    """Owns the settings changed while the topology runs: ``max_spout_pending`` per
    spout component, and whether each (component, stream) is being recorded."""

    def __init__(self, plan: PhysicalPlan, tasks: TaskTable, tell: Tell,
                 event: Callable[..., None]) -> None:
        self.plan, self.tasks, self.tell, self.event = plan, tasks, tell, event
        self.component_tasks = plan.component_tasks()
        self.spout_pending: dict[str, Any] = {}  # component -> max_spout_pending set live
        self.recordings: dict[tuple[str, str], bool] = {}  # set live by running.record()
        self.trace: float | None = None  # the trace rate set live (running.set_trace)

    def status(self) -> dict:
        """The settings changed live and in force (``status()["settings"]``): what a
        restarted instance, or a new master, is told."""
        return {"max_spout_pending": dict(self.spout_pending), "trace": self.trace,
                "recordings": sorted([c, s] for (c, s), on in self.recordings.items() if on)}

    def for_new(self, component: str) -> list[wire.Control]:
        """What an instance of ``component`` that has just become ready must be told."""
        told: list[wire.Control] = [wire.Recording(stream=stream, on=on)
                                    for (c, stream), on in self.recordings.items()
                                    if c == component]
        if component in self.spout_pending:
            told.append(wire.Setting(key=MAX_SPOUT_PENDING, value=self.spout_pending[component]))
        if self.trace is not None:  # a bolt ignores it
            told.append(wire.Setting(key=TRACE, value=self.trace))
        return told

    def differing(self, component: str, record: dict) -> list[wire.Control]:
        """Of what :meth:`for_new` tells an instance of ``component``, what it does not
        run, from its statistics ``record``: the streams it records now (``recording``)
        and the settings it was told live (``live``, as its instance keeps them). A spout
        whose tuner runs (``"auto"``) is not told ``"auto"`` again, which would start the
        tuner afresh; a bolt ignores settings."""
        live = record.get("live") or {}
        recording = set(record.get("recording") or ())
        spout = record.get("kind") == "spout"

        def runs(told: wire.Control) -> bool:
            if isinstance(told, wire.Recording):
                return told.on == (told.stream in recording)
            return not spout or live.get(told.key, _UNSET) == told.value

        return [told for told in self.for_new(component) if not runs(told)]

    def answer_set_trace(self, msg: wire.AskSetTrace) -> list[int]:
        """Change the fraction of spout tuples traced, in every spout task; remembered,
        so that a restarted spout traces at it too. Returns the tasks told now."""
        value = _controls.check_trace(msg.value)
        targets = _controls.spout_targets(self.component_tasks, self.tasks.kinds(), None)
        self.trace = value
        told = self.tell(wire.Setting(key=TRACE, value=value),
                         [t for ts in targets.values() for t in ts])
        self.event("trace", value=value, tasks=told)
        return told

    def answer_set_max_spout_pending(self, msg: wire.AskSetMaxSpoutPending) -> list[int]:
        """Change max_spout_pending of one spout component (or all); remembered, so
        that a restarted instance gets it too. Returns the tasks told now."""
        value = _controls.check_max_spout_pending(msg.value)
        targets = _controls.spout_targets(self.component_tasks, self.tasks.kinds(),
                                          msg.component)
        tasks = [t for ts in targets.values() for t in ts]
        self.spout_pending.update(dict.fromkeys(targets, value))
        told = self.tell(wire.Setting(key=MAX_SPOUT_PENDING, value=value), tasks)
        self.event("max_spout_pending", component=msg.component, value=value, tasks=told)
        return told

    def answer_record(self, msg: wire.AskRecord) -> list[int]:
        """Start (``on``) or stop recording a component's stream in its instances;
        remembered, so that a restarted instance does the same. Returns the tasks told."""
        key = check_stream(self.plan.streams, msg.component, msg.stream)
        self.recordings[key] = msg.on
        told = self.tell(wire.Recording(stream=key[1], on=msg.on), self.component_tasks[key[0]])
        self.event("recording_started" if msg.on else "recording_stopped", component=key[0],
                   stream=key[1], tasks=told)
        return told
