"""The metrics manager's store: counters over time windows, as Heron's UI shows them.

Pure: it is fed the statistics records the instances report (cumulative counters since
each incarnation started) with ``now`` in the master's clock, and answers with plain
dicts. Per task it keeps the counters' deltas per second for the last 10 minutes and per
minute for the last 3 hours (two bounded rings), and totals since the first report.

A new incarnation's counters start again from 0, and a counter that goes down is taken
as restarted from 0 too: no delta is ever negative.

>>> store = MetricsStore()
>>> store.add(7, 0, {"component": "sink", "kind": "bolt", "executed": 100,
...                  "busy_seconds": 0.5}, now=10.0)
>>> store.add(7, 1, {"component": "sink", "kind": "bolt", "executed": 30}, now=20.0)
>>> m = store.instance(7, "all", now=20.0)
>>> m["executed"], m["executed_per_s"], m["capacity"], m["execute_latency_ms"]
(130, 13.0, 0.05, 3.846)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from .hotkeys import merge_reports
from .metrics import merge, subtract
from .metrics import summarise as summarise_buckets
from .watermarks import combine_windows

COUNTERS = ("emitted", "executed", "acked", "failed", "timed_out", "busy_seconds",
            "cpu_seconds", "held_seconds")
RATES = ("emitted", "executed", "acked", "failed")  # counters also given per second
WINDOWS: dict[str, float | None] = {"1m": 60.0, "10m": 600.0, "1h": 3600.0,
                                    "3h": 10800.0, "all": None}
SECONDS_KEPT = 600  # per-second buckets: the last 10 minutes
MINUTES_KEPT = 180  # per-minute buckets: the last 3 hours
SPOUT_GAUGES = ("pending", "max_spout_pending", "complete_latency_ms", "latency_bounded")
GAUGES = ("pending_emits", "queued_tuples", "sm_queued_bytes", "sm_queued_frames")  # latest
HISTOGRAMS = ("execute", "process", "complete")  # latency histograms a record may carry
STREAMS = "streams"  # kept beside them: tuples emitted per stream ({name: count} merges too)
MIN_SPAN = 1e-3  # seconds: the shortest span a rate is computed over


def window_seconds(window: str) -> float | None:
    """The length of a named window in seconds (None: since start).

    >>> window_seconds("10m"), window_seconds("all")
    (600.0, None)
    >>> window_seconds("5m")
    Traceback (most recent call last):
    ValueError: unknown metrics window '5m'; the windows are 1m, 10m, 1h, 3h, all
    """
    try:
        return WINDOWS[window]
    except (KeyError, TypeError):
        raise ValueError(f"unknown metrics window {window!r}; the windows are "
                         f"{', '.join(WINDOWS)}") from None


def deltas(values: list[float], last: list[float]) -> list[float]:
    """What each counter grew by; one that went down restarted from 0.

    >>> deltas([5, 3, 0.5], [2, 7, 0.25])
    [3, 3, 0.25]
    """
    return [v - old if v >= old else v for v, old in zip(values, last)]


class Ring:
    """Counter deltas summed in buckets of ``width`` seconds; the ``size`` latest kept.

    A report tells what happened up to the moment it was sent, so a bucket ``t`` holds
    the reports sent in ``(t, t + width]``.

    >>> r = Ring(1.0, 2)
    >>> for t in (0.1, 0.9, 1.5, 2.2):
    ...     r.add([1], t)
    >>> list(r.buckets), r.since(1.0), r.since(1.5)
    ([(1.0, [1]), (2.0, [1])], [2], [1])
    """

    __slots__ = ("width", "buckets")

    def __init__(self, width: float, size: int) -> None:
        self.width = width
        self.buckets: deque[tuple[float, list]] = deque(maxlen=size)

    def add(self, values: list, now: float) -> None:
        start = math.ceil(now / self.width) * self.width - self.width
        if self.buckets and start <= self.buckets[-1][0]:  # same bucket (or a clock step back)
            row = self.buckets[-1][1]
            for i, v in enumerate(values):
                row[i] += v
        else:
            self.buckets.append((start, list(values)))

    def points(self, since: float) -> list[tuple[float, list]]:
        """The buckets that start at ``since`` or later, oldest first: a window of
        ``n`` widths is ``n`` buckets, the current (partly filled) one included."""
        return [(t, row) for t, row in self.buckets if t >= since]

    def since(self, since: float) -> list:
        """The sum of each counter over the buckets that start at ``since`` or later."""
        rows = [row for _, row in self.points(since)]
        return [sum(column) for column in zip(*rows)] if rows else [0] * len(COUNTERS)


class HistogramRing:
    """Histogram deltas (``{name: {bucket: count}}``) merged in buckets of ``width``
    seconds; the ``size`` latest kept. Sparse: a second with no tuples holds nothing.

    >>> r = HistogramRing(1.0, 2)
    >>> r.add({"execute": {3: 1}}, 0.5); r.add({"execute": {3: 2, 4: 1}}, 0.7)
    >>> r.add({"execute": {5: 1}}, 1.5)
    >>> r.since(0.0), r.since(1.0)
    ({'execute': {3: 3, 4: 1, 5: 1}}, {'execute': {5: 1}})
    """

    __slots__ = ("width", "buckets")

    def __init__(self, width: float, size: int) -> None:
        self.width = width
        self.buckets: deque[tuple[float, dict]] = deque(maxlen=size)

    def add(self, hists: Mapping[str, Mapping[int, int]], now: float) -> None:
        if not any(hists.values()):
            return
        start = math.ceil(now / self.width) * self.width - self.width
        if not self.buckets or start > self.buckets[-1][0]:
            self.buckets.append((start, {}))
        merge_histograms(self.buckets[-1][1], hists)

    def since(self, since: float) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for t, hists in self.buckets:
            if t >= since:
                merge_histograms(out, hists)
        return out


def merge_histograms(into: dict, more: Mapping[str, Mapping[int, int]]) -> dict:
    """Add each named histogram of ``more`` into ``into`` (returned)."""
    for name, buckets in more.items():
        if buckets:
            merge(into.setdefault(name, {}), buckets)
    return into


def latency_summaries(hists: Mapping[str, Mapping[int, int]]) -> dict:
    """``{"execute", "process", "complete"}``: count, mean, p50, p95, p99 in ms (or None)."""
    return {name: summarise_buckets(hists.get(name) or {}) for name in HISTOGRAMS}


class TaskSeries:
    """One task's counters: deltas per second and per minute, totals, latest record."""

    __slots__ = ("incarnation", "last", "totals", "seconds", "minutes", "latest",
                 "hist_last", "hist_totals", "hist_seconds", "hist_minutes")

    def __init__(self) -> None:
        self.incarnation: int | None = None
        self.last = [0] * len(COUNTERS)
        self.totals = [0] * len(COUNTERS)
        self.seconds = Ring(1.0, SECONDS_KEPT)
        self.minutes = Ring(60.0, MINUTES_KEPT)
        self.latest: Mapping[str, Any] = {}
        self.hist_last: dict[str, Mapping[int, int]] = {}
        self.hist_totals: dict[str, dict[int, int]] = {}
        self.hist_seconds = HistogramRing(1.0, SECONDS_KEPT)
        self.hist_minutes = HistogramRing(60.0, MINUTES_KEPT)

    def add(self, incarnation: int, record: Mapping[str, Any], now: float) -> None:
        if incarnation != self.incarnation:  # a new process: its counters start at 0
            self.incarnation, self.last = incarnation, [0] * len(COUNTERS)
            self.hist_last = {}
        values = [record.get(c) or 0 for c in COUNTERS]
        if self.last is None:  # adopted: what it did before, a master that died counted
            self.last, self.latest = values, record
            self.hist_last = {**(record.get("histograms") or {}),
                              STREAMS: record.get("stream_emitted") or {}}
            return
        grown = deltas(values, self.last)
        self.last, self.latest = values, record
        self.totals = [a + b for a, b in zip(self.totals, grown)]
        self.seconds.add(grown, now)
        self.minutes.add(grown, now)
        self._add_histograms({**(record.get("histograms") or {}),
                              STREAMS: record.get("stream_emitted") or {}}, now)

    def _add_histograms(self, hists: Mapping[str, Mapping[int, int]], now: float) -> None:
        """Cumulative buckets of this incarnation -> what grew since the last report."""
        grown = {name: subtract(buckets, self.hist_last.get(name, {}))
                 for name, buckets in hists.items() if name in HISTOGRAMS or name == STREAMS}
        self.hist_last = {**self.hist_last, **hists}
        merge_histograms(self.hist_totals, grown)
        self.hist_seconds.add(grown, now)
        self.hist_minutes.add(grown, now)

    def histograms(self, window: float | None, now: float) -> dict[str, dict[int, int]]:
        """Each latency histogram's growth over the window, as :meth:`counts`."""
        if window is None:
            return merge_histograms({}, self.hist_totals)
        ring = self.hist_seconds if window <= SECONDS_KEPT else self.hist_minutes
        return ring.since(now - window)

    def counts(self, window: float | None, now: float) -> list:
        """Each counter's growth over the last ``window`` seconds (None: since start);
        windows over 10 minutes are counted to the minute."""
        if window is None:
            return list(self.totals)
        ring = self.seconds if window <= SECONDS_KEPT else self.minutes
        return ring.since(now - window)


