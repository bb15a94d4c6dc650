"""The default in-flight limit with acking on: a latency bound. Pure: time comes in as
``now``; ``docs/internals/tuner.md``, "The default: a latency bound", says why.

By Little's law a spout task's roots in flight are its completion rate times their
complete latency. Each turn (about two mean complete latencies after the last, within
:data:`SHORTEST` and :data:`LONG`, and once :data:`SAMPLE` roots have completed or
:data:`LONGEST` has passed) the bound reads how many roots completed since the last turn
and their summed latency, and moves its limit:

- latency over target: down to ``rate × target`` (never up), and
- latency under target, the limit reached since the last turn, and the turn's
  :data:`TAIL` percentile under target too: up to ``rate × target``, at least the limit
  it had and at most :data:`GROWTH` times it;
- latency under target but its tail over it: left alone (a queue's growth lengthens
  the tail; on a noisy machine the mean at the target put the p99 at 3-4 times it);
- latency under target, the limit never reached: left alone (nothing says more helps);
- nothing completed but roots failed: down to the floor;
- nothing completed in :data:`LONGEST` with the limit reached, at a limit above any
  that roots completed under (since the last failure): :data:`GROWTH` times up. A bolt
  that acks only once it holds N tuples (a batch insert) completes nothing while fewer
  are in flight, and roots lost with a killed task complete nothing either; without
  this the spout would wait for the message timeout;
- the same silence under *every* limit roots completed under: back up to the lowest of
  them. A windowed bolt acks a window's worth at once, late, so the cut for its latency
  can take the limit under a window's worth, where nothing ever completes. That lowest
  limit then counts as the floor does for the base latency below;
- the same silence at a limit roots did complete under: a stall (a starved process, a
  pause), which more in flight would only queue behind: the limit stays.

The target is never below :data:`QUEUE_FACTOR` times the *base latency*: what a tree
costs with next to no queue, such as a bolt that holds its tuples until a tick tuple.
Without it, such a topology would run at the floor: each turn would see the latency
over target and cut to ``rate × target``, and the rate falls with the limit. The bound
is about queues; a queue may add as much again. The base is read as the mean latency of
a turn taken after a whole turn at the floor, where at most two roots wait per task,
and is the lower of the last two such readings: a stall (a starved process) inflates
one reading, and a base read in it would let the limit climb to seconds of queue once
the stall ends.

Never below ``floor`` (:func:`floor_for`: a few roots per task of the topology's widest
component). It starts at ``max(START, floor)``, low enough that a slow bolt gets a
fraction of a second of queue before the first turn.

>>> b = LatencyBound(target=0.1, floor=2, now=0.0)
>>> b.limit
8
>>> b.turn(acked=100, latency=0.5, failed=0, held=True, now=0.1)  # 5 ms each, held
16
>>> b.turn(acked=120, latency=4.5, failed=0, held=True, now=0.2)  # 200 ms: over target
16
>>> b.turn(acked=145, latency=9.5, failed=0, held=True, now=0.46)  # still: ~100/s × 0.1 s
10
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from operator import sub

from runtime.model.constants import RESERVED_PREFIX
from runtime.observe.metrics import percentile

SHORTEST = 0.01  # seconds: the shortest turn (a fast topology climbs ×2 per turn)
LONG = 0.25  # seconds: the longest turn once SAMPLE roots have completed
LATENCIES = 2  # a turn lasts this many mean complete latencies (within SHORTEST, LONG):
#                long enough for the roots it judges to have been emitted under the last limit
LONGEST = 1.0  # seconds: a turn waits at most this long for SAMPLE completions
SAMPLE = 8  # completions a turn waits for before it judges the latency (up to LONGEST)
GROWTH = 2  # the most a turn multiplies the limit by
START = 8  # roots in flight before the first turn: 10-tuple trees on a 10 ms bolt are 0.8 s
FLOOR_PER_TASK = 2  # the floor: roots per task of the widest component, so none idles
BIG_CHANGE = 2  # a change of this factor since the last one reported is reported
QUEUE_FACTOR = 2  # the target is at least this many base latencies (see the module)
TAIL = 0.99  # the percentile of a turn's complete latencies held at the target


class LatencyBound:
    """One spout task's latency bound on its roots in flight (its ``limit``)."""

    __slots__ = ("target", "floor", "limit", "turns", "base", "_since", "_acked",
                 "_latency", "_failed", "_every", "_floor_turns", "_proven", "_lowest",
                 "_before", "_least", "_read", "_counts", "_late")

    def __init__(self, target: float, floor: int, now: float) -> None:
        if not target > 0 or floor < 1:
            raise ValueError(f"target must be > 0 and floor >= 1, not {target}, {floor}")
        self.target, self.floor = target, floor
        self.limit = max(START, floor)
        self.turns = 0  # turns taken
        self.base: float | None = None  # seconds: a tree's latency with next to no queue
        self._read: float | None = None  # seconds: the last reading of the base
        self._counts: list[int] | None = None  # the latency histogram at the last turn
        self._floor_turns = 0  # turns in a row that ended with the limit at the floor
        self._proven = 0  # the highest limit roots completed under, since the last failure
        self._lowest: int | None = None  # the lowest such limit (None: none completed)
        self._before = self.limit  # the limit in force during the last turn
        self._least = floor  # the least limit under which roots complete, as far as known
        self._late = False  # whether the last roots completed took over LONGEST each
        self._since, self._acked, self._latency, self._failed = now, 0, 0.0, 0
        self._every = SHORTEST  # seconds: how long this turn lasts at least

    def set_floor(self, floor: int) -> None:
        """A new floor (the spout's streams are known after the tracker is made)."""
        self.floor = self._least = max(1, floor)
        self.limit = max(self.limit, self.floor)

    def turn(self, acked: int, latency: float, failed: int, held: bool,
             now: float, counts: Sequence[int] | None = None) -> int | None:
        """Take a turn if one is due: ``acked`` roots completed so far, ``latency`` their
        summed complete latency (seconds), ``failed`` roots failed so far, ``held``
        whether the limit was reached since the last turn, ``counts`` the latency
        histogram's bucket counts so far (``runtime.observe.metrics``; without them the
        tail is taken to be the mean). The new limit, or None when no turn was due."""
        elapsed, done = now - self._since, acked - self._acked
        if elapsed < self._every or (done < SAMPLE and elapsed < LONGEST):
            return None
        mean = (latency - self._latency) / done if done else None
        tail = self._tail(counts, done)
        if mean is not None:
            self._every = min(LONG, max(SHORTEST, LATENCIES * mean))
            self._late = mean > LONGEST
            tail = mean if tail is None else max(mean, tail)
        lost = failed - self._failed
        # the roots completed in this turn were sent under this turn's limit or the last's
        under, self._before = max(self.limit, self._before), self.limit
        if lost:
            self._proven, self._lowest, self._least = 0, None, self.floor
        elif done:
            self._proven = max(self._proven, self.limit)
            self._lowest = under if self._lowest is None else min(self._lowest, under)
        self._since, self._acked, self._latency, self._failed = now, acked, latency, failed
        self.turns += 1
        if mean is not None and self._floor_turns >= 2:  # its roots were all sent at the floor
            self.base, self._read = mean if self._read is None else min(mean, self._read), mean
        self.limit = max(self.floor, self._next(done / elapsed, mean, tail, lost, held))
        self._floor_turns = self._floor_turns + 1 if self.limit <= self._least else 0
        return self.limit

    @property
    def aim(self) -> float:
        """Seconds of complete latency the limit aims at: the target, or more when a tree
        costs more than that with no queue (the base latency)."""
        return self.target if self.base is None else max(self.target, QUEUE_FACTOR * self.base)

    def _tail(self, counts: Sequence[int] | None, done: int) -> float | None:
        """The :data:`TAIL` percentile (seconds) of the turn's completions: the bucket
        counts now less those of the last turn."""
        if counts is None:
            return None
        last, self._counts = self._counts, list(counts)
        turn = counts if last is None else map(sub, counts, last)
        return percentile(enumerate(turn), done, TAIL) if done else None

    def _next(self, rate: float, mean: float | None, tail: float | None, lost: int,
              held: bool) -> int:
        """The limit after a turn (before the floor): Little's law, see the module."""
        if mean is None:  # a silence: more in flight helps only above a proven limit
            if lost:
                return self.floor
            if not held:
                return self.limit
            if self.limit > self._proven:  # never seen completing at this limit: more
                return self.limit * GROWTH
            if self._lowest is not None and self.limit < self._lowest:
                # under every limit roots completed at: back to the lowest, which is the
                # least that completes (a window's worth), and reads as a floor would
                self._least = self._lowest
                return self._lowest
            if self.limit < self._proven and self._late:
                # roots completed "under" this limit, but a turn credits them to the limit of
                # its own time, and acks that come seconds late (a window's) are from tuples
                # sent many turns earlier, under a higher one: step back up towards the
                # highest limit roots completed under
                return min(self._proven, self.limit * GROWTH)
            return self.limit  # the highest limit roots completed under: a stall
        aim = self.aim
        little = round(rate * aim)
        if mean > aim:
            return min(self.limit, little)
        if not held or tail > aim:  # more in flight would only lengthen the tail
            return self.limit
        return min(max(self.limit, little), self.limit * GROWTH)


def floor_for(components: Iterable[str]) -> int:
    """The floor of a spout task's bound, from the component of every task of its
    topology: :data:`FLOOR_PER_TASK` roots per task of the widest component (the
    runtime's own aside), so that even when the latency is over target each task of a
    wide, slow bolt can have a tuple at work and one waiting; a floor of one batch would
    be seconds of queue for a 10 ms bolt.

    >>> floor_for(["words", "split", "count", "count", "count", "__acker"])
    6
    """
    widths = Counter(c for c in components if not c.startswith(RESERVED_PREFIX))
    return FLOOR_PER_TASK * max(widths.values(), default=1)
