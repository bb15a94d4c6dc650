"""A spout's parallelism changes in a live rebalance (issue 22, part 3), with real processes:
the embedded-log spout 2 -> 4 -> 1 under at least once, compared exactly with the log (0
lost, duplicates at most what the moved partitions had not committed), also with a new
number of containers, and 2 -> 1 -> 2 with tuples still in flight past the drain's bound;
a checkpointed count whose log spout goes 2 -> 4 -> 1 (counts exact); the Kafka spout
1 -> 3 on a 4-partition topic of librdkafka's mock cluster (0 lost); the Redis queue spout
1 -> 2 -> 1 on a real redis-server (0 lost, the removed consumer holds nothing); a spout
that cannot change its parallelism, or one with checkpoints before the first commit, is
still refused, naming the component and why.

Waits poll the sinks, the broker and the master's statistics with deadlines."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

import cloudpickle
import pytest

from runtime import Bolt, Topology
from runtime.sources import EmbeddedLog, KafkaSpout, RedisQueue, RedisQueueSpout
from runtime.testing import (
    ListSink,
    ListSpout,
    PacedLogSpout,
    PassOn,
    SlowBolt,
    StatefulWordCount,
    read_sink,
    wait_for,
)

from .test_checkpoints_mp import GO, go

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS = 4


def tasks_of(running, component: str) -> list:
    return [s for s in running.statistics() if s.component == component and s.state == "running"]


def calm(running) -> None:
    """No task raised or restarted: a spout's rebalance hook that failed would have
    crashed its instance, and the restarted one might hide it."""
    assert running.exceptions() == []
    assert all(s.restarts == 0 for s in running.statistics())


def sink_values(running) -> Counter:
    return Counter(v[0] for v in read_sink(running.run_dir, "sink"))


def every_id_at_the_sink(running, ids: list) -> Counter:
    """Wait until each of ``ids`` reached the sink; how often each value arrived."""
    wait_for(lambda: set(sink_values(running)) >= set(ids), 180, "every id at the sink")
    return sink_values(running)


def duplicates_in(got: Counter) -> int:
    return sum(n - 1 for n in got.values())


# -- the embedded log -------------------------------------------------------------------------
def append(root, records: list[str], create: bool = False) -> None:
    """``records`` spread over the 4 partitions, 500 at a time."""
    with EmbeddedLog(root) as log:
        if create:
            log.create_topic("ids", PARTITIONS)
        for i in range(0, len(records), 500):
            log.append_many("ids", [f'"{r}"'.encode() for r in records[i:i + 500]],
                            partition=(i // 500) % PARTITIONS)


def test_log_spout_rebalanced_2_4_1_under_at_least_once_loses_nothing(tmp_path):
    ids = [f"r{i}" for i in range(12_000)]
    parts = [ids[:4000], ids[4000:8000], ids[8000:]]
    window = 150  # max_uncommitted: the most a partition has read and not committed
    append(tmp_path, parts[0], create=True)
    topo = Topology("spout-rebal-log")
    topo.spout("ids", PacedLogSpout("ids", root=str(tmp_path), fields=["word"], batch_size=50,
                                    rate=1500, max_uncommitted=window), parallelism=2)
    topo.bolt("mid", PassOn, parallelism=2).shuffle_grouping("ids")
    topo.bolt("sink", ListSink, parallelism=2).fields_grouping("mid", ["word"])
    with topo.submit(ackers=1, max_spout_pending=200) as running:
        running.wait_active(60)
        wait_for(lambda: len(sink_values(running)) > 500, 60, "first tuples")
        pids = running.status()["containers"]
        up = running.rebalance({"ids": 4})
        spouts = tasks_of(running, "ids")
        append(tmp_path, parts[1])
        wait_for(lambda: all(s.emitted > 0 for s in tasks_of(running, "ids")
                             if s.task in up["tasks_added"]), 60,
                 "the added spout tasks to read their partitions")
        wait_for(lambda: set(sink_values(running)) >= set(parts[0] + parts[1]), 120,
                 "the first two parts at the sink")
        down = running.rebalance({"ids": 1})
        append(tmp_path, parts[2])
        assert running.status()["containers"] == pids  # in place
        assert len(tasks_of(running, "ids")) == 1
        got = every_id_at_the_sink(running, ids)
        calm(running)
    duplicates = duplicates_in(got)
    print(f"\n[spout rebalance] ids 2->4: {up}\n[spout rebalance] ids 4->1: {down}\n"
          f"duplicates: {duplicates}")
    assert set(got) == set(ids)  # 0 lost, nothing else
    # read twice at most: what a moved partition had read and not committed (in flight,
    # or acked above an offset in flight): 2 partitions move in 2 -> 4, 3 in 4 -> 1
    assert duplicates <= (2 + 3) * window
    assert len(spouts) == 4 and len(up["tasks_added"]) == 2 and len(down["tasks_removed"]) == 3
    assert up["parallelism"] == {"ids": 4} and down["parallelism"] == {"ids": 1}


def test_log_spout_rebalanced_with_a_new_number_of_containers_loses_nothing(tmp_path):
    """2 -> 3 spout tasks and 1 -> 2 containers: every container restarts on a plan
    numbered afresh; the spouts resume at the committed offsets (0 lost)."""
    ids = [f"r{i}" for i in range(6000)]
    append(tmp_path, ids[:3000], create=True)
    topo = Topology("spout-rebal-restart")
    topo.spout("ids", PacedLogSpout("ids", root=str(tmp_path), fields=["word"], batch_size=50,
                                    rate=1500), parallelism=2)
    topo.bolt("sink", ListSink).shuffle_grouping("ids")
    with topo.submit(ackers=1, max_spout_pending=200) as running:
        running.wait_active(60)
        wait_for(lambda: len(sink_values(running)) > 300, 60, "first tuples")
        moved = running.rebalance({"ids": 3}, containers=2)
        append(tmp_path, ids[3000:])
        got = every_id_at_the_sink(running, ids)
        spouts = tasks_of(running, "ids")
    print(f"\n[spout rebalance] restart 2->3: {moved}\n"
          f"duplicates: {duplicates_in(got)}")
    assert set(got) == set(ids) and not moved["in_place"]
    assert len(spouts) == 3 and {s.container for s in spouts} == {0, 1}


class Sleepy(Bolt):
    """Passes each tuple on after ``seconds`` asleep, until :func:`go` (a file ``GO`` in
    the run directory): a slow step that burns no CPU, so that tuples are still in flight when
    the drain's bound is over, and no slower than it must be once the rebalances are."""

    outputs = ["word"]

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def prepare(self, config, context):
        self._go = os.path.join(context.run_dir, GO)

    def process(self, tup):
        if self._go is not None and os.path.exists(self._go):
            self._go, self.seconds = None, 0.0
        time.sleep(self.seconds)
        self.emit([tup.values[0]], anchors=[tup])
        self.ack(tup)


