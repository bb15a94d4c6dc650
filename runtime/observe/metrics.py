"""Cheap metrics: a log-scale latency histogram that every tuple can afford.

Buckets are fixed (a constant relative width), so two histograms of the same latency
add bucket by bucket: an instance reports its cumulative buckets (sparse: only those
counted), and the master subtracts and adds them to answer for any window.

>>> h = LatencyHistogram()
>>> for ms in (1, 2, 3, 4, 100):
...     h.record(ms / 1000)
>>> s = h.summary()
>>> s["count"], 2.8 < s["p50"] < 3.3, 90 < s["p99"] < 110
(5, True, True)
>>> h.record(0.002, 10)  # ten tuples of a batch, 2 ms each: one call
>>> h.count, summarise(h.sparse(), h.total)["count"]
(15, 15)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping

STEPS_PER_DOUBLING = 8  # bucket width: a factor 2**(1/8), about 9 %
MIN_SECONDS = 1e-6  # latencies below a microsecond share the first bucket
BUCKETS = 8 * 32  # up to 2**32 microseconds (over an hour); longer ones share the last
QUANTILES = (0.5, 0.95, 0.99)


# the lower edge of every bucket but the first: bucket(s) is how many of them s reaches
_EDGES = [MIN_SECONDS * 2 ** (i / STEPS_PER_DOUBLING) for i in range(1, BUCKETS)]


def bucket(seconds: float) -> int:
    """The bucket a latency falls in.

    >>> bucket(0), bucket(1e-6), bucket(2e-6), bucket(1e9)
    (0, 0, 8, 255)
    """
    return bisect_right(_EDGES, seconds)


def bucket_seconds(i: int) -> float:
    """The middle of bucket ``i`` (geometric), in seconds: what a percentile reports."""
    return MIN_SECONDS * 2 ** ((i + 0.5) / STEPS_PER_DOUBLING)


class LatencyHistogram:
    """Counts latencies in buckets of constant relative width; percentiles to about 5 %."""

    __slots__ = ("counts", "count", "total")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.count = 0
        self.total = 0.0

    def record(self, seconds: float, n: int = 1) -> None:
        """``n`` latencies of ``seconds`` each (a batch's tuples, counted in one call)."""
        self.counts[bucket(seconds)] += n
        self.count += n
        self.total += seconds * n

    def record_each(self, latencies: list[float]) -> None:
        """One record per latency (a spout's acked roots, per frame): sorted once, then
        counted bucket by bucket with a binary search per bucket spanned, in C.

        >>> h = LatencyHistogram(); h.record_each([0.002, 0.001, 0.001])
        >>> h.count, h.counts[bucket(0.001)], h.counts[bucket(0.002)]
        (3, 2, 1)
        """
        if not latencies:
            return
        ordered = sorted(latencies)  # nearly in order already: acks come back as sent
        counts, start = self.counts, 0
        first, last = bucket(ordered[0]), bucket(ordered[-1])
        for i in range(first, last):
            end = bisect_left(ordered, _EDGES[i], start)
            counts[i] += end - start
            start = end
        counts[last] += len(ordered) - start
        self.count += len(ordered)
        self.total += sum(ordered)

    def record_since(self, starts: list[float], now: float) -> None:
        """One record per start time, ``now - start`` long: what ``record_each`` of those
        latencies records, without making them (a spout's acked roots: their emit times).
        The starts are sorted once; each bucket spanned is one binary search.

        >>> h, g = LatencyHistogram(), LatencyHistogram()
        >>> h.record_since([9.998, 9.999, 9.999], now=10.0)
        >>> g.record_each([0.002, 0.001, 0.001])
        >>> h.counts == g.counts, h.count, round(h.total, 6)
        (True, 3, 0.004)
        """
        if not starts:
            return
        ordered = sorted(starts)  # nearly in order already: acks come back as sent
        counts, end = self.counts, len(ordered)
        first, last = bucket(now - ordered[-1]), bucket(now - ordered[0])
        for i in range(first, last):  # a latency is under _EDGES[i]: it started after
            start = bisect_right(ordered, now - _EDGES[i], 0, end)
            counts[i] += end - start
            end = start
        counts[last] += end
        self.count += len(ordered)
        self.total += now * len(ordered) - sum(ordered)

    def percentile(self, q: float) -> float | None:
        """The latency (seconds) below which a fraction ``q`` of the records fall."""
        return percentile(enumerate(self.counts), self.count, q)

    def summary(self) -> dict | None:
        """``{"count", "mean", "p50", "p95", "p99"}`` in milliseconds, or None if empty."""
        return summarise(self.sparse(), self.total)

    def sparse(self) -> dict[int, int]:
        """The counted buckets only, ``{bucket: count}``: what a statistics report carries."""
        return {i: n for i, n in enumerate(self.counts) if n}


def percentile(counts: Iterable[tuple[int, int]], count: int, q: float) -> float | None:
    """The ``q`` percentile (seconds) of ``(bucket, count)`` pairs in bucket order."""
    if not count:
        return None
    rank, seen = q * count, 0
    for i, n in counts:
        seen += n
        if seen >= rank and n:
            return bucket_seconds(i)
    return None


def summarise(buckets: Mapping[int, int], total: float | None = None) -> dict | None:
    """Count, mean and percentiles (ms) of sparse buckets; the mean is exact when the sum
    of the latencies (``total``, seconds) is known, else taken from the bucket middles.

    >>> summarise({8: 3, 16: 1})["count"], summarise({}) is None
    (4, True)
    """
    items = sorted((int(i), n) for i, n in buckets.items() if n > 0)
    count = sum(n for _, n in items)
    if not count:
        return None
    if total is None:
        total = sum(bucket_seconds(i) * n for i, n in items)
    out = {"count": count, "mean": total / count * 1000}
    out.update({f"p{round(q * 100)}": percentile(items, count, q) * 1000 for q in QUANTILES})
    return out


def subtract(now: Mapping[int, int], before: Mapping[int, int]) -> dict[int, int]:
    """What each bucket grew by (cumulative buckets of one incarnation); a bucket that went
    down means the counting restarted, so all of ``now`` is new.

    >>> subtract({1: 5, 2: 3}, {1: 2}), subtract({1: 1}, {1: 4, 2: 1})
    ({1: 3, 2: 3}, {1: 1})
    """
    if any(n < before.get(i, 0) for i, n in now.items()) or any(
            i not in now for i in before):
        return {i: n for i, n in now.items() if n}
    return {i: n - before.get(i, 0) for i, n in now.items() if n - before.get(i, 0)}


def merge(into: dict[int, int], more: Mapping[int, int]) -> dict[int, int]:
    """Add ``more``'s buckets into ``into`` (returned)."""
    for i, n in more.items():
        into[i] = into.get(i, 0) + n
    return into
