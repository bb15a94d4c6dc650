"""The Redis Streams queue, against a real redis-server (the `redis_url` fixture): open hides,
ack removes, abort returns, open-timeout reclaim, a killed consumer's items, dead letters."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import redis

from runtime.sources import QueueItem
from runtime.sources._redis import ABORTED_MIN_IDLE_MS, RedisQueue, RedisQueueStats
from runtime.testing import FakeClock, wait_for

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def queues(redis_url):
    """A factory of RedisQueue handles on stream "jobs" (reclaim on every open by default);
    all are closed after the test."""
    made = []

    def make(**options):
        options.setdefault("reclaim_interval", 0.0)
        made.append(RedisQueue("jobs", redis_url, **options))
        return made[-1]

    yield make
    for queue in made:
        queue.close()


@pytest.fixture
def queue(queues):
    return queues(open_timeout=30.0)


def payloads(items: list[QueueItem]) -> list[bytes]:
    return [item.payload for item in items]


def test_open_hides_ack_removes_abort_returns(queue):
    ids = queue.put_many([b"a", b"b"])
    c = queue.put(b"c")
    assert len(set(ids + [c])) == 3
    [a] = queue.open("c1")
    assert a == QueueItem(ids[0], b"a", 0)
    assert queue.statistics() == RedisQueueStats(visible=2, open=1)
    assert queue.abort(a.id, "it broke") is True
    assert queue.statistics() == RedisQueueStats(visible=3, open=0, aborted=1)
    assert queue.open("c1", max_items=2) == [QueueItem(ids[0], b"a", 1),
                                             QueueItem(ids[1], b"b", 0)]
    assert queue.ack(ids[0]) and queue.ack(ids[1])
    assert queue.statistics() == RedisQueueStats(visible=1, acked=2, aborted=1, redelivered=1)
    assert payloads(queue.open("c1", max_items=10)) == [b"c"]
    assert queue.open("c1") == []
    assert queue.ack(c)
    assert queue.statistics().visible == queue.statistics().open == 0


def test_an_open_item_is_invisible_to_another_consumer_until_acked(queues):
    first, second = queues(), queues()
    first.put_many([b"a", b"b", b"c"])
    assert payloads(first.open("c1", max_items=2)) == [b"a", b"b"]
    assert payloads(second.open("c2", max_items=5)) == [b"c"]
    assert second.open("c2", max_items=5) == []
    assert sorted(first.held("c1")) == first.held("c1") and len(first.held("c1")) == 2
    assert len(first.held()) == 3


def test_an_aborted_item_goes_to_whichever_consumer_opens_next(queues):
    first, second = queues(), queues()
    [item_id] = first.put_many([b"a"])
    assert first.open("c1") == [QueueItem(item_id, b"a", 0)]
    assert first.abort(item_id)
    assert second.open("c2") == [QueueItem(item_id, b"a", 1)]
    assert second.held("c2") == [item_id] and first.held("c1") == []


def test_an_item_held_past_the_open_timeout_is_reclaimed_by_another_consumer(queues):
    """The reclaimer's open_timeout is the one that counts: Redis only knows idle times."""
    holder, patient, impatient = queues(), queues(open_timeout=60.0), queues(open_timeout=0.2)
    [item_id] = holder.put_many([b"slow"])
    assert holder.open("slow-consumer") == [QueueItem(item_id, b"slow", 0)]
    assert patient.open("patient") == []
    got = wait_for(lambda: impatient.open("impatient"), 10, "the open-timeout reclaim")
    assert got == [QueueItem(item_id, b"slow", 1)]
    assert impatient.held("impatient") == [item_id]
    assert impatient.statistics().timed_out == 1
    # the slow consumer's late ack still removes the item: it was processed
    assert holder.ack(item_id) is True
    assert impatient.ack(item_id) is False
    assert impatient.statistics() == RedisQueueStats(acked=1, timed_out=1, ignored_acks=1)


CONSUMER = textwrap.dedent("""
    import sys
    from runtime.sources._redis import RedisQueue
    q = RedisQueue("jobs", sys.argv[1], open_timeout=60.0)
    print(" ".join(item.id for item in q.open("doomed", max_items=5)), flush=True)
    sys.stdin.read()  # hold them until killed
""")


