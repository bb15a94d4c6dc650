"""Retry backoff: a failed message waits before its replay, longer each time, up to a cap.

The pure policy (`Backoff`, `ReplaySchedule`), then each spout that schedules replays, driven
by hand with a fake clock: the embedded log's (and so Kafka's) `OffsetSpout`, the embedded
queue's `QueueSpout`, and the test helper `ListSpout`. `RedisQueueSpout` shares the code path
of `QueueSpout` and is covered in test_redis_spout.py.
"""

from __future__ import annotations

import pytest

from runtime.model.api import Context
from runtime.sources import (
    Backoff,
    EmbeddedLog,
    EmbeddedQueue,
    LogSpout,
    QueueSpout,
    ReplaySchedule,
)
from runtime.testing import FakeClock, ListSpout

# -- the policy ------------------------------------------------------------------------------

def test_the_delay_doubles_from_the_first_and_stops_at_the_cap():
    b = Backoff(first=0.25, cap=1.5)
    assert [b.delay(n) for n in range(0, 7)] == [0.0, 0.25, 0.5, 1.0, 1.5, 1.5, 1.5]
    assert Backoff(0.1, 10.0).delay(10_000) == 10.0  # no overflow however often it failed
    assert Backoff(0, 10.0).delay(3) == 0.0  # retry_delay=0: replay at once


@pytest.mark.parametrize("first, cap", [(-1, 1), (2, 1), ("1", 2), (True, 2), (0.1, None)])
def test_a_bad_backoff_is_refused_naming_both_options(first, cap):
    with pytest.raises(ValueError, match="retry_delay must be a number of seconds >= 0 and "
                                         "retry_delay_max one >= retry_delay"):
        Backoff(first, cap)


def test_a_spout_refuses_a_bad_backoff_when_defined(tmp_path):
    with pytest.raises(ValueError, match=r"LogSpout\('events'\): retry_delay"):
        LogSpout("events", tmp_path, retry_delay=5, retry_delay_max=1)
    with pytest.raises(ValueError, match=r"QueueSpout\('jobs'\): retry_delay"):
        QueueSpout("jobs", tmp_path / "q.db", retry_delay=-0.5)


def test_the_schedule_hands_ids_back_when_due_earliest_first_and_keeps_any_id():
    s = ReplaySchedule(Backoff(1.0, 8.0))
    s.add({"not": "comparable"}, failures=2, now=0.0)  # due at 2
    s.add({"also": "not"}, failures=1, now=0.5)  # due at 1.5
    assert s.due(1.4) == [] and len(s) == 2
    assert s.due(5.0, limit=1) == [{"also": "not"}]
    assert s.due(5.0) == [{"not": "comparable"}] and len(s) == 0
    s.add("a", 4, now=0.0)
    assert s.drain() == ["a"] and len(s) == 0


# -- the spouts, by hand, on a fake clock ------------------------------------------------------

def context() -> Context:
    return Context("t", "src", 1, 0, 1, {}, 0, ".")


def emitted_by(spout, clock: FakeClock) -> list:
    out: list = []
    spout.emit = lambda values, msg_id=None, **_: out.append(msg_id)
    spout.clock = clock
    spout.open({}, context())
    return out


def test_a_failed_log_record_is_replayed_only_after_its_backoff(tmp_path):
    with EmbeddedLog(tmp_path / "log") as log:
        log.create_topic("events", 1)
        log.append_many("events", [b'{"n": 1}'])
    clock = FakeClock(100.0)
    spout = LogSpout("events", tmp_path / "log", checkpoint_dir=tmp_path / "ck",
                     retry_delay=1.0, retry_delay_max=3.0, max_retries=None)
    out = emitted_by(spout, clock)
    spout.next_tuple()
    assert out == [(0, 0)]
    for wait in (1.0, 2.0, 3.0, 3.0):  # 1, 2, 4 capped at 3, 3
        spout.fail((0, 0))
        sent = len(out)
        clock.advance(wait - 0.25)
        spout.next_tuple()
        assert len(out) == sent  # not yet
        clock.advance(0.25)
        spout.next_tuple()
        assert len(out) == sent + 1 and out[-1] == (0, 0)  # due now, not a moment before
    assert spout.statistics().replayed == 4
    spout.close()


def test_a_failed_queue_item_stays_held_until_its_backoff_is_over(tmp_path):
    path = tmp_path / "q.db"
    with EmbeddedQueue(path, "jobs") as q:
        q.put_many([b'{"n": 1}'])
    clock = FakeClock(0.0)
    spout = QueueSpout("jobs", path, retry_delay=2.0, retry_delay_max=60.0, max_retries=None)
    out = emitted_by(spout, clock)
    spout.next_tuple()
    spout.fail(out[-1])
    assert spout.statistics()["retry_waiting"] == 1
    spout.next_tuple()
    with EmbeddedQueue(path, "jobs") as q:
        assert (q.statistics().visible, q.statistics().open) == (0, 1)  # no one else gets it
    assert len(out) == 1
    clock.advance(2.0)
    spout.next_tuple()  # aborts it (visible again) and opens it again
    assert out == [1, 1] and spout.statistics()["retry_waiting"] == 0
    spout.fail(1)
    clock.advance(3.9)  # the second failure waits 4 s
    spout.next_tuple()
    assert out == [1, 1]
    clock.advance(0.1)
    spout.next_tuple()
    assert out == [1, 1, 1]
    spout.close()


def test_list_spout_replays_at_once_or_after_a_backoff():
    clock = FakeClock(0.0)
    now = ListSpout([[1], [2]], replay=True)
    out = emitted_by(now, clock)
    now.next_tuple()
    now.fail(0)
    now.next_tuple()
    now.next_tuple()
    assert out == [0, 1, 0]
    later = ListSpout([[1], [2]], replay=True, retry_delay=0.5)
    out = emitted_by(later, clock)
    later.next_tuple()
    later.fail(0)
    later.next_tuple()
    later.next_tuple()
    assert out == [0, 1]
    clock.advance(0.5)
    later.next_tuple()
    assert out == [0, 1, 0]
