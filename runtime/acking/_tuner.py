"""Max spout pending auto-tuning: the state machine of "Storm @Twitter" §3.3.3.

Every tuning period the spout reports how much progress it made (committed offset
for a Kafka-style spout, acks received for a Kestrel-style one) and the tuner moves
max spout pending up by 25 %, down by at least 25 %, or leaves it alone, depending on
its last action and on whether progress rose, fell or stayed similar. Read
:meth:`MaxSpoutPendingTuner.auto_tune` first; ``docs/internals/tuner.md`` explains why.

Arithmetic is exact (``fractions.Fraction``), so ``ceil`` and ``floor`` never land on
the wrong side of an integer because of a rounding error.

Each turn is also kept as a :class:`TunerTurn` (the two progress figures compared, the
similarity test, the action and the value before and after), and :func:`replay` runs the
state machine again over a recorded progress series with other settings: what auto would
have done on that run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

Action = Literal["increase", "decrease", "no_change"]

__all__ = [
    "MIN_STEP_DOWN",
    "NO_CHANGE_LIMIT",
    "STEP_UP",
    "MaxSpoutPendingTuner",
    "TunerStatistics",
    "TunerTurn",
    "replay",
]

STEP_UP = Fraction(5, 4)  # an increase multiplies the value by 1.25
MIN_STEP_DOWN = Fraction(1, 4)  # a decrease removes at least 25 %
NO_CHANGE_LIMIT = 5  # similar turns in the no-change state before probing upwards


@dataclass(frozen=True, slots=True)
class TunerStatistics:
    """A snapshot of a tuner: its value, last action, last delta and no-change count."""

    value: int
    last_action: Action
    last_delta: float | None
    no_change_count: int


@dataclass(frozen=True, slots=True)
class TunerTurn:
    """One turn, as data: ``progress`` made in the period just ended, ``previous`` (the
    period before; None on the first turn), whether they were ``similar`` (within
    ``band`` = similarity × previous; None on the first turn), the ``action``, and the
    value ``before`` and ``after``. ``restored``: a no_change that took back a useless
    increase (the value drops although the action is no_change). ``time`` is the
    caller's (seconds), for a replay."""

    progress: float
    previous: float | None
    similar: bool | None
    band: float | None
    action: Action
    before: int
    after: int
    restored: bool = False
    time: float | None = None

    @property
    def move(self) -> str:
        """What happened to the value, in one word: increase, decrease, restore or
        no_change."""
        return "restore" if self.restored else self.action


