"""The offset-tracking core that Kafka-style spouts share: pure, no I/O, no clock.

Per partition it knows the next offset to read, the offsets in flight, the acked offsets
above the first gap, and the failed offsets waiting to be replayed. The *committed* offset is
the lowest offset not yet acked: Kafka's meaning, the offset to resume from after a restart.
A spout asks `replays` first (failed offsets whose retry time has come, earliest first, then
lowest; the time is the spout's: ``fail`` takes ``retry_at`` and ``replays`` takes ``now``,
see ``_retry.py``), then `room` for how many new
offsets it may read, tells the tracker what it emitted with `emitted`, and feeds it
`ack` / `fail`. Reading stops while ``next - committed >= max_uncommitted``, so a restart
from the committed offsets re-reads at most ``max_uncommitted`` offsets per partition.

>>> t = OffsetTracker(max_uncommitted=3)
>>> t.assign(0, committed=10)
>>> t.room(0), [t.emitted(0, o) for o in (10, 11, 12)], t.room(0)
(3, [None, None, None], 0)
>>> t.ack(0, 11), t.committed(0), t.fail(0, 10), t.replays(0), t.ack(0, 10)
(True, 10, True, [10], True)
>>> t.committed(0), t.room(0), t.ack(0, 10), t.progress()
(12, 2, False, 2)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass


def task_partitions(count: int, task_index: int, parallelism: int) -> list[int]:
    """The partitions of a topic of ``count`` that task ``task_index`` of ``parallelism``
    reads: partition p goes to task ``p % parallelism``. Every partition has exactly one
    task, so after a rebalance each is read by one task (a task beyond ``count`` reads
    nothing).

    >>> [task_partitions(4, i, 3) for i in range(3)]
    [[0, 3], [1], [2]]
    """
    return [p for p in range(count) if p % parallelism == task_index]


@dataclass(frozen=True, slots=True)
class OffsetStatistics:
    """A snapshot of an `OffsetTracker`, totals over its partitions."""

    partitions: int
    committed: Mapping[int, int]  # partition -> committed offset (the next one to resume at)
    progress: int  # offsets committed since assign, over all partitions
    in_flight: int  # emitted (or replayed) and neither acked nor failed yet
    acked_ahead: int  # acked, but above a gap, so not committed yet
    replay_queued: int  # failed, waiting to be replayed
    emitted: int  # fresh offsets handed out
    replayed: int  # failed offsets handed out again
    acks: int
    fails: int
    duplicate_acks: int  # an ack of an offset already acked (ignored)
    unknown_acks: int  # an ack of an offset not in flight, nor acked before (ignored)
    ignored_fails: int  # a fail of an offset not in flight (ignored)
    dead_lettered: int  # offsets given up on (`drop`): done without an ack
    skipped: int  # offsets the log does not have (Kafka: compaction, transaction markers)
    blocked: int  # partitions that may read nothing new now (max_uncommitted reached)


class _Partition:
    """One partition's ledger. ``next - committed`` is the uncommitted window."""

    __slots__ = ("start", "committed", "next", "in_flight", "acked", "failed", "failures")

    def __init__(self, committed: int) -> None:
        self.start = self.committed = self.next = committed
        self.in_flight: set[int] = set()
        self.acked: set[int] = set()  # acked offsets above committed
        self.failed: list[tuple[float, int]] = []  # a heap of (retry_at, offset)
        self.failures: dict[int, int] = {}  # offset -> fails so far, until it is done

    def advance(self) -> None:
        while self.committed in self.acked:
            self.acked.remove(self.committed)
            self.committed += 1