def test_log_spout_tuples_in_flight_past_the_drain_are_read_again_by_the_new_owner(tmp_path):
    """2 -> 1 -> 2 while a slow bolt keeps hundreds of tuples in flight past the drain's
    bound: the removed task's pending tuples (their completions go to a task that no
    longer exists) are read again by the partitions' new owner from the committed offset;
    0 lost, duplicates at most what the moved partitions had not committed."""
    ids = [f"r{i}" for i in range(1600)]
    window = 150  # max_uncommitted per partition: 300 a task, below max_spout_pending
    append(tmp_path, ids, create=True)
    topo = Topology("spout-rebal-undrained")
    topo.spout("ids", PacedLogSpout("ids", root=str(tmp_path), fields=["word"], batch_size=50,
                                    rate=1500, max_uncommitted=window), parallelism=2)
    topo.bolt("slow", Sleepy(0.01), parallelism=2).shuffle_grouping("ids")  # 200 a second
    topo.bolt("sink", ListSink).shuffle_grouping("slow")
    with topo.submit(ackers=1, max_spout_pending=400) as running:
        running.wait_active(60)
        # 400 in flight take the slow bolts 2 s at least, past the drain's bound (1 s)
        wait_for(lambda: sum(s.pending for s in tasks_of(running, "ids")) >= 400, 60,
                 "400 tuples in flight")
        down = running.rebalance({"ids": 1})
        wait_for(lambda: len(sink_values(running)) > 800, 120, "half the ids")
        up = running.rebalance({"ids": 2})
        go(running)  # the rest as fast as it can
        got = every_id_at_the_sink(running, ids)
        calm(running)
    duplicates = duplicates_in(got)
    print(f"\n[spout rebalance] undrained 2->1: {down}\n[spout rebalance] 1->2: {up}\n"
          f"duplicates: {duplicates}")
    assert set(got) == set(ids)  # 0 lost
    assert down["drained"] is False  # the case under test: tuples still in flight
    assert duplicates <= (2 + 2) * window  # partitions 1 and 3 move at each step