class MetricsStore:
    """Every task's :class:`TaskSeries`, and the summaries the client asks for."""

    def adopted(self, task: int, incarnation: int) -> None:
        """A master replacing one that died: ``task``'s running incarnation counts from
        its next report on (a baseline), not from its start (no spike in the rates)."""
        series = self.tasks[task] = TaskSeries()
        series.incarnation, series.last = incarnation, None

    def __init__(self) -> None:
        self.tasks: dict[int, TaskSeries] = {}
        # when the work started: the last report before the first one that counted a
        # tuple (a topology takes seconds to start; rates and capacity over that time
        # would be diluted by it)
        self.started: float | None = None
        self.idle_since: float | None = None  # the latest report before any work

    def add(self, task: int, incarnation: int, record: Mapping[str, Any], now: float) -> None:
        """One statistics report of ``task``'s current incarnation."""
        if self.started is None:
            if record.get("emitted") or record.get("executed"):
                self.started = now if self.idle_since is None else self.idle_since
            else:
                self.idle_since = now
        self.tasks.setdefault(task, TaskSeries()).add(incarnation, record, now)

    def span(self, window: float | None, now: float) -> float:
        """The seconds a window's counts cover: at most the time since the work started."""
        since = now - (now if self.started is None else self.started)
        return max(MIN_SPAN, since if window is None else min(window, since))

    def instance(self, task: int, window: str, now: float,
                 info: Mapping[str, Any] | None = None) -> dict:
        """One task's metrics over ``window``; ``info`` adds what the master knows
        (component, kind, state, restarts) for a task that has not reported yet."""
        series = self.tasks.get(task, TaskSeries())
        counts = series.counts(window_seconds(window), now)
        latest = {**series.latest, **(info or {})}  # the master's state and restarts win
        span = self.span(window_seconds(window), now)
        out = summarise(dict(zip(COUNTERS, counts)), span, latest,
                        (info or {}).get("restarts", 0))
        hists = series.histograms(window_seconds(window), now)
        out["latency_ms"] = latency_summaries(hists)
        out["stream_emitted_per_s"] = {name: round(n / span, 3)
                                       for name, n in sorted(hists.get(STREAMS, {}).items())}
        return out

    def component_latency(self, tasks: Iterable[int], window: str, now: float) -> dict:
        """A component's latency percentiles: its instances' histograms merged (fixed
        buckets add up, so these are true percentiles of all its tuples)."""
        merged: dict[str, dict[int, int]] = {}
        for task in tasks:
            series = self.tasks.get(task)
            if series is not None:
                merge_histograms(merged, series.histograms(window_seconds(window), now))
        return latency_summaries(merged)

    def series(self, tasks: Iterable[int], window: str, now: float) -> list[tuple]:
        """``(t, executed_per_s, emitted_per_s)`` summed over ``tasks``, oldest first:
        per second for windows up to 10 minutes, otherwise per minute (the last 3 hours
        at most). ``t`` is the start of the bucket, in the clock of ``now``."""
        seconds = window_seconds(window)
        fine = seconds is not None and seconds <= SECONDS_KEPT
        since = now - (seconds if seconds is not None else MINUTES_KEPT * 60.0)
        ex, em = COUNTERS.index("executed"), COUNTERS.index("emitted")
        summed: dict[float, list] = {}
        for task in tasks:
            series = self.tasks.get(task)
            if series is None:
                continue
            ring = series.seconds if fine else series.minutes
            for t, row in ring.points(since):
                point = summed.setdefault(t, [0, 0])
                point[0] += row[ex]
                point[1] += row[em]
        width = 1.0 if fine else 60.0
        return [(t, x / width, e / width) for t, (x, e) in sorted(summed.items())]

    def answer(self, tasks: Mapping[int, Mapping[str, Any]], window: str, now: float,
               wall: float | None = None,
               containers: Mapping[int, Mapping[str, Any]] | None = None) -> dict:
        """What ``running.metrics(window)`` returns (see :meth:`RunningTopology.metrics`).
        ``tasks`` maps each task of the plan to what the master knows of it; ``wall``,
        the wall-clock time at ``now``, turns series times into wall-clock times."""
        window_seconds(window)
        instances = {t: self.instance(t, window, now, info) for t, info in tasks.items()}
        by_component: dict[str, list[int]] = {}
        for t, info in tasks.items():
            by_component.setdefault(info["component"], []).append(t)
        shift = 0.0 if wall is None else wall - now
        components = {c: combine([instances[t] for t in ts]) for c, ts in by_component.items()}
        for c, ts in by_component.items():
            components[c]["latency_ms"] = self.component_latency(ts, window, now)
        return {"window": window,
                "components": components,
                "instances": instances,
                "containers": dict(containers or {}),
                "series": {c: [(t + shift, x, e) for t, x, e in self.series(ts, window, now)]
                           for c, ts in by_component.items()}}


