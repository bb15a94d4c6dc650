"""A spout task's tracker (runtime/acking/_tracking.py), pure: roots one by one and in runs of
consecutive roots, settled whole or root by root, renewed, failed and timed out."""

from __future__ import annotations

import random

import pytest

from runtime.acking import _cuts
from runtime.acking._ids import RootIds
from runtime.acking._tracking import SpoutTracker
from runtime.wire import ACKED_FAILED, ACKED_OK, ACKED_RENEWED, ACKED_TIMEOUT

TIMEOUT = 30.0


def tracker_with_runs(*lengths: int, now: float = 0.0):
    """A tracker holding runs of these lengths, back to back; msg_ids count from 0."""
    t = SpoutTracker(TIMEOUT, now=now)
    first = start = RootIds(task=3, bits=4).run_start()
    n = 0
    for length in lengths:
        t.add_run(first, list(range(n, n + length)), [now] * length)
        first, n = first + length, n + length
    return t, start


def test_whole_runs_complete_in_order_with_their_latencies():
    t, first = tracker_with_runs(3, 2)
    assert t.in_flight == 5
    assert t.complete_range(first, 5, now=0.004) == [0, 1, 2, 3, 4]
    assert (t.in_flight, t.acked, t.stale, len(t.runs)) == (0, 5, 0, 0)
    assert t.latency.count == 5 and t.latency.total == pytest.approx(5 * 0.004)


def test_part_of_a_run_is_cut_out_of_it_and_the_rest_stays_runs():
    t, first = tracker_with_runs(4)
    assert t.complete_range(first + 1, 2, now=1.0) == [1, 2]
    assert t.in_flight == 2 and len(t.runs) == 2 and len(t.pending) == 0
    assert t.runs.get(first) == ([0], [0.0]) and t.runs.get(first + 3) == ([3], [0.0])
    assert t.complete([first + 3, first], now=2.0) == [3, 0]
    assert (t.in_flight, t.acked, t.stale) == (0, 4, 0)
    assert t.latency.count == 4


def test_a_range_over_a_whole_run_and_part_of_the_next():
    t, first = tracker_with_runs(2, 3)
    assert t.complete_range(first, 3, now=1.0) == [0, 1, 2]
    assert t.in_flight == 2
    assert t.complete_range(first + 3, 2, now=1.0) == [3, 4]
    assert (t.in_flight, t.acked, t.stale, len(t.pending), len(t.runs)) == (0, 5, 0, 0, 0)


def test_completing_twice_counts_the_second_as_stale():
    t, first = tracker_with_runs(3)
    assert t.complete_range(first, 3, now=1.0) == [0, 1, 2]
    assert t.complete_range(first, 3, now=1.0) == []
    assert t.complete([first + 1], now=1.0) == []
    assert (t.in_flight, t.acked, t.stale) == (0, 3, 4)


def test_a_range_longer_than_what_is_in_flight_settles_what_is_there_at_once():
    """A broken or stale COMPLETED frame may claim any count: the work is bounded by
    what is in flight, never by the count."""
    t, first = tracker_with_runs(3, 2)
    assert t.complete_range(first + 1, 1, now=1.0) == [1]  # a run taken apart
    t.emitted(first + 100, "inside", 0.0)
    t.emitted(first - 1, "outside", 0.0)
    assert t.complete_range(first, 10**15, now=2.0) == [0, 2, 3, 4, "inside"]
    assert (t.in_flight, t.stale, len(t.runs)) == (1, 10**15 - 5, 0)


def test_outcomes_from_the_acker_reach_roots_inside_runs():
    t, first = tracker_with_runs(4)
    acked, failed = t.settle([first, ACKED_OK, first + 1, ACKED_FAILED,
                              first + 2, ACKED_TIMEOUT, first + 3, ACKED_RENEWED], now=1.0)
    assert (acked, failed) == ([0], [1, 2])
    assert (t.in_flight, t.timed_out, len(t.pending)) == (1, 1, 1)
    assert t.complete_range(first + 3, 1, now=2.0) == [3]  # the renewed root, alone now
    assert t.in_flight == 0


def test_a_run_times_out_as_a_whole_and_never_early():
    t, first = tracker_with_runs(3, now=0.0)
    assert t.expire(TIMEOUT - 0.001) == []
    expired = t.expire(1.5 * TIMEOUT)
    assert expired == [0, 1, 2]
    assert (t.in_flight, t.failed, t.timed_out, len(t.runs)) == (0, 3, 3, 0)
    assert t.complete_range(first, 3, now=50.0) == [] and t.stale == 3


def test_a_run_taken_apart_keeps_its_age():
    """Roots of a run settled one by one move to the bucket the run was in: they time
    out when the run would have, not later."""
    t, first = tracker_with_runs(3, now=0.0)
    t.expire(TIMEOUT / 2)  # one rotation: the run is one bucket old now
    assert t.complete([first], now=TIMEOUT / 2) == [0]
    assert t.expire(TIMEOUT) == []
    assert t.expire(1.5 * TIMEOUT) == [1, 2]  # the third rotation after the emit
    assert t.in_flight == 0


