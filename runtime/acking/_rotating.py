"""Storm's ``RotatingMap``: the pending map of the acker and of a spout task, whose keys
expire by age (docs/internals/acker.md)."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RotatingMap(Generic[K, V]):
    """Storm's ``RotatingMap``: a map whose keys expire by age, in ``buckets`` steps.

    New keys go to the newest bucket; :meth:`rotate` drops the oldest bucket and
    returns it. A key is dropped by the ``buckets``-th rotation after its last
    :meth:`put`: rotating every ``p`` seconds, it lives between
    ``(buckets - 1) * p`` and ``buckets * p`` seconds.

    >>> m = RotatingMap(2)
    >>> m.put("a", 1)
    >>> m.rotate(), m.get("a")
    ({}, 1)
    >>> m.rotate(), "a" in m
    ({'a': 1}, False)
    """

    def __init__(self, buckets: int = 3) -> None:
        if buckets < 2:
            raise ValueError(f"RotatingMap needs at least 2 buckets, not {buckets}")
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(buckets))

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value stored under ``key``, from whichever bucket holds it."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket[key]
        return default

    def put(self, key: K, value: V) -> None:
        """Store ``value`` in the newest bucket: ``key`` becomes the youngest key."""
        self.remove(key)
        self._buckets[0][key] = value

    def replace(self, key: K, value: V) -> None:
        """Store ``value`` without changing ``key``'s age (a new key starts newest)."""
        self._holder(key)[key] = value

    @property
    def newest(self) -> dict[K, V]:
        """The newest bucket, where new keys go (a new dict after each :meth:`rotate`)."""
        return self._buckets[0]

    @property
    def buckets(self) -> deque[dict[K, V]]:
        """The buckets, newest first (for moving keys between two maps rotated together,
        keeping their age: change them only that way)."""
        return self._buckets

    def remove(self, key: K) -> V | None:
        """Remove ``key`` and return its value (``None`` when absent)."""
        return self._holder(key).pop(key, None)

    def contains(self, key: K) -> bool:
        """Whether any bucket holds ``key``."""
        return any(key in bucket for bucket in self._buckets)

    __contains__ = contains

    def __len__(self) -> int:
        return sum(map(len, self._buckets))

    def rotate(self) -> dict[K, V]:
        """Drop the oldest bucket, open a new empty one, and return what was dropped."""
        self._buckets.appendleft({})
        return self._buckets.pop()

    def _holder(self, key: K) -> dict[K, V]:
        """The bucket that holds ``key``, or the newest one when none does."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket
        return self._buckets[0]