def test_checkpointed_count_with_its_log_spout_rebalanced_2_4_1_stays_exact(tmp_path):
    """With checkpoints the spouts' positions move with their partitions (repartition,
    then the rollback): the committed counts equal a batch count of the log."""
    words = [f"w{(i * 7) % 101}" for i in range(12_000)]
    parts = [words[:4000], words[4000:8000], words[8000:]]
    append(tmp_path, parts[0], create=True)
    topo = Topology("spout-rebal-count")
    topo.spout("ids", PacedLogSpout("ids", root=str(tmp_path), fields=["word"], batch_size=50,
                                    rate=1500), parallelism=2)
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("ids", ["word"])

    def counted() -> int:
        return sum(running.state("count").values())

    with topo.submit(checkpoint_interval=0.3) as running:
        running.wait_active(60)
        wait_for(lambda: counted() > 0, 60, "a first committed count")
        up = running.rebalance({"ids": 4, "count": 3})
        append(tmp_path, parts[1])
        wait_for(lambda: counted() >= 8000, 120, "the first two parts counted")
        down = running.rebalance({"ids": 1})
        append(tmp_path, parts[2])
        assert len(tasks_of(running, "ids")) == 1
        wait_for(lambda: counted() >= len(words), 180, "the whole log to be committed")
        state = running.state("count")
        calm(running)
    print(f"\n[spout rebalance] checkpointed 2->4: {up}\n[spout rebalance] 4->1: {down}")
    assert state == dict(Counter(words))
    assert up["parallelism"] == {"ids": 4, "count": 3} and len(down["tasks_removed"]) == 3


# -- Kafka (librdkafka's mock cluster) --------------------------------------------------------
@pytest.fixture
def kafka():
    """A mock cluster of one broker, alive while the producer is; yields (producer, brokers).
    A topic it creates on the first write has 4 partitions."""
    from confluent_kafka import Producer

    producer = Producer({"test.mock.num.brokers": 1})
    brokers = ",".join(f"{b.host}:{b.port}"
                       for b in producer.list_topics(timeout=10).brokers.values())
    yield producer, brokers
    producer.flush(10)


def produce(producer, first: int, per_partition: int) -> None:
    for p in range(PARTITIONS):
        for o in range(first, first + per_partition):
            producer.produce("events", json.dumps([p, o]).encode(), partition=p)
    assert producer.flush(10) == 0


def test_kafka_spout_rebalanced_1_to_3_on_four_partitions_loses_nothing(kafka):
    producer, brokers = kafka
    per = 1500
    produce(producer, 0, per)
    topo = Topology("spout-rebal-kafka")
    topo.spout("events", KafkaSpout("events", brokers, fields=["record"], commit_interval=0.1,
                                    batch_size=50, max_uncommitted=300), parallelism=1)
    topo.bolt("work", SlowBolt(0.0002, fields=("record",))).shuffle_grouping("events")
    topo.bolt("sink", ListSink).shuffle_grouping("work")
    pending = 300
    with topo.submit(ackers=1, max_spout_pending=pending) as running:
        running.wait_active(60)
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) > 300, 60, "first records")
        up = running.rebalance({"events": 3})
        produce(producer, per, per)
        wait_for(lambda: all(s.emitted > 0 for s in tasks_of(running, "events")
                             if s.task in up["tasks_added"]), 60,
                 "the added spout tasks to read their partitions")
        wait_for(lambda: len({tuple(v[0]) for v in read_sink(running.run_dir, "sink")})
                 >= PARTITIONS * 2 * per, 180, "every record at the sink")
        records = Counter(tuple(v[0]) for v in read_sink(running.run_dir, "sink"))
        spouts = tasks_of(running, "events")
        calm(running)
    duplicates = duplicates_in(records)
    print(f"\n[spout rebalance] kafka 1->3: {up}\nduplicates: {duplicates}")
    assert set(records) == {(p, o) for p in range(PARTITIONS) for o in range(2 * per)}
    assert duplicates <= pending  # one spout task's tuples in flight at the pause
    assert len(spouts) == 3 and up["in_place"]