class MaxSpoutPendingTuner:
    """Tunes one spout task's max spout pending from its progress per period.

    ``similarity`` is the relative band inside which two deltas count as equal;
    results are clamped to ``[minimum, maximum]`` (``maximum=None``: unbounded).
    Before its first call the tuner is in the paper's starting state, ``no_change``.

    >>> tuner = MaxSpoutPendingTuner(100)
    >>> tuner.auto_tune(1000), tuner.get()  # the first call always increases
    ('increase', 125)
    >>> tuner.auto_tune(1500), tuner.get()  # progress grew: keep going up
    ('increase', 157)
    >>> tuner.auto_tune(1520), tuner.get()  # flat: that increase bought nothing, undo it
    ('no_change', 125)
    >>> tuner.last_turn.move, tuner.last_turn.similar, tuner.last_turn.band
    ('restore', True, 75.0)
    >>> tuner.auto_tune(900), tuner.get()  # progress fell by 41 %: cut by 41 %
    ('decrease', 74)

    ``step_up``, ``min_step_down`` and ``no_change_limit`` default to the paper's 1.25,
    25 % and 5; other values are for what-if replays (:func:`replay`).
    """

    def __init__(
        self,
        initial: int,
        *,
        similarity: float = 0.05,
        minimum: int = 1,
        maximum: int | None = None,
        step_up: float = STEP_UP,
        min_step_down: float = MIN_STEP_DOWN,
        no_change_limit: int = NO_CHANGE_LIMIT,
    ) -> None:
        _check_settings(initial, similarity, minimum, maximum)
        _check_steps(step_up, min_step_down, no_change_limit)
        self._value = initial
        self._similarity = Fraction(str(similarity))  # 0.05 means exactly 1/20
        self._step_up, self._min_step_down = _exact(step_up), _exact(min_step_down)
        self._no_change_limit = no_change_limit
        self.last_turn: TunerTurn | None = None  # None before the first turn
        self._minimum = minimum
        self._maximum = maximum
        self._before_increase = initial
        self._last_delta: float | None = None
        self._no_change_count = 0
        self._last_action: Action = "no_change"
        self._restored = False  # the turn being taken restored the value

    def get(self) -> int:
        """The current max spout pending value."""
        return self._value

    @property
    def last_action(self) -> Action:
        """The action of the last turn (``no_change`` before the first)."""
        return self._last_action

    def auto_tune(self, delta_progress: float) -> Action:
        """Take one turn given the progress made since the previous call."""
        if not 0 <= delta_progress < math.inf:
            raise ValueError(f"delta_progress must be finite and >= 0, not {delta_progress}")
        before, previous = self._value, self._last_delta
        self._restored = False
        self._last_action = self._turn(Fraction(delta_progress))
        self._last_delta = delta_progress
        self.last_turn = self._record(delta_progress, previous, before)
        return self._last_action

    def _record(self, progress: float, previous: float | None, before: int) -> TunerTurn:
        """The turn just taken, as data (the similarity test recomputed for the record)."""
        if previous is None:
            similar = band = None
        else:
            exact_band = self._similarity * Fraction(previous)
            similar = abs(Fraction(progress) - Fraction(previous)) <= exact_band
            band = float(exact_band)
        return TunerTurn(progress, previous, similar, band, self._last_action, before,
                         self._value, self._restored)

    def statistics(self) -> TunerStatistics:
        """A snapshot of the tuner's state."""
        return TunerStatistics(
            self._value, self._last_action, self._last_delta, self._no_change_count
        )

    def _turn(self, current: Fraction) -> Action:
        """The state machine: pick and apply the next action."""
        if self._last_delta is None:
            return self._increase()
        last = Fraction(self._last_delta)
        if abs(current - last) <= self._similarity * last:
            return self._on_similar()
        if current > last:
            return self._increase()
        if self._last_action == "decrease":
            return "no_change"
        return self._decrease(current, last)

    def _on_similar(self) -> Action:
        """Similar progress: undo a useless increase, or count a quiet turn."""
        if self._last_action == "increase":
            return self._restore()
        if self._last_action == "decrease":
            return "no_change"
        self._no_change_count += 1
        if self._no_change_count >= self._no_change_limit:
            return self._increase()
        return "no_change"

    def _increase(self) -> Action:
        self._before_increase = self._value
        self._set(math.ceil(self._value * self._step_up))
        return "increase"

    def _decrease(self, current: Fraction, last: Fraction) -> Action:
        drop = max(self._min_step_down, (last - current) / last)
        self._set(math.floor(self._value * (1 - drop)))
        return "decrease"

    def _restore(self) -> Action:
        self._value = self._clamp(self._before_increase)
        self._restored = True
        return "no_change"

    def _set(self, value: int) -> None:
        """Move to ``value`` (clamped); any move resets the no-change counter."""
        self._value = self._clamp(value)
        self._no_change_count = 0

    def _clamp(self, value: int) -> int:
        if self._maximum is not None:
            value = min(value, self._maximum)
        return max(value, self._minimum)


def _check_settings(initial: int, similarity: float, minimum: int, maximum: int | None) -> None:
    """Raise ``ValueError`` unless ``minimum <= initial <= maximum`` and the rest make sense."""
    if minimum < 1:
        raise ValueError(f"minimum must be >= 1 (0 would stop the spout for good), not {minimum}")
    if maximum is not None and maximum < minimum:
        raise ValueError(f"maximum {maximum} is below minimum {minimum}")
    if initial < minimum or (maximum is not None and initial > maximum):
        raise ValueError(f"initial {initial} is outside [{minimum}, {maximum}]")
    if not similarity >= 0:
        raise ValueError(f"similarity must be >= 0, not {similarity}")


