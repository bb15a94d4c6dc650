"""The per-key sequence checker of the chaos runs (runtime/_sequence.py): every key's values
0..n-1 must arrive at least once; gaps are losses, reported by key."""

from __future__ import annotations

import random

import pytest

from runtime.testing import SequenceChecker


def test_in_order_once_each_is_ok():
    r = SequenceChecker().see_all((k, v) for v in range(100) for k in "abc").report(
        dict.fromkeys("abc", 100))
    assert r.ok and (r.keys, r.received, r.distinct, r.duplicates, r.late) == (3, 300, 300, 0, 0)
    assert str(r) == "3 keys, 300 values received (300 distinct): 0 lost, 0 duplicates, 0 late"


def test_replays_in_any_order_with_duplicates_lose_nothing():
    rng = random.Random(7)
    pairs = [(k, v) for k in range(20) for v in range(500)]
    replays = rng.sample(pairs, 1000)  # at least once: some values twice, late
    arrivals = pairs + replays
    rng.shuffle(arrivals)
    r = SequenceChecker().see_all(arrivals).report(dict.fromkeys(range(20), 500))
    assert r.ok and r.total_lost == 0
    assert r.duplicates == 1000 and r.distinct == 10_000
    assert r.late > 0  # shuffled: many first arrivals come after a higher value


def test_gaps_are_losses_reported_by_key_as_ranges():
    c = SequenceChecker()
    c.see_all([("a", v) for v in range(10) if v not in (3, 4, 5, 9)])
    c.see_all([("b", v) for v in range(0, 10, 2)])
    r = c.report({"a": 10, "b": 10, "never": 2})
    assert r.lost == {"a": [(3, 5), (9, 9)], "b": [(1, 1), (3, 3), (5, 5), (7, 7), (9, 9)],
                      "never": [(0, 1)]}
    assert r.total_lost == 4 + 5 + 2 and not r.ok
    assert "LOST 11 in 3 keys (a: 3-5, 9; b: 1, 3, 5; never: 0-1)" in str(r)


def test_values_beyond_the_expected_count_or_of_unexpected_keys_are_not_ok():
    c = SequenceChecker().see_all([("a", 0), ("a", 1), ("a", 2), ("z", 0)])
    r = c.report({"a": 2})
    assert r.total_lost == 0 and r.beyond == 2 and not r.ok
    assert "2 beyond the expected counts" in str(r)


@pytest.mark.parametrize("value", [-1, 1.0, "3", None, True])
def test_a_value_that_is_not_a_sequence_number_is_refused(value):
    with pytest.raises(ValueError, match="key 'k': a sequence value is an integer >= 0"):
        SequenceChecker().see("k", value)


def test_memory_stays_small_when_values_arrive_roughly_in_order():
    c = SequenceChecker()
    for v in range(100_000):
        c.see("k", v ^ 1)  # pairs swapped: 1, 0, 3, 2, ...
    state = c._keys["k"]
    assert (state.prefix, len(state.above)) == (100_000, 0)
    assert c.report({"k": 100_000}).late == 50_000