def test_a_renewed_root_of_a_run_starts_its_age_again():
    t, first = tracker_with_runs(2, now=0.0)
    t.expire(TIMEOUT / 2)
    t.settle([first, ACKED_RENEWED], now=TIMEOUT / 2)
    assert t.expire(TIMEOUT) == []
    assert t.expire(1.5 * TIMEOUT) == [1]  # the other root, with the run's age
    assert t.expire(2 * TIMEOUT) == [0]


def test_runs_and_single_roots_together_keep_the_count_right():
    """A random mix of runs and single roots, settled at random in ranges, lists and
    outcomes: every msg_id is acked or failed exactly once, and in_flight ends at 0."""
    rng = random.Random(7)
    t = SpoutTracker(TIMEOUT)
    ids = RootIds(task=1, bits=3)
    first, n, roots = ids.run_start(), 0, []
    for _ in range(200):
        if rng.random() < 0.7:
            length = rng.randint(1, 20)
            t.add_run(first, list(range(n, n + length)), [0.0] * length)
            roots += [(first + i, n + i) for i in range(length)]
            first, n = first + length, n + length
        else:
            root = ids.new()
            t.emitted(root, n, 0.0)
            roots.append((root, n))
            n += 1
    rng.shuffle(roots)
    left = {r for r, _ in roots}
    settled: list = []
    while roots:
        k = rng.randint(1, 30)
        take, roots = [r for r, _ in roots[:k]], roots[k:]
        way = rng.random()
        if way < 0.3:  # a range: the first root taken and those right after it still left
            start = end = take[0]
            while end + 1 in left:
                end += 1
            settled += t.complete_range(start, end - start + 1, now=1.0)
            done = set(range(start, end + 1))
            roots = [(r, m) for r, m in roots if r not in done]
            take = [r for r in take[1:] if r not in done]
            left -= done
        if way < 0.6:
            settled += t.complete(take, now=1.0)
        else:
            outcomes = [x for r in take for x in (r, rng.choice([ACKED_OK, ACKED_FAILED]))]
            acked, failed = t.settle(outcomes, now=1.0)
            settled += acked + failed
        left -= set(take)
    assert sorted(settled) == list(range(n))
    assert t.in_flight == 0 and t.stale == 0 and len(t.pending) == 0 and len(t.runs) == 0


def test_a_long_list_of_whole_runs_settles_them_whole_in_root_order(monkeypatch):
    """An acker's completions (two count tasks and more: the trees it completes are whole
    runs, in its own order) settle each run in one step, as a range does: no run is taken
    apart root by root (docs/internals/performance-log.md, "Issue 17, eighth pass")."""
    t, first = tracker_with_runs(20, 20)
    taken_apart = []
    monkeypatch.setattr(_cuts, "cut_runs", lambda *args: taken_apart.append(args))
    monkeypatch.setattr(_cuts, "detach", lambda *args: taken_apart.append(args))
    roots = list(range(first, first + 40))
    random.Random(3).shuffle(roots)
    assert t.complete(roots, now=0.004) == list(range(40))
    assert taken_apart == []
    assert (t.in_flight, t.acked, t.stale, len(t.runs), len(t.pending)) == (0, 40, 0, 0, 0)
    assert t.latency.count == 40


@pytest.mark.parametrize("seed", range(40))
def test_a_list_settled_by_stretches_has_the_effect_of_settling_it_root_by_root(seed):
    """Runs and single roots, some settled before (a run taken apart), then a list of
    stretches with gaps, repeats and strays, long or short: settled by stretches
    (``complete``) and root by root (``_complete_each``), two trackers end the same."""
    rng = random.Random(seed)
    start = RootIds(task=2, bits=4).prefix | 1000  # the same roots in both trackers

    def built() -> tuple[SpoutTracker, int]:
        r = random.Random(seed)
        t = SpoutTracker(TIMEOUT)
        first, n = start, 0
        for _ in range(r.randint(1, 12)):
            length = r.randint(1, 60)
            t.add_run(first, list(range(n, n + length)), [0.0] * length)
            first, n = first + length, n + length
            if r.random() < 0.3:  # a single root, among the runs' (as a retried emit's)
                t.emitted(first + 10**9 + r.randrange(10**6), n, 0.0)
                n += 1
        return t, first

    (a, end), (b, _) = built(), built()
    early = [rng.randrange(start, end) for _ in range(rng.randint(0, 5))]
    assert a._complete_each(early, 0.5) == b._complete_each(early, 0.5)
    roots = [r for r in range(start, end) if rng.random() < 0.9]
    roots += [rng.randrange(start, end) for _ in range(rng.randint(0, 3))]  # repeats
    roots += [end + 5, start - 7]  # strays: never emitted
    rng.shuffle(roots)
    if rng.random() < 0.3:
        roots = roots[:rng.randint(1, 20)]
    assert sorted(a.complete(roots, 1.0)) == sorted(b._complete_each(roots, 1.0))
    for field in ("in_flight", "acked", "stale"):
        assert getattr(a, field) == getattr(b, field)
    assert a.latency.count == b.latency.count
    held = [{r for bucket in t.pending.buckets for r in bucket}
            | {f + i for bucket in t.runs.buckets for f, (m, _) in bucket.items()
               for i in range(len(m))} for t in (a, b)]
    assert held[0] == held[1]


