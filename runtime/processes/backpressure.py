"""Water marks: Heron's spout backpressure (seed 002 §5.4.2), as pure bookkeeping.

A stream manager queues the frames it cannot hand over yet, per destination (a local
instance, or the stream manager of another container). :class:`WaterMarks` counts the
bytes queued per destination and says when one crosses the high mark (start
backpressure: every stream manager stops reading from its local spouts) and when it
drains below the low mark (stop). :class:`Backpressure` combines this container's own
causes with those announced by its peers, which expire unless refreshed, so a peer that
died while announcing cannot stall the topology for ever. No clock is read here: time
comes in as ``now``.

>>> marks = WaterMarks(high=100, low=50)
>>> marks.add(7, 60), marks.add(7, 60), marks.remove(7, 30), marks.remove(7, 50)
(None, 'start', None, 'stop')
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

START, STOP = "start", "stop"


class WaterMarks:
    """Queued bytes per destination, and the crossings of the high and low marks."""
    def __init__(self, high: int, low: int) -> None:
        if not 0 <= low < high:
            raise ValueError(f"water marks need 0 <= low < high, got low={low} high={high}")
        self.high, self.low = high, low
        self.queued: dict[Hashable, int] = {}
        self.over: set[Hashable] = set()

    def add(self, dest: Hashable, nbytes: int) -> str | None:
        """``nbytes`` more are queued for ``dest``; "start" when that crosses the high mark."""
        total = self.queued.get(dest, 0) + nbytes
        self.queued[dest] = total
        if total >= self.high and dest not in self.over:
            self.over.add(dest)
            return START
        return None

    def remove(self, dest: Hashable, nbytes: int) -> str | None:
        """``nbytes`` were handed over; "stop" when that drains below the low mark."""
        total = max(0, self.queued.get(dest, 0) - nbytes)
        self.queued[dest] = total
        if total <= self.low and dest in self.over:
            self.over.discard(dest)
            return STOP
        return None

    def clear(self, dest: Hashable) -> str | None:
        """Everything queued for ``dest`` was dropped (e.g. it left the plan)."""
        return self.remove(dest, self.queued.get(dest, 0))

    def total(self) -> int:
        return sum(self.queued.values())


@dataclass(frozen=True)
class BackpressureStatistics:
    """A stream manager's water-mark state, as data: whether its spouts are held, and why."""

    active: bool
    local_causes: tuple  # destinations of this container over the high mark
    remote_causes: tuple  # tasks announced by peer stream managers
    episodes: int  # times this container's spouts were stopped
    seconds: float  # time spent with spouts stopped


class Backpressure:
    """Whether this container's spouts must stop: its own causes plus live peer announcements."""

    def __init__(self, announce_ttl: float) -> None:
        self.ttl = announce_ttl
        self.local: set[Hashable] = set()
        self.remote: dict[int, float] = {}  # task -> when the announcement expires
        self.episodes = 0
        self.seconds = 0.0
        self._since: float | None = None

    def active(self, now: float) -> bool:
        if self.remote:  # announcements not repeated in time have expired
            for task in [t for t, until in self.remote.items() if until <= now]:
                del self.remote[task]
        on = bool(self.local or self.remote)
        self._account(on, now)
        return on

    def _account(self, on: bool, now: float) -> None:
        if on and self._since is None:
            self._since, self.episodes = now, self.episodes + 1
        elif not on and self._since is not None:
            self.seconds += now - self._since
            self._since = None

    def holds_spouts(self) -> bool:
        """Whether to stop reading the local spouts: any cause, local or announced (an
        expired announcement counts until :meth:`active` next looks at the clock)."""
        return bool(self.local or self.remote)

    def holds(self, task: Hashable) -> bool:
        """Whether to stop reading local bolt (or acker) ``task``: under backpressure
        (a cause here or announced by a peer), every local task but this container's
        own causes. A cause is still read, so it always drains and the episode ends (no
        deadlock, cycles included: what a cause sends to a held task queues here until
        that task is over the high mark too, and then it is a cause); any other bolt's
        output would only pile up in front of a cause (a 10,000-fold fan-out would fill
        the stream manager in front of it, here or in another container).

        >>> bp = Backpressure(announce_ttl=3.0)
        >>> bp.holds(4), bp.local.add(7), bp.holds(4), bp.holds(7)
        (False, None, True, False)
        """
        return bool(self.local or self.remote) and task not in self.local

    def announced(self, task: int, transition: str, now: float) -> None:
        """A peer said backpressure started (or was still on) or stopped for ``task``."""
        if transition == START:
            self.remote[task] = now + self.ttl
        else:
            self.remote.pop(task, None)

    def statistics(self, now: float) -> BackpressureStatistics:
        on = self.active(now)
        running = now - self._since if self._since is not None else 0.0
        return BackpressureStatistics(on, tuple(sorted(map(str, self.local))),
                                      tuple(sorted(self.remote)), self.episodes,
                                      self.seconds + running)
