"""A spout task's runs of roots, cut apart where completions cover only part of them.

A spout's tracked tuples travel as runs of consecutive roots (acker.md, "Runs of
roots"), and its tracker holds each run as one entry, ``first root -> (msg_ids, emit
times)``, so that a range of completions settles a whole run in one step. But an
acker's lists take runs apart: at two count tasks and more a count task now and then
finds a sentence's tree whole and completes its root alone, inside a run the acker
completes later, and a list's stretches may start or end inside a run. The functions
here cut such parts out of the runs that hold them, leaving the rest a run in its
bucket (so it times out when the run would have), or turn a run's roots into single
entries when that is cheaper (docs/internals/performance-log.md, "Issue 17, ninth pass").

They work on the tracker's two :class:`~runtime.acking._rotating.RotatingMap` s,
``runs`` and ``pending`` (root -> (msg_id, emit time)), and keep every root in the
bucket of its run's age. Read :func:`cut` first.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, islice

from ._rotating import RotatingMap


def run_starts(runs: RotatingMap) -> list[int]:
    """The first root of every run, in root order. Ints, not ``(first, age)`` tuples: a
    tuple made and compared a run cost ~1,300 instructions a root of the acker's
    stretches at 1/2/2, over half of what settling them cost the spout (performance-
    log.md, "Issue 17, tenth pass"); the age of the few runs used is looked up."""
    return sorted(chain.from_iterable(runs.buckets))


def _holder(runs: RotatingMap, lo: int) -> tuple[int, dict]:
    """The age of the run at ``lo`` (its bucket's index) and its bucket."""
    for age, bucket in enumerate(runs.buckets):
        if lo in bucket:
            return age, bucket
    raise KeyError(lo)


def cut_runs(runs: RotatingMap, first: int, end: int) -> list[tuple[int, list, list]]:
    """Cut the roots ``first`` to ``end - 1`` out of the runs that hold them:
    ``(first root, msg_ids, emit times)`` of each part cut, in root order."""
    starts = run_starts(runs)
    i = max(0, bisect_right(starts, first) - 1)
    parts = []
    for lo in islice(starts, i, None):
        if lo >= end:
            break
        bucket = _holder(runs, lo)[1]
        a, b = max(first, lo), min(end, lo + len(bucket[lo][0]))
        if a < b:
            parts.append((a, *cut(bucket, lo, a, b)))
    return parts


def singles_within(pending: RotatingMap, first: int, end: int, parts: list) -> list:
    """Remove the single roots between ``first`` and ``end - 1`` that ``parts`` (cut
    from runs) do not cover: ``(root, [msg_id], [emit time])`` each."""
    gaps, at = [], first
    for a, msg_ids, _ in parts:
        gaps.append((at, a))
        at = a + len(msg_ids)
    gaps.append((at, end))
    found, remove = [], pending.remove
    for lo, hi in gaps:
        if hi - lo <= len(pending):
            roots = range(lo, hi)
        else:  # a gap longer than what is held: look at what is held instead
            roots = sorted(r for b in pending.buckets for r in b if lo <= r < hi)
        for root in roots:
            entry = remove(root)
            if entry is not None:
                found.append((root, [entry[0]], [entry[1]]))
    return found


def detach(runs: RotatingMap, pending: RotatingMap, roots) -> None:
    """The roots of ``roots`` that runs hold become single entries in ``pending``, in
    the bucket of their run's age, so that they can be settled one by one. A run of
    which they are a few keeps the rest as runs (each root cut out, a few Python steps);
    one of which they are a quarter or more is taken apart whole, in C (~150
    instructions a root of it)."""
    if not len(runs):
        return
    ordered = sorted(roots)
    for lo in run_starts(runs):
        age, bucket = _holder(runs, lo)
        msg_ids, stamps = bucket[lo]
        hi = lo + len(msg_ids)
        i, j = bisect_left(ordered, lo), bisect_left(ordered, hi)
        if i == j:
            continue
        held = pending.buckets[age]
        if 4 * (j - i) >= hi - lo:
            del bucket[lo]
            held.update(zip(range(lo, hi), zip(msg_ids, stamps)))
            continue
        for root in sorted(set(ordered[i:j])):  # each cut leaves the rest at root + 1
            (msg_id,), (stamp,) = cut(bucket, lo, root, root + 1)
            held[root] = (msg_id, stamp)
            lo = root + 1


def stretches(ordered: list) -> list[tuple[int, int]] | None:
    """Distinct sorted roots as ``(first, count)`` stretches of consecutive roots; None
    when there are more than one stretch for every eight roots (single roots, drawn at
    random, are settled better one by one). Along distinct sorted ints ``root - index``
    never falls and stays the same exactly along a stretch, so each stretch's end is one
    binary search, not a subtraction and a comparison a root (docs/internals/
    performance-log.md, "Issue 17, ninth pass").

    >>> stretches([10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31])
    [(10, 4), (20, 12)]
    >>> stretches([1, 5, 9]) is None
    True
    """
    n, at, found = len(ordered), 0, []
    while at < n:
        if len(found) > n // 8:
            return None
        same = ordered[at] - at  # root - index along this stretch
        if ordered[-1] - (n - 1) == same:  # the rest is one stretch
            end = n
        else:  # the first index past the stretch
            end, past = at + 1, n - 1
            while end < past:
                mid = (end + past) // 2
                if ordered[mid] - mid == same:
                    end = mid + 1
                else:
                    past = mid
        found.append((ordered[at], end - at))
        at = end
    return found


def cut(bucket: dict, lo: int, a: int, b: int) -> tuple[list, list]:
    """Take the roots ``a`` to ``b - 1`` out of the run at ``lo`` in ``bucket``: their
    msg_ids and emit times. What is left before them stays at ``lo`` (its place in the
    bucket kept), what is left after them becomes a run at ``b``.

    >>> bucket = {10: (list("abcde"), [1.0] * 5)}
    >>> cut(bucket, 10, 12, 14)
    (['c', 'd'], [1.0, 1.0])
    >>> bucket
    {10: (['a', 'b'], [1.0, 1.0]), 14: (['e'], [1.0])}
    """
    msg_ids, stamps = bucket[lo]
    if lo < a:
        bucket[lo] = (msg_ids[:a - lo], stamps[:a - lo])
    else:
        del bucket[lo]
    if b - lo < len(msg_ids):
        bucket[b] = (msg_ids[b - lo:], stamps[b - lo:])
    return msg_ids[a - lo:b - lo], stamps[a - lo:b - lo]
