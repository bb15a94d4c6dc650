"""The hottest keys of a fields-grouped input, counted on a sample of its tuples.

A bolt task counts the grouping key of each tuple it samples for latency (one tuple in
``stride``, docs/internals/diagnosis.md), each with the weight ``stride`` so the counts
estimate tuples. The counter is bounded: past :data:`CAPACITY` keys it keeps the heavier
half, so a key that is hot keeps its count and a long tail costs nothing.

>>> k = HotKeys()
>>> for key, weight in (("a", 5), ("b", 1), ("a", 5), (["x"], 2)):
...     k.add(key, weight)
>>> k.report(2)
{'total': 13, 'top': [['a', 10], ["['x']", 2]]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CAPACITY = 256  # distinct keys kept per task before the lighter half is forgotten
TOP = 10  # keys a task reports
KEY_CHARS = 60  # a key is reported as its repr, cut to this many characters


class HotKeys:
    """Sampled key counts of one task (weights: tuples each sample stands for)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.total = 0  # every sampled weight, the forgotten keys' included

    def add(self, key: Any, weight: int) -> None:
        try:
            self.counts[key] = self.counts.get(key, 0) + weight
        except TypeError:  # an unhashable value (a list field): counted by its repr
            key = _shown(key)
            self.counts[key] = self.counts.get(key, 0) + weight
        self.total += weight
        if len(self.counts) > CAPACITY:
            self._forget()

    def _forget(self) -> None:
        kept = sorted(self.counts.items(), key=lambda kv: -kv[1])[:CAPACITY // 2]
        self.counts = dict(kept)

    def report(self, top: int = TOP) -> dict:
        """``{"total", "top": [[key as text, weight], ...]}``, heaviest first."""
        ranked = sorted(self.counts.items(), key=lambda kv: -kv[1])[:top]
        return {"total": self.total, "top": [[_shown(k), n] for k, n in ranked]}


def _shown(key: Any) -> str:
    text = key if isinstance(key, str) else repr(key)
    return text[:KEY_CHARS]


def merge_reports(reports: Iterable[Mapping[str, Any] | None], top: int = TOP) -> dict | None:
    """A component's hottest keys from its tasks' reports (as :meth:`HotKeys.report`
    gives them, or as this returns them): weights added per key, each key's ``share`` of
    every sampled tuple of the component.

    >>> m = merge_reports([{"total": 10, "top": [["a", 8], ["b", 2]]},
    ...                    {"total": 10, "top": [["c", 1]]}, None])
    >>> m["total"], m["top"][0], [k["share"] for k in m["top"]]
    (20, {'key': 'a', 'tuples': 8, 'share': 0.4}, [0.4, 0.1, 0.05])
    """
    known = [r for r in reports if isinstance(r, Mapping) and r.get("total")]
    if not known:
        return None
    total = sum(r["total"] for r in known)
    weights: dict[str, int] = {}
    for r in known:
        for item in r.get("top") or ():
            key, n = (item["key"], item["tuples"]) if isinstance(item, Mapping) else item
            weights[key] = weights.get(key, 0) + n
    ranked = sorted(weights.items(), key=lambda kv: -kv[1])[:top]
    return {"total": total, "top": [{"key": k, "tuples": n, "share": round(n / total, 4)}
                                    for k, n in ranked]}
