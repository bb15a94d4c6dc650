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
from collections import deque
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from operator import and_, not_, rshift, xor
from typing import Literal

from runtime.wire import ACK_ACK as ACK
from runtime.wire import ACK_FAIL as FAIL
from runtime.wire import ACK_INIT as INIT
from runtime.wire import ACK_RESET as RESET
from runtime.wire import ACKED_FAILED as FAILED
from runtime.wire import ACKED_OK as OK
from runtime.wire import ACKED_RENEWED as RENEWED
from runtime.wire import ACKED_TIMEOUT as TIMEOUT

from ._ids import SELF_INIT, TASK_BITS
from ._rotating import RotatingMap

FailReason = Literal["fail", "timeout"]

# One pending root is one int: bits 0-63 hold the XOR, bit 64 says a tuple of the tree
# failed, bits 65 and up hold spout task + 1 (0: the init has not arrived yet). A Python
# int of up to 90 bits takes 36 bytes, so a root costs one dict slot, its key and 36 bytes.
# A self-initialising root (below) writes its spout task in the root id, so its entry is
# the XOR alone, and bit 64 says it was decided (failed or timed out): a tombstone.
_XOR_BITS = (1 << 64) - 1
_FAILED_BIT = 1 << 64
_TASK_SHIFT = 65
_KEEP_ON_INIT = _XOR_BITS | _FAILED_BIT  # what an init leaves of an early entry

