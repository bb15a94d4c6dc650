"""User-defined metrics: what a spout or bolt registers with ``context.register_metric``.

A task holds one :class:`UserMetrics` registry. Each metric is a plain object whose
``inc``/``set``/``observe`` is one addition (no lock: a task runs its user code on one
thread), and the registry's :meth:`UserMetrics.report` is the small dict of numbers that
travels with the task's statistics, every ``stats_interval``. The master keeps the
latest report of each task; the dashboard shows it and the Prometheus export serves it
(``docs/internals/metrics.md``, "User metrics").

>>> m = UserMetrics()
>>> words = m.register("words_seen", "counter"); words.inc(); words.inc(2)
>>> m.register("queue_depth", "gauge").set(7)
>>> size = m.register("size_bytes", "histogram", buckets=[10, 100]); size.observe(42)
>>> r = m.report()
>>> r["counters"], r["gauges"], r["histograms"]["size_bytes"]["counts"]
({'words_seen': 3}, {'queue_depth': 7}, [0, 1, 0])
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterable

KINDS = ("counter", "gauge", "histogram")
MAX_METRICS = 100  # per task: a report stays a few kilobytes at most
# Prometheus's default histogram buckets (seconds, as most user histograms time things)
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0)
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")  # a Prometheus name without colons


class Counter:
    """Only goes up (by ``inc``); a restarted task counts afresh, as Prometheus expects."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name, self.value = name, 0

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"counter {self.name!r}: inc({amount}) would go down; "
                             "use a gauge for a value that can")
        self.value += amount


class Gauge:
    """A value that goes up and down: ``set``, ``inc``, ``dec``."""

    __slots__ = ("name", "value")

    def __init__(self, name: str) -> None:
        self.name, self.value = name, 0

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class Histogram:
    """Observations counted in fixed buckets (upper bounds, plus one past the last), with
    their sum: what a Prometheus histogram carries."""

    __slots__ = ("name", "bounds", "counts", "sum", "count")

    def __init__(self, name: str, buckets: Iterable[float] | None = None) -> None:
        self.name = name
        self.bounds = _bounds(name, DEFAULT_BUCKETS if buckets is None else buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum, self.count = 0.0, 0

    def observe(self, value: float) -> None:
        """One observation: it falls in the first bucket whose bound it does not exceed."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def report(self) -> dict:
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum,
                "count": self.count}


def _bounds(name: str, buckets: Iterable[float]) -> tuple[float, ...]:
    """Finite upper bounds, strictly increasing (+Inf is always the last bucket)."""
    given = list(buckets)
    bounds = tuple(float(b) for b in given if b != math.inf)
    if not bounds or any(a >= b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"histogram {name!r}: buckets must be increasing numbers, "
                         f"got {given!r}")
    return bounds


_CLASSES = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


class UserMetrics:
    """One task's registered metrics, by name."""

    __slots__ = ("metrics",)

    def __init__(self) -> None:
        self.metrics: dict[str, Counter | Gauge | Histogram] = {}

    def register(self, name: str, kind: str, buckets: Iterable[float] | None = None):
        """The metric ``name`` of ``kind`` ("counter", "gauge" or "histogram"): made on
        first call, the same object after (so ``open`` may run again). ValueError for a
        bad name or kind, a name taken by another kind, or too many metrics."""
        problem = check_metric(name, kind)
        if problem:
            raise ValueError(problem)
        known = self.metrics.get(name)
        if known is not None:
            if not isinstance(known, _CLASSES[kind]):
                raise ValueError(f"metric {name!r} is already a {_kind(known)}, "
                                 f"not a {kind}")
            return known
        if len(self.metrics) >= MAX_METRICS:
            raise ValueError(f"metric {name!r}: a task may register at most "
                             f"{MAX_METRICS} metrics")
        made = Histogram(name, buckets) if kind == "histogram" else _CLASSES[kind](name)
        self.metrics[name] = made
        return made

    def report(self) -> dict:
        """``{"counters": {name: n}, "gauges": {name: v}, "histograms": {name: {bounds,
        counts, sum, count}}}``: plain numbers, for the task's statistics."""
        out: dict[str, dict] = {"counters": {}, "gauges": {}, "histograms": {}}
        for name, m in self.metrics.items():
            if isinstance(m, Histogram):
                out["histograms"][name] = m.report()
            else:
                out["counters" if isinstance(m, Counter) else "gauges"][name] = m.value
        return out


def _kind(metric) -> str:
    return {Counter: "counter", Gauge: "gauge", Histogram: "histogram"}[type(metric)]


def check_metric(name: object, kind: object) -> str | None:
    """Why ``name``/``kind`` cannot be a user metric (None: they can).

    >>> check_metric("words", "counter") is None, check_metric("9x", "gauge")[:14]
    (True, "metric '9x': a")
    """
    if not isinstance(name, str) or not _NAME.match(name):
        return (f"metric {name!r}: a name is letters, digits and underscores, not "
                "starting with a digit")
    if kind not in KINDS:
        return f"metric {name!r}: kind must be one of {', '.join(KINDS)}, not {kind!r}"
    return None