def summarise(counts: Mapping[str, float], span: float, latest: Mapping[str, Any],
              restarts: int = 0) -> dict:
    """One instance's window: counts, rates, capacity, latency, CPU, RSS (and gauges).

    >>> m = summarise({"executed": 200, "emitted": 100, "busy_seconds": 0.5,
    ...                "cpu_seconds": 1.0}, 10.0, {"kind": "bolt", "rss_bytes": 4096})
    >>> m["executed_per_s"], m["capacity"], m["execute_latency_ms"], m["cpu_percent"]
    (20.0, 0.05, 2.5, 10.0)
    """
    busy, executed = counts.get("busy_seconds", 0), counts.get("executed", 0)
    out: dict[str, Any] = {"component": latest.get("component"), "kind": latest.get("kind"),
                           "state": latest.get("state"), "restarts": restarts,
                           "seconds": round(span, 3)}
    out.update({c: counts.get(c, 0) for c in COUNTERS})
    out.update({f"{c}_per_s": round(counts.get(c, 0) / span, 3) for c in RATES})
    out["capacity"] = round(min(1.0, busy / span), 4)
    out.update(time_shares(busy, counts.get("held_seconds", 0), span))
    out["execute_latency_ms"] = round(busy / executed * 1000, 3) if executed else None
    out["cpu_percent"] = round(counts.get("cpu_seconds", 0) / span * 100, 2)
    out["rss_bytes"] = latest.get("rss_bytes") or 0
    out.update({g: latest.get(g) or 0 for g in GAUGES})
    if latest.get("hot_keys"):  # sampled, since the incarnation started (observe/hotkeys.py)
        out["hot_keys"] = merge_reports([latest["hot_keys"]])
    if latest.get("kind") == "spout":
        out.update({g: latest.get(g) for g in SPOUT_GAUGES})
    if latest.get("window") is not None:  # a windowed bolt: its latest windows
        out["window"] = latest["window"]
    return out


