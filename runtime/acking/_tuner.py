"""Max spout pending auto-tuning: the state machine of "Storm @Twitter" §3.3.3.

Every tuning period the spout reports how much progress it made (committed offset
for a Kafka-style spout, acks received for a Kestrel-style one) and the tuner moves
max spout pending up by 25 %, down by at least 25 %, or leaves it alone, depending on
its last action and on whether progress rose, fell or stayed similar. Read
:meth:`MaxSpoutPendingTuner.auto_tune` first; ``docs/internals/tuner.md`` explains why.

Arithmetic is exact (``fractions.Fraction``), so ``ceil`` and ``floor`` never land on
the wrong side of an integer because of a rounding error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Action = Literal["increase", "decrease", "no_change"]

__all__ = ["MIN_STEP_DOWN", "NO_CHANGE_LIMIT", "STEP_UP", "MaxSpoutPendingTuner", "TunerStatistics"]

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
    >>> tuner.auto_tune(900), tuner.get()  # progress fell by 41 %: cut by 41 %
    ('decrease', 74)
    """

    def __init__(
        self,
        initial: int,
        *,
        similarity: float = 0.05,
        minimum: int = 1,
        maximum: int | None = None,
    ) -> None:
        _check_settings(initial, similarity, minimum, maximum)
        self._value = initial
        self._similarity = Fraction(str(similarity))  # 0.05 means exactly 1/20
        self._minimum = minimum
        self._maximum = maximum
        self._before_increase = initial
        self._last_delta: float | None = None
        self._no_change_count = 0
        self._last_action: Action = "no_change"

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
        self._last_action = self._turn(Fraction(delta_progress))
        self._last_delta = delta_progress
        return self._last_action

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
        if self._no_change_count == NO_CHANGE_LIMIT:
            return self._increase()
        return "no_change"

    def _increase(self) -> Action:
        self._before_increase = self._value
        self._set(math.ceil(self._value * STEP_UP))
        return "increase"

    def _decrease(self, current: Fraction, last: Fraction) -> Action:
        drop = max(MIN_STEP_DOWN, (last - current) / last)
        self._set(math.floor(self._value * (1 - drop)))
        return "decrease"

    def _restore(self) -> Action:
        self._value = self._clamp(self._before_increase)
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