OLDEST_REPORTED = 10  # oldest roots each acker and spout task reports (running.acker_state)
_BULK = 12  # a batch of 4 messages or more (12 ints) is tried in C first


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
    the init arrives. A self-initialising root (:class:`RootIds`) needs no init: the
    ledger starts it from its id the first time it hears of it. A root times out
    ``timeout_secs`` after its init (or its last :meth:`reset_timeout`; for a
    self-initialising root, after the first message about it), to within
    ``rotation_secs`` late and never early; every method first expires what is due at
    ``now``, so any call may return timeouts.

    >>> from runtime.acking import RootIds, new_id
    >>> ledger = AckLedger(30.0)
    >>> a, b = new_id(), new_id()               # the two tuples a spout emitted
    >>> ledger.init(root_id=7, spout_task=3, xor_val=a ^ b, now=0.0)
    []
    >>> ledger.ack(7, a, now=1.0)                # a bolt acked a, anchoring nothing
    []
    >>> ledger.ack(7, b, now=2.0)
    [Completed(root_id=7, spout_task=3)]
    >>> root = RootIds(task=3).new()             # one tuple, sent to one task: no init
    >>> ledger.ack(root, root, now=3.0)          # acked by a bolt that anchored nothing
    [Completed(root_id=..., spout_task=3)]
    """

    def __init__(self, timeout_secs: float, *, buckets: int = 3,
                 task_bits: int = TASK_BITS) -> None:
        if not timeout_secs > 0:
            raise ValueError(f"timeout_secs must be positive, not {timeout_secs}")
        self._pending: RotatingMap[int, int] = RotatingMap(buckets)
        self._buckets = buckets
        self.rotation_secs = timeout_secs / (buckets - 1)
        self._slot: float = -math.inf  # rotation slot of the last call (none yet)
        self._shift, self._task_mask = 63 - task_bits, (1 << task_bits) - 1
        self._completed = self._failed = self._timed_out = self._orphaned = 0
        self.rejected = 0  # malformed messages skipped by apply()

    # -- one message at a time (what a notebook or a test drives by hand) ------------------
    def init(self, root_id: int, spout_task: int, xor_val: int, now: float) -> list[Decision]:
        """A spout emitted root ``root_id``; ``xor_val`` XORs the edge ids it sent."""
        if spout_task < 0:
            raise ValueError(f"spout_task must be >= 0, not {spout_task}")
        if root_id >> 63 == 1:
            raise ValueError(f"root {root_id} is self-initialising: it takes no init")
        return self.apply([INIT, root_id, xor_val], now, spout_task)

    def ack(self, root_id: int, xor_val: int, now: float) -> list[Decision]:
        """A tuple of the tree was acked: its own edge id XOR its new children's."""
        return self.apply([ACK, root_id, xor_val], now)

    def fail(self, root_id: int, now: float) -> list[Decision]:
        """A tuple of the tree failed explicitly: the root fails once its init is here."""
        return self.apply([FAIL, root_id, 0], now)

    def reset_timeout(self, root_id: int, now: float) -> list[Decision]:
        """Restart ``root_id``'s timeout from ``now``; unknown roots are ignored (but a
        self-initialising root's spout task is told, since it times the root out too)."""
        return self.apply([RESET, root_id, 0], now)

    def expire(self, now: float) -> list[Decision]:
        """The roots that timed out by ``now``; call at least every ``rotation_secs``."""
        out: list[int] = []
        self._advance(now, out)
        return _decisions(out)

    def apply(self, messages, now: float, sender: int = 0) -> list[Decision]:
        """A batch of messages as a flat list of ``op, root, value`` triples (ops:
        :data:`INIT`, :data:`ACK`, :data:`FAIL`, :data:`RESET`; ``sender`` is the spout
        task of every INIT), with exactly the effect of calling the methods above one by
        one. A message of the wrong shape or op is skipped and counted in ``rejected``."""
        out: list[int] = []
        self.settle(messages, now, sender, out)
        return _decisions(out)

    def settle(self, messages, now: float, sender: int, out: list,
               completed: dict[int, list] | None = None) -> None:
        """:meth:`apply`, with each decision appended to ``out`` as three ints,
        ``outcome, root, spout task`` (outcomes as on the wire: ``ACKED_OK``,
        ``ACKED_FAILED``, ``ACKED_TIMEOUT``, ``ACKED_RENEWED``) instead of an object.
        A batch of acks of distinct self-initialising roots (what bolts send) is settled
        in C (:meth:`_settle_acks`), the rest one message at a time. The roots that such
        a batch completes go to ``completed`` (spout task -> roots) when it is given,
        for the acker to send as ``COMPLETED`` frames, and to ``out`` when it is not."""
        self._advance(now, out)
        if len(messages) < _BULK or not self._settle_acks(messages, out, completed):
            self._settle_each(messages, sender, out)

    def _settle_acks(self, messages: list, out: list, completed: dict | None) -> bool:
        """Settle a batch of ``ACK`` messages by whole lists, in C, and say True; or do
        nothing and say False when the batch is not one this does exactly as one message
        at a time: anything but acks of distinct self-initialising roots, none held in
        an older bucket, with int values of 2 or more (a bool, which the long way
        rejects, equals 0 or 1; an ack value is that small by a chance of 2^-62). A root's entry
        is its XOR alone here, and a root the ledger holds nothing about starts as the
        root itself (its implied init), so the new entries are one ``map`` of XORs and
        the zeros among them the completed roots (a tombstone has bit 64: never 0).
        docs/internals/performance-log.md, "Issue 17, sixth pass: two counters"."""
        roots, values = messages[1::3], messages[2::3]
        buckets = self._pending._buckets
        newest = buckets[0]
        try:
            lo, hi = min(roots), max(roots)
            if (messages[0::3].count(ACK) != len(roots) or len(messages) % 3
                    or lo < SELF_INIT or hi > _XOR_BITS or min(values) < 2):
                return False
            entries = list(map(xor, map(newest.get, roots, roots), values))
        except TypeError:  # a root or a value that is no int: the long way rejects it
            return False
        fresh = dict(zip(roots, entries))
        if len(fresh) != len(roots) or not all(
                bucket.keys().isdisjoint(fresh.keys()) for bucket in islice(buckets, 1, None)):
            return False
        newest.update(fresh)
        if entries.count(0):
            done = list(compress(roots, map(not_, entries)))
            deque(map(newest.pop, done), 0)
            self._completed += len(done)
            self._file_completed(done, lo >> self._shift == hi >> self._shift, out, completed)
        return True

    def _file_completed(self, roots: list, one_task: bool, out: list,
                        completed: dict | None) -> None:
        """The roots :meth:`_settle_acks` completed, filed by the spout task written in
        each (``one_task``: all of one, read from the first)."""
        shift, mask = self._shift, self._task_mask
        if completed is None:
            tasks = map(and_, map(rshift, roots, repeat(shift)), repeat(mask))
            out += chain.from_iterable(zip(repeat(OK), roots, tasks))
        elif one_task:
            completed.setdefault(roots[0] >> shift & mask, []).extend(roots)
        else:
            for root in roots:
                completed.setdefault(root >> shift & mask, []).append(root)

    def _settle_each(self, messages, sender: int, out: list) -> None:
        """:meth:`settle`, one message at a time: every op, any root, malformed ones
        skipped and counted in ``rejected``."""
        buckets = self._pending._buckets
        newest = buckets[0]
        if len(messages) % 3:
            self.rejected += 1
        it = iter(messages)
        for op, root, value in zip(it, it, it):
            try:
                implied = root >> 63 == 1  # a self-initialising root
                for holder in buckets:  # noqa: B007 - the bucket that holds root, if any
                    if root in holder:
                        entry = holder[root]
                        break
                else:
                    holder = None
                    # a self-initialising root starts as its init would have made it
                    entry = root if implied else 0
            except TypeError:  # an unhashable or non-integer root
                self.rejected += 1
                continue
            if implied:
                self._settle_implied(op, root, value, entry, holder, out)
                continue
            if op == ACK and type(value) is int:
                entry ^= value
            elif op == INIT and type(value) is int and root >> 63 == 0:
                entry = ((entry & _KEEP_ON_INIT) ^ value) | ((sender + 1) << _TASK_SHIFT)
                holder = self._renew(root, holder, newest)
            elif op == FAIL:
                entry |= _FAILED_BIT
            elif op == RESET:
                task = entry >> _TASK_SHIFT
                if holder is not None:
                    holder = self._renew(root, holder, newest)
                    holder[root] = entry
                if task:
                    out += (RENEWED, root, task - 1)
                continue
            else:
                self.rejected += 1
                continue
            task = entry >> _TASK_SHIFT
            if not task or (entry & _XOR_BITS and not entry & _FAILED_BIT):
                (newest if holder is None else holder)[root] = entry  # still pending
                continue
            if entry & _FAILED_BIT:
                self._failed += 1
                out += (FAILED, root, task - 1)
                if holder is not None:
                    del holder[root]
            else:
                if holder is not None:
                    del holder[root]
                self._completed += 1
                out += (OK, root, task - 1)

    def _settle_implied(self, op: int, root: int, value, entry: int, holder: dict | None,
                        out: list) -> None:
        """One message about a self-initialising root, whose entry is its XOR alone (its
        spout task is written in the root) with bit 64 set once it is decided: a
        tombstone, which a later message of its tree cannot start afresh."""
        newest = self._pending._buckets[0]
        if op == ACK and type(value) is int:
            entry ^= value
            if entry:  # still pending, or a tombstone
                (newest if holder is None else holder)[root] = entry
                return
            if holder is not None:
                del holder[root]
            self._completed += 1
            out += (OK, root, root >> self._shift & self._task_mask)
        elif op == FAIL:
            if not entry & _FAILED_BIT:
                self._failed += 1
                out += (FAILED, root, root >> self._shift & self._task_mask)
            (newest if holder is None else holder)[root] = _FAILED_BIT
        elif op == RESET:
            if holder is not None:
                newest[root] = entry
                if holder is not newest:
                    del holder[root]
            if not entry & _FAILED_BIT:
                out += (RENEWED, root, root >> self._shift & self._task_mask)
        else:  # an init (a self-initialising root takes none), or an unknown op
            self.rejected += 1

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

    # -- read-only views (the live acker view; never on the hot path) --------------------
    def ages(self, now: float) -> list[tuple[float, float, int]]:
        """The pending roots by age, one ``(youngest, oldest, count)`` per rotation slot,
        newest first: a root in slot ``i`` was last (re)started between ``youngest`` and
        ``oldest`` seconds before ``now``. Counts are as :meth:`statistics` counts
        pending (roots awaiting their init, and tombstones, included). O(buckets).

        >>> ledger = AckLedger(30.0)                 # rotations every 15 s
        >>> _ = ledger.init(root_id=7, spout_task=3, xor_val=5, now=1.0)
        >>> _ = ledger.expire(now=16.0)              # one rotation: root 7 is 1-16 s old
        >>> ledger.ages(now=16.0)
        [(0.0, 1.0, 0), (1.0, 16.0, 1), (16.0, 31.0, 0)]
        """
        since = max(0.0, now - self._slot * self.rotation_secs) if self._slot > -math.inf else 0.0
        rot, buckets = self.rotation_secs, list(self._pending.buckets)  # (one C-level copy:
        # the acker's thread may rotate the deque while a report reads it)
        return [(since + (i - 1) * rot if i else 0.0, since + i * rot, len(bucket))
                for i, bucket in enumerate(buckets)]

    def oldest(self, n: int) -> list[tuple[int, int, int]]:
        """Up to ``n`` of the oldest roots that have a spout task: ``(root, spout task,
        slot)``, oldest first (``slot`` indexes :meth:`ages`; within a slot, in the order
        they arrived). Costs ``n`` steps, not one per pending root; safe to call from
        another thread (a bucket changed meanwhile gives a shorter list, never an error).

        >>> ledger = AckLedger(30.0)
        >>> _ = ledger.init(root_id=7, spout_task=3, xor_val=5, now=1.0)
        >>> ledger.oldest(5)
        [(7, 3, 0)]
        """
        found: list[tuple[int, int, int]] = []
        buckets = list(self._pending.buckets)
        for slot in range(len(buckets) - 1, -1, -1):
            found += _with_task(buckets[slot], slot, n - len(found), self._shift,
                                self._task_mask)
            if len(found) >= n:
                break
        return found

    def _advance(self, now: float, out: list) -> None:
        """Rotate once per ``rotation_secs`` boundary crossed since the last call."""
        slot = math.floor(now / self.rotation_secs)
        if slot <= self._slot:
            return
        due, self._slot = int(min(slot - self._slot, self._buckets)), slot
        for _ in range(due):
            self._timeouts(self._pending.rotate(), out)

    def _timeouts(self, expired: dict[int, int], out: list) -> None:
        """Decide the expired roots that have a spout task; the others are orphans, or
        the tombstones of decided self-initialising roots, which leave quietly (a timed
        out self-initialising root leaves a tombstone for one more timeout)."""
        newest, shift, mask = self._pending._buckets[0], self._shift, self._task_mask
        for root, entry in expired.items():
            if root >> 63 == 1:  # self-initialising: pending, or a tombstone
                if not entry & _FAILED_BIT:
                    out += (TIMEOUT, root, root >> shift & mask)
                    self._timed_out += 1
                    newest[root] = _FAILED_BIT
            elif entry >> _TASK_SHIFT:
                out += (TIMEOUT, root, (entry >> _TASK_SHIFT) - 1)
                self._timed_out += 1
            else:
                self._orphaned += 1


