"""The physical plan: task ids, and the packing of tasks into containers.

Tasks are numbered from 1 in declaration order; containers are filled round-robin, as
Heron's round-robin packing does, so each container gets a share of every component.

>>> from runtime.testing import ListSpout, ListSink
>>> from runtime import Topology
>>> topo = Topology("demo")
>>> _ = topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
>>> _ = topo.bolt("sink", ListSink, parallelism=3).shuffle_grouping("numbers")
>>> print(topo.physical_plan(containers=2))
physical plan of 'demo': 5 tasks in 2 containers
  container 0: numbers[1] sink[3] sink[5]
  container 1: numbers[2] sink[4]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from runtime.groupings import KEY_GROUPS

from .constants import (
    ACKER,
    ACKERS,
    CHECKPOINT_INTERVAL,
    CHECKPOINTER,
    DEFAULTS,
    MAX_PARALLELISMS,
    SYSTEM,
    TICK,
)
from .errors import TopologyError
from .options import option_problem

# the narrowest spout task field of root ids: task ids up to 1023, so that the spout tasks a
# rebalance adds (new ids, never reused) fit for many rebalances; 53 random bits are left,
# so two of a spout's pending roots collide with odds of about n**2 / 2**54 (n in flight)
ROOT_BITS_MIN = 10


@dataclass(frozen=True)
class TaskInfo:
    """One task of the physical plan: its id, component, index within it and container."""
    task: int
    component: str
    index: int  # 0..parallelism-1 within its component
    container: int


@dataclass(frozen=True)
class PhysicalPlan:
    """Everything a process needs to know about where tasks live, as plain data."""

    topology: str
    containers: int
    tasks: tuple[TaskInfo, ...]
    streams: tuple[tuple[str, str], ...]  # stream id -> (component, stream); 0 is the tick
    config: Mapping[str, Any] = field(default_factory=dict)
    # the plan's number among the plans the topology has run on: 0 at submit, one more at
    # each rebalance; a stream manager keeps the one it last switched to (issue 22)
    epoch: int = 0
    # the width of the spout task field of every root id (runtime/acking/_ledger.py): fixed
    # at submit, so that a rebalance that adds task ids changes no root's meaning (0: from
    # the number of tasks, at least ROOT_BITS_MIN, so that spout tasks added later fit)
    bits: int = 0
    # the highest task id any plan of this topology gave out: an added task never takes
    # the id of one removed before (its instance may still be stopping; 0: the highest now)
    last_id: int = 0

    @classmethod
    def pack(cls, topology, containers: int, config: Mapping[str, Any]) -> PhysicalPlan:
        if type(containers) is not int or containers < 1:
            raise TopologyError(f"topology {topology.name!r}: containers must be >= 1, "
                                f"not {containers!r}")
        config = {**DEFAULTS, **config}
        check_config(f"topology {topology.name!r}", config)
        specs = list(topology.components.values())
        for spec in specs:
            check_config(f"component {spec.id!r}", spec.config)
        config[MAX_PARALLELISMS] = {s.id: s.max_parallelism for s in specs}  # the guard's
        components = [(s.id, s.parallelism) for s in specs] + [(ACKER, int(config[ACKERS]))]
        if config.get(CHECKPOINT_INTERVAL):  # one checkpoint spout drives every checkpoint
            if int(config[ACKERS]):
                raise TopologyError(f"topology {topology.name!r}: checkpoint_interval needs "
                                    "ackers=0: with checkpoints, recovery is a rollback, and "
                                    "a per-tuple replay would apply updates twice")
            components.append((CHECKPOINTER, 1))
        tasks, n = [], 0
        for comp, parallelism in components:
            for index in range(parallelism):
                tasks.append(TaskInfo(n + 1, comp, index, n % containers))
                n += 1
        streams = [(SYSTEM, TICK)] + [(s.id, st) for s in specs for st in s.streams]
        return cls(topology.name, containers, tuple(tasks), tuple(streams), config)

    def __call__(self) -> PhysicalPlan:
        """The plan itself: ``running.plan()`` (issue 22's spelling) and ``running.plan``
        are the same object, the plan the topology runs on now."""
        return self

    # -- lookups ----------------------------------------------------------------------------
    def acker_tasks(self) -> tuple[int, ...]:
        return tuple(t.task for t in self.tasks if t.component == ACKER)

    def component_tasks(self) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {}
        for t in self.tasks:
            out.setdefault(t.component, []).append(t.task)
        return {c: tuple(ts) for c, ts in out.items()}

    def task_containers(self) -> dict[int, int]:
        return {t.task: t.container for t in self.tasks}

    def tasks_in(self, container: int) -> tuple[TaskInfo, ...]:
        return tuple(t for t in self.tasks if t.container == container)

    def task(self, task_id: int) -> TaskInfo:
        """The task of that id (IndexError if none: after a rebalance the ids have gaps)."""
        info = self._by_id.get(task_id)
        if info is None:
            raise IndexError(f"no task {task_id} in topology {self.topology!r}")
        return info

    @cached_property
    def _by_id(self) -> dict[int, TaskInfo]:
        return {t.task: t for t in self.tasks}

    def root_bits(self) -> int:
        """The width of the task field of a root id (see ``bits``)."""
        return self.bits or max(ROOT_BITS_MIN, len(self.tasks).bit_length())

    def root_task_limit(self) -> int:
        """The first task id a spout task may not have: its roots could not name it."""
        return 1 << self.root_bits()

    def stream_ids(self) -> dict[tuple[str, str], int]:
        return {key: i for i, key in enumerate(self.streams)}

    def parallelism(self) -> dict[str, int]:
        """Component -> its number of tasks, in declaration order."""
        return {c: len(ts) for c, ts in self.component_tasks().items()}

    def rebalanced(self, parallelism: Mapping[str, int],
                   containers: int | None = None) -> PhysicalPlan:
        """This plan with new parallelism for some components, as the next epoch. Check
        the request first (:func:`check_rebalance`).

        With the same containers (in place) every kept task keeps its id, index and
        container; a shrunk component loses its highest indexes, and a grown one gets new
        ids after the highest, each in the container that then holds fewest tasks. With a
        new number of containers (the containers restart) the tasks are numbered again and
        packed round-robin as :meth:`pack` does."""
        if containers is not None and containers != self.containers:
            return self._repacked({**self.parallelism(), **parallelism}, containers)
        kept = [t for t in self.tasks if t.index < parallelism.get(t.component, t.index + 1)]
        load = [sum(t.container == c for t in kept) for c in range(self.containers)]
        n, have = max(self.last_id, *(t.task for t in self.tasks)), self.parallelism()
        for comp, count in parallelism.items():
            for index in range(have[comp], count):
                c = load.index(min(load))
                load[c], n = load[c] + 1, n + 1
                kept.append(TaskInfo(n, comp, index, c))
        return replace(self, tasks=tuple(kept), epoch=self.epoch + 1, bits=self.root_bits(),
                       last_id=n)

    def _repacked(self, counts: Mapping[str, int], containers: int) -> PhysicalPlan:
        tasks, n = [], 0
        for comp, count in counts.items():
            for index in range(count):
                tasks.append(TaskInfo(n + 1, comp, index, n % containers))
                n += 1
        return PhysicalPlan(self.topology, containers, tuple(tasks), self.streams, self.config,
                            self.epoch + 1)

    # -- shipping as plain data -------------------------------------------------------------
    def to_data(self) -> dict:
        return {"topology": self.topology, "containers": self.containers,
                "tasks": [[t.task, t.component, t.index, t.container] for t in self.tasks],
                "streams": [list(s) for s in self.streams], "config": dict(self.config),
                "epoch": self.epoch, "bits": self.bits, "last_id": self.last_id}

    @classmethod
    def from_data(cls, data: Mapping) -> PhysicalPlan:
        return cls(data["topology"], data["containers"],
                   tuple(TaskInfo(*t) for t in data["tasks"]),
                   tuple(tuple(s) for s in data["streams"]), data["config"],
                   data.get("epoch", 0), data.get("bits", 0), data.get("last_id", 0))

    def __str__(self) -> str:
        lines = [f"physical plan of {self.topology!r}: {len(self.tasks)} tasks in "
                 f"{self.containers} containers"]
        for c in range(self.containers):
            names = " ".join(f"{t.component}[{t.task}]" for t in self.tasks_in(c))
            lines.append(f"  container {c}: {names}")
        return "\n".join(lines)


def check_rebalance(plan: PhysicalPlan, parallelism: Any, containers: Any,
                    fixed: Mapping[str, str]) -> None:
    """Refuse a rebalance that cannot be done, naming the component and the problem
    (ValueError): an unknown or system component, a spout whose parallelism is ``fixed``
    (component -> why: its class does not say it can change), a parallelism that is not
    an int from 1 to the component's maximum parallelism (``max_parallelism=``, in the
    plan's config; ``KEY_GROUPS`` if the plan does not say: above it the key groups cannot
    cover every task, and keyed state could not follow its keys), or a number of
    containers below 1."""
    where = f"rebalance of {plan.topology!r}"
    if not isinstance(parallelism, Mapping) or not parallelism:
        raise ValueError(f"{where}: give {{component: parallelism}}, not {parallelism!r}")
    if containers is not None and (type(containers) is not int or containers < 1):
        raise ValueError(f"{where}: containers must be an int >= 1, not {containers!r}")
    known, maxima = plan.parallelism(), plan.config.get(MAX_PARALLELISMS) or {}
    for comp, count in parallelism.items():
        if problem := _rebalance_problem(comp, count, known, fixed,
                                         maxima.get(comp, KEY_GROUPS)):
            raise ValueError(f"{where}: component {comp!r}: {problem}")


def _rebalance_problem(comp: Any, count: Any, known: Mapping[str, int],
                       fixed: Mapping[str, str], maximum: int) -> str | None:
    if comp not in known:
        return f"no such component (the components: {sorted(c for c in known if c[:2] != '__')})"
    if comp.startswith("__"):
        return "a system component's tasks are the engine's to choose"
    if comp in fixed:
        return fixed[comp]
    if type(count) is not int or count < 1:
        return f"parallelism must be an int >= 1, not {count!r}"
    if count > maximum:
        return (f"parallelism {count} is above its maximum parallelism {maximum} "
                "(max_parallelism=, fixed when the topology was defined; for keyed state "
                "its number of key groups)")
    return None


def check_root_ids(plan: PhysicalPlan, spouts: frozenset[str]) -> None:
    """Refuse a rebalanced ``plan`` that gives a spout task an id its root ids cannot hold
    (the width is fixed at submit: ``root_bits``), naming the component (ValueError)."""
    limit = plan.root_task_limit()
    for t in plan.tasks:
        if t.component in spouts and t.task >= limit:
            raise ValueError(
                f"rebalance of {plan.topology!r}: component {t.component!r}: a new spout "
                f"task would get id {t.task}, and root ids hold spout task ids below {limit} "
                f"(their {plan.root_bits()}-bit task field is fixed at submit); change the "
                "number of containers to number the tasks afresh")


def check_config(name: str, config: Mapping[str, Any]) -> None:
    """The engine's options must make sense before anything starts (user keys pass)."""
    problems = [f"{key} must be {problem}, not {value!r}" for key, value in config.items()
                if (problem := option_problem(key, value))]
    if problems:
        raise TopologyError(f"{name}: " + "; ".join(problems))
