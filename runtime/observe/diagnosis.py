"""Why is it slow: ranked findings from the metrics the master already holds.

Pure: :func:`diagnose` takes ``running.metrics(window)``'s answer (plain data: components,
instances), the topology's options, the number of cores, the backpressure causes and
each bolt's input groupings, and returns :class:`Finding` records, most important first.
Nothing here reads a clock, a socket or a process, so a recorded metrics dict gives the
same findings as the live topology (docs/internals/diagnosis.md).

The rules, one function each (:data:`RULES`), every one a question a person would ask:

- ``timeouts``: spout tuples time out and are replayed (work done twice, for nothing);
- ``cpu``: more busy processes than cores, so every one of them is slowed;
- ``skew``: one task of a component works much more than its siblings (a hot key under a
  fields grouping, or uneven tasks);
- ``acker``: the acker is at capacity;
- ``slow_bolt``: a bolt at capacity (Storm's: busy time over the window);
- ``max_spout_pending``: no bolt is busy, but the spouts keep their in-flight limit full.

The score orders them: a finding that explains the others comes first (timeouts, then
cpu), then the busiest component (its capacity, 0 to 1, with a bonus for the root cause
of backpressure), then the in-flight limit, which matters only when nothing is busy.

>>> m = {"components": {
...     "src": {"kind": "spout", "capacity": 0.1, "acked": 500, "timed_out": 0},
...     "slow": {"kind": "bolt", "instances": 1, "capacity": 0.97, "executed_per_s": 98.0,
...              "latency_ms": {"execute": {"p50": 10.1, "p99": 10.4}}},
...     "sink": {"kind": "bolt", "instances": 1, "capacity": 0.02}},
...     "instances": {3: {"component": "slow", "capacity": 0.97}}}
>>> [(f.kind, f.component, f.task) for f in diagnose(m)]
[('slow_bolt', 'slow', 3)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BUSY = 0.5  # capacity from which a bolt (or the acker) is named as a bottleneck
LOADED = 0.25  # capacity from which the busiest (skewed) task or the acker is named, when
#                the spouts are held back (their limit full, or backpressure)
SKEWED = 1.5  # max / mean busy time over a component's tasks from which it is skewed
BACKLOG = 64 * 1024  # bytes queued for one task from which its backlog can show skew
HOT = 0.2  # a key's share of the sampled tuples from which it is called hot
TIMED_OUT = 0.01  # share of the spout tuples completed or timed out that timed out
FULL = 0.5  # in-flight tuples, as a share of max_spout_pending, from which it limits
CPU_BUSY = 50.0  # per cent of a core from which a process counts as busy
CPU_SPAN = 5.0  # seconds of work a task's CPU share needs before it counts: start-up
#                (imports, unpickling, prepare) is a burst, not the topology's demand
ACKER = "__acker"  # runtime.model.constants.ACKER (observe imports nothing of runtime)
KINDS = ("timeouts", "cpu", "skew", "acker", "slow_bolt", "max_spout_pending")


@dataclass(frozen=True)
class Finding:
    """One reason a topology is slow: where (``component``, ``task`` or None), what
    (``kind``, one of :data:`KINDS`), the numbers that led to it (``evidence``) and what
    to change (``advice``). ``score`` ranks findings, highest first."""

    component: str
    task: int | None
    kind: str
    evidence: dict = field(compare=False)
    advice: str = field(compare=False)
    score: float = field(default=0.0, compare=False)

    def __str__(self) -> str:
        where = self.component if self.task is None else f"{self.component}[{self.task}]"
        return f"{self.kind} at {where}: {_words(self.evidence)}. {self.advice}"

    def as_dict(self) -> dict:
        """A plain dict (the panel, the magic, the DataFrame)."""
        return {"component": self.component, "task": self.task, "kind": self.kind,
                "evidence": dict(self.evidence), "advice": self.advice,
                "score": round(self.score, 3)}


def diagnose(metrics: Mapping[str, Any], *, config: Mapping[str, Any] | None = None,
             cores: int | None = None, backpressure: Iterable[str] = (),
             groupings: Mapping[str, Sequence[str]] | None = None) -> list[Finding]:
    """The findings for one metrics answer, most important first (module docstring).

    ``backpressure``: the components the master names as backpressure causes;
    ``groupings``: each bolt's input groupings as labels (``"fields(word)"``), which
    the skew advice reads."""
    facts = Facts(metrics, config or {}, cores, frozenset(backpressure), groupings or {})
    found = [f for rule in RULES for f in rule(facts)]
    return sorted(found, key=lambda f: -f.score)


class Facts:
    """What the rules read, in one place: components, instances by component, options."""

    def __init__(self, metrics: Mapping[str, Any], config: Mapping[str, Any],
                 cores: int | None, causes: frozenset, groupings: Mapping) -> None:
        self.components = {c: m for c, m in (metrics.get("components") or {}).items()
                           if isinstance(m, Mapping)}
        self.instances: dict[str, list[tuple[int, Mapping]]] = {}
        for task, m in (metrics.get("instances") or {}).items():
            self.instances.setdefault(m.get("component"), []).append((int(task), m))
        self.config, self.cores, self.causes = config, cores, causes
        self.groupings = groupings

    def kind(self, component: str) -> str | None:
        return self.components[component].get("kind")

    def bolts(self) -> dict[str, Mapping]:
        """The user's bolts (not the acker)."""
        return {c: m for c, m in self.components.items()
                if m.get("kind") == "bolt" and not c.startswith("__")}

    def spouts(self) -> dict[str, Mapping]:
        return {c: m for c, m in self.components.items() if m.get("kind") == "spout"}

    def busiest(self, component: str) -> tuple[int | None, float]:
        """The task of a component with the most capacity, and that capacity."""
        tasks = self.instances.get(component) or []
        if not tasks:
            return None, _num(self.components[component], "capacity")
        task, m = max(tasks, key=lambda tm: _num(tm[1], "capacity"))
        return task, _num(m, "capacity")

    def anything_busy(self) -> bool:
        return any(_num(m, "capacity") >= BUSY for c, m in self.components.items()
                   if m.get("kind") != "spout")

    def saturated(self) -> bool:
        """Whether the spouts are held back: a limit full, or backpressure."""
        return bool(self.causes) or any(
            _num(m, "held_ms_per_s") >= 200 or in_flight(m) >= FULL * _limit(m)
            for m in self.spouts().values() if _limit(m))

    def busiest_anywhere(self) -> str | None:
        """The component with the most capacity, spouts included."""
        return max(self.components, key=lambda c: _num(self.components[c], "capacity"),
                   default=None)


