"""Aggregators, and the pure core of a persistent aggregation: combine a batch per key in
memory, then apply it to a backing map with one ``multi_get`` and one ``multi_put``,
skipping keys the batch has already been applied to (Trident's transactional state).

No sockets, no clock: :class:`BatchAggregation` is driven with ``add`` for each tuple of
a batch attempt and ``end`` for that attempt's end marker, and answers with a decision.

>>> from runtime.trident._state import MemoryMap
>>> state = MemoryMap()
>>> agg = BatchAggregation(Count(), state)
>>> for word in ["a", "b", "a"]:
...     agg.add(attempt=7, key=(word,), tup=None)
>>> agg.end(txid=1, attempt=7, expected=3).updated
[(('a',), 2), (('b',), 1)]
>>> agg.add(attempt=8, key=("a",), tup=None)  # batch 1 replayed: "a" already has txid 1
>>> agg.end(txid=1, attempt=8, expected=1).updated, state.snapshot()
([], {'a': 2, 'b': 1})
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from runtime.model.windowing import Count as _Counted

from ._state import TxValue

STALE_ATTEMPTS = 64  # attempt ids remembered as over, so their late tuples are ignored


class CombinerAggregator:
    """Trident's combiner: ``init(tup)`` turns one tuple into a value, ``combine(a, b)``
    merges two (associative and commutative), ``zero()`` is the value of nothing. A batch
    is combined per key in memory, then combined with the stored value."""

    def init(self, tup) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define init(tup)")

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define combine(a, b)")

    def zero(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define zero()")


class ReducerAggregator:
    """Trident's reducer: ``init()`` is the starting value of a new key and
    ``reduce(value, tup)`` folds one tuple in. A batch's tuples are kept per key and
    folded into the stored value at the end of the batch, in arrival order."""

    def init(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define init()")

    def reduce(self, value: Any, tup) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define reduce(value, tup)")


class Count(CombinerAggregator, _Counted):
    """How many tuples each key had. ``Count(n)`` is also a window's length or slide in
    tuples (``runtime.model.windowing.Count``), so ``runtime.Count`` serves both.

    >>> c = Count(); c.combine(c.init(None), c.zero())
    1
    """

    def init(self, tup) -> int:
        return 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0

    __repr__ = _Counted.__repr__


class Sum(CombinerAggregator):
    """The sum of one field over each key's tuples."""

    def __init__(self, field: str) -> None:
        self.field = field

    def init(self, tup) -> Any:
        return tup[self.field]

    def combine(self, a, b):
        return a + b

    def zero(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"Sum({self.field!r})"


def check_aggregator(where: str, aggregator: Any) -> None:
    """A TypeError naming ``where`` unless ``aggregator`` is a combiner or a reducer."""
    if not isinstance(aggregator, CombinerAggregator | ReducerAggregator):
        raise TypeError(f"{where}: aggregator {aggregator!r} must be a CombinerAggregator "
                        "(init/combine/zero, e.g. Count()) or a ReducerAggregator "
                        "(init/reduce) instance")


@dataclass(frozen=True)
class BatchEnd:
    """What ``end`` decided: ``ok`` (the marker can be acked) or not (fail it: the batch
    is replayed); ``updated`` lists the (key, new value) pairs written; ``skipped`` counts
    keys the batch had already been applied to; ``reason`` says why it failed."""

    ok: bool
    updated: list = field(default_factory=list)
    skipped: int = 0
    reason: str = ""


class _Partial:
    """One attempt's tuples for this task, combined (or listed, for a reducer) per key."""

    __slots__ = ("attempt", "count", "by_key")

    def __init__(self, attempt: int) -> None:
        self.attempt, self.count, self.by_key = attempt, 0, {}


class BatchAggregation:
    """One aggregator task's batches: the current attempt's partial, and the commit.

    Tuples of an attempt travel before its end marker on the same link (FIFO), so at the
    marker the task has them all unless some were lost (the task restarted, or a new
    attempt began): then the count falls short of ``expected`` and the marker fails.
    """

    def __init__(self, aggregator: Any, state: Any) -> None:
        check_aggregator("persistent aggregate", aggregator)
        self.aggregator, self.state = aggregator, state
        self.combiner = isinstance(aggregator, CombinerAggregator)
        self.partial: _Partial | None = None
        self.over: OrderedDict[int, None] = OrderedDict()  # attempts that ended here
        self.committed = self.skipped_batches = self.failed = self.ignored = 0

    def add(self, attempt: int, key: tuple, tup: Any) -> None:
        """One tuple of ``attempt``; a new attempt drops what an older one left."""
        part = self.partial
        if part is None or part.attempt != attempt:
            if attempt in self.over:
                self.ignored += 1  # a straggler of an attempt that already ended
                return
            part = self.partial = _Partial(attempt)
        part.count += 1
        if self.combiner:
            one = self.aggregator.init(tup)
            had = part.by_key.get(key, _MISSING)
            part.by_key[key] = one if had is _MISSING else self.aggregator.combine(had, one)
        else:
            part.by_key.setdefault(key, []).append(tup)

    def end(self, txid: int, attempt: int, expected: int) -> BatchEnd:
        """The marker of ``attempt`` (of batch ``txid``), which sent ``expected`` tuples
        here: commit them if all arrived, else fail."""
        part = self.partial
        mine = part is not None and part.attempt == attempt
        if mine:
            self.partial = None
        self._over(attempt)
        got = part.count if mine else 0
        if got != expected:
            self.failed += 1
            return BatchEnd(False, reason=f"batch {txid}: {got} of {expected} tuples arrived")
        return self._commit(txid, part.by_key if mine else {})

    def _over(self, attempt: int) -> None:
        self.over[attempt] = None
        while len(self.over) > STALE_ATTEMPTS:
            self.over.popitem(last=False)

    def _commit(self, txid: int, by_key: dict) -> BatchEnd:
        """One multi_get, one multi_put (none for an empty batch); a key whose stored txid
        is this batch's (or later) already holds this batch and keeps its value."""
        if not by_key:
            return BatchEnd(True)
        keys = list(by_key)
        olds = self.state.multi_get(keys)
        puts, skipped = [], 0
        for key, old in zip(keys, olds):
            if old is not None and old.txid >= txid:
                skipped += 1
                continue
            puts.append((key, self._apply(old, by_key[key])))
        if puts:
            self.state.multi_put([k for k, _ in puts], [TxValue(txid, v) for _, v in puts])
        self.committed += bool(puts)
        self.skipped_batches += not puts
        return BatchEnd(True, puts, skipped)

    def _apply(self, old: TxValue | None, mine: Any) -> Any:
        agg = self.aggregator
        if self.combiner:
            return agg.combine(agg.zero() if old is None else old.value, mine)
        value = agg.init() if old is None else old.value
        for tup in mine:
            value = agg.reduce(value, tup)
        return value

    def statistics(self) -> dict:
        return {"committed": self.committed, "skipped_batches": self.skipped_batches,
                "failed": self.failed, "ignored": self.ignored}


_MISSING = object()
