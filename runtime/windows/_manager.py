"""The windows of one bolt task, as pure logic: tuples in, evaluated windows and expired
tuples out. Nothing here reads a clock; processing time comes in as ``now_ms``.

Storm's semantics (docs/windows.md): a window ending at ``end`` holds the tuples with
``end - length < ts <= end`` (Duration length) or the last ``n`` tuples with ``ts <=
end`` (Count length). Tuples it no longer needs are evicted from the front of a queue
kept in timestamp order, and handed back to be acked. An empty window is never
evaluated: in event time the next window end is found from the next tuple (Storm's
"time gaps").

>>> from runtime.model.windowing import Count, Window
>>> m = WindowManager(Window.sliding(Count(3), Count(2)), inputs=[("s", "default")])
>>> [w.tuples for w in m.add("a", ("s", "default"), None, 0)]
[]
>>> [w.tuples for w in m.add("b", ("s", "default"), None, 1)]
[['a', 'b']]
>>> _ = m.add("c", ("s", "default"), None, 2); w, = m.add("d", ("s", "default"), None, 3)
>>> w.tuples, w.new, w.expired
(['b', 'c', 'd'], ['c', 'd'], ['a'])
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from math import inf
from operator import itemgetter
from typing import Any

from runtime.model.windowing import Count, Duration, Window

_KEY = itemgetter(0, 1)  # a queue entry's (timestamp, arrival sequence)
_LAST = inf  # a reference key's sequence part: after every tuple of the same timestamp
SNAPSHOT_VERSION = 1  # the layout of WindowManager.snapshot; a change bumps it


def _same(item: Any) -> Any:
    return item


def _plain(key: Hashable) -> Any:
    """An input stream's key as msgpack keeps it: a tuple becomes a list."""
    return list(key) if isinstance(key, tuple) else key


def _hashable(key: Any) -> Hashable:
    return tuple(key) if isinstance(key, list) else key


@dataclass
class WindowView:
    """One evaluated window, as ``process_window`` sees it: ``tuples`` in it, the ``new``
    ones since the last evaluation, the ones ``expired`` since then (already out), and
    the event-time bounds ``start`` (exclusive) and ``end`` in ms (None in processing
    time)."""

    tuples: list
    new: list
    expired: list
    start: int | None = None
    end: int | None = None

    def __len__(self) -> int:
        return len(self.tuples)

    def __iter__(self):
        return iter(self.tuples)


