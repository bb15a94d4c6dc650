"""Retry backoff: how long a failed message waits before its replay. Pure, no clock.

A poison message (one a bolt fails every time, or one that times out because processing it
hangs) replayed at once fails again at once: it burns the spout's in-flight slots and the
bolts' time in a tight loop. As Storm's Kafka spout does (its exponential-backoff retry
service), the n-th failure of a message waits ``first * 2**(n-1)`` seconds, at most ``cap``,
before it is replayed; ``max_retries`` still decides when it is dead-lettered instead.

The spouts take the two numbers as ``retry_delay`` (``first``) and ``retry_delay_max``
(``cap``); a spout of one's own that replays in ``fail`` can keep its failed ids in a
`ReplaySchedule` and emit ``due(now)`` first in ``next_tuple``.

>>> b = Backoff(first=0.5, cap=3.0)
>>> [b.delay(n) for n in (1, 2, 3, 4, 5)]
[0.5, 1.0, 2.0, 3.0, 3.0]
>>> s = ReplaySchedule(b)
>>> s.add("a", failures=1, now=10.0), s.add("b", failures=3, now=10.0), s.due(10.4)
(10.5, 12.0, [])
>>> s.due(11.0), len(s), s.due(12.0), len(s)
(['a'], 1, ['b'], 0)
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any

DEFAULT_RETRY_DELAY = 0.1  # seconds before the first replay of a failed message
DEFAULT_RETRY_DELAY_MAX = 10.0  # seconds: the longest wait, however often it failed


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with a cap: ``delay(n)`` seconds after the n-th failure."""

    first: float = DEFAULT_RETRY_DELAY
    cap: float = DEFAULT_RETRY_DELAY_MAX

    def __post_init__(self) -> None:
        problem = backoff_problem(self.first, self.cap)
        if problem:
            raise ValueError(problem)

    def delay(self, failures: int) -> float:
        """Seconds to wait after a message's ``failures``-th failure (0 before any)."""
        if failures < 1 or self.first == 0:
            return 0.0
        return min(self.cap, self.first * 2.0 ** min(failures - 1, 64))  # 2**64: no overflow


def backoff_problem(first: Any, cap: Any) -> str | None:
    """What is wrong with ``retry_delay=first, retry_delay_max=cap`` (None: nothing)."""
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (first, cap))
    if not numbers or first < 0 or cap < first:
        return (f"retry_delay must be a number of seconds >= 0 and retry_delay_max one >= "
                f"retry_delay, not {first!r} and {cap!r}")
    return None


class ReplaySchedule:
    """Failed message ids waiting for their replay time, earliest first (ties: in order)."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._heap: list[tuple[float, int, Any]] = []
        self._order = itertools.count()  # msg ids need not be comparable

    def add(self, msg_id: Any, failures: int, now: float) -> float:
        """Schedule ``msg_id`` after its ``failures``-th failure; returns when it is due."""
        due = now + self.backoff.delay(failures)
        heapq.heappush(self._heap, (due, next(self._order), msg_id))
        return due

    def due(self, now: float, limit: int | None = None) -> list:
        """Take the ids whose time has come (at most ``limit``), earliest first."""
        out = []
        while self._heap and self._heap[0][0] <= now and (limit is None or len(out) < limit):
            out.append(heapq.heappop(self._heap)[2])
        return out

    def drain(self) -> list:
        """Take every id, due or not (the spout is closing: hand them back to the source)."""
        out = [entry[2] for entry in sorted(self._heap)]
        self._heap.clear()
        return out

    def __len__(self) -> int:
        return len(self._heap)