def in_flight(m: Mapping[str, Any]) -> float:
    """A spout's tuples in flight: the latest gauge, or the window's mean by Little's law
    (acked per second × mean complete latency), whichever is larger (the gauge is one
    instant of a number that moves)."""
    mean = _p(m, "complete", "mean") or 0.0
    return max(_num(m, "pending"), _num(m, "acked_per_s") * mean / 1000)


def _limit(m: Mapping[str, Any]) -> int:
    limit = m.get("max_spout_pending")
    return limit if isinstance(limit, int) and limit > 0 else 0


def _num(m: Mapping[str, Any], key: str) -> float:
    value = m.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


# -- the rules ----------------------------------------------------------------------------
def timeouts(facts: Facts) -> list[Finding]:
    """A spout's tuples time out: each is replayed, and the work done on it is lost."""
    out = []
    for name, m in facts.spouts().items():
        late, acked = _num(m, "timed_out"), _num(m, "acked")
        if not late or late / (late + acked) < TIMED_OUT:
            continue
        share = late / (late + acked)
        timeout = facts.config.get("message_timeout")
        evidence = {"timed_out": int(late), "acked": int(acked), "timed_out_share":
                    round(share, 3), "message_timeout_s": timeout,
                    "max_spout_pending": m.get("max_spout_pending"),
                    "complete_p99_ms": _p99(m, "complete")}
        out.append(Finding(name, None, "timeouts", evidence, (
            f"{share:.0%} of {name}'s tuples time out and are replayed. Raise "
            "message_timeout above the complete latency, or lower max_spout_pending so "
            "fewer tuples wait in queues; then speed up the slowest bolt."), 2.0 + share))
    return out


def cpu(facts: Facts) -> list[Finding]:
    """More busy processes than cores: they take turns, and each one looks slow."""
    if not facts.cores:
        return []
    tasks = [(c, t, m) for c, ts in facts.instances.items() for t, m in ts
             if _num(m, "seconds") >= CPU_SPAN]
    busy = [(c, t, m) for c, t, m in tasks if _num(m, "cpu_percent") >= CPU_BUSY]
    used = sum(_num(m, "cpu_percent") for _, _, m in tasks) / 100
    if len(busy) <= facts.cores or used < 0.8 * facts.cores:
        return []
    c, t, m = max(busy, key=lambda ctm: _num(ctm[2], "cpu_percent"))
    evidence = {"busy_processes": len(busy), "cores": facts.cores,
                "cores_used": round(used, 2), "busiest_cpu_percent": _num(m, "cpu_percent")}
    return [Finding(c, None, "cpu", evidence, (
        f"{len(busy)} processes want a core each and there are {facts.cores}: they take "
        "turns. Lower the parallelism of the cheap components, use fewer containers' "
        "worth of tasks, or run on more cores."), 1.5)]