@dataclass
class WindowManager:
    """The queue of one task's windowed tuples and its trigger. Feed it with :meth:`add`
    (each tuple, with its timestamp in event time) and :meth:`tick` (each watermark
    interval, or each slide in processing time); both return the windows to evaluate,
    oldest first. :meth:`take_expired` gives the tuples to ack (evicted, or late)."""

    window: Window
    inputs: Iterable[Hashable] = ()
    watermark: int | None = None  # the last watermark (ms), event time only
    late: int = 0  # late tuples so far
    evaluated: int = 0  # windows given to process_window so far
    last: tuple | None = None  # the last evaluated window: (start, end, tuples); ms or None
    _queue: list = field(default_factory=list)  # (ts, seq, item) in (ts, seq) order
    _seq: int = 0  # the next tuple's arrival sequence
    _latest: dict = field(default_factory=dict)  # input stream -> its latest timestamp
    _next_end: int | None = None  # event time, Duration slide: the next window's end
    _counted: tuple = (-inf, -1)  # Count slide: the key of the last tuple counted
    _since: int = 0  # Count slide: tuples counted since the last trigger
    _previous: set = field(default_factory=set)  # seqs of the last evaluated window
    _expired: list = field(default_factory=list)  # evicted since the last evaluation
    _to_ack: list = field(default_factory=list)  # evicted since the last take_expired
    _last_tick: int | None = None  # processing time: the last tick (ms)
    # after a rebalance split the open windows (_split.py): seq -> the watermark (ms) of
    # the tuple's old task, which evaluated every window ending at or before it, with it
    _done: dict = field(default_factory=dict)
    # event time: the watermark up to which this task itself evaluated every window; the
    # watermark, except after a split until the first tick (its watermark is then the old
    # tasks' lowest, and what it holds was evaluated only as far as the marks say)
    _through: int | None = None

    def __post_init__(self) -> None:
        self.inputs = frozenset(self.inputs)
        self._lag = self.window.lag.ms if self.window.lag else 0

    # -- in ----------------------------------------------------------------------------
    def add(self, item: Any, stream: Hashable, ts: int | None, now_ms: int) -> list[WindowView]:
        """One tuple. In event time ``ts`` is its timestamp (ms) and a tuple older than
        the watermark is late: counted, not kept (check :meth:`is_late` first to send it
        on). Returns the windows a Count slide triggers (processing time)."""
        if not self.window.event_time:
            ts = now_ms
        elif self.is_late(ts):
            self.late += 1
            return []
        else:
            self._latest[stream] = max(ts, self._latest.get(stream, ts))
        seq, queue, self._seq = self._seq, self._queue, self._seq + 1
        if not queue or ts >= queue[-1][0]:  # in order, the common case: no search
            queue.append((ts, seq, item))
        else:
            insort(queue, (ts, seq, item), key=_KEY)
        key = (ts, seq)
        if self.window.event_time or not isinstance(self.window.slide, Count):
            return []
        return self._count_triggers(key)

    def is_late(self, ts: int) -> bool:
        """Storm's rule: a timestamp before the last watermark is late."""
        return self.watermark is not None and ts < self.watermark

    def tick(self, now_ms: int) -> list[WindowView]:
        """A watermark interval (event time) or a slide (processing time) has passed."""
        if not self.window.event_time:
            return self._evaluate_at((now_ms, _LAST), None, self._drift(now_ms))
        mark = self.next_watermark()
        if mark is None or (self.watermark is not None and mark <= self.watermark):
            return []
        self.watermark = self._through = mark
        if isinstance(self.window.slide, Count):
            return self._count_triggers((mark, _LAST))
        return self._watermark_windows(mark)

    def next_watermark(self) -> int | None:
        """The minimum over the input streams of their latest timestamp, minus the lag;
        None until every input stream has sent a tuple."""
        if not self._latest or not self.inputs <= self._latest.keys():
            return None
        return min(self._latest[s] for s in self.inputs or self._latest) - self._lag

    def _drift(self, now_ms: int) -> float:
        """Processing time: how much later than one slide after the last this tick came
        (ms; everything for the first). The window reaches back that much further, as
        Storm's TimeEvictionPolicy does, so that a late tick loses no tuple between two
        windows: a tumbling window is exactly the arrivals since the last tick."""
        last, self._last_tick = self._last_tick, now_ms
        if last is None:
            return inf
        slide = self.window.slide
        return now_ms - last - slide.ms if isinstance(slide, Duration) else 0

    # -- out ---------------------------------------------------------------------------
    def take_expired(self) -> list:
        """The tuples evicted since the last call: they left every window, ack them."""
        out, self._to_ack = self._to_ack, []
        return out

    @property
    def queued(self) -> int:
        """Tuples held: in open windows, or waiting for the watermark."""
        return len(self._queue)

    def open_windows(self) -> tuple[int, int | None] | None:
        """The windows not yet evaluated that hold a tuple, and the oldest one's start
        (ms, exclusive): in event time with a Duration length and slide, where windows
        end at known multiples of the slide; None elsewhere (a Count or processing-time
        window ends when a tuple or a tick comes, so it cannot be named in advance)."""
        length, slide = self.window.length, self.window.slide
        if not (self.window.event_time and isinstance(length, Duration)
                and isinstance(slide, Duration)):
            return None
        return _open_ends(self._queue, length.ms, slide.ms, self.watermark)

    # -- checkpoints -------------------------------------------------------------------
    def snapshot(self, encode: Callable[[Any], Any] = _same) -> dict:
        """Everything the windows hold, as msgpack types, for a checkpoint: the tuples
        (``encode(item)`` each, in queue order, with their timestamps and arrival
        sequences), each input stream's latest timestamp, the watermark, the slide's
        progress, the counters, and what the next evaluation reports as expired.
        :meth:`restored` builds the same manager back (docs/windows.md, "Checkpoints")."""
        return {"version": SNAPSHOT_VERSION, "seq": self._seq,
                "queue": [[ts, seq, encode(item)] for ts, seq, item in self._queue],
                "latest": [[_plain(s), ts] for s, ts in self._latest.items()],
                "watermark": self.watermark, "late": self.late, "evaluated": self.evaluated,
                "last": None if self.last is None else list(self.last),
                "next_end": self._next_end, "counted": list(self._counted),
                "since": self._since, "previous": sorted(self._previous),
                "expired": [encode(t) for t in self._expired],
                "to_ack": [encode(t) for t in self._to_ack], "last_tick": self._last_tick,
                "done": [[seq, mark] for seq, mark in self._done.items()],
                "through": self._through}

    @classmethod
    def restored(cls, window: Window, inputs: Iterable[Hashable], saved: dict | None,
                 decode: Callable[[Any], Any] = _same) -> WindowManager:
        """A manager holding what :meth:`snapshot` saved (``decode`` undoes its
        ``encode``); an empty one for None (nothing was saved yet)."""
        m = cls(window, inputs)
        if saved is None:
            return m
        if saved.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"window snapshot version {saved.get('version')!r}, "
                             f"expected {SNAPSHOT_VERSION}")
        m._queue = [(ts, seq, decode(item)) for ts, seq, item in saved["queue"]]
        m._seq, m._latest = saved["seq"], {_hashable(s): ts for s, ts in saved["latest"]}
        m.watermark, m.late, m.evaluated = saved["watermark"], saved["late"], saved["evaluated"]
        m.last = None if saved["last"] is None else tuple(saved["last"])
        m._next_end, m._counted = saved["next_end"], tuple(saved["counted"])
        m._since, m._previous = saved["since"], set(saved["previous"])
        m._expired = [decode(t) for t in saved["expired"]]
        m._to_ack = [decode(t) for t in saved["to_ack"]]
        m._last_tick = saved["last_tick"]
        m._done = {seq: mark for seq, mark in saved.get("done", ())}  # not saved before 21's split
        m._through = saved.get("through", m.watermark)  # nor this, before the split of a split
        return m

    # -- triggers ----------------------------------------------------------------------
    def _watermark_windows(self, mark: int) -> list[WindowView]:
        """Every window ending at or before the watermark; after an empty one the next
        end is the first slide boundary at or after the next tuple (Storm's time gaps)."""
        slide, out = self.window.slide.ms, []
        end = self._next_end
        if end is None:
            end = self._aligned(-inf, mark)
        while end is not None and end <= mark:
            view = self._evaluate_at((end, _LAST), end)
            if view:
                out += view
                end += slide
                continue
            # empty, yet holding a tuple at or before its end: a split's, which its old task
            # evaluated here, may be in the next window (else this is a gap: jump over it)
            held = self._queue and self._queue[0][0] <= end
            following = end + slide if held else self._aligned(end, mark)
            if following is None:
                break
            end = following
        self._next_end = end
        return out

    def _aligned(self, after: float, upto: int) -> int | None:
        """The first multiple of the slide at or after the earliest timestamp in
        (after, upto], or None when there is none."""
        ts = self._first_after(after)
        if ts is None or ts > upto:
            return None
        slide = self.window.slide.ms
        return -(-ts // slide) * slide

    def _first_after(self, after: float) -> int | None:
        i = bisect_right(self._queue, (after, _LAST), key=_KEY)
        return self._queue[i][0] if i < len(self._queue) else None

    def _count_triggers(self, upto: tuple) -> list[WindowView]:
        """A Count slide: a window at every n-th tuple (in timestamp order, up to
        ``upto``) since the last."""
        n, out = self.window.slide.n, []
        lo = bisect_right(self._queue, self._counted, key=_KEY)
        hi = bisect_right(self._queue, upto, key=_KEY)
        for ts, seq, _ in list(self._queue[lo:hi]):
            self._counted, self._since = (ts, seq), self._since + 1
            if self._since == n:
                self._since = 0
                out += self._evaluate_at((ts, seq), ts if self.window.event_time else None)
        return out

    # -- evaluating --------------------------------------------------------------------
    def _evaluate_at(self, ref: tuple, end: int | None, drift: float = 0) -> list[WindowView]:
        """Evict what a window ending at ``ref`` (and reaching ``drift`` ms further back
        than its length) no longer holds, and return it (or nothing when it is empty)."""
        self._evict(ref, drift)
        tuples = self._queue[:bisect_right(self._queue, ref, key=_KEY)]
        if self._done and end is not None:
            tuples = self._not_done(tuples, end)
        if not tuples:
            return []
        previous, self._previous = self._previous, {seq for _, seq, _ in tuples}
        expired, self._expired = self._expired, []
        self.evaluated += 1
        self._evict_ahead(ref)
        start = None
        if end is not None:
            start = end - self.window.length.ms if isinstance(
                self.window.length, Duration) else tuples[0][0]
        self.last = (start, end, len(tuples))  # shown on the dashboard
        return [WindowView([t for _, _, t in tuples],
                           [t for _, seq, t in tuples if seq not in previous],
                           expired, start, end)]

    def _not_done(self, tuples: list, end: int) -> list:
        """After a rebalance split: leave out the tuples whose old task already evaluated
        the window ending at ``end``, and forget the marks no later window needs (windows
        are evaluated in order of their ends)."""
        done = self._done
        kept = [entry for entry in tuples if done.get(entry[1], -inf) < end]
        self._done = {seq: mark for seq, mark in done.items() if mark > end}
        return kept

    def _evict(self, ref: tuple, drift: float = 0) -> None:
        """What a window ending at ``ref`` does not hold (Storm's eviction)."""
        length = self.window.length
        if isinstance(length, Duration):
            self._cut(bisect_right(self._queue, (ref[0] - length.ms - drift, _LAST), key=_KEY))
        else:
            self._cut(bisect_right(self._queue, ref, key=_KEY) - length.n)

    def _evict_ahead(self, ref: tuple) -> None:
        """After a window, what the next one cannot hold, so that it is acked now rather
        than a slide later (a tumbling window's tuples as soon as it is evaluated). Only
        where the next window's end is certain: a Count slide, or a Duration slide in
        event time (at least one slide on)."""
        length, slide = self.window.length, self.window.slide
        if type(length) is not type(slide) or isinstance(length, Duration) and (
                not self.window.event_time):
            return
        if isinstance(length, Duration):
            self._cut(bisect_right(self._queue, (ref[0] + slide.ms - length.ms, _LAST),
                                   key=_KEY))
        else:
            self._cut(bisect_right(self._queue, ref, key=_KEY) - max(0, length.n - slide.n))

    def _cut(self, cut: int) -> None:
        """Evict the first ``cut`` tuples of the queue."""
        if cut > 0:
            gone = [t for _, _, t in self._queue[:cut]]
            del self._queue[:cut]
            self._expired += gone
            self._to_ack += gone


def _open_ends(queue: list, length: int, slide: int,
               watermark: int | None) -> tuple[int, int | None]:
    """Count the window ends ``k * slide`` after ``watermark`` that hold a tuple of
    ``queue`` (``(ts, seq, item)`` in timestamp order), and give the first one's start.
    A window ending at ``e`` holds ``e - length < ts <= e``: one search per window (and
    one per empty stretch skipped), not one step per tuple held.

    >>> q = [(ts, 0, None) for ts in (3_000, 5_000, 18_000)]
    >>> _open_ends(q, 20_000, 10_000, None)  # ends 10 s, 20 s, 30 s
    (3, -10000)
    >>> _open_ends(q, 20_000, 10_000, 20_000)  # 10 s and 20 s are evaluated
    (1, 10000)
    >>> _open_ends([(1_000, 0, None), (95_000, 1, None)], 10_000, 10_000, None)  # a gap
    (2, 0)
    """
    if not queue:
        return 0, None
    k = -(-queue[0][0] // slide)
    if watermark is not None:
        k = max(k, watermark // slide + 1)
    count, oldest = 0, None
    while True:
        end = k * slide
        i = bisect_right(queue, (end - length, _LAST), key=_KEY)  # the first tuple it may hold
        if i == len(queue):
            return count, oldest
        if queue[i][0] <= end:
            count, k = count + 1, k + 1
            oldest = end - length if oldest is None else oldest
        else:  # an empty stretch: on to the first end that holds the next tuple
            k = max(k + 1, -(-queue[i][0] // slide))
