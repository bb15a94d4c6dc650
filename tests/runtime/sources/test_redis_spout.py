"""The Redis Streams spout against a real redis-server: alone with a recording emit, in the
in-memory twin with an acker, and in a multiprocess topology whose spout instance is SIGKILLed
while it holds opened items."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections import Counter

import cloudpickle
import pytest
import redis

from runtime import Bolt, Topology
from runtime.model.api import Context
from runtime.sources import RedisQueueSpout
from runtime.sources._redis import RedisQueue
from runtime.sources._redis_spout import RedisSpoutStats
from runtime.testing import FakeClock, InMemoryCluster, ListSink, gone, read_sink, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def fill(url: str, n: int, stream: str = "jobs") -> list[str]:
    with RedisQueue(stream, url) as q:
        return q.put_many([json.dumps({"n": i}).encode() for i in range(n)])


def queue_stats(url: str, stream: str = "jobs"):
    with RedisQueue(stream, url) as q:
        return q.statistics()


def opened(spout: RedisQueueSpout, task_index: int = 0, config: dict | None = None) -> list:
    """Open `spout` as task `task_index` of topology "t" with a recording emit."""
    emitted: list = []
    spout.emit = lambda values, msg_id=None, **_: emitted.append((values, msg_id))
    spout.open(config or {}, Context("t", "queue", task_index + 1, task_index, 2, {}, 0, "."))
    return emitted


# -- the spout alone -------------------------------------------------------------------------

def test_items_are_opened_in_batches_emitted_and_acked_in_batches(redis_url):
    ids = fill(redis_url, 25)
    spout = RedisQueueSpout("jobs", redis_url, batch_size=10, ack_interval=3600.0)
    spout.clock = FakeClock(0.0)
    out = opened(spout)
    spout.next_tuple()
    assert out == [([{"n": i}], ids[i]) for i in range(10)]
    for _, msg_id in out:
        spout.ack(msg_id)
    assert spout.statistics() == RedisSpoutStats("t.queue.0", emitted=10, unsent_acks=10)
    assert queue_stats(redis_url).acked == 0  # batched: sent with the next call
    spout.next_tuple()
    assert queue_stats(redis_url).acked == 10 and spout.progress() == 10
    assert len(out) == 20
    spout.close()
    assert queue_stats(redis_url).released == 10  # what it still held went back


def test_double_and_unknown_acks_and_fails_are_ignored_and_counted(redis_url):
    fill(redis_url, 3)
    spout = RedisQueueSpout("jobs", redis_url, ack_batch=1, retry_delay=0)
    out = opened(spout)
    spout.next_tuple()
    (_, a), (_, b), _ = out
    spout.ack(a)
    spout.ack(a)
    spout.ack("1-1")
    spout.fail(a)
    spout.fail(b)
    spout.fail(b)
    s = spout.statistics()
    assert (s.acked, s.ignored_acks, s.failed, s.ignored_fails, s.held) == (1, 2, 1, 2, 1)
    spout.close()


def test_a_failed_item_comes_back_then_is_dead_lettered_after_max_retries(redis_url):
    [item_id] = fill(redis_url, 1)
    spout = RedisQueueSpout("jobs", redis_url, max_retries=3, retry_delay=0)
    out = opened(spout)
    for _ in range(5):
        spout.next_tuple()
        if out:
            spout.fail(out.pop()[1])
    s = spout.statistics()
    assert (s.emitted, s.redelivered, s.failed, s.dead_lettered) == (3, 2, 3, 1)
    with RedisQueue("jobs", redis_url) as q:
        [dead] = q.dead_letters()
    assert dead.source_id == item_id and dead.deliveries == 3
    assert dead.error.startswith("failed 3 times; last: a bolt failed it or it timed out")
    spout.close()


def test_a_malformed_payload_is_dead_lettered_and_the_rest_flow(redis_url):
    with RedisQueue("jobs", redis_url) as q:
        q.put_many([b'{"n": 0}', b"{not json", b'{"n": 2}'])
    spout = RedisQueueSpout("jobs", redis_url, fields=["n"])
    out = opened(spout)
    spout.next_tuple()
    assert [values for values, _ in out] == [[{"n": 0}], [{"n": 2}]]
    assert spout.statistics().dead_lettered == 1
    with RedisQueue("jobs", redis_url) as q:
        [dead] = q.dead_letters()
    assert dead.payload == b"{not json" and dead.error.startswith("cannot decode: invalid JSON")
    assert dead.consumer == "t.queue.0"
    spout.close()


def test_several_fields_from_a_json_object(redis_url):
    with RedisQueue("jobs", redis_url) as q:
        q.put_many([b'{"user": 7, "kind": "click"}', b'{"user": 8}'])
    spout = RedisQueueSpout("jobs", redis_url, fields=["user", "kind"])
    out = opened(spout)
    spout.next_tuple()
    assert [values for values, _ in out] == [[7, "click"]]
    assert spout.statistics().dead_lettered == 1  # no "kind": dead-lettered, not a crash
    spout.close()


def test_a_new_incarnation_takes_back_what_its_predecessor_held(redis_url):
    fill(redis_url, 4)
    crashed = RedisQueueSpout("jobs", redis_url)
    opened(crashed)
    crashed.next_tuple()  # holds 4, then "dies" without close
    other_task = RedisQueueSpout("jobs", redis_url)
    opened(other_task, task_index=1)
    reborn = RedisQueueSpout("jobs", redis_url)
    out = opened(reborn)  # the same task index: the same consumer
    reborn.next_tuple()
    assert sorted(values[0]["n"] for values, _ in out) == [0, 1, 2, 3]
    assert reborn.statistics().redelivered == 4
    assert queue_stats(redis_url).released == 4
    for spout in (other_task, reborn):
        spout.close()


def test_deactivate_stops_opening_and_sends_the_acks(redis_url):
    fill(redis_url, 4)
    spout = RedisQueueSpout("jobs", redis_url, batch_size=2, ack_interval=3600.0)
    spout.clock = FakeClock(0.0)
    out = opened(spout)
    spout.next_tuple()
    spout.ack(out[0][1])
    spout.deactivate()
    assert queue_stats(redis_url).acked == 1
    spout.ack(out[1][1])  # inactive: sent at once
    assert queue_stats(redis_url).acked == 2
    spout.next_tuple()
    assert len(out) == 2
    spout.activate()
    spout.next_tuple()
    assert len(out) == 4
    spout.close()


def test_a_short_open_timeout_is_warned_about(redis_url, caplog):
    spout = RedisQueueSpout("jobs", redis_url, open_timeout=10.0)
    with caplog.at_level(logging.WARNING, logger="runtime.sources"):
        opened(spout, config={"message_timeout": 30.0})
    assert "open_timeout=10.0 s is not longer than message_timeout=30.0 s" in caplog.text
    spout.close()


def test_an_unreachable_redis_fails_open_with_a_connection_error(redis_url):
    spout = RedisQueueSpout("jobs", "redis://127.0.0.1:1/0")
    spout.emit = lambda values, msg_id=None, **_: None
    with pytest.raises(redis.ConnectionError):  # the runtime reports it and restarts the task
        spout.open({}, Context("t", "queue", 1, 0, 1, {}, 0, "."))


def test_a_lost_connection_is_counted_and_acks_are_kept_until_it_is_back(redis_url):
    fill(redis_url, 3)
    spout = RedisQueueSpout("jobs", redis_url, batch_size=1)
    out = opened(spout)
    spout.next_tuple()
    pool = spout.queue._redis.connection_pool
    port = pool.connection_kwargs["port"]
    pool.connection_kwargs["port"] = 1  # nothing listens there: a real refused connection
    pool.disconnect()
    pool.reset()  # its idle connections would reconnect to the old port
    spout.ack(out[0][1])
    spout.next_tuple()
    s = spout.statistics()
    assert (len(out), s.unsent_acks, s.acked) == (1, 1, 0)
    assert s.connection_errors >= 2  # the ack flush and the open
    pool.connection_kwargs["port"] = port
    pool.disconnect()
    pool.reset()  # its idle connections would reconnect to the old port
    spout.next_tuple()
    assert (len(out), spout.statistics().acked, spout.statistics().unsent_acks) == (2, 1, 0)
    assert queue_stats(redis_url).acked == 1
    spout.close()


def test_bad_arguments_are_rejected_when_defined():
    with pytest.raises(ValueError, match=r"RedisQueueSpout\('jobs'\): decode"):
        RedisQueueSpout("jobs", decode="yaml")
    with pytest.raises(ValueError, match=r"RedisQueueSpout\('jobs'\): max_retries"):
        RedisQueueSpout("jobs", max_retries=0)
    with pytest.raises(ValueError, match=r"RedisQueueSpout\('jobs'\): ack_batch"):
        RedisQueueSpout("jobs", ack_batch=0)
    with pytest.raises(ValueError, match="open_timeout"):
        RedisQueueSpout("jobs", open_timeout=-1)


# -- the in-memory twin, with an acker -------------------------------------------------------

class FailFirst(Bolt):
    """Fails the first delivery of every item whose n is a multiple of 10; passes on and acks
    the rest."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.seen: set[int] = set()

    def process(self, tup):
        n = tup[0]["n"]
        if n % 10 == 0 and n not in self.seen:
            self.seen.add(n)
            self.fail(tup)
            return
        self.emit([n], anchors=[tup])
        self.ack(tup)


