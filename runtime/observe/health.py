"""What the topology master concludes from the instances' reports: pure decisions.

Each function takes the facts (last-heard times, a statistics record, the config) and
``now`` where time matters, and returns a value; the master acts on it (sends a restart,
records an event). Nothing here reads a clock, a socket or a process.

- :func:`hung`: instances that stopped heart-beating (their ``stats`` reports), and
- :func:`replay_ratio` and :func:`storming`: Storm's replay-storm trap, where the time
  the last of ``max_spout_pending`` tuples waits (``max_spout_pending ÷ ack rate``, by
  Little's law) nears ``message_timeout``.
- :func:`tuner_turn`: a max-spout-pending tuner action, when a new one was reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STORM_ON = 0.8  # fraction of message_timeout at which a spout is warned about replays
STORM_OFF = 0.6  # fraction it must fall below before a new warning may be recorded
RATE_SECONDS = 1.0  # a spout's ack rate is known once it has been watched this long: the
# first reports come before the first acks, and a rate over them would be near 0


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


def ack_rate(base: tuple[float, int] | None, now: float, acked: Any) -> float | None:
    """A spout task's acks per second since ``base`` = (time, acked then), its first
    report; None until :data:`RATE_SECONDS` have passed, or for a count that is no number.

    >>> ack_rate((10.0, 0), 14.0, 8000), ack_rate(None, 14.0, 8000), ack_rate((10.0, 5), 10.9, 5)
    (2000.0, None, None)
    """
    if base is None or not isinstance(acked, int) or now - base[0] < RATE_SECONDS:
        return None
    return (acked - base[1]) / (now - base[0])


def queue_wait(record: Mapping[str, Any], rate: float | None) -> float | None:
    """How long the last of ``max_spout_pending`` tuples in flight waits to complete, in
    seconds, at the spout's ack ``rate``: Little's law, ``in flight = rate × latency``,
    read at the cap. None when the limit or a positive rate is unknown, or the limit
    follows the latency already (the latency bound, acking/_bound.py).

    The complete latency is no input: it already *is* ``in flight / rate``, so the old
    product ``max_spout_pending × complete latency`` counted the queue twice (tuples ×
    seconds, not seconds) and gave 27,375 s for a queue that took 25 s to drain.

    >>> queue_wait({"max_spout_pending": 50_000}, 2000.0)
    25.0
    >>> queue_wait({"max_spout_pending": 50_000}, 0.0) is None
    True
    """
    pending = record.get("max_spout_pending")
    if record.get("latency_bounded") or not isinstance(pending, int):
        return None
    if not isinstance(rate, int | float) or not rate > 0:
        return None
    return pending / rate


def replay_ratio(record: Mapping[str, Any], message_timeout: float | None,
                 rate: float | None) -> float | None:
    """:func:`queue_wait` as a fraction of ``message_timeout``; None when either is
    unknown.

    >>> replay_ratio({"max_spout_pending": 1000}, 30.0, 40.0)  # 25 s of 30 s
    0.8333333333333334
    >>> replay_ratio({"max_spout_pending": None}, 30.0, 40.0) is None
    True
    """
    wait, timeout = queue_wait(record, rate), seconds(message_timeout)
    if wait is None or timeout is None:
        return None
    return wait / timeout


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


def storm_message(component: str, record: Mapping[str, Any], message_timeout: float,
                  rate: float) -> str:
    """The warning, in words, for a spout whose ratio reached :data:`STORM_ON`: every
    figure in it can be checked by hand from the ones before it."""
    pending = record["max_spout_pending"]
    wait = pending / rate
    return (f"spout {component!r}: max_spout_pending {pending:,} tuples in flight at "
            f"{rate:,.0f} acks/s means the last of them completes after {pending:,} ÷ "
            f"{rate:,.0f}/s = {wait:,.1f} s, {wait / message_timeout:.0%} of "
            f"message_timeout ({message_timeout:g} s). Tuples that wait longer than the "
            f"timeout time out and are replayed with no failure anywhere. Lower "
            f"max_spout_pending (under {0.5 * message_timeout * rate:,.0f} keeps the wait "
            f"under half the timeout at this rate), raise message_timeout, or speed up the "
            f"slow bolt.")


def tuner_turn(seen: int, record: Mapping[str, Any]) -> dict | None:
    """The tuner's latest action, if it ran since it was last seen (``seen`` turns).

    With the auto-tuner's turn as data in the record (``tuner_turn``), the event carries
    it too: the progress of the last period and the one before, the similarity test, the
    move and the value before and after.

    >>> tuner_turn(3, {"tuner_turns": 4, "tuner_action": "increase", "max_spout_pending": 125})
    {'action': 'increase', 'max_spout_pending': 125, 'turns': 4}
    >>> tuner_turn(4, {"tuner_turns": 4, "tuner_action": "increase"}) is None
    True
    >>> tuner_turn(0, {"tuner_turns": 1, "tuner_action": "no_change", "max_spout_pending": 100,
    ...                "tuner_turn": {"progress": 1040, "previous": 1000, "move": "restore"}})
    {'action': 'no_change', 'max_spout_pending': 100, 'turns': 1, 'progress': 1040, \
'previous': 1000, 'move': 'restore'}
    """
    turns = record.get("tuner_turns")
    if not isinstance(turns, int) or turns <= seen:
        return None
    event = {"action": record.get("tuner_action"),
             "max_spout_pending": record.get("max_spout_pending"), "turns": turns}
    turn = record.get("tuner_turn")
    if isinstance(turn, Mapping) and event["action"] != "latency_bound":
        event.update({k: v for k, v in turn.items() if k not in event})
    return event
