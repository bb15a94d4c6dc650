"""The max spout pending tuner (seed 000 §3.3.3): every branch, the pinned arithmetic,
clamping, and a simulated plant on which it must settle near the knee."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.tuning import MaxSpoutPendingTuner, TunerStatistics, TunerTurn, replay


def after_increase() -> MaxSpoutPendingTuner:
    """Last action increase (100 -> 125), last delta 1000."""
    tuner = MaxSpoutPendingTuner(100)
    assert tuner.auto_tune(1000) == "increase"
    return tuner


def after_no_change() -> MaxSpoutPendingTuner:
    """Last action no_change (the increase was restored: 100), last delta 1000, count 0."""
    tuner = after_increase()
    assert tuner.auto_tune(1000) == "no_change"
    return tuner


def after_decrease() -> MaxSpoutPendingTuner:
    """Last action decrease (125 -> 62, progress halved), last delta 500."""
    tuner = after_increase()
    assert tuner.auto_tune(500) == "decrease"
    assert tuner.get() == 62
    return tuner


def turns(tuner: MaxSpoutPendingTuner, deltas: list[float]) -> list[tuple[str, int]]:
    """Feed ``deltas``; return (action, value) after each."""
    return [(tuner.auto_tune(d), tuner.get()) for d in deltas]


# --- the first call ------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [0, 1, 10**9, 0.5])
def test_first_call_always_increases(delta):
    tuner = MaxSpoutPendingTuner(100)
    assert tuner.last_action == "no_change"  # the paper's starting state
    assert tuner.auto_tune(delta) == "increase"
    assert tuner.get() == 125
    assert tuner.statistics() == TunerStatistics(125, "increase", delta, 0)


def test_increase_rounds_up():
    assert turns(MaxSpoutPendingTuner(1), [5]) == [("increase", 2)]  # ceil(1.25)
    assert turns(MaxSpoutPendingTuner(7), [5]) == [("increase", 9)]  # ceil(8.75)


# --- after an increase ---------------------------------------------------------------------


def test_after_increase_higher_increases_again():
    assert turns(after_increase(), [1200]) == [("increase", 157)]


def test_after_increase_lower_decreases_by_at_least_a_quarter():
    assert turns(after_increase(), [900]) == [("decrease", 93)]  # 10 % drop: floor(125 * .75)


def test_after_increase_lower_decreases_by_the_relative_drop():
    assert turns(after_increase(), [400]) == [("decrease", 50)]  # 60 % drop: 125 * .4


def test_after_increase_similar_restores_the_value_before_it():
    assert turns(after_increase(), [1040]) == [("no_change", 100)]


def test_restore_undoes_only_the_last_of_several_increases():
    tuner = MaxSpoutPendingTuner(100)
    assert turns(tuner, [1000, 2000, 2010]) == [
        ("increase", 125),
        ("increase", 157),
        ("no_change", 125),
    ]


def test_restore_does_not_count_as_a_no_change_turn():
    tuner = after_no_change()
    assert tuner.statistics().no_change_count == 0


# --- after no change -----------------------------------------------------------------------


def test_after_no_change_higher_increases():
    assert turns(after_no_change(), [1500]) == [("increase", 125)]


def test_after_no_change_lower_decreases():
    assert turns(after_no_change(), [700]) == [("decrease", 70)]  # 30 % drop


def test_after_no_change_similar_counts_and_the_fifth_increases():
    tuner = after_no_change()
    counts = []
    for _ in range(4):
        assert tuner.auto_tune(1000) == "no_change"
        counts.append(tuner.statistics().no_change_count)
    assert counts == [1, 2, 3, 4]
    assert tuner.get() == 100
    assert tuner.auto_tune(1000) == "increase"
    assert tuner.statistics() == TunerStatistics(125, "increase", 1000, 0)


def test_flat_progress_probes_upwards_every_five_turns_and_restores():
    tuner = after_no_change()
    actions = [tuner.auto_tune(1000) for _ in range(12)]
    assert actions == ["no_change"] * 4 + ["increase", "no_change"] + ["no_change"] * 4 + [
        "increase",
        "no_change",
    ]
    assert tuner.get() == 100


def test_no_change_counter_resets_on_a_decrease():
    tuner = after_no_change()
    turns(tuner, [1000, 1000, 1000])
    assert tuner.statistics().no_change_count == 3
    assert tuner.auto_tune(500) == "decrease"
    assert tuner.statistics().no_change_count == 0


def test_no_change_counter_resets_on_an_increase():
    tuner = after_no_change()
    turns(tuner, [1000, 1000])
    assert tuner.auto_tune(2000) == "increase"
    assert tuner.statistics().no_change_count == 0


# --- after a decrease ----------------------------------------------------------------------


def test_after_decrease_higher_increases():
    assert turns(after_decrease(), [800]) == [("increase", 78)]  # ceil(62 * 1.25)


@pytest.mark.parametrize("delta", [500, 510, 490, 100, 0])
def test_after_decrease_anything_else_is_no_change(delta):
    tuner = after_decrease()
    assert turns(tuner, [delta]) == [("no_change", 62)]
    assert tuner.statistics().no_change_count == 0


def test_after_decrease_then_no_change_the_counter_starts():
    tuner = after_decrease()
    assert turns(tuner, [500, 500]) == [("no_change", 62), ("no_change", 62)]
    assert tuner.statistics().no_change_count == 1


# --- similarity ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "similar"),
    [(1050, True), (950, True), (1051, False), (949, False), (1000.0, True), (1050.5, False)],
)
def test_similar_means_within_five_percent_of_last_inclusive(current, similar):
    tuner = after_increase()  # similar restores (no_change); otherwise it moves
    assert (tuner.auto_tune(current) == "no_change") is similar


def test_similarity_is_configurable():
    tuner = MaxSpoutPendingTuner(100, similarity=0.2)
    assert turns(tuner, [1000, 1200]) == [("increase", 125), ("no_change", 100)]


def test_zero_similarity_only_equal_deltas_are_similar():
    tuner = MaxSpoutPendingTuner(100, similarity=0)
    assert turns(tuner, [1000, 1001]) == [("increase", 125), ("increase", 157)]
    assert tuner.auto_tune(1001) == "no_change"


def test_last_zero_is_similar_only_to_zero():
    tuner = MaxSpoutPendingTuner(100)
    assert turns(tuner, [0, 0]) == [("increase", 125), ("no_change", 100)]
    assert turns(tuner, [1]) == [("increase", 125)]  # 1 is not similar to 0: it is higher


def test_zero_progress_forever_never_decreases():
    """A plant that makes no progress at all gives the tuner nothing to descend on."""
    tuner = MaxSpoutPendingTuner(100)
    values = [v for _, v in turns(tuner, [0] * 20)]
    assert set(values) == {100, 125}


# --- arithmetic and clamping ---------------------------------------------------------------


def test_decrease_is_exact_where_floats_would_round_down():
    # 100 * (1 - 0.9) is 9.999... in floats; the pinned formula means exactly 10.
    tuner = MaxSpoutPendingTuner(80)
    turns(tuner, [10])  # 80 -> 100, last delta 10
    assert turns(tuner, [1]) == [("decrease", 10)]


def test_increase_is_clamped_to_maximum():
    tuner = MaxSpoutPendingTuner(90, maximum=100)
    assert turns(tuner, [10, 20]) == [("increase", 100), ("increase", 100)]


def test_restore_after_a_clamped_increase():
    tuner = MaxSpoutPendingTuner(90, maximum=100)
    assert turns(tuner, [10, 10]) == [("increase", 100), ("no_change", 90)]


def test_decrease_is_clamped_to_minimum():
    tuner = MaxSpoutPendingTuner(4, minimum=3)
    assert turns(tuner, [100, 60]) == [("increase", 5), ("decrease", 3)]  # floor(5 * .6)


def test_decrease_to_zero_progress_stops_at_minimum():
    tuner = MaxSpoutPendingTuner(100)
    assert turns(tuner, [100, 0]) == [("increase", 125), ("decrease", 1)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0},
        {"initial": 5, "minimum": 0},
        {"initial": 5, "minimum": 6},
        {"initial": 5, "maximum": 4},
        {"initial": 5, "minimum": 3, "maximum": 2},
        {"initial": 5, "similarity": -0.1},
    ],
)
def test_bad_settings_are_rejected(kwargs):
    initial = kwargs.pop("initial")
    with pytest.raises(ValueError):
        MaxSpoutPendingTuner(initial, **kwargs)


@pytest.mark.parametrize("delta", [-1, math.nan, math.inf])
def test_bad_deltas_are_rejected_and_change_nothing(delta):
    tuner = after_increase()
    before = tuner.statistics()
    with pytest.raises(ValueError):
        tuner.auto_tune(delta)
    assert tuner.statistics() == before


def test_statistics_is_a_frozen_snapshot():
    tuner = after_increase()
    record = tuner.statistics()
    tuner.auto_tune(5000)
    assert record == TunerStatistics(125, "increase", 1000, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.value = 1


# --- properties ----------------------------------------------------------------------------

deltas = st.lists(st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)), max_size=60)


@given(
    initial=st.integers(1, 10**6),
    minimum=st.integers(1, 100),
    span=st.one_of(st.none(), st.integers(0, 10**6)),
    deltas=deltas,
)
def test_value_always_within_bounds(initial, minimum, span, deltas):
    maximum = None if span is None else minimum + span
    initial = min(max(initial, minimum), math.inf if maximum is None else maximum)
    tuner = MaxSpoutPendingTuner(initial, minimum=minimum, maximum=maximum)
    for delta in deltas:
        tuner.auto_tune(delta)
        assert minimum <= tuner.get() <= (maximum or math.inf)


@given(initial=st.integers(1, 10**6), deltas=deltas)
def test_actions_move_the_value_the_way_they_say(initial, deltas):
    tuner = MaxSpoutPendingTuner(initial)
    for delta in deltas:
        before, previous = tuner.get(), tuner.last_action
        action = tuner.auto_tune(delta)
        after = tuner.get()
        assert tuner.last_action == action
        if action == "increase":
            assert after == math.ceil(before * 1.25)
        elif action == "decrease":
            assert after <= max(1, math.floor(before * 0.75))
        else:  # no change, or the restore of a useless increase
            assert after == before or (previous == "increase" and after < before)
        assert 0 <= tuner.statistics().no_change_count < 5


# --- a simulated plant ---------------------------------------------------------------------

KNEE = 1000  # the pending value at which the plant saturates
PEAK = 50 * KNEE  # progress per period at the knee


def plant(pending: int) -> int:
    """Progress per period: grows with pending up to the knee, then overload costs."""
    if pending <= KNEE:
        return 50 * pending
    return max(0, PEAK - 10 * (pending - KNEE))


@pytest.mark.parametrize("initial", [10, 100, 2000, 4000])
@pytest.mark.parametrize("seed", range(3))
def test_settles_near_the_knee(initial, seed):
    noise = random.Random(seed)  # +-2 %, inside the similarity band
    tuner = MaxSpoutPendingTuner(initial)
    values, progress = [], []
    for _ in range(300):
        progress.append(round(plant(tuner.get()) * noise.uniform(0.98, 1.02)))
        tuner.auto_tune(progress[-1])
        values.append(tuner.get())
    settled, made = values[150:], progress[150:]
    assert min(settled) >= 0.75 * KNEE and max(settled) <= 1.5 * KNEE
    assert 0.9 * KNEE <= statistics.median(settled) <= 1.25 * KNEE
    assert statistics.mean(made) >= 0.93 * PEAK


def test_saturating_plant_without_overload_stays_just_above_the_knee():
    tuner = MaxSpoutPendingTuner(10)
    values = []
    for _ in range(200):
        tuner.auto_tune(50 * min(tuner.get(), KNEE))
        values.append(tuner.get())
    assert KNEE <= statistics.median(values[100:]) <= 1.25 * KNEE


# --- each turn as data -----------------------------------------------------------------------


def test_each_turn_records_both_periods_the_similarity_test_and_the_move():
    tuner = MaxSpoutPendingTuner(100)
    assert tuner.last_turn is None
    tuner.auto_tune(1000)
    assert tuner.last_turn == TunerTurn(1000, None, None, None, "increase", 100, 125)
    tuner.auto_tune(1040)  # within 5 % of 1000: the increase bought nothing
    assert tuner.last_turn == TunerTurn(1040, 1000, True, 50.0, "no_change", 125, 100,
                                        restored=True)
    assert tuner.last_turn.move == "restore" and tuner.last_turn.after < tuner.last_turn.before
    tuner.auto_tune(500)
    turn = tuner.last_turn
    assert (turn.previous, turn.similar, turn.move, turn.before, turn.after) == (
        1040, False, "decrease", 100, 48)  # 1 - 500/1040 = 51.9 % off: floor(48.07)


def test_a_plain_no_change_is_not_a_restore():
    tuner = after_no_change()
    tuner.auto_tune(1000)
    assert tuner.last_turn.move == "no_change" and tuner.last_turn.before == tuner.get()


# --- replay: what auto would have done with other settings ---------------------------------

# A hand-made run: total progress read every second. Periods 1-3 grow by 100 each, then
# progress is flat at 400 a period, then it halves.
RUN = [(0, 0), (1, 100), (2, 300), (3, 600), (4, 1000), (5, 1400), (6, 1800), (7, 2000)]


def test_replay_at_the_recorded_interval_follows_the_paper():
    turns = replay(RUN, initial=100)
    assert [t.time for t in turns] == [1, 2, 3, 4, 5, 6, 7]
    assert [t.progress for t in turns] == [100, 200, 300, 400, 400, 400, 200]
    assert [(t.move, t.after) for t in turns] == [
        ("increase", 125), ("increase", 157), ("increase", 197), ("increase", 247),
        ("restore", 197),  # 400 vs 400: similar, take back the last increase
        ("no_change", 197),  # similar again, in the no-change state: count 1
        ("decrease", 98)]  # 400 -> 200: -50 %, floor(197 * 0.5)


def test_a_wider_similarity_band_stops_the_climb_earlier():
    # 300 vs 200 is +50 %: similar with a 60 % band, so the third turn restores 157 -> 125
    turns = replay(RUN, initial=100, similarity=0.6)
    assert [t.move for t in turns[:3]] == ["increase", "increase", "restore"]
    assert turns[2].band == pytest.approx(120.0) and turns[2].after == 125


def test_other_step_factors_change_the_values_not_the_decisions():
    paper, bold = replay(RUN, initial=100), replay(RUN, initial=100, step_up=2,
                                                    min_step_down=0.5)
    assert [t.move for t in bold] == [t.move for t in paper]
    assert [t.after for t in bold] == [200, 400, 800, 1600, 800, 800, 400]


def test_a_longer_interval_sums_the_periods_it_spans():
    turns = replay(RUN, initial=100, interval=2)
    assert [(t.time, t.progress) for t in turns] == [(2, 300), (4, 700), (6, 800)]
    # 700 vs 300: increase; 800 vs 700 is +14 %: increase again
    assert [(t.move, t.after) for t in turns] == [
        ("increase", 125), ("increase", 157), ("increase", 197)]


def test_an_interval_between_readings_reads_the_last_one_before_the_turn():
    turns = replay([(0, 0), (0.4, 10), (1.3, 50), (2.2, 60)], interval=1, initial=10)
    assert [(t.time, t.progress) for t in turns] == [(1, 10), (2, 40)]


def test_no_change_limit_probes_upwards_sooner():
    flat = [(t, 100 * t) for t in range(6)]  # the same progress every period
    paper = replay(flat, initial=100)
    eager = replay(flat, initial=100, no_change_limit=2)
    assert [t.move for t in paper] == ["increase", "restore", "no_change", "no_change",
                                       "no_change"]
    assert [t.move for t in eager] == ["increase", "restore", "no_change", "increase",
                                       "restore"]


def test_a_replay_with_the_runs_settings_matches_a_tuner_fed_by_hand():
    tuner = MaxSpoutPendingTuner(1000)
    deltas = [b - a for (_, a), (_, b) in zip(RUN, RUN[1:])]
    by_hand = [(tuner.auto_tune(d), tuner.get()) for d in deltas]
    assert [(t.action, t.after) for t in replay(RUN)] == by_hand


@pytest.mark.parametrize("series, options, message", [
    ([], {}, "at least one"),
    ([(0, 0), (1, 10), (2, 5)], {}, "go forward"),
    ([(0, 0), (2, 10), (1, 20)], {}, "go forward"),
    ([(0, 0), (1, 10)], {"interval": 0}, "interval"),
    ([(0, 0), (1, 10)], {"step_up": 1.0}, "step_up"),
    ([(0, 0), (1, 10)], {"min_step_down": 1}, "min_step_down"),
    ([(0, 0), (1, 10)], {"no_change_limit": 0}, "no_change_limit"),
])
def test_a_replay_refuses_what_it_cannot_mean(series, options, message):
    with pytest.raises(ValueError, match=message):
        replay(series, **options)
