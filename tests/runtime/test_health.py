"""The master's pure decisions (runtime.observe.health): who is hung, when a spout is headed for a
replay storm, and when the tuner acted. Numbers in, values out; no clock, no process."""

from __future__ import annotations

import pytest

from runtime.observe.health import (
    STORM_OFF,
    STORM_ON,
    ack_rate,
    hung,
    queue_wait,
    replay_ratio,
    seconds,
    storm_message,
    storming,
    tuner_turn,
)

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

@pytest.mark.parametrize("pending, rate, timeout, expected", [
    (1000, 50.0, 25.0, 0.8),  # 1000 ÷ 50/s = 20 s = 80 % of 25 s
    (50_000, 2000.0, 3.0, 25 / 3),  # tutorial 04's overloaded run: a 25 s queue, 833 %
    (500, 1000.0, 30.0, 0.5 / 30),
    (1, 1 / 29, 30.0, 29 / 30),
])
def test_the_ratio_is_the_wait_at_the_cap_over_the_timeout(pending, rate, timeout, expected):
    assert replay_ratio({"max_spout_pending": pending}, timeout, rate) == pytest.approx(expected)


def test_the_wait_is_seconds_not_tuples_times_seconds():
    """The reported bug: 50,000 in flight with a p99 of 547.5 ms gave 27,375 s. The wait
    is 50,000 ÷ the ack rate, whatever the latency (which is that wait already)."""
    record = {"max_spout_pending": 50_000,
              "complete_latency_ms": {"p50": 400, "p99": 547.5, "count": 9000}}
    assert queue_wait(record, 2000.0) == 25.0


def test_the_threshold_is_reached_at_exactly_80_percent():
    assert storming(False, replay_ratio({"max_spout_pending": 1000}, 25.0, 50.0))
    assert not storming(False, replay_ratio({"max_spout_pending": 1000}, 25.0, 50.1))
    assert not storming(False, replay_ratio({"max_spout_pending": 999}, 25.0, 50.0))


def test_the_ack_rate_is_counted_from_the_first_report():
    assert ack_rate((100.0, 250), 104.0, 8250) == 2000.0
    assert ack_rate((100.0, 250), 100.0, 250) is None  # no time has passed
    assert ack_rate((100.0, 0), 100.5, 3) is None  # too soon: the first acks are on their way
    assert ack_rate((100.0, 0), 101.0, 3) == 3.0
    assert ack_rate(None, 104.0, 8250) is None
    assert ack_rate((100.0, 0), 104.0, None) is None


@pytest.mark.parametrize("record, rate", [
    ({}, 100.0),  # a bolt, or a spout from before the acker was wired
    ({"max_spout_pending": None}, 100.0),  # no limit
    ({"max_spout_pending": "auto"}, 100.0),
    ({"max_spout_pending": 1000}, None),  # no rate yet
    ({"max_spout_pending": 1000}, 0.0),  # nothing acked since the first report
    ({"max_spout_pending": 1000, "latency_bounded": True}, 1.0),  # the limit follows latency
])
def test_an_unknown_ratio_is_none(record, rate):
    assert replay_ratio(record, 30.0, rate) is None


@pytest.mark.parametrize("timeout", [None, 0, -1.0, "30"])
def test_no_timeout_means_no_ratio(timeout):
    assert replay_ratio({"max_spout_pending": 1000}, timeout, 10.0) is None


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


def test_the_warning_gives_figures_a_person_can_check():
    text = storm_message("numbers", {"max_spout_pending": 50_000}, 3.0, 2000.0)
    assert "'numbers'" in text and "50,000 tuples in flight at 2,000 acks/s" in text
    assert "50,000 ÷ 2,000/s = 25.0 s" in text and "833% of message_timeout (3 s)" in text
    assert "replayed with no failure anywhere" in text
    assert "under 3,000 keeps the wait under half the timeout" in text  # 1.5 s × 2000/s
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