def skew(facts: Facts) -> list[Finding]:
    """A component whose busiest task is at capacity while its siblings are not, or
    whose hottest key is more than one task can take its share of."""
    out = []
    for name, m in facts.bolts().items():
        task, capacity = facts.busiest(name)
        ratio, tasks = _num(m.get("skew") or {}, "busy"), len(facts.instances.get(name) or ())
        loaded = capacity >= BUSY or (capacity >= LOADED and facts.saturated())
        backlog = _backlog(facts, name)
        uneven = (ratio >= SKEWED or _hot_on_one_task(facts, name) * tasks >= SKEWED
                  or backlog is not None)
        if tasks >= 2 and loaded and uneven:
            task = backlog if backlog is not None and ratio < SKEWED else task
            out.append(_skew_finding(facts, name, m, task, capacity, ratio))
    return out


def _backlog(facts: Facts, name: str) -> int | None:
    """The task whose input queue (bytes its stream manager holds for it) is over
    :data:`SKEWED` times the mean of its siblings' and at least :data:`BACKLOG` bytes:
    while every task still works through a backlog, busy time and executed counts are
    even, and only the queues show which task the grouping overloads."""
    queued = [(t, _num(m, "sm_queued_bytes")) for t, m in facts.instances.get(name, ())]
    if len(queued) < 2:
        return None
    task, most = max(queued, key=lambda tq: tq[1])
    mean = sum(q for _, q in queued) / len(queued)
    return task if most >= BACKLOG and most >= SKEWED * mean else None


def _hot_on_one_task(facts: Facts, name: str) -> float:
    """The largest share of a component's sampled tuples that one key brings to one task:
    all of a hot key's under a fields grouping, about half under a partial key grouping."""
    total = _num(facts.components[name].get("hot_keys") or {}, "total")
    if not total or not _hot_share(facts.components[name]):
        return 0.0
    return max((_num(top[0], "tuples") / total for _, m in facts.instances.get(name, ())
                if (top := (m.get("hot_keys") or {}).get("top"))), default=0.0)


def _own_key(facts: Facts, name: str, task: int | None) -> dict | None:
    """The top key of one task's own sampled tuples, when it is most of them (the hot key
    of a task that works through a backlog at the same pace as its siblings)."""
    for t, m in facts.instances.get(name, ()):
        top = ((m.get("hot_keys") or {}).get("top") or [None])[0]
        if t == task and isinstance(top, Mapping) and _num(top, "share") >= 0.5:
            return top
    return None


def _hot_share(m: Mapping[str, Any]) -> float:
    """The hottest key's share of a component's tuples, if it is hot (:data:`HOT`): a key
    that alone gives one task over :data:`SKEWED` times its fair share will make that task
    the bottleneck, even while every task still works through a backlog."""
    top = ((m.get("hot_keys") or {}).get("top") or [None])[0]
    share = _num(top, "share") if isinstance(top, Mapping) else 0.0
    return share if share >= HOT else 0.0


def _skew_finding(facts: Facts, name: str, m: Mapping, task: int | None, capacity: float,
                  ratio: float) -> Finding:
    hot = (m.get("hot_keys") or {})["top"][0] if _hot_share(m) else _own_key(facts, name, task)
    evidence = {"busiest_capacity": capacity, "skew_busy": ratio,
                "skew_executed": _num(m.get("skew") or {}, "executed"),
                "tasks": len(facts.instances[name])}
    fields = [g for g in facts.groupings.get(name, ()) if g.startswith("fields")]
    if hot:
        evidence.update(hot_key=hot["key"], hot_key_share=hot["share"])
        source = fields[0] if fields else "its fields grouping"
        advice = (f"key {hot['key']!r} carries {hot['share']:.0%} of {name}'s tuples, and "
                  f"{source} sends every one to the same task. Use "
                  "partial_key_grouping(source, fields) (each key split over two tasks, then "
                  "merge the partial results downstream), or pre-aggregate the hot key.")
    else:
        advice = (f"{name}'s busiest task works {ratio:.1f}× its share. Look at what sends "
                  "it more (a fields or direct grouping, a custom grouping) or why its "
                  "tuples cost more.")
    return Finding(name, task, "skew", evidence, advice, capacity + 0.05 + _cause(facts, name))