def _check_steps(step_up: float, min_step_down: float, no_change_limit: int) -> None:
    """Raise ``ValueError`` unless the steps move the value the way their names say."""
    if not step_up > 1:
        raise ValueError(f"step_up must be > 1 (it multiplies the value), not {step_up}")
    if not 0 < min_step_down < 1:
        raise ValueError(f"min_step_down must be in (0, 1) (a fraction removed), "
                         f"not {min_step_down}")
    if isinstance(no_change_limit, bool) or not isinstance(no_change_limit, int) \
            or no_change_limit < 1:
        raise ValueError(f"no_change_limit must be an int >= 1, not {no_change_limit!r}")


def _exact(value: float | Fraction) -> Fraction:
    """A setting as an exact fraction: 1.25 as 5/4, read from its decimal text."""
    return value if isinstance(value, Fraction) else Fraction(str(value))


def replay(
    progress: Sequence[tuple[float, float]],
    *,
    interval: float | None = None,
    initial: int = 1000,
    **settings: Any,
) -> list[TunerTurn]:
    """Run the state machine over a recorded progress series: what a tuner with these
    ``settings`` (those of :class:`MaxSpoutPendingTuner`) would have done on that run.

    ``progress`` holds ``(time, total progress so far)`` readings, in time order, the
    first being the baseline (as the runtime's first reading is). A turn falls every
    ``interval`` seconds after the first reading (``None``: at every reading) and is fed
    the progress made since the previous turn, read from the last reading at or before
    it. Pure. The progress is the run's own: a different cap would have changed it, so
    a replay says what the tuner would have *decided* given what it saw, not what the
    topology would then have done.

    >>> run = [(0, 0), (1, 100), (2, 250), (3, 400), (4, 410)]
    >>> [(t.time, t.progress, t.move, t.after) for t in replay(run, initial=100)]
    [(1, 100, 'increase', 125), (2, 150, 'increase', 157), (3, 150, 'restore', 125), \
(4, 10, 'decrease', 8)]
    >>> [(t.time, t.progress, t.move) for t in replay(run, interval=2, initial=100)]
    [(2, 250, 'increase'), (4, 160, 'decrease')]
    """
    readings = _check_readings(progress)
    if interval is not None and not 0 < interval < math.inf:
        raise ValueError(f"interval must be a positive number of seconds, not {interval}")
    tuner = MaxSpoutPendingTuner(initial, **settings)
    turns, last = [], readings[0][1]
    for time, total in _turn_readings(readings, interval):
        tuner.auto_tune(total - last)
        last = total
        turns.append(replace(tuner.last_turn, time=time))
    return turns


def _check_readings(progress: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    readings = [(t, p) for t, p in progress]
    if not readings:
        raise ValueError("progress must hold at least one (time, total) reading")
    for (t0, p0), (t1, p1) in zip(readings, readings[1:]):
        if t1 < t0 or p1 < p0:
            raise ValueError(f"progress readings must go forward in time and in total: "
                             f"({t0}, {p0}) then ({t1}, {p1})")
    return readings


def _turn_readings(readings: list[tuple[float, float]], interval: float | None):
    """The readings the turns see: all but the baseline, or the last one at or before
    each multiple of ``interval`` after the baseline (a multiple past the last reading
    is no turn: the run had ended)."""
    if interval is None:
        yield from readings[1:]
        return
    start, i, k = readings[0][0], 0, 1
    while start + k * interval <= readings[-1][0]:
        at = start + k * interval
        while i + 1 < len(readings) and readings[i + 1][0] <= at:
            i += 1
        yield at, readings[i][1]
        k += 1
