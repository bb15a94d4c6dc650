"""The offset-tracking core alone: pure, no log, no clock."""

from __future__ import annotations

import random

import pytest

from runtime.sources import OffsetTracker


def tracker(max_uncommitted: int = 100, partitions=(0,), committed: int = 0) -> OffsetTracker:
    t = OffsetTracker(max_uncommitted)
    for p in partitions:
        t.assign(p, committed)
    return t


def emit(t: OffsetTracker, partition: int, n: int) -> list[int]:
    """Emit the next `n` fresh offsets of `partition` (as many as there is room for)."""
    out = []
    for _ in range(min(n, t.room(partition))):
        out.append(t.next_offset(partition))
        t.emitted(partition, out[-1])
    return out


def test_committed_is_the_lowest_offset_not_acked():
    t = tracker()
    assert emit(t, 0, 5) == [0, 1, 2, 3, 4]
    assert t.committed(0) == 0
    for o in (1, 2, 4):
        assert t.ack(0, o)
    assert t.committed(0) == 0 and t.statistics().acked_ahead == 3
    t.ack(0, 0)
    assert t.committed(0) == 3 and t.progress() == 3
    t.ack(0, 3)
    assert t.committed(0) == 5 and t.statistics().acked_ahead == 0


def test_acks_in_any_order_commit_everything():
    t = tracker(max_uncommitted=1000)
    offsets = emit(t, 0, 500)
    random.Random(4).shuffle(offsets)
    for o in offsets:
        t.ack(0, o)
    assert t.committed(0) == 500 and t.progress() == 500
    s = t.statistics()
    assert (s.in_flight, s.acked_ahead, s.acks, s.duplicate_acks) == (0, 0, 500, 0)


def test_failed_offsets_are_replayed_lowest_first_before_new_reads():
    t = tracker()
    emit(t, 0, 6)
    for o in (4, 1, 3):
        assert t.fail(0, o)
    assert t.statistics().replay_queued == 3
    assert t.replays(0, limit=2) == [1, 3]
    assert t.replays(0) == [4]
    assert t.replays(0) == []
    assert t.next_offset(0) == 6  # replays do not move the read position
    for o in range(6):
        t.ack(0, o)
    assert t.committed(0) == 6
    assert t.statistics().replayed == 3


def test_a_failed_offset_holds_the_commit_until_its_replay_is_acked():
    t = tracker()
    emit(t, 0, 3)
    t.fail(0, 0)
    t.ack(0, 1), t.ack(0, 2)
    assert t.committed(0) == 0
    assert not t.ack(0, 0)  # not in flight while it waits for replay
    assert t.replays(0) == [0]
    t.fail(0, 0)  # failed again
    assert t.replays(0) == [0]
    t.ack(0, 0)
    assert t.committed(0) == 3 and t.statistics().fails == 2


def test_reading_stops_while_the_uncommitted_window_is_full():
    t = tracker(max_uncommitted=4)
    assert emit(t, 0, 10) == [0, 1, 2, 3]
    assert t.room(0) == 0 and t.statistics().blocked == 1
    t.ack(0, 1), t.ack(0, 2), t.ack(0, 3)  # acked, but above the gap at 0
    assert t.room(0) == 0
    t.fail(0, 0)
    assert t.room(0) == 0  # a failed offset is still uncommitted
    assert t.replays(0) == [0]
    t.ack(0, 0)
    assert t.room(0) == 4 and emit(t, 0, 10) == [4, 5, 6, 7]


def test_double_acks_and_unknown_offsets_are_ignored_and_counted():
    t = tracker(partitions=(0, 1))
    emit(t, 0, 3)
    assert t.ack(0, 0) and t.ack(0, 2)
    assert not t.ack(0, 0)  # below committed
    assert not t.ack(0, 2)  # acked above the gap
    assert not t.ack(0, 7)  # never emitted
    assert not t.ack(5, 0)  # not a partition of this tracker
    assert not t.fail(0, 0) and not t.fail(0, 9) and not t.fail(5, 1)
    s = t.statistics()
    assert (s.acks, s.duplicate_acks, s.unknown_acks, s.ignored_fails) == (2, 2, 2, 3)
    assert t.committed(0) == 1 and t.pending(0) == 1