def acker(facts: Facts) -> list[Finding]:
    """The acker at capacity: every tuple tree waits on it."""
    m = facts.components.get(ACKER)
    if m is None:
        return []
    task, capacity = facts.busiest(ACKER)
    held_up = (capacity >= LOADED and facts.saturated()
               and facts.busiest_anywhere() == ACKER)  # the spouts wait on its verdicts
    if capacity < BUSY and not held_up:
        return []
    evidence = {"capacity": capacity, "ackers": int(_num(m, "instances")) or 1,
                "acks_per_s": _num(m, "executed_per_s")}
    return [Finding(ACKER, task, "acker", evidence, (
        f"the acker is busy {capacity:.0%} of the time settling acks, more than any other "
        "task, and the spouts wait on its verdicts. Add ackers (the ackers "
        "option), anchor fewer tuples (each anchored emit is an ack to settle), or let a "
        "BasicBolt ack for you (its ack is folded into its child's)."), capacity + 0.15)]


def slow_bolt(facts: Facts) -> list[Finding]:
    """A bolt at capacity, whose tasks are evenly loaded (else it is skew)."""
    out = []
    skewed = {f.component for f in skew(facts)}
    held_by = _held_by(facts)
    for name, m in facts.bolts().items():
        task, capacity = facts.busiest(name)
        if name in skewed or (capacity < BUSY and name != held_by):
            continue
        evidence = {"capacity": capacity, "executed_per_s": _num(m, "executed_per_s"),
                    "execute_p50_ms": _p(m, "execute", "p50"),
                    "execute_p99_ms": _p(m, "execute", "p99"),
                    "tasks": int(_num(m, "instances")) or 1,
                    "backpressure": name in facts.causes}
        out.append(Finding(name, task, "slow_bolt", evidence, (
            f"{name} is busy {capacity:.0%} of the time: it cannot take more. Raise its "
            "parallelism (its tasks share the work), or make process() cheaper (batch "
            "its I/O, cache lookups)."), _bolt_score(facts, name, capacity)))
    return out


def _held_by(facts: Facts) -> str | None:
    """The busiest bolt, when no bolt is at capacity but the spouts are held back and it
    is loaded (:data:`LOADED`): the spouts' limit keeps it from filling up (the default
    latency bound does that to a slow bolt), but it is what the tuples wait for."""
    if facts.anything_busy() or not facts.saturated():
        return None
    bolts = facts.bolts()
    name = max(bolts, key=lambda c: _num(bolts[c], "capacity"), default=None)
    return name if name is not None and facts.busiest(name)[1] >= LOADED else None


def _bolt_score(facts: Facts, name: str, capacity: float) -> float:
    """At capacity: the capacity; held back below it: above a full limit's finding."""
    base = capacity if capacity >= BUSY else 0.4 + capacity / 10
    return base + _cause(facts, name)


def max_spout_pending(facts: Facts) -> list[Finding]:
    """No bolt is busy, yet the spouts keep max_spout_pending tuples in flight: the
    limit, not the work, sets the rate (at most limit / complete latency)."""
    if facts.anything_busy():
        return []
    out = []
    for name, m in facts.spouts().items():
        limit, pending = _limit(m), in_flight(m)
        if not limit or pending < FULL * limit:
            continue
        if _num(m, "capacity") >= BUSY or _num(m, "held_ms_per_s") >= 500:
            continue  # the spout's own work, or backpressure, limits it
        mean = _p(m, "complete", "mean")
        bounded = bool(m.get("latency_bounded"))
        evidence = {"in_flight": round(pending, 2), "max_spout_pending": limit,
                    "latency_bounded": bounded, "acked_per_s": _num(m, "acked_per_s"),
                    "complete_mean_ms": mean, "spout_capacity": _num(m, "capacity")}
        how = ("raise target_latency (the default limit follows it) or set "
               "max_spout_pending" if bounded else "raise max_spout_pending, or set it to "
               "'auto'")
        out.append(Finding(name, None, "max_spout_pending", evidence, (
            f"{name} keeps its {limit} in-flight tuples full while no bolt is busy: the "
            f"limit sets the rate (limit / complete latency). To go faster, {how}."),
            0.3 + min(1.0, pending / limit) * 0.1))
    return out


RULES = (timeouts, cpu, skew, acker, slow_bolt, max_spout_pending)


def _cause(facts: Facts, component: str) -> float:
    """A bonus for the component the master names as the cause of backpressure."""
    return 0.1 if component in facts.causes else 0.0


def _p(m: Mapping, name: str, key: str) -> float | None:
    hist = (m.get("latency_ms") or {}).get(name)
    if not isinstance(hist, Mapping) or hist.get(key) is None:
        return None
    return round(float(hist[key]), 3)


def _p99(m: Mapping, name: str) -> float | None:
    return _p(m, name, "p99")


def _words(evidence: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {_short(v)}" for k, v in evidence.items() if v is not None)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