def test_a_root_completed_alone_cuts_its_run_and_the_rest_keeps_its_age():
    """A count task that finds a sentence's tree whole completes its root alone, inside a
    run the acker completes later: the root is cut out, not the run taken apart, and
    what is left times out when the run would have (performance-log.md, "ninth pass")."""
    t, first = tracker_with_runs(1000, now=0.0)
    t.expire(TIMEOUT / 2)  # one rotation: the run is one bucket old
    assert t.complete_range(first + 500, 1, now=TIMEOUT / 2) == [500]
    assert t.complete([first + 7, first + 900], now=TIMEOUT / 2) == [7, 900]
    assert len(t.pending) == 0 and len(t.runs) == 4 and t.in_flight == 997
    assert t.expire(TIMEOUT) == []
    expired = t.expire(1.5 * TIMEOUT)  # the third rotation after the emit
    assert sorted(expired) == sorted(set(range(1000)) - {7, 500, 900})
    assert (t.in_flight, t.acked, t.stale) == (0, 3, 0)


@pytest.mark.parametrize("seed", range(60))
def test_settling_in_any_way_matches_a_root_by_root_model(seed):
    """Runs and single roots, settled at random by ranges (over gaps, repeats and
    strays), an acker's stretches (several ranges, overlapping now and then), lists,
    outcomes (a renewed root becomes a single) and rotations, against a plain dict of
    root -> msg_id: the same msg_ids acked, failed and timed out, ranges and stretches
    in root order, lists of a few roots in their own order, the same stale count, and
    the same roots still held, with their ages."""
    rng = random.Random(seed)
    t = SpoutTracker(TIMEOUT, now=0.0)
    ids = RootIds(task=1, bits=3)
    model: dict = {}  # root -> (msg_id, rotations left before it times out)
    first, n, stale, now = ids.run_start(), 0, 0, 0.0
    for _ in range(rng.randint(2, 14)):
        length = rng.randint(1, 40)
        t.add_run(first, list(range(n, n + length)), [now] * length)
        model.update((first + i, [n + i, 3]) for i in range(length))
        first, n = first + length + rng.choice([0, 0, 3]), n + length
        if rng.random() < 0.3:
            root = first + 10**6 + n
            t.emitted(root, n, now)
            model[root] = [n, 3]
            n += 1
    lo, hi = min(model) - 3, max(model) + 3
    for _ in range(rng.randint(1, 25)):
        way = rng.random()
        if way < 0.1:
            flat, want, at = [], [], rng.randrange(lo, hi)
            for _ in range(rng.randint(1, 5)):
                at += rng.choice([-2, 0, 1, 7])  # overlapping, next to, or after the last
                count = rng.randint(0, 20)
                flat += (at, count)
                want += [model.pop(r)[0] for r in range(at, at + count) if r in model]
                at += count
            stale += sum(flat[1::2]) - len(want)
            pairs = iter(flat)
            assert t.complete_stretches(zip(pairs, pairs), now) == want
        elif way < 0.35:
            start = rng.randrange(lo, hi)
            count = rng.randint(0, 60)
            want = [model.pop(r)[0] for r in range(start, start + count) if r in model]
            stale += count - len(want)
            assert t.complete_range(start, count, now) == want
        elif way < 0.6:
            roots = [rng.randrange(lo, hi) for _ in range(rng.randint(1, 12))]
            want, seen = [], set()
            for r in roots:
                if r in model and r not in seen:
                    want.append(model.pop(r)[0])
                else:
                    stale += 1
                seen.add(r)
            assert t.complete(roots, now) == want
        elif way < 0.85:
            roots = rng.sample(range(lo, hi), rng.randint(1, 8))
            kinds = [rng.choice([ACKED_OK, ACKED_FAILED, ACKED_RENEWED]) for _ in roots]
            want_acked, want_failed = [], []
            for r, k in zip(roots, kinds):
                if r not in model:
                    stale += k != ACKED_RENEWED
                elif k == ACKED_RENEWED:
                    model[r][1] = 3
                else:
                    (want_acked if k == ACKED_OK else want_failed).append(model.pop(r)[0])
            assert t.settle([x for pair in zip(roots, kinds) for x in pair], now) == (
                want_acked, want_failed)
        else:
            now += TIMEOUT / 2
            for entry in model.values():
                entry[1] -= 1
            gone = sorted(m for m, left in model.values() if left == 0)
            model = {r: e for r, e in model.items() if e[1] > 0}
            assert sorted(t.expire(now)) == gone
        assert t.in_flight == len(model) and t.stale == stale
    held = {r: age for age, bucket in enumerate(t.pending.buckets) for r in bucket}
    held.update((f + i, age) for age, bucket in enumerate(t.runs.buckets)
                for f, (m, _) in bucket.items() for i in range(len(m)))
    assert held == {r: 3 - left for r, (_, left) in model.items()}
