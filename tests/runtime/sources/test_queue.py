"""The embedded Kestrel-style queue: open / ack / abort, timeouts, release, several processes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from runtime.sources import EmbeddedQueue, QueueItem, QueueStats

REPO = Path(__file__).resolve().parents[3]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def queue(tmp_path, clock):
    with EmbeddedQueue(tmp_path / "q.db", "jobs", open_timeout=30.0, clock=clock) as opened:
        yield opened


def payloads(items: list[QueueItem]) -> list[bytes]:
    return [item.payload for item in items]


def test_open_ack_abort(queue):
    ids = queue.put_many([b"a", b"b"])
    assert queue.put(b"c") == ids[-1] + 1
    [a] = queue.open("c1")
    assert a == QueueItem(ids[0], b"a", 0)
    assert queue.statistics() == QueueStats(visible=2, open=1)
    assert queue.abort(a.id) is True
    assert queue.open("c1", max_items=2) == [QueueItem(ids[0], b"a", 1), QueueItem(ids[1], b"b", 0)]
    assert queue.ack(ids[0]) and queue.ack(ids[1])
    assert queue.statistics() == QueueStats(visible=1, acked=2, aborted=1)
    assert payloads(queue.open("c1", max_items=10)) == [b"c"]
    assert queue.open("c1") == []


def test_an_open_item_is_invisible_to_another_consumer(queue):
    queue.put_many([b"a", b"b"])
    assert payloads(queue.open("c1")) == [b"a"]
    assert payloads(queue.open("c2", max_items=5)) == [b"b"]
    assert queue.open("c3") == []
    assert queue.statistics().open == 2


def test_visible_items_are_fifo_by_id(queue):
    queue.put_many([b"%d" % i for i in range(10)])
    first = queue.open("c1", max_items=3)
    assert payloads(first) == [b"0", b"1", b"2"]
    queue.abort(first[1].id)  # returns to its place by id, ahead of the unopened ones
    assert payloads(queue.open("c2", max_items=3)) == [b"1", b"3", b"4"]


def test_an_item_open_too_long_returns_on_the_next_open(queue, clock):
    queue.put_many([b"a", b"b"])
    [a] = queue.open("slow")
    clock.now += 29.9
    assert payloads(queue.open("other")) == [b"b"]  # a is still held
    clock.now += 0.1
    assert queue.open("other") == [QueueItem(a.id, b"a", 1)]
    assert queue.statistics() == QueueStats(open=2, timed_out=1)
    # the timeout runs from each opening: b, opened 0.1 s ago, stays with "other"
    assert queue.open("third", now=clock.now + 29.85) == []


def test_the_clock_can_be_passed_to_open_and_expire(queue):
    queue.put(b"a")
    queue.open("c1", now=0.0)
    assert queue.expire(now=29.0) == 0
    assert queue.expire(now=30.0) == 1
    assert queue.open("c2", now=30.0)[0].attempts == 1


def test_a_late_ack_still_removes_the_item(queue, clock):
    [a] = queue.open("c1") if queue.put(b"a") else []
    clock.now += 31
    assert queue.expire() == 1
    assert queue.ack(a.id) is True  # it was processed: do not deliver it again
    assert queue.open("c2") == []


def test_release_returns_everything_a_consumer_held(queue):
    queue.put_many([b"a", b"b", b"c"])
    held = queue.open("gone", max_items=2)
    queue.open("stays")
    assert queue.release("gone") == 2
    assert queue.release("gone") == 0
    assert queue.open("new", max_items=5) == [QueueItem(i.id, i.payload, 1) for i in held]
    assert queue.statistics() == QueueStats(open=3, released=2)


def test_close_releases_what_this_handle_held(tmp_path):
    path = tmp_path / "q.db"
    with EmbeddedQueue(path, "jobs") as first:
        first.put_many([b"a", b"b"])
        first.open("c1")
        with EmbeddedQueue(path, "jobs") as second:
            second.open("c2")
        assert first.statistics() == QueueStats(visible=1, open=1, released=1)
    with EmbeddedQueue(path, "jobs") as reopened:
        assert reopened.statistics() == QueueStats(visible=2, released=2)
        assert [i.attempts for i in reopened.open("c3", max_items=2)] == [1, 1]


def test_double_and_unknown_acks_and_aborts_are_ignored_and_counted(queue):
    [a] = queue.open("c1") if queue.put(b"a") else []
    assert queue.ack(a.id) is True
    assert queue.ack(a.id) is False
    assert queue.ack(12345) is False
    assert queue.abort(a.id) is False
    queue.put(b"b")
    assert queue.abort(a.id + 1) is False  # visible, not open
    assert queue.statistics() == QueueStats(visible=1, acked=1, ignored_acks=2, ignored_aborts=2)


def test_queues_in_one_file_are_separate(tmp_path):
    with EmbeddedQueue(tmp_path / "q.db", "a") as a, EmbeddedQueue(tmp_path / "q.db", "b") as b:
        id_a = a.put(b"for a")
        b.put(b"for b")
        assert payloads(b.open("c")) == [b"for b"]
        assert b.ack(id_a) is False  # not b's item
        assert payloads(a.open("c")) == [b"for a"]


def test_bad_arguments(queue, tmp_path):
    with pytest.raises(TypeError, match="bytes, not str"):
        queue.put("text")
    with pytest.raises(ValueError, match="max_items"):
        queue.open("c", max_items=0)
    with pytest.raises(ValueError, match="consumer_id"):
        queue.open("")
    with pytest.raises(ValueError, match="open_timeout"):
        EmbeddedQueue(tmp_path / "x.db", "q", open_timeout=0)
    with pytest.raises(ValueError, match="fsync"):
        EmbeddedQueue(tmp_path / "x.db", "q", fsync="sometimes")
    with pytest.raises(ValueError, match="bad topic name"):
        EmbeddedQueue(tmp_path / "x.db", "a/b")
    queue.close()
    queue.close()
    with pytest.raises(ValueError, match="closed"):
        queue.put(b"x")


def test_a_failed_put_many_puts_nothing(queue):
    with pytest.raises(TypeError):
        queue.put_many([b"ok", 7])
    assert queue.statistics().visible == 0


def test_the_file_is_in_wal_mode(queue):
    with sqlite3.connect(queue.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_threads_sharing_one_handle_each_item_once(queue):
    queue.put_many([b"%d" % i for i in range(400)])
    got: list[list[int]] = [[] for _ in range(4)]

    def consume(k: int) -> None:
        while items := queue.open(f"t{k}", max_items=3):
            for item in items:
                got[k].append(item.id)
                queue.ack(item.id)

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    every = [i for ids in got for i in ids]
    assert len(every) == len(set(every)) == 400
    assert queue.statistics() == QueueStats(acked=400)


# -- several processes ----------------------------------------------------------------------

CONSUMER = textwrap.dedent("""
    import sys
    from runtime.sources import EmbeddedQueue
    with EmbeddedQueue(sys.argv[1], "jobs", open_timeout=float(sys.argv[3])) as q:
        print("ready", flush=True)
        sys.stdin.readline()
        if sys.argv[4] == "hold":
            print(*[i.id for i in q.open(sys.argv[2], max_items=10)], flush=True)
            sys.stdin.readline()  # wait to be killed
        held = len(sys.argv) > 5  # "then-wait": hold the first batch until told to go on
        while items := q.open(sys.argv[2], max_items=int(sys.argv[4])):
            if held:
                print("held", flush=True)
                sys.stdin.readline()
                held = False
            for item in items:
                assert q.ack(item.id), item
                print(item.id, flush=True)
