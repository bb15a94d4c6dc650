"""The acker's ledger: Storm's XOR bookkeeping of tuple trees, as a pure class.

For every spout tuple (a *root*) the ledger keeps two things: the spout task that
emitted it, and the XOR of every edge id sent to it so far. Each edge id is XORed in
twice, once when its tuple is created and once when it is acked, so the XOR is zero
exactly when every tuple of the tree has been acked (seed 001, "How does Storm
implement reliability in an efficient way?"). Read :meth:`AckLedger.ack` first.

Nothing here reads a clock, opens a socket or starts a thread: every method that
cares about time takes ``now`` (seconds, any monotonic origin) and every outcome is
returned as a value, :class:`Completed` or :class:`Failed`, for the caller to send to
the spout task it names. See ``docs/internals/acker.md``.
"""

from __future__ import annotations

import math
import os
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from .wire import ACK_ACK as ACK
from .wire import ACK_FAIL as FAIL
from .wire import ACK_INIT as INIT
from .wire import ACK_RESET as RESET

K = TypeVar("K")
V = TypeVar("V")

FailReason = Literal["fail", "timeout"]

# One pending root is one int: bits 0-63 hold the XOR, bit 64 says a tuple of the tree
# failed, bits 65 and up hold spout task + 1 (0: the init has not arrived yet). A Python
# int of up to 90 bits takes 36 bytes, so a root costs one dict slot, its key and 36 bytes.
_XOR_BITS = (1 << 64) - 1
_FAILED_BIT = 1 << 64
_TASK_SHIFT = 65
_KEEP_ON_INIT = _XOR_BITS | _FAILED_BIT  # what an init leaves of an early entry


_ids = random.Random(os.urandom(32))


def new_id() -> int:
    """A random, nonzero, unsigned 64-bit id for a root or an edge.

    Zero is excluded because XORing zero changes nothing: a zero edge id would make
    its tuple invisible to the ledger. The generator is a module-level
    ``random.Random`` seeded from ``os.urandom`` and reseeded in every forked child,
    so sibling processes never draw the same ids.

    >>> 0 < new_id() < 2**64
    True
    """
    return _ids.getrandbits(64) or new_id()


def _reseed_ids() -> None:
    _ids.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_ids)


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

    def add_new(self, key: K, value: V) -> None:
        """Store a key known not to be here (a fresh random id) in the newest bucket."""
        self._buckets[0][key] = value

    def replace(self, key: K, value: V) -> None:
        """Store ``value`` without changing ``key``'s age (a new key starts newest)."""
        self._holder(key)[key] = value

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


@dataclass(frozen=True, slots=True)
class Completed:
    """Every tuple of root ``root_id``'s tree was acked: call ``ack`` on ``spout_task``."""

    root_id: int
    spout_task: int


@dataclass(frozen=True, slots=True)
class Failed:
    """Root ``root_id`` failed (``reason`` "fail" or "timeout"): call ``fail`` on ``spout_task``."""

    root_id: int
    spout_task: int
    reason: FailReason


@dataclass(frozen=True, slots=True)
class Renewed:
    """Root ``root_id``'s timeout was restarted (``reset_timeout``): ``spout_task``, which
    times its roots out too, must restart its own clock for it (Storm forwards it so)."""

    root_id: int
    spout_task: int


Decision = Completed | Failed | Renewed


@dataclass(frozen=True, slots=True)
class LedgerStatistics:
    """Counters of an :class:`AckLedger`.

    ``pending`` counts every root the ledger holds, including those whose init has not
    arrived; ``orphaned`` counts roots that expired before their init arrived (they
    have no spout task to tell, so they end without a decision).
    """

    pending: int
    completed: int
    failed: int
    timed_out: int
    orphaned: int


