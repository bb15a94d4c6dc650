"""Cheap metrics: a log-scale latency histogram that every tuple can afford.

>>> h = LatencyHistogram()
>>> for ms in (1, 2, 3, 4, 100):
...     h.record(ms / 1000)
>>> s = h.summary()
>>> s["count"], 2.8 < s["p50"] < 3.3, 90 < s["p99"] < 110
(5, True, True)
"""

from __future__ import annotations

import math

STEPS_PER_DOUBLING = 8  # bucket width: a factor 2**(1/8), about 9 %
MIN_SECONDS = 1e-6  # latencies below a microsecond share the first bucket
BUCKETS = 8 * 32  # up to 2**32 microseconds (over an hour); longer ones share the last


class LatencyHistogram:
    """Counts latencies in buckets of constant relative width; percentiles to about 5 %."""

    __slots__ = ("counts", "count", "total")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.count = 0
        self.total = 0.0

    def record(self, seconds: float) -> None:
        i = int(math.log2(max(seconds, MIN_SECONDS) / MIN_SECONDS) * STEPS_PER_DOUBLING)
        self.counts[min(i, BUCKETS - 1)] += 1
        self.count += 1
        self.total += seconds

    def percentile(self, q: float) -> float | None:
        """The latency (seconds) below which a fraction ``q`` of the records fall."""
        if not self.count:
            return None
        rank, seen = q * self.count, 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank and n:
                return MIN_SECONDS * 2 ** ((i + 0.5) / STEPS_PER_DOUBLING)
        return None

    def summary(self) -> dict | None:
        """``{"count", "mean", "p50", "p95", "p99"}`` in milliseconds, or None if empty."""
        if not self.count:
            return None
        ms = {f"p{round(q * 100)}": self.percentile(q) * 1000 for q in (0.5, 0.95, 0.99)}
        return {"count": self.count, "mean": self.total / self.count * 1000, **ms}