class OffsetTracker:
    """Tracks offsets of several partitions for at-least-once reading of a log.

    ``msg_id`` of a tuple is ``(partition, offset)``; the tracker is told of each one
    emitted, acked and failed. A double ack, an ack of an offset never emitted and a fail
    of an offset not in flight are ignored and counted (they are what timeouts racing
    acks, or a restarted spout receiving its predecessor's callbacks, look like).
    """

    def __init__(self, max_uncommitted: int = 10_000) -> None:
        if not isinstance(max_uncommitted, int) or max_uncommitted < 1:
            raise ValueError(f"max_uncommitted must be a positive int, not {max_uncommitted!r}")
        self.max_uncommitted = max_uncommitted
        self._parts: dict[int, _Partition] = {}
        self._released = 0  # the progress of partitions given up (`unassign`)
        self._counts = dict.fromkeys(
            ("emitted", "replayed", "acks", "fails", "duplicate_acks", "unknown_acks",
             "ignored_fails", "dead_lettered", "skipped"), 0)

    # -- partitions -----------------------------------------------------------------------

    def assign(self, partition: int, committed: int = 0) -> None:
        """Start tracking `partition`, resuming at its `committed` offset."""
        if committed < 0:
            raise ValueError(f"partition {partition}: committed offset {committed} < 0")
        self._parts[partition] = _Partition(committed)

    def unassign(self, partition: int) -> None:
        """Stop tracking `partition` (a rebalance gave it to another task, which resumes at
        its committed offset): what is in flight or waiting for replay there is forgotten,
        and its later acks and fails are ignored and counted."""
        p = self._parts.pop(partition)
        self._released += p.committed - p.start

    def partitions(self) -> list[int]:
        return sorted(self._parts)

    # -- reading --------------------------------------------------------------------------

    def replays(self, partition: int, limit: int | None = None,
                now: float = math.inf) -> list[int]:
        """Take up to `limit` failed offsets due by `now` (their ``retry_at``) to emit again,
        earliest first, then lowest; they are in flight again."""
        p = self._parts[partition]
        out = []
        while p.failed and p.failed[0][0] <= now and (limit is None or len(out) < limit):
            out.append(heapq.heappop(p.failed)[1])
        p.in_flight.update(out)
        self._counts["replayed"] += len(out)
        return out

    def next_offset(self, partition: int) -> int:
        """The next offset to read fresh from `partition`."""
        return self._parts[partition].next

    def room(self, partition: int) -> int:
        """How many new offsets may be read now (0 while the window is full)."""
        p = self._parts[partition]
        return max(0, self.max_uncommitted - (p.next - p.committed))

    def emitted(self, partition: int, offset: int) -> None:
        """`offset`, which must be `next_offset(partition)`, was read and emitted."""
        p = self._parts[partition]
        if offset != p.next:
            raise ValueError(f"partition {partition}: emitted offset {offset}, "
                             f"expected {p.next}")
        p.next += 1
        p.in_flight.add(offset)
        self._counts["emitted"] += 1

    def emitted_many(self, partition: int, first: int, count: int) -> None:
        """`emitted` for the `count` contiguous offsets from `first` (one call per batch)."""
        p = self._parts[partition]
        if first != p.next:
            raise ValueError(f"partition {partition}: emitted offset {first}, "
                             f"expected {p.next}")
        p.next += count
        p.in_flight.update(range(first, first + count))
        self._counts["emitted"] += count

    def skip_to(self, partition: int, offset: int) -> int:
        """Count offsets from `next_offset` up to `offset` as done: the log has no record there.

        Kafka's offsets have gaps (compacted records, transaction markers); the embedded log's
        do not. Returns how many were skipped.
        """
        p = self._parts[partition]
        gap = range(p.next, offset)
        p.acked.update(gap)
        p.next = max(p.next, offset)
        p.advance()
        self._counts["skipped"] += len(gap)
        return len(gap)

    # -- callbacks ------------------------------------------------------------------------

    def ack(self, partition: int, offset: int) -> bool:
        """Mark an in-flight offset done; False (counted) when it was not in flight."""
        p = self._parts.get(partition)
        if p is None or offset not in p.in_flight:
            done = p is not None and (offset < p.committed or offset in p.acked)
            self._counts["duplicate_acks" if done else "unknown_acks"] += 1
            return False
        self._done(p, offset)
        self._counts["acks"] += 1
        return True

    def ack_many(self, partition: int, first: int, count: int) -> int:
        """`ack` every offset of ``[first, first + count)`` still in flight (those dead-lettered
        meanwhile are done already); one call per batch, for a spout whose tuples are acked
        as they are emitted (at most once). Returns how many it acked."""
        p = self._parts[partition]
        end = first + count
        if p.committed == first and p.next == end and len(p.in_flight) == count:
            p.in_flight.clear()  # the common case: nothing else pending in this partition
            p.failures.clear()
            p.committed = end
            acked = count
        else:
            offsets = [o for o in range(first, end) if o in p.in_flight]
            for offset in offsets:
                self._done(p, offset)
            acked = len(offsets)
        self._counts["acks"] += acked
        return acked

    def drop(self, partition: int, offset: int) -> bool:
        """Give up on an in-flight offset (it was dead-lettered): done without an ack, so the
        committed offset moves past it. False when it was not in flight."""
        p = self._parts.get(partition)
        if p is None or offset not in p.in_flight:
            return False
        self._done(p, offset)
        self._counts["dead_lettered"] += 1
        return True

    def in_flight(self, partition: int, offset: int) -> bool:
        """Whether `offset` of `partition` was handed out and is neither acked nor failed."""
        p = self._parts.get(partition)
        return p is not None and offset in p.in_flight

    def failures(self, partition: int, offset: int) -> int:
        """How many times `offset` failed so far (0 once it is done)."""
        return self._parts[partition].failures.get(offset, 0)

    @staticmethod
    def _done(p: _Partition, offset: int) -> None:
        p.in_flight.remove(offset)
        p.failures.pop(offset, None)
        p.acked.add(offset)
        p.advance()

    def fail(self, partition: int, offset: int, retry_at: float = 0.0) -> bool:
        """Queue an in-flight offset for replay at `retry_at` (the spout's clock, seconds);
        False (counted) when it was not in flight."""
        p = self._parts.get(partition)
        if p is None or offset not in p.in_flight:
            self._counts["ignored_fails"] += 1
            return False
        p.in_flight.remove(offset)
        p.failures[offset] = p.failures.get(offset, 0) + 1
        heapq.heappush(p.failed, (retry_at, offset))
        self._counts["fails"] += 1
        return True

    # -- reading the state ----------------------------------------------------------------

    def committed(self, partition: int) -> int:
        """The lowest offset of `partition` not acked yet: where a restart resumes."""
        return self._parts[partition].committed

    def committed_offsets(self) -> dict[int, int]:
        return {n: p.committed for n, p in sorted(self._parts.items())}

    def pending(self, partition: int) -> int:
        """Offsets of `partition` in flight or waiting for replay."""
        p = self._parts[partition]
        return len(p.in_flight) + len(p.failed)

    def progress(self) -> int:
        """Offsets committed since `assign`, over all partitions, those given up included
        (the auto-tuner's input: it never goes back)."""
        return self._released + sum(p.committed - p.start for p in self._parts.values())

    def statistics(self) -> OffsetStatistics:
        parts = self._parts.values()
        return OffsetStatistics(
            partitions=len(self._parts), committed=self.committed_offsets(),
            progress=self.progress(), in_flight=sum(len(p.in_flight) for p in parts),
            acked_ahead=sum(len(p.acked) for p in parts),
            replay_queued=sum(len(p.failed) for p in parts),
            blocked=sum(1 for n in self._parts if self.room(n) == 0), **self._counts)