class AckLedger:
    """XOR bookkeeping of pending tuple trees, with Storm's rotating timeouts.

    Messages may arrive in any order: acks and fails that reach the ledger before
    their root's init are kept (with no spout task yet), and the root is decided when
    the init arrives. A root times out ``timeout_secs`` after its init (or its last
    :meth:`reset_timeout`), to within ``rotation_secs`` late and never early; every
    method first expires what is due at ``now``, so any call may return timeouts.

    >>> ledger = AckLedger(30.0)
    >>> a, b = new_id(), new_id()               # the two tuples a spout emitted
    >>> ledger.init(root_id=7, spout_task=3, xor_val=a ^ b, now=0.0)
    []
    >>> ledger.ack(7, a, now=1.0)                # a bolt acked a, anchoring nothing
    []
    >>> ledger.ack(7, b, now=2.0)
    [Completed(root_id=7, spout_task=3)]
    """

    def __init__(self, timeout_secs: float, *, buckets: int = 3) -> None:
        if not timeout_secs > 0:
            raise ValueError(f"timeout_secs must be positive, not {timeout_secs}")
        self._pending: RotatingMap[int, int] = RotatingMap(buckets)
        self._buckets = buckets
        self.rotation_secs = timeout_secs / (buckets - 1)
        self._slot: float = -math.inf  # rotation slot of the last call (none yet)
        self._completed = self._failed = self._timed_out = self._orphaned = 0
        self.rejected = 0  # malformed messages skipped by apply()

    def init(self, root_id: int, spout_task: int, xor_val: int, now: float) -> list[Decision]:
        """A spout emitted root ``root_id``; ``xor_val`` XORs the edge ids it sent."""
        if spout_task < 0:
            raise ValueError(f"spout_task must be >= 0, not {spout_task}")
        decisions = self._advance(now)
        early = self._pending.get(root_id, 0) & _KEEP_ON_INIT
        entry = (early ^ xor_val) | ((spout_task + 1) << _TASK_SHIFT)
        return decisions + self._settle(root_id, entry, self._pending.put)

    def ack(self, root_id: int, xor_val: int, now: float) -> list[Decision]:
        """A tuple of the tree was acked: its own edge id XOR its new children's."""
        decisions = self._advance(now)
        entry = self._pending.get(root_id, 0) ^ xor_val
        return decisions + self._settle(root_id, entry, self._pending.replace)

    def fail(self, root_id: int, now: float) -> list[Decision]:
        """A tuple of the tree failed explicitly: the root fails once its init is here."""
        decisions = self._advance(now)
        entry = self._pending.get(root_id, 0) | _FAILED_BIT
        return decisions + self._settle(root_id, entry, self._pending.replace)

    def reset_timeout(self, root_id: int, now: float) -> list[Decision]:
        """Restart ``root_id``'s timeout from ``now``; unknown roots are ignored."""
        decisions = self._advance(now)
        entry = self._pending.get(root_id)
        if entry is not None:
            self._pending.put(root_id, entry)
            decisions += _renewed(root_id, entry)
        return decisions

    def expire(self, now: float) -> list[Decision]:
        """The roots that timed out by ``now``; call at least every ``rotation_secs``."""
        return self._advance(now)

    def apply(self, messages, now: float) -> list[Decision]:
        """A batch of ``[op, root, value, spout_task]`` messages (ops: :data:`INIT`,
        :data:`ACK`, :data:`FAIL`, :data:`RESET`), with exactly the effect of calling
        the methods above one by one, in one loop: this is the acker's hot path.
        A message of the wrong shape or op is skipped and counted in ``rejected``."""
        decisions = self._advance(now)
        buckets, newest = self._pending._buckets, self._pending._buckets[0]
        for message in messages:
            try:
                op, root, value, spout = message
                for holder in buckets:  # noqa: B007 - the bucket that holds root, if any
                    if root in holder:
                        break
                else:
                    holder = None
            except (TypeError, ValueError):
                self.rejected += 1
                continue
            entry = 0 if holder is None else holder[root]
            if op == ACK:
                entry ^= value
            elif op == INIT and type(spout) is int and spout >= 0:
                entry = ((entry & _KEEP_ON_INIT) ^ value) | ((spout + 1) << _TASK_SHIFT)
                holder = self._renew(root, holder, newest)
            elif op == FAIL:
                entry |= _FAILED_BIT
            elif op == RESET and holder is not None:
                holder = self._renew(root, holder, newest)
                holder[root] = entry
                decisions += _renewed(root, entry)
                continue
            else:
                self.rejected += op != RESET
                continue
            decision = self._decide(root, entry)
            if decision is None:
                (newest if holder is None else holder)[root] = entry
            else:
                if holder is not None:
                    del holder[root]
                decisions.append(decision)
        return decisions

    @staticmethod
    def _renew(root: int, holder: dict | None, newest: dict) -> dict | None:
        """Make a stored ``root`` the youngest key (init and reset restart its timeout)."""
        if holder is None:
            return None
        if holder is not newest:
            newest[root] = holder.pop(root)
        return newest

    def statistics(self) -> LedgerStatistics:
        """A snapshot of the ledger's counters."""
        return LedgerStatistics(
            len(self._pending), self._completed, self._failed, self._timed_out, self._orphaned
        )

    def _settle(
        self, root_id: int, entry: int, store: Callable[[int, int], None]
    ) -> list[Decision]:
        """Decide ``root_id`` from its new ``entry``; keep the entry while it is pending."""
        decision = self._decide(root_id, entry)
        if decision is None:
            store(root_id, entry)
            return []
        self._pending.remove(root_id)
        return [decision]

    def _decide(self, root_id: int, entry: int) -> Decision | None:
        task = _spout_task(entry)
        if task is None:
            return None
        if entry & _FAILED_BIT:
            self._failed += 1
            return Failed(root_id, task, "fail")
        if entry & _XOR_BITS == 0:
            self._completed += 1
            return Completed(root_id, task)
        return None

    def _advance(self, now: float) -> list[Decision]:
        """Rotate once per ``rotation_secs`` boundary crossed since the last call."""
        slot = math.floor(now / self.rotation_secs)
        if slot <= self._slot:
            return []
        due, self._slot = int(min(slot - self._slot, self._buckets)), slot
        return [d for _ in range(due) for d in self._timeouts(self._pending.rotate())]

    def _timeouts(self, expired: dict[int, int]) -> list[Decision]:
        decisions: list[Decision] = [
            Failed(root, task, "timeout")
            for root, entry in expired.items()
            if (task := _spout_task(entry)) is not None
        ]
        self._timed_out += len(decisions)
        self._orphaned += len(expired) - len(decisions)
        return decisions


def _renewed(root_id: int, entry: int) -> list[Decision]:
    task = _spout_task(entry)
    return [] if task is None else [Renewed(root_id, task)]


def _spout_task(entry: int) -> int | None:
    """The spout task recorded in ``entry``, or ``None`` before the init arrived."""
    task = entry >> _TASK_SHIFT
    return task - 1 if task else None
