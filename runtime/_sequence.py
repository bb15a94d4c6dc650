"""A per-key sequence checker for chaos runs (as Flink's end-to-end tests check theirs).

A source emits, for each key, the values 0, 1, 2, ... in order; a sink feeds every
``(key, value)`` it receives to `SequenceChecker.see`, in arrival order. Under at-least-once
each value must arrive at least once: a value never seen is a *loss* (reported by key, as
ranges), a value seen again is a *duplicate*, and a value that arrives after a higher one of
its key arrived is *late* (a replay overtaken by newer values; no error under at-least-once,
where Storm keeps no order across a replay). Pure: no clock, no I/O.

Per key it keeps the contiguous prefix seen (one integer) and the values seen above it
(a set that stays small while values arrive roughly in order), so 100,000 values cost
little memory.

>>> c = SequenceChecker()
>>> for key, value in [("a", 0), ("a", 2), ("a", 1), ("a", 2), ("b", 0), ("b", 3)]:
...     c.see(key, value)
>>> r = c.report({"a": 4, "b": 4, "c": 1})
>>> r.lost, r.total_lost, r.duplicates, r.late, r.ok
({'a': [(3, 3)], 'b': [(1, 2)], 'c': [(0, 0)]}, 4, 1, 1, False)
>>> print(r)
3 keys, 6 values received (5 distinct): LOST 4 in 3 keys (a: 3; b: 1-2; c: 0), 1 duplicates, 1 late
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


class _Key:
    """What one key has received: ``prefix`` = every value below it was seen."""

    __slots__ = ("prefix", "above", "highest")

    def __init__(self) -> None:
        self.prefix = 0
        self.above: set[int] = set()
        self.highest = -1

    def see(self, value: int) -> tuple[bool, bool]:
        """Record ``value``; (a duplicate, late)."""
        if value < self.prefix or value in self.above:
            return True, False
        late = value < self.highest
        self.highest = max(self.highest, value)
        self.above.add(value)
        while self.prefix in self.above:
            self.above.remove(self.prefix)
            self.prefix += 1
        return False, late

    def missing(self, expected: int) -> list[tuple[int, int]]:
        """Ranges (first, last) of values below ``expected`` never seen."""
        gaps, start = [], None
        for v in range(self.prefix, expected):
            if v in self.above:
                if start is not None:
                    gaps.append((start, v - 1))
                    start = None
            elif start is None:
                start = v
        if start is not None:
            gaps.append((start, expected - 1))
        return gaps


@dataclass(frozen=True)
class SequenceReport:
    """What arrived: ``lost`` maps a key to the ranges (first, last) of its values that never
    arrived; ``beyond`` counts values at or above a key's expected count (a source's bug)."""

    keys: int
    received: int  # every value seen, duplicates included
    distinct: int
    duplicates: int  # received - distinct: what replays cost
    late: int  # first arrivals below a higher value of the same key
    lost: Mapping[Hashable, list[tuple[int, int]]] = field(default_factory=dict)
    beyond: int = 0

    @property
    def total_lost(self) -> int:
        return sum(last - first + 1 for gaps in self.lost.values() for first, last in gaps)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing unexpected: at-least-once held."""
        return self.total_lost == 0 and self.beyond == 0

    def __str__(self) -> str:
        head = f"{self.keys} keys, {self.received} values received ({self.distinct} distinct)"
        if self.total_lost:
            some = sorted(self.lost.items(), key=lambda kv: str(kv[0]))[:5]
            where = "; ".join(f"{k}: " + ", ".join(_span(g) for g in gaps[:3])
                              for k, gaps in some)
            more = ", ..." if len(self.lost) > 5 else ""
            head += f": LOST {self.total_lost} in {len(self.lost)} keys ({where}{more})"
        else:
            head += ": 0 lost"
        tail = f", {self.beyond} beyond the expected counts" if self.beyond else ""
        return f"{head}, {self.duplicates} duplicates, {self.late} late{tail}"


def _span(gap: tuple[int, int]) -> str:
    return str(gap[0]) if gap[0] == gap[1] else f"{gap[0]}-{gap[1]}"


class SequenceChecker:
    """Feed it ``see(key, value)`` in arrival order, then ask for a `report`."""

    def __init__(self) -> None:
        self._keys: dict[Hashable, _Key] = {}
        self.received = self.duplicates = self.late = 0

    def see(self, key: Hashable, value: int) -> None:
        if type(value) is not int or value < 0:
            raise ValueError(f"key {key!r}: a sequence value is an integer >= 0, not {value!r}")
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key()
        duplicate, late = state.see(value)
        self.received += 1
        self.duplicates += duplicate
        self.late += late

    def see_all(self, pairs) -> SequenceChecker:
        for key, value in pairs:
            self.see(key, value)
        return self

    def report(self, expected: Mapping[Hashable, int]) -> SequenceReport:
        """Check against ``expected``: key -> how many values (0 .. n-1) it must deliver. A key
        received but not expected has all its values counted ``beyond``."""
        lost = {}
        for key, n in expected.items():
            gaps = self._keys[key].missing(n) if key in self._keys else ([(0, n - 1)] if n else [])
            if gaps:
                lost[key] = gaps
        beyond = sum(_beyond(s, expected.get(k, 0)) for k, s in self._keys.items())
        return SequenceReport(len(expected.keys() | self._keys.keys()), self.received,
                              self.received - self.duplicates, self.duplicates, self.late,
                              lost, beyond)


def _beyond(state: _Key, expected: int) -> int:
    """Distinct values of a key at or above its expected count."""
    return max(0, state.prefix - expected) + sum(1 for v in state.above if v >= expected)
