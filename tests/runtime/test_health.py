"""The master's pure decisions (runtime.observe.health): who is hung, when a spout is headed for a
replay storm, and when the tuner acted. Numbers in, values out; no clock, no process."""

from __future__ import annotations

import pytest

from runtime.observe.health import (
    STORM_OFF,
    STORM_ON,
    hung,
    replay_ratio,
    seconds,
    storm_message,
    storming,
    tuner_turn,
)


def spout_record(pending, p99, count=100):
    return {"max_spout_pending": pending,
            "complete_latency_ms": {"p50": p99 / 2, "p99": p99, "count": count}}


# -- hung ----------------------------------------------------------------------------------

def test_nobody_is_hung_while_everyone_reports():
    assert hung({1: 99.9, 2: 100.0, 3: 99.0}, now=100.0, timeout=1.5) == {}


def test_a_task_silent_past_the_timeout_is_hung_with_its_silence():
    assert hung({1: 100.0, 2: 97.0}, now=100.25, timeout=1.5) == {2: 3.25}


def test_the_timeout_itself_is_not_yet_hung():
    assert hung({1: 10.0}, now=11.5, timeout=1.5) == {}
    assert hung({1: 10.0}, now=11.5001, timeout=1.5) == pytest.approx({1: 1.5001})


def test_the_longest_silent_comes_first():
    assert list(hung({1: 5.0, 2: 1.0, 3: 3.0, 4: 9.5}, now=10.0, timeout=1.0)) == [2, 3, 1]


def test_only_watched_tasks_can_be_hung():
    """Tasks not yet ready, or already being restarted, are simply not in ``heard``."""
    assert hung({}, now=1e9, timeout=1.5) == {}


@pytest.mark.parametrize("value, expected", [
    (10, 10.0), (0.5, 0.5), (0, None), (-1, None), (None, None), ("10", None),
    (False, None)])
def test_a_configured_duration_is_positive_seconds_or_off(value, expected):
    assert seconds(value) == expected


# -- replay storm ------------------------------------------------------------------------------

@pytest.mark.parametrize("pending, p99_ms, timeout, expected", [
    (1000, 24.0, 30.0, 0.8),  # 1000 × 24 ms = 24 s = 80 % of 30 s
    (1000, 30.0, 30.0, 1.0),
    (500, 6.0, 30.0, 0.1),
    (1, 29_000.0, 30.0, 29 / 30),
    (2000, 4.0, 10.0, 0.8),
])
def test_the_ratio_is_pending_times_p99_over_the_timeout(pending, p99_ms, timeout, expected):
    assert replay_ratio(spout_record(pending, p99_ms), timeout) == pytest.approx(expected)


def test_the_threshold_is_reached_at_exactly_80_percent():
    assert storming(False, replay_ratio(spout_record(1000, 24.0), 30.0))
    assert not storming(False, replay_ratio(spout_record(1000, 23.9), 30.0))
    assert not storming(False, replay_ratio(spout_record(999, 24.0), 30.0))


@pytest.mark.parametrize("record", [
    {},  # a bolt, or a spout from before the acker was wired
    {"max_spout_pending": None, "complete_latency_ms": {"p50": 1, "p99": 50, "count": 9}},
    {"max_spout_pending": 1000, "complete_latency_ms": None},  # ackers=0: nothing completes
    {"max_spout_pending": 1000},
    spout_record(1000, 50.0, count=0),  # nothing completed yet
    {"max_spout_pending": 1000, "complete_latency_ms": {"p50": 1, "count": 3}},
    {"max_spout_pending": "auto", "complete_latency_ms": {"p50": 1, "p99": 50, "count": 9}},
    {"max_spout_pending": 1000, "complete_latency_ms": [1, 2]},
])
def test_an_unknown_ratio_is_none(record):
    assert replay_ratio(record, 30.0) is None


@pytest.mark.parametrize("timeout", [None, 0, -1.0, "30"])
def test_no_timeout_means_no_ratio(timeout):
    assert replay_ratio(spout_record(1000, 50.0), timeout) is None


def test_an_episode_starts_at_the_on_mark_and_ends_below_the_off_mark():
    ratios = [0.5, 0.79, 0.8, 0.9, 0.7, 0.61, None, 0.6, 0.59, 0.75, 0.85]
    state, states = False, []
    for r in ratios:
        state = storming(state, r)
        states.append(state)
    assert states == [False, False, True, True, True, True, True, True, False, False, True]
    starts = sum(1 for before, after in zip([False, *states], states) if after and not before)
    assert starts == 2  # two episodes, two warnings, however long each one lasts
    assert STORM_OFF < STORM_ON == 0.8


def test_the_warning_says_why_in_words():
    text = storm_message("words", spout_record(1000, 25.0), 30.0)
    assert "'words'" in text and "max_spout_pending 1000" in text and "25 ms" in text
    assert "83%" in text and "30 s" in text
    assert "replayed with no failure anywhere" in text
    for remedy in ("Lower max_spout_pending", "raise message_timeout", "slow bolt"):
        assert remedy in text


# -- tuner ---------------------------------------------------------------------------------

def test_a_new_tuner_turn_is_reported_with_its_action_and_value():
    record = {"tuner_turns": 1, "tuner_action": "increase", "max_spout_pending": 125}
    assert tuner_turn(0, record) == {"action": "increase", "max_spout_pending": 125, "turns": 1}


def test_the_same_turn_is_not_reported_twice():
    record = {"tuner_turns": 3, "tuner_action": "decrease", "max_spout_pending": 80}
    assert tuner_turn(3, record) is None
    assert tuner_turn(5, record) is None


def test_turns_missed_between_reports_give_one_event_with_the_latest_action():
    record = {"tuner_turns": 7, "tuner_action": "no_change", "max_spout_pending": 100}
    assert tuner_turn(4, record) == {"action": "no_change", "max_spout_pending": 100,
                                     "turns": 7}


@pytest.mark.parametrize("record", [{}, {"tuner_turns": None}, {"tuner_turns": 0},
                                    {"tuner_turns": "3"}])
def test_no_tuner_no_event(record):
    assert tuner_turn(0, record) is None