def test_partitions_are_tracked_independently():
    t = tracker(max_uncommitted=2, partitions=(0, 2))
    assert emit(t, 0, 5) == [0, 1] and emit(t, 2, 5) == [0, 1]
    t.ack(2, 0), t.ack(2, 1)
    assert t.committed_offsets() == {0: 0, 2: 2}
    assert t.room(0) == 0 and t.room(2) == 2
    assert t.partitions() == [0, 2] and t.progress() == 2


def test_a_restart_from_the_committed_offsets_rereads_only_the_uncommitted_window():
    first = tracker(max_uncommitted=10)
    emit(first, 0, 10)
    for o in (0, 1, 2, 3, 5, 6, 9):
        first.ack(0, o)
    committed = first.committed(0)
    assert committed == 4
    second = tracker(max_uncommitted=10, committed=committed)
    assert second.next_offset(0) == 4 and second.progress() == 0
    reread = emit(second, 0, 100)
    assert reread[:6] == [4, 5, 6, 7, 8, 9]  # duplicates: 5, 6 and 9 only, all >= committed
    assert len(set(reread) & {0, 1, 2, 3, 5, 6, 9}) == 3 <= first.max_uncommitted


def test_emitting_out_of_order_and_bad_settings_are_errors():
    t = tracker()
    with pytest.raises(ValueError, match="expected 0"):
        t.emitted(0, 3)
    with pytest.raises(ValueError, match="max_uncommitted"):
        OffsetTracker(0)
    with pytest.raises(ValueError, match="committed offset"):
        t.assign(1, -1)


def test_drop_counts_an_offset_done_without_an_ack_and_failures_are_counted():
    t = OffsetTracker(max_uncommitted=10)
    t.assign(0, committed=0)
    t.emitted_many(0, 0, 3)
    assert [t.in_flight(0, o) for o in (0, 1, 2, 3)] == [True, True, True, False]
    t.fail(0, 0)
    assert t.failures(0, 0) == 1 and t.replays(0) == [0]
    t.fail(0, 0)
    assert t.failures(0, 0) == 2
    t.replays(0)
    assert t.drop(0, 0) and not t.drop(0, 0)  # the second: not in flight any more
    assert t.failures(0, 0) == 0 and t.committed(0) == 1
    t.ack(0, 2)
    assert t.committed(0) == 1 and t.drop(0, 1) and t.committed(0) == 3
    s = t.statistics()
    assert (s.dead_lettered, s.acks, s.fails, s.in_flight) == (2, 1, 2, 0)


def test_emitted_many_must_continue_at_the_next_offset_and_skip_to_jumps_gaps():
    t = OffsetTracker(max_uncommitted=10)
    t.assign(0, committed=5)
    with pytest.raises(ValueError, match="expected 5"):
        t.emitted_many(0, 6, 2)
    t.emitted(0, 5)
    assert t.skip_to(0, 9) == 3  # 6, 7, 8 are not in the log (compacted, markers)
    t.emitted(0, 9)
    t.ack(0, 5)
    assert t.committed(0) == 9 and t.statistics().skipped == 3
    t.ack(0, 9)
    assert t.committed(0) == 10 and t.progress() == 5


def test_ack_many_acks_what_is_still_in_flight_of_a_range():
    t = OffsetTracker(100)
    t.assign(0, 10)
    t.emitted_many(0, 10, 5)
    assert t.ack_many(0, 10, 5) == 5 and t.committed(0) == 15 and t.pending(0) == 0
    t.emitted_many(0, 15, 4)
    t.drop(0, 16)  # dead-lettered meanwhile: done already
    assert t.ack_many(0, 15, 4) == 3 and t.committed(0) == 19
    assert t.statistics().acks == 8