def test_the_items_of_a_killed_consumer_process_are_reclaimed(queues, redis_url):
    patient, survivor = queues(open_timeout=60.0), queues(open_timeout=0.5)
    ids = patient.put_many([b"item-%d" % i for i in range(8)])
    child = subprocess.Popen([sys.executable, "-c", CONSUMER, redis_url], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = child.stdout.readline().split()
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait(timeout=10)
    assert held == ids[:5]
    assert survivor.held("doomed") == held  # dead, but still holding them
    rest = patient.open("patient", max_items=10)
    assert [(i.id, i.attempts) for i in rest] == [(i, 0) for i in ids[5:]]
    assert patient.ack_many([i.id for i in rest]) == 3
    first_seen: dict[str, int] = {}

    def reclaimed() -> bool:
        items = survivor.open("survivor", max_items=10)
        survivor.ack_many([i.id for i in items])  # processed at once, as a consumer would
        for item in items:
            first_seen.setdefault(item.id, item.attempts)
        return len(first_seen) == len(held)

    wait_for(reclaimed, 10, "the dead consumer's items")
    assert first_seen == dict.fromkeys(held, 1)
    stats = survivor.statistics()
    assert (stats.acked, stats.visible, stats.open) == (8, 0, 0)  # 0 lost
    assert stats.timed_out >= 5 and survivor.held("doomed") == []


def test_an_item_that_failed_max_retries_times_is_dead_lettered(queue, queues):
    queue = queues(open_timeout=30.0, max_retries=3)
    [poison] = queue.put_many([b"poison"])
    deliveries = []
    while items := queue.open("c1"):
        [item] = items
        deliveries.append(item.attempts)
        assert queue.abort(item.id, f"boom #{item.attempts}")
    assert deliveries == [0, 1, 2]  # failed 3 times: not delivered a 4th
    [dead] = queue.dead_letters()
    assert (dead.source_id, dead.payload, dead.deliveries, dead.consumer) == (
        poison, b"poison", 3, "c1")
    assert dead.error == "failed 3 times; last: boom #2"
    stats = queue.statistics()
    assert (stats.visible, stats.open, stats.dead, stats.dead_lettered) == (0, 0, 1, 1)
    assert queue.ack(poison) is False  # gone from the queue


def test_an_item_whose_consumer_timed_out_max_retries_times_is_dead_lettered(queues):
    queue = queues(open_timeout=0.05, max_retries=2)
    [item_id] = queue.put_many([b"x"])
    attempts: list[int] = []

    def buried() -> bool:
        attempts.extend(i.attempts for i in queue.open("forgetful"))  # never acked
        return queue.statistics().dead == 1

    wait_for(buried, 10, "the item to time out twice and be dead-lettered")
    assert attempts == [0, 1]
    [dead] = queue.dead_letters()
    assert dead.source_id == item_id and dead.deliveries == 2
    assert "not acked within open_timeout=0.05 s" in dead.error


def test_max_retries_none_retries_for_ever(queues):
    queue = queues(max_retries=None)
    queue.put(b"x")
    for attempt in range(12):
        [item] = queue.open("c1")
        assert item.attempts == attempt
        queue.abort(item.id)
    assert queue.statistics().dead == 0


def test_a_malformed_entry_is_dead_lettered_and_the_rest_delivered(queue, redis_url):
    queue.put(b"first")
    client = redis.Redis.from_url(redis_url)
    bad = client.xadd("jobs", {"other": b"x", "error": b"not ours"}).decode()
    client.close()
    queue.put(b"last")
    assert payloads(queue.open("c1", max_items=10)) == [b"first", b"last"]
    assert queue.buried_by_last_open == 1
    [dead] = queue.dead_letters()
    assert (dead.source_id, dead.payload, dead.deliveries) == (bad, None, 1)
    assert dead.fields == {b"other": b"x", b"error": b"not ours"}
    assert 'no "payload" field' in dead.error
    assert queue.statistics().dead_lettered == 1


def test_dead_letter_moves_an_open_item_with_its_error(queue):
    [item_id] = queue.put_many([b"{not json"])
    queue.open("c1")
    assert queue.dead_letter(item_id, "cannot decode: invalid JSON", consumer_id="c1")
    assert queue.dead_letter(item_id, "again") is False  # no longer open
    [dead] = queue.dead_letters()
    assert (dead.payload, dead.error, dead.consumer) == (
        b"{not json", "cannot decode: invalid JSON", "c1")


def test_double_and_unknown_acks_and_aborts_are_ignored_and_counted(queue):
    [a, b] = queue.put_many([b"a", b"b"])
    queue.open("c1")
    assert queue.ack(a) is True
    assert queue.ack(a) is False  # double ack
    assert queue.ack(b) is False  # visible, never opened: not acked, and not deleted
    assert queue.ack("123-4") is False and queue.ack("garbage") is False
    assert queue.ack_many([a, a, "1-1"]) == 0
    assert queue.abort(a) is False and queue.abort("garbage") is False
    assert queue.open("c1") == [QueueItem(b, b"b", 0)]
    assert queue.abort(b, consumer_id="someone-else") is False  # held by c1
    assert queue.abort(b) is True and queue.abort(b) is False  # already given back
    stats = queue.statistics()
    assert (stats.acked, stats.ignored_acks, stats.aborted, stats.ignored_aborts) == (1, 7, 1, 4)


def test_release_returns_everything_a_consumer_held(queues):
    queue, other = queues(), queues()
    ids = queue.put_many([b"a", b"b", b"c"])
    queue.open("c1", max_items=2)
    other.open("c2")
    assert queue.release("c1") == 2
    assert queue.release("c1") == 0  # nothing open any more
    assert [(i.id, i.attempts) for i in other.open("c3", max_items=5)] == [
        (ids[0], 1), (ids[1], 1)]
    assert queue.statistics().released == 2 and queue.statistics().redelivered == 2


def test_close_releases_what_the_handle_opened(queues, redis_url):
    with RedisQueue("jobs", redis_url) as first:
        first.put_many([b"a", b"b"])
        first.open("c1", max_items=2)
    assert [i.attempts for i in queues().open("c2", max_items=5)] == [1, 1]


def test_reclaims_run_at_the_interval_of_the_injected_clock(queues):
    clock = FakeClock(100.0)
    lazy, other = queues(reclaim_interval=10.0, clock=clock), queues()
    [item_id] = lazy.put_many([b"a"])
    assert lazy.open("lazy") == [QueueItem(item_id, b"a", 0)]  # the first open reclaims too
    assert lazy.release("lazy") == 1  # own give-back: the next open reclaims at once
    assert lazy.open("lazy") == [QueueItem(item_id, b"a", 1)]
    other.put(b"b")
    [b] = other.open("other")
    assert other.abort(b.id)  # someone else's abort: picked up at the next due reclaim
    clock.advance(9.0)
    assert lazy.open("lazy") == []
    clock.advance(1.0)
    assert [i.id for i in lazy.open("lazy")] == [b.id]


def test_threads_with_their_own_handles_open_each_item_once(queues):
    ids = queues().put_many([b"%d" % i for i in range(300)])
    handles = [queues() for _ in range(3)]
    got: list[list[str]] = [[] for _ in handles]

    def consume(k: int) -> None:
        while items := handles[k].open(f"c{k}", max_items=7):
            got[k] += [i.id for i in items]
            handles[k].ack_many([i.id for i in items])

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got[0] + got[1] + got[2]) == sorted(ids)
    assert handles[0].statistics() == RedisQueueStats(acked=300)