class FailAll(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.fail(tup)


def twin(url: str, middle, **spout_options) -> Topology:
    topo = Topology("twin")
    topo.spout("queue", RedisQueueSpout("jobs", url, batch_size=7, **spout_options),
               parallelism=2)
    topo.bolt("mid", middle).shuffle_grouping("queue")
    topo.bolt("sink", ListSink).shuffle_grouping("mid")
    return topo


def spouts(cluster) -> list[RedisQueueSpout]:
    return [cluster.user_object(t) for t in cluster.plan.component_tasks()["queue"]]


def test_every_item_reaches_the_sink_failed_ones_after_a_retry(redis_url):
    n = 200
    fill(redis_url, n)
    with InMemoryCluster(twin(redis_url, FailFirst, retry_delay=0), ackers=1,
                         max_spout_pending=10) as cluster:  # retry at once: the twin goes idle
        cluster.run_until_idle()
        got = [v[0] for v in cluster.sink("sink")]
        assert sorted(got) == list(range(n))  # each once: no timeouts in the twin
        stats = [s.statistics() for s in spouts(cluster)]
        assert sum(s.failed for s in stats) == sum(s.redelivered for s in stats) == n // 10
        assert sum(s.progress() for s in spouts(cluster)) == n
        assert all(s.emitted for s in stats)  # both tasks took a share
        assert cluster.exceptions == []
    q = queue_stats(redis_url)
    assert (q.acked, q.aborted, q.visible, q.open) == (n, n // 10, 0, 0)


def test_items_failing_every_time_end_in_the_dead_letter_stream(redis_url):
    ids = fill(redis_url, 20)
    with InMemoryCluster(twin(redis_url, FailAll, max_retries=2, retry_delay=0),
                         ackers=1) as cluster:  # retry at once: the twin goes idle, not waits
        cluster.run_until_idle()
        assert cluster.sink("sink") == []
        assert cluster.exceptions == []
    with RedisQueue("jobs", redis_url) as q:
        dead = q.dead_letters()
        stats = q.statistics()
    assert sorted(d.source_id for d in dead) == sorted(ids)
    assert all(d.deliveries == 2 for d in dead)
    assert (stats.visible, stats.open, stats.dead_lettered, stats.aborted) == (0, 0, 20, 40)


# -- multiprocess: SIGKILL a spout instance holding opened items -----------------------------

class GatedCount(Bolt):
    """Counts the items it sees, but holds them (unacked) until the file `gate` exists, so
    the spouts upstream keep items open until the test opens the gate. Looks at the gate on
    every tuple and every tick."""

    outputs = ["n", "count"]

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def prepare(self, config, context):
        self.counts: Counter = Counter()
        self.waiting: list = []

    def process(self, tup):
        self.waiting.append(tup)
        self.process_tick(tup)

    def process_tick(self, tup):
        import os

        if not os.path.exists(self.gate):
            return
        for t in self.waiting:
            n = t[0]["n"]
            self.counts[n] += 1
            self.emit([n, self.counts[n]], anchors=[t])
            self.ack(t)
        self.waiting.clear()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_killing_a_spout_holding_opened_items_loses_none(redis_url, tmp_path,
                                                        tupleflow_processes, record_property):
    n = 400
    ids = fill(redis_url, n)
    gate = tmp_path / "gate"
    topo = Topology("redis-kill", message_timeout=30.0)
    topo.spout("jobs", RedisQueueSpout("jobs", redis_url, batch_size=20), parallelism=2)
    topo.bolt("count", GatedCount(str(gate)), tick_freq_secs=0.1).shuffle_grouping("jobs")
    topo.bolt("sink", ListSink).shuffle_grouping("count")
    with RedisQueue("jobs", redis_url) as q, \
            topo.submit(ackers=1, max_spout_pending=50) as running:
        wait_for(lambda: min(len(q.held(f"redis-kill.jobs.{i}")) for i in (0, 1)) >= 50, 30,
                 "both spout tasks to hold max_spout_pending opened items")
        ours = {p.pid: p for p in tupleflow_processes()}
        first = min(s.task for s in running.statistics() if s.component == "jobs")
        (victim,) = [s for s in running.statistics() if s.task == first]
        held = q.held("redis-kill.jobs.0")  # nothing is acked before the gate opens
        ours[victim.pid].send_signal(signal.SIGKILL)
        wait_for(lambda: gone(ours[victim.pid]), 10, "the killed spout to exit")
        running.wait_until(lambda s: any(x.task == first and x.incarnation > victim.incarnation
                                         and x.state == "running" for x in s), timeout=30)
        gate.touch()
        wait_for(lambda: q.statistics().acked == n, 60, "every item acked in Redis")
        stats = q.statistics()
        records = read_sink(running.run_dir, "sink")
    by_id = dict(zip(ids, range(n), strict=True))
    delivered = Counter(values[0] for values in records)
    assert set(delivered) == set(range(n))  # 0 lost
    assert {by_id[i] for i in held} <= set(delivered)
    assert (stats.visible, stats.open, stats.acked) == (0, 0, n)  # each acked exactly once
    assert stats.released + stats.timed_out >= len(held)
    duplicates = len(records) - n
    assert duplicates <= len(held)  # only what the killed spout held came twice
    record_property("duplicates", duplicates)
    print(f"\n[redis kill] the killed spout held {len(held)} items; {duplicates} duplicates")


class StaysDead(RedisQueueSpout):
    """A RedisQueueSpout whose task 0 cannot start again once the file `dead` exists: its
    restarts fail in open (before any release), so only the other task can take its items."""

    def __init__(self, dead: str, *args, **options) -> None:
        super().__init__(*args, **options)
        self.dead = dead

    def open(self, config, context):
        import os

        if context.task_index == 0 and os.path.exists(self.dead):
            raise RuntimeError("this task stays dead (test)")
        super().open(config, context)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_items_of_a_spout_that_stays_dead_are_reclaimed_by_the_other_task(
        redis_url, tmp_path, tupleflow_processes):
    n = 300
    fill(redis_url, n)
    gate, dead = tmp_path / "gate", tmp_path / "dead"
    spout = StaysDead(str(dead), "jobs", redis_url, batch_size=20, open_timeout=2.0,
                      reclaim_interval=0.2)
    topo = Topology("redis-dead", message_timeout=30.0)
    topo.spout("jobs", spout, parallelism=2)
    topo.bolt("count", GatedCount(str(gate)), tick_freq_secs=0.1).shuffle_grouping("jobs")
    topo.bolt("sink", ListSink).shuffle_grouping("count")
    with RedisQueue("jobs", redis_url) as q, \
            topo.submit(ackers=1, max_spout_pending=50) as running:
        wait_for(lambda: len(q.held("redis-dead.jobs.0")) >= 50, 30,
                 "task 0 to hold max_spout_pending opened items")
        ours = {p.pid: p for p in tupleflow_processes()}
        first = min(s.task for s in running.statistics() if s.component == "jobs")
        (victim,) = [s for s in running.statistics() if s.task == first]
        held = q.held("redis-dead.jobs.0")
        dead.touch()
        ours[victim.pid].send_signal(signal.SIGKILL)
        wait_for(lambda: gone(ours[victim.pid]), 10, "the killed spout to exit")
        gate.touch()
        wait_for(lambda: q.statistics().acked == n, 60, "every item acked in Redis")
        stats = q.statistics()
        records = read_sink(running.run_dir, "sink")
        assert any("stays dead" in e["error"] for e in running.exceptions())
        assert q.held("redis-dead.jobs.0") == []  # task 1 took all it held, by XAUTOCLAIM
    assert {values[0] for values in records} == set(range(n))  # 0 lost
    assert stats.released == 0 and stats.timed_out >= len(held)
    print(f"\n[redis dead] task 0 held {len(held)} items, reclaimed after the open-timeout; "
          f"{len(records) - n} duplicates")


def test_a_failed_item_is_held_until_its_backoff_is_over(redis_url):
    """Backoff (runtime/sources/_retry.py): the n-th failure waits retry_delay * 2**(n-1)."""
    fill(redis_url, 1)
    spout = RedisQueueSpout("jobs", redis_url, retry_delay=2.0, retry_delay_max=60.0,
                            max_retries=None)
    clock = FakeClock(0.0)
    spout.clock = clock
    out = opened(spout)
    spout.next_tuple()
    spout.fail(out[-1][1])
    clock.advance(1.5)
    spout.next_tuple()
    assert len(out) == 1 and spout.statistics().retry_waiting == 1
    assert queue_stats(redis_url).open == 1  # still held: no other task gets it early
    clock.advance(0.5)
    spout.next_tuple()  # aborts it when due; the next open takes it back
    wait_for(lambda: spout.next_tuple() or len(out) == 2, 10, "the item opened again")
    s = spout.statistics()
    assert (s.failed, s.redelivered, s.retry_waiting) == (1, 1, 0)
    spout.close()