# -- a Redis queue ----------------------------------------------------------------------------
def test_redis_queue_spout_rebalanced_1_2_1_loses_nothing(redis_url):
    n = 3000
    topo = Topology("spout-rebal-redis", message_timeout=30.0)
    topo.spout("jobs", RedisQueueSpout("jobs", redis_url, batch_size=20), parallelism=1)
    topo.bolt("work", SlowBolt(0.0005, fields=("n",))).shuffle_grouping("jobs")
    topo.bolt("sink", ListSink).shuffle_grouping("work")
    with RedisQueue("jobs", redis_url) as q, \
            topo.submit(ackers=1, max_spout_pending=100) as running:
        q.put_many([json.dumps(i).encode() for i in range(n // 3)])
        running.wait_active(60)
        wait_for(lambda: q.statistics().acked > 100, 60, "first acks")
        up = running.rebalance({"jobs": 2})
        q.put_many([json.dumps(i).encode() for i in range(n // 3, 2 * n // 3)])
        wait_for(lambda: len(q.held("spout-rebal-redis.jobs.1"))
                 or q.statistics().acked >= 2 * n // 3, 60, "the second consumer to open")
        down = running.rebalance({"jobs": 1})
        q.put_many([json.dumps(i).encode() for i in range(2 * n // 3, n)])
        wait_for(lambda: q.statistics().acked == n, 120, "every item acked in Redis")
        stats = q.statistics()
        held_by_removed = q.held("spout-rebal-redis.jobs.1")
        got = Counter(v[0] for v in read_sink(running.run_dir, "sink"))
        spouts = tasks_of(running, "jobs")
        calm(running)
    print(f"\n[spout rebalance] redis 1->2: {up}\n[spout rebalance] redis 2->1: {down}\n"
          f"duplicates: {sum(got.values()) - n}")
    assert set(got) == set(range(n))  # 0 lost
    assert (stats.visible, stats.open, stats.acked) == (0, 0, n)
    assert held_by_removed == [] and len(spouts) == 1
    assert len(up["tasks_added"]) == 1 and len(down["tasks_removed"]) == 1


# -- what is still refused --------------------------------------------------------------------
def refused(running, spout: str, why: str) -> None:
    """Once every task runs: rebalancing ``spout`` 2 -> 3 is refused naming it and ``why``
    (a regular expression), and changes nothing."""
    running.wait_active(60)
    wait_for(lambda: all(s.state == "running" for s in running.statistics()), 60,
             "every task to report")
    with pytest.raises(ValueError, match=f"component '{spout}': {why}"):
        running.rebalance({spout: 3})
    assert len(running.plan().component_tasks()[spout]) == 2


def test_a_spout_that_cannot_change_its_parallelism_is_refused_naming_it(tmp_path):
    topo = Topology("spout-rebal-fixed")
    topo.spout("numbers", ListSpout([[i] for i in range(100)], fields=["n"]), parallelism=2)
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit() as running:
        refused(running, "numbers", r"a ListSpout cannot change its parallelism \(its class "
                                    r"does not set resizable = True\)")


def test_with_checkpoints_a_spout_waits_for_a_first_committed_checkpoint(tmp_path):
    append(tmp_path, [f"r{i}" for i in range(100)], create=True)
    topo = Topology("spout-rebal-early")
    topo.spout("ids", PacedLogSpout("ids", root=str(tmp_path), fields=["word"], rate=100),
               parallelism=2)
    topo.bolt("count", StatefulWordCount).fields_grouping("ids", ["word"])
    with topo.submit(checkpoint_interval=600) as running:  # none commits during the test
        refused(running, "ids", "with checkpoints a spout's parallelism changes only once a "
                                "first checkpoint has committed")
        assert running.rebalance({"count": 2})["parallelism"] == {"count": 2}  # bolts may