def test_a_deleted_stream_and_group_are_made_again(queue, redis_url):
    queue.put(b"a")
    client = redis.Redis.from_url(redis_url)
    client.delete("jobs")
    client.close()
    assert queue.open("c1") == []
    queue.put(b"b")
    assert payloads(queue.open("c1")) == [b"b"]


def test_aborted_items_look_idle_for_years(queue, redis_url):
    [item_id] = queue.put_many([b"a"])
    queue.open("c1")
    queue.abort(item_id)
    client = redis.Redis.from_url(redis_url)
    [row] = client.xpending_range("jobs", "tupleflow", "-", "+", 10)
    client.close()
    assert row["time_since_delivered"] >= ABORTED_MIN_IDLE_MS and row["times_delivered"] == 1


def test_bad_arguments(queue, redis_url):
    with pytest.raises(ValueError, match="open_timeout"):
        RedisQueue("jobs", redis_url, open_timeout=0)
    with pytest.raises(ValueError, match="max_retries"):
        RedisQueue("jobs", redis_url, max_retries=0)
    with pytest.raises(ValueError, match="name"):
        RedisQueue("", redis_url)
    with pytest.raises(ValueError, match="max_items"):
        queue.open("c1", max_items=0)
    with pytest.raises(ValueError, match="consumer_id"):
        queue.open("")
    with pytest.raises(TypeError, match="bytes"):
        queue.put("text")


def test_importing_the_sources_package_does_not_import_redis():
    code = ("import sys, runtime.sources as s; assert 'redis' not in sys.modules; "
            "s.RedisQueue; assert 'redis' in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