""")


def start_consumer(path: Path, consumer_id: str, open_timeout: float, batch: str,
                   *then: str):
    child = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, str(path), consumer_id, str(open_timeout), batch,
         *then],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.stdout.readline() == "ready\n"
    return child


@pytest.fixture
def children():
    started: list[subprocess.Popen] = []
    yield started
    for child in started:
        child.kill()
        child.wait(timeout=10)


def test_two_processes_share_a_queue_each_item_delivered_once(tmp_path, children):
    path = tmp_path / "q.db"
    with EmbeddedQueue(path, "jobs") as q:
        ids = q.put_many([b"item-%d" % i for i in range(600)])
        children += [start_consumer(path, f"p{k}", 30.0, batch, "then-wait")
                     for k, batch in enumerate("37")]
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        # both hold a batch of their own at the same time before either acks anything
        assert [child.stdout.readline() for child in children] == ["held\n"] * 2
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        got = [[int(line) for line in child.communicate(timeout=60)[0].split()]
               for child in children]
        assert [child.returncode for child in children] == [0, 0]
        assert sorted(got[0] + got[1]) == ids  # every item exactly once, none lost
        assert len(got[0]) >= 3 and len(got[1]) >= 7  # each acked at least its first batch
        assert q.statistics() == QueueStats(acked=600)


def test_items_held_by_a_killed_process_are_redelivered_after_the_open_timeout(tmp_path,
                                                                                children):
    path = tmp_path / "q.db"
    with EmbeddedQueue(path, "jobs", open_timeout=30.0) as q:  # the survivor's own timeout
        ids = q.put_many([b"item-%d" % i for i in range(25)])
        children.append(child := start_consumer(path, "doomed", 2.0, "hold"))
        child.stdin.write("go\n")
        child.stdin.flush()
        held = [int(i) for i in child.stdout.readline().split()]
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert held == ids[:10]
        before = q.open("survivor", max_items=100)
        assert [i.id for i in before] == ids[10:]  # still invisible: the timeout has not passed
        later = q.open("survivor", max_items=100, now=time.time() + 2.0)
        assert [(i.id, i.attempts) for i in later] == [(i, 1) for i in held]
        for item in before + later:
            assert q.ack(item.id)
        assert q.statistics() == QueueStats(acked=25, timed_out=10)  # 0 lost
