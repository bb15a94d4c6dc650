"""The dashboard's memory: per component, what each refresh saw happen since the last one.

Pure: fed the instances' cumulative statistics (``running.statistics()`` as dicts) and
the refresh's wall-clock time, it keeps per component a bounded list of points
``(t, emitted/s, acked/s, failed/s, latency ms, pending, capacity)`` for the sparklines
and the health verdict (pending: a spout's tuples in flight, summed over its tasks; None
for a bolt; capacity: the busiest task's share of the interval spent in ``process``, as
Storm's capacity but over the last interval only: the window's capacity counts the
start-up too, and a bolt that cannot keep up shows it here first). Counters are
cumulative per incarnation, so a restarted instance (new incarnation) or a counter that
went down counts from 0 again: no rate is ever negative (as ``runtime.observe.series.deltas``).

Latency is a bolt's execute latency over the interval (busy time / executed tuples), and
for a spout the p99 complete latency it last reported; None when nothing was measured.

>>> h = History(keep=3)
>>> h.add([{"task": 1, "component": "b", "incarnation": 0, "emitted": 0, "acked": 0,
...         "failed": 0, "executed": 0, "busy_seconds": 0.0}], now=10.0)
>>> h.add([{"task": 1, "component": "b", "incarnation": 0, "emitted": 20, "acked": 10,
...         "failed": 1, "executed": 10, "busy_seconds": 0.02}], now=12.0)
>>> h.series("b")
{'emitted': [10.0], 'acked': [5.0], 'failed': [0.5], 'latency': [2.0], 'pending': [None], \
'capacity': [0.01]}
>>> h.recent("b", "capacity")
0.01
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

COUNTED = ("emitted", "acked", "failed", "executed", "busy_seconds")
SHOWN = ("emitted", "acked", "failed", "latency", "pending", "capacity")
RECENT = 5  # points averaged by History.recent: a few seconds, so one busy second is not news
KEEP = 300  # points per component: 5 minutes at one refresh a second


class History:
    """Per component, the last ``keep`` refreshes' rates (see the module docstring)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self.last: dict[int, tuple[Any, list[float]]] = {}  # task -> (incarnation, counters)
        self.when: float | None = None
        self.points: dict[str, deque] = {}

    def add(self, stats: Iterable[Mapping[str, Any]], now: float) -> None:
        """One refresh's statistics; the first only sets the baseline."""
        grown: dict[str, list[float]] = {}
        latency: dict[str, float | None] = {}
        pending: dict[str, int] = {}
        busiest: dict[str, float] = {}  # component -> its busiest task's busy seconds
        for record in stats:
            component = record.get("component")
            row = grown.setdefault(component, [0.0] * len(COUNTED))
            deltas = self._grown(record)
            for i, delta in enumerate(deltas):
                row[i] += delta
            busiest[component] = max(busiest.get(component, 0.0), deltas[-1])
            if record.get("kind") == "spout":
                latency[component] = _p99(_complete(record), latency.get(component))
                pending[component] = pending.get(component, 0) + (record.get("pending") or 0)
        if self.when is not None and now > self.when:
            self._append(grown, latency, pending, busiest, now - self.when, now)
        self.when = now

    def recent(self, component: str, name: str, n: int = RECENT) -> float | None:
        """The mean of the last ``n`` known points of one series; None when none is."""
        known = [v for v in self.series(component)[name][-n:] if v is not None]
        return round(sum(known) / len(known), 4) if known else None

    def series(self, component: str) -> dict[str, list]:
        """``{"emitted", "acked", "failed", "latency", "pending"}``: lists, oldest first."""
        points = list(self.points.get(component, ()))
        return {name: [p[i + 1] for p in points] for i, name in enumerate(SHOWN)}

    def _grown(self, record: Mapping[str, Any]) -> list[float]:
        values = [float(record.get(c) or 0) for c in COUNTED]
        incarnation, old = self.last.get(record.get("task"), (None, None))
        self.last[record.get("task")] = (record.get("incarnation"), values)
        if old is None or incarnation != record.get("incarnation"):
            old = [0.0] * len(COUNTED) if old is not None else values
        return [v - o if v >= o else v for v, o in zip(values, old)]

    def _append(self, grown: dict, latency: dict, pending: dict, busiest: dict, span: float,
                now: float) -> None:
        for component, (emitted, acked, failed, executed, busy) in grown.items():
            lat = latency.get(component) if component in latency else (
                round(busy / executed * 1000, 3) if executed else None)
            ring = self.points.setdefault(component, deque(maxlen=self.keep))
            ring.append((now, round(emitted / span, 3), round(acked / span, 3),
                         round(failed / span, 3), lat, pending.get(component),
                         round(min(1.0, busiest.get(component, 0.0) / span), 4)))


def _complete(record: Mapping[str, Any]) -> Any:
    """A spout's complete-latency summary: the histogram one if reported, else the old."""
    found = (record.get("latency_ms") or {}).get("complete")
    return found if found else record.get("complete_latency_ms")


def _p99(summary: Any, known: float | None) -> float | None:
    """The larger of a complete-latency summary's p99 and what is already known."""
    value = summary.get("p99") if isinstance(summary, Mapping) else None
    if value is None:
        return known
    return value if known is None else max(known, value)