def _with_task(bucket: dict[int, int], slot: int, n: int, shift: int,
               mask: int) -> list[tuple[int, int, int]]:
    """The first ``n`` roots of ``bucket`` that have a spout task, with it and ``slot``
    (a self-initialising root's is in the root, ``shift`` and ``mask`` read it; a
    tombstone has none)."""
    found: list[tuple[int, int, int]] = []
    try:
        for root, entry in bucket.items():
            if len(found) >= n:
                break
            if root >> 63 == 1:
                if not entry & _FAILED_BIT:
                    found.append((root, root >> shift & mask, slot))
            elif entry >> _TASK_SHIFT:
                found.append((root, (entry >> _TASK_SHIFT) - 1, slot))
    except RuntimeError:  # the acker's thread changed the bucket: what was read stands
        pass
    return found


_INT = {int}


def _decisions(flat: list[int]) -> list[Decision]:
    """The ``outcome, root, task`` triples of :meth:`AckLedger.settle` as values."""
    it = iter(flat)
    return [_DECISION[outcome](root, task) for outcome, root, task in zip(it, it, it)]


_DECISION = {
    OK: Completed,
    FAILED: lambda root, task: Failed(root, task, "fail"),
    TIMEOUT: lambda root, task: Failed(root, task, "timeout"),
    RENEWED: Renewed,
}