def time_shares(busy: float, held: float, span: float) -> dict:
    """Flink's time accounting: milliseconds per second busy (in ``process`` or
    ``next_tuple``), held (output waiting: backpressured) and idle (the rest).

    >>> time_shares(0.5, 0.2, 2.0)
    {'busy_ms_per_s': 250.0, 'held_ms_per_s': 100.0, 'idle_ms_per_s': 650.0}
    """
    busy_ms = min(1000.0, busy / span * 1000)
    held_ms = min(1000.0 - busy_ms, held / span * 1000)
    return {"busy_ms_per_s": round(busy_ms, 1), "held_ms_per_s": round(held_ms, 1),
            "idle_ms_per_s": round(1000.0 - busy_ms - held_ms, 1)}


def skew(values: list[float]) -> float:
    """Max over mean: 1.0 when the tasks share the work evenly, n when one does it all.

    >>> skew([10, 10]), skew([30, 10, 0, 0]), skew([0, 0])
    (1.0, 3.0, 1.0)
    """
    mean = sum(values) / len(values) if values else 0
    return round(max(values) / mean, 3) if mean > 0 else 1.0


def combine(instances: list[dict]) -> dict:
    """A component from its instances: counts, rates, CPU, RSS, restarts and pending are
    summed; capacity is the busiest instance's (Storm's UI); execute latency is busy time
    over executed tuples; complete latency percentiles are the slowest instance's.

    >>> a = summarise({"executed": 10, "busy_seconds": 0.1}, 1.0, {"kind": "bolt"})
    >>> b = summarise({"executed": 30, "busy_seconds": 0.5}, 1.0, {"kind": "bolt"})
    >>> c = combine([a, b])
    >>> c["executed"], c["capacity"], c["execute_latency_ms"], c["instances"]
    (40, 0.5, 15.0, 2)
    """
    first = instances[0]
    out: dict[str, Any] = {"kind": first["kind"], "instances": len(instances),
                           "seconds": first["seconds"]}
    for key in (*COUNTERS, *(f"{c}_per_s" for c in RATES), "cpu_percent", "rss_bytes",
                "restarts", *GAUGES):
        out[key] = _sum(i[key] for i in instances)
    out["capacity"] = max(i["capacity"] for i in instances)
    for key in ("busy_ms_per_s", "held_ms_per_s", "idle_ms_per_s"):  # a task's mean
        out[key] = round(sum(i.get(key, 0) for i in instances) / len(instances), 1)
    out["skew"] = {"executed": skew([i["executed"] for i in instances]),
                   "busy": skew([i["busy_seconds"] for i in instances])}
    hot = merge_reports([i.get("hot_keys") for i in instances])
    if hot is not None:
        out["hot_keys"] = hot
    by_stream: dict[str, float] = {}
    for i in instances:
        merge(by_stream, i.get("stream_emitted_per_s") or {})
    out["stream_emitted_per_s"] = {name: round(n, 6) for name, n in sorted(by_stream.items())}
    if any(i.get("window") for i in instances):
        out["window"] = combine_windows(i.get("window") for i in instances)
    executed = out["executed"]
    out["execute_latency_ms"] = (round(out["busy_seconds"] / executed * 1000, 3)
                                 if executed else None)
    if first["kind"] == "spout":
        out["pending"] = _sum(i.get("pending") or 0 for i in instances)
        limits = [i.get("max_spout_pending") for i in instances]
        out["max_spout_pending"] = (None if any(v is None for v in limits) else sum(limits))
        out["latency_bounded"] = any(i.get("latency_bounded") for i in instances)
        out["complete_latency_ms"] = slowest([i.get("complete_latency_ms")
                                              for i in instances])
    return out


def slowest(summaries: list[Mapping[str, float] | None]) -> dict | None:
    """Complete latency of a component: the total count, the count-weighted mean, and
    each percentile of its slowest instance (percentiles of summaries do not merge).

    >>> slowest([{"count": 1, "mean": 2.0, "p50": 2, "p95": 3, "p99": 4},
    ...          {"count": 3, "mean": 6.0, "p50": 5, "p95": 6, "p99": 7}, None])
    {'count': 4, 'mean': 5.0, 'p50': 5, 'p95': 6, 'p99': 7}
    """
    known = [s for s in summaries if s and s.get("count")]
    if not known:
        return None
    count = sum(s["count"] for s in known)
    out = {"count": count, "mean": sum(s["count"] * s["mean"] for s in known) / count}
    out.update({p: max(s[p] for s in known) for p in ("p50", "p95", "p99")})
    return out


def _sum(values: Iterable[float]) -> float:
    """A sum rounded to hide float noise (counts stay ints)."""
    total = sum(values)
    return total if isinstance(total, int) else round(total, 6)
