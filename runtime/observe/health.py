"""What the topology master concludes from the instances' reports: pure decisions.

Each function takes the facts (last-heard times, a statistics record, the config) and
``now`` where time matters, and returns a value; the master acts on it (sends a restart,
records an event). Nothing here reads a clock, a socket or a process.

- :func:`hung`: instances that stopped heart-beating (their ``stats`` reports), and
- :func:`replay_ratio` and :func:`storming`: Storm's replay-storm trap, where
  ``max_spout_pending × complete latency`` nears ``message_timeout``.
- :func:`tuner_turn`: a max-spout-pending tuner action, when a new one was reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STORM_ON = 0.8  # fraction of message_timeout at which a spout is warned about replays
STORM_OFF = 0.6  # fraction it must fall below before a new warning may be recorded


def seconds(value: Any) -> float | None:
    """A configured duration: a positive number of seconds, or None (off) for anything else.

    >>> seconds(1.5), seconds(10), seconds(0), seconds(None), seconds("10"), seconds(True)
    (1.5, 10.0, None, None, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def hung(heard: Mapping[int, float], now: float, timeout: float) -> dict[int, float]:
    """The tasks not heard from for more than ``timeout`` seconds, with how long.

    ``heard`` holds only the tasks being watched (ready, and not already being
    restarted), each with when its current incarnation last reported.

    >>> hung({1: 10.0, 2: 11.0, 3: 8.5}, now=12.0, timeout=1.5)
    {3: 3.5, 1: 2.0}
    >>> hung({1: 10.5}, now=12.0, timeout=1.5)  # exactly the timeout: not yet
    {}
    """
    silent = {task: now - last for task, last in heard.items() if now - last > timeout}
    return dict(sorted(silent.items(), key=lambda item: -item[1]))


def replay_ratio(record: Mapping[str, Any], message_timeout: float | None) -> float | None:
    """``max_spout_pending × p99 complete latency`` as a fraction of ``message_timeout``,
    from a spout's statistics record; None when any of them is unknown.

    >>> replay_ratio({"max_spout_pending": 1000,
    ...               "complete_latency_ms": {"p50": 9, "p99": 25, "count": 500}}, 30.0)
    0.8333333333333334
    >>> replay_ratio({"max_spout_pending": None, "complete_latency_ms": None}, 30.0) is None
    True
    """
    pending, latency = record.get("max_spout_pending"), record.get("complete_latency_ms")
    if record.get("latency_bounded"):  # the limit follows the latency (acking/_bound.py)
        return None
    if not isinstance(pending, int) or not isinstance(latency, Mapping):
        return None
    p99 = latency.get("p99")
    if not isinstance(p99, int | float) or latency.get("count", 1) == 0:
        return None  # no spout tuple completed yet
    if seconds(message_timeout) is None:
        return None
    return pending * p99 / (1000.0 * message_timeout)


def storming(was: bool, ratio: float | None) -> bool:
    """Whether a spout task is (still) in a replay-storm episode.

    An episode starts when the ratio reaches :data:`STORM_ON` and ends only when it falls
    below :data:`STORM_OFF`, so that a ratio hovering near the threshold is one episode,
    not a warning every report. An unknown ratio leaves the state as it was.

    >>> storming(False, 0.79), storming(False, 0.8), storming(True, 0.7), storming(True, 0.59)
    (False, True, True, False)
    >>> storming(True, None)
    True
    """
    if ratio is None:
        return was
    return ratio >= (STORM_OFF if was else STORM_ON)


def storm_message(component: str, record: Mapping[str, Any], message_timeout: float) -> str:
    """The warning, in words, for a spout whose ratio reached :data:`STORM_ON`."""
    pending = record["max_spout_pending"]
    p99 = record["complete_latency_ms"]["p99"]
    product = pending * p99 / 1000.0
    return (f"spout {component!r}: max_spout_pending {pending} × p99 complete latency "
            f"{p99:g} ms = {product:.1f} s, {product / message_timeout:.0%} of message_timeout "
            f"({message_timeout:g} s). The in-flight limit times the latency is close to the "
            f"timeout, so spout tuples will time out and be replayed with no failure "
            f"anywhere. Lower max_spout_pending, raise message_timeout, or speed up the "
            f"slow bolt.")


def tuner_turn(seen: int, record: Mapping[str, Any]) -> dict | None:
    """The tuner's latest action, if it ran since it was last seen (``seen`` turns).

    >>> tuner_turn(3, {"tuner_turns": 4, "tuner_action": "increase", "max_spout_pending": 125})
    {'action': 'increase', 'max_spout_pending': 125, 'turns': 4}
    >>> tuner_turn(4, {"tuner_turns": 4, "tuner_action": "increase"}) is None
    True
    """
    turns = record.get("tuner_turns")
    if not isinstance(turns, int) or turns <= seen:
        return None
    return {"action": record.get("tuner_action"),
            "max_spout_pending": record.get("max_spout_pending"), "turns": turns}
