"""A windowed component's open windows dealt over a new number of tasks, for a rebalance
under checkpoints (issue 21; docs/internals/window-rebalance.md).

A windowed task's committed snapshot (``WindowedBolt.snapshot_windows``, with ``deal``
added by the task's checkpoint wrapper) holds its tuples, each with the source it came
from, and says how each input stream is grouped. :func:`split_windows` merges the
snapshots of a component's old tasks and deals every held tuple to the new task its
input's grouping sends its key to from now on: a fields grouping through the
component's key groups (:func:`~runtime.groupings.key_task`, as ``_rebalance.split``
deals keyed state), a shuffle round-robin, a global grouping to task index 0, an all
grouping a copy to every task. Each new task's window clock (reasons in the page):

- each input stream's latest timestamp: the highest over the old tasks (what any task
  saw of a stream is in the stream's past for all);
- the watermark: the lowest of the old tasks' (no window is evaluated early);
- a held tuple remembers its old task's watermark (``done``), or the higher mark it kept
  from an earlier split: a window ending at or before it was already evaluated with that
  tuple, and is not evaluated with it again;
- the next window end: the lowest of the old tasks' (none if one had none: the next
  evaluation starts from the earliest held tuple);
- the late and evaluated counters: summed onto the new task 0 (the component's totals
  stay right); the last window shown: the latest-ending one.

Count windows are not split (:func:`unsplittable` says why), nor the windows of an input
whose grouping gives no rule here (direct, partial key, custom).

>>> from runtime.model.api import TupleSource
>>> s = lambda *queue: {"sources": [["ev", 4, "default", ["k", "ts"]]],
...     "deal": [["ev", "default", "fields", [0]]],
...     "windows": {"version": 1, "seq": len(queue), "latest": [[["ev", "default"], 90]],
...                 "watermark": 50, "late": 1, "evaluated": 2, "last": [40, 50, 3],
...                 "next_end": 60, "counted": [0, -1], "since": 0, "previous": [],
...                 "expired": [], "to_ack": [], "last_tick": None,
...                 "queue": [[ts, i, [0, [k, ts]]] for i, (k, ts) in enumerate(queue)]}}
>>> parts, moved = split_windows([s(("a", 55), ("b", 60)), s(("c", 70))], 3)
>>> sorted(len(p["windows"]["queue"]) for p in parts), parts[0]["windows"]["late"]
([0, 1, 2], 2)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from math import inf
from typing import Any

from runtime.groupings import (
    KEY_GROUPS,
    AllGrouping,
    FieldsGrouping,
    GlobalGrouping,
    LocalOrShuffleGrouping,
    ShuffleGrouping,
    keyed_picker,
    label,
)
from runtime.model.windowing import Count, Window

from ._manager import SNAPSHOT_VERSION

# how a held tuple finds its new task, by the grouping of the input it came on
FIELDS = "fields"  # the task its key goes to: through the component's key groups
ANY = "any"  # any task: dealt round-robin (shuffle, local-or-shuffle)
FIRST = "first"  # the task of index 0 (global: the lowest task id, which a rebalance keeps)
EVERY = "every"  # every task, one copy (all: each old task held the same tuples)
_RULES = {FieldsGrouping: FIELDS, ShuffleGrouping: ANY, LocalOrShuffleGrouping: ANY,
          GlobalGrouping: FIRST, AllGrouping: EVERY}  # exact types: a subclass may choose


def deal_rules(inputs: Iterable) -> list[list]:
    """``[component, stream, rule, key indexes]`` for each input subscription (saved with
    every snapshot, so that the master can split it without the user's classes)."""
    return [[s.source, s.stream, _RULES.get(type(s.grouping)),
             list(getattr(s.grouping, "indexes", ()))] for s in inputs]


def unsplittable(window: Window | None, inputs: Iterable) -> str | None:
    """Why a rebalance may not split this windowed component's open windows, or None."""
    if window is not None and (isinstance(window.length, Count)
                               or isinstance(window.slide, Count)):
        return ("a count window's open windows are in the checkpoint, and which tuples a "
                "count window holds depends on one task's order of arrival: they cannot be "
                "split over a new number of tasks")
    for s in inputs:
        if type(s.grouping) not in _RULES:
            return (f"its input {s.source!r} (stream {s.stream!r}) is "
                    f"{label(s.grouping)}-grouped: the held tuples' new tasks cannot be "
                    "known, so its open windows in the checkpoint cannot be split over a "
                    "new number of tasks (fields, shuffle, global and all groupings can)")
    return None


def split_windows(saved: Sequence[Mapping | None], n: int,
                  groups: int = KEY_GROUPS) -> tuple[list[dict], int]:
    """The snapshots of a component's old tasks (by task index; None: saved nothing)
    merged and dealt to ``n`` new ones through ``groups`` key groups; and how many held
    tuples went to a task of another index."""
    old = [(i, s) for i, s in enumerate(saved) if s is not None]
    news = [_New() for _ in range(n)]
    deal = _Dealer(n, groups, min((i for i, _ in old), default=0))
    moved = 0
    for i, s in old:
        moved += _deal_one(i, s, news, deal)
    clock = _clock([s["windows"] for _, s in old])
    rules = old[0][1].get("deal") if old else None  # one component's: the same in every task
    return [{**new.snapshot(clock, first=j == 0), "deal": rules}
            for j, new in enumerate(news)], moved


def _deal_one(i: int, s: Mapping, news: list, deal: _Dealer) -> int:
    """Old task ``i``'s tuples to their new tasks; those that changed task index. The
    rule is looked up once per source of the snapshot, not per tuple (a rebalance waits
    for this: ``benchmarks/checkpoints.py --only split``)."""
    w, sources = s["windows"], s["sources"]
    rules = {(c, st): (rule, idx) for c, st, rule, idx in s.get("deal") or ()}
    routes = [deal.route(i, row, rules) for row in sources]
    index = [new.indexer(i, sources) for new in news]  # new task -> old source -> its own
    previous, moved = set(w["previous"]), 0
    kept, through = _marks(w)
    for ts, seq, (src, values) in w["queue"]:
        done = _mark(kept.get(seq), through)
        for j in routes[src](values):
            news[j].held.append((ts, i, seq, [index[j](src), values], done, seq in previous))
            moved += j != i
    for name in ("expired", "to_ack"):
        for src, values in w[name]:
            for j in routes[src](values):
                news[j].lists[name].append([index[j](src), values])
    return moved


def _marks(w: Mapping) -> tuple[dict, int | None]:
    """What the old task evaluated: the marks its tuples kept from an earlier split (by
    queue number), and the watermark up to which it evaluated every window itself
    (``through``; None when it was restored from a split and saved before its first tick,
    whose watermark is then no such bound). A second split from such a snapshot (or from
    the split's own checkpoint) must keep both, or a window an older task evaluated is
    evaluated again with only the tuples still held, or one nobody evaluated is skipped."""
    return dict(map(tuple, w.get("done", ()))), w.get("through", w["watermark"])


def _mark(kept: int | None, through: int | None) -> int | None:
    """A held tuple's mark for its new task: the higher of the two (None: neither)."""
    if kept is None or through is None:
        return through if kept is None else kept
    return max(kept, through)


class _Dealer:
    """Where the held tuples of one source go: a function of a tuple's values giving its
    new task indexes, by its input's rule."""

    def __init__(self, n: int, groups: int, first_old: int) -> None:
        self.n, self.groups, self.first_old, self.turn = n, groups, first_old, 0

    def route(self, old: int, source: list, rules: Mapping) -> Callable[[Any], Iterable[int]]:
        component, _, stream, _ = source
        rule, indexes = rules.get((component, stream), (None, ()))
        n, groups = self.n, self.groups
        if rule == FIELDS:  # the router's own pick (a one-field stream's value is bare)
            pick = keyed_picker(indexes, n, groups)
            return lambda values: (pick(values if type(values) is list else [values]),)
        if rule == ANY:
            return self._in_turn
        if rule == FIRST:
            return lambda values: (0,)
        if rule == EVERY:  # every old task held the same tuples: one old task's copy
            every = tuple(range(n)) if old == self.first_old else ()
            return lambda values: every
        raise ValueError(f"held tuples from {component!r} stream {stream!r} have no rule "
                         "to deal them by (a snapshot saved without its deal rules)")

    def _in_turn(self, values: Any) -> tuple[int]:
        self.turn += 1
        return ((self.turn - 1) % self.n,)


def _clock(snaps: list[Mapping]) -> dict:
    """Every new task's window clock, from the old tasks' (the module's doc says why)."""
    latest: dict = {}
    for w in snaps:
        for stream, ts in w["latest"]:
            key = tuple(stream) if isinstance(stream, list) else stream
            latest[key] = max(ts, latest.get(key, ts))
    marks = [w["watermark"] for w in snaps if w["watermark"] is not None]
    ends = [w["next_end"] for w in snaps]
    ticks = [w["last_tick"] for w in snaps if w["last_tick"] is not None]
    lasts = [w["last"] for w in snaps if w["last"] is not None]
    return {"latest": [[list(s) if isinstance(s, tuple) else s, ts] for s, ts in latest.items()],
            "watermark": min(marks, default=None),
            "next_end": None if None in ends or not ends else min(ends),
            "last_tick": max(ticks, default=None),
            "last": max(lasts, key=lambda last: -inf if last[1] is None else last[1],
                        default=None),
            "late": sum(w["late"] for w in snaps),
            "evaluated": sum(w["evaluated"] for w in snaps)}


class _New:
    """One new task's snapshot as it is dealt: its held tuples and its sources table."""

    def __init__(self) -> None:
        self.held: list[tuple] = []  # (ts, old task, old seq, item, done, in previous)
        self.lists: dict[str, list] = {"expired": [], "to_ack": []}
        self.sources: list[list] = []
        self._index: dict[tuple, int] = {}

    def indexer(self, old: int, sources: list) -> Callable[[int], int]:
        """Old task ``old``'s source index -> this task's (its table grows as needed)."""
        known: dict[int, int] = {}

        def index(src: int) -> int:
            i = known.get(src)
            if i is None:
                i = known[src] = self._source(sources[src])
            return i

        return index

    def _source(self, source: list) -> int:
        key = (source[0], source[1], source[2])
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.sources)
            self.sources.append(list(source))
        return i

    def snapshot(self, clock: Mapping, first: bool) -> dict:
        """The merged queue in timestamp order, numbered again in that order."""
        held = sorted(self.held)  # by (ts, old task, old seq): never a tie past them
        windows = {"version": SNAPSHOT_VERSION, "seq": len(held),
                   "queue": [[ts, k, item] for k, (ts, _, _, item, _, _) in enumerate(held)],
                   "latest": clock["latest"], "watermark": clock["watermark"],
                   "late": clock["late"] if first else 0,
                   "evaluated": clock["evaluated"] if first else 0, "last": clock["last"],
                   "next_end": clock["next_end"], "counted": [-inf, -1], "since": 0,
                   "previous": [k for k, h in enumerate(held) if h[5]],
                   "expired": self.lists["expired"], "to_ack": self.lists["to_ack"],
                   "last_tick": clock["last_tick"],
                   "done": [[k, h[4]] for k, h in enumerate(held) if h[4] is not None],
                   "through": None}  # it evaluated nothing yet: the marks say what was
        return {"sources": self.sources, "windows": windows}
