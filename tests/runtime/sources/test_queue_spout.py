"""The Kestrel-style spout over the embedded queue: alone with a recording emit, then in a
multiprocess topology whose spout instance is SIGKILLed while it holds opened items."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys

import cloudpickle
import psutil
import pytest

from runtime import Bolt, Topology
from runtime.model.api import Context
from runtime.sources import EmbeddedQueue, QueueSpout
from runtime.testing import InMemoryCluster, ListSink, read_sink, replaced, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def path(tmp_path):
    return tmp_path / "q.db"


def fill(path, n: int, name: str = "jobs") -> None:
    with EmbeddedQueue(path, name) as q:
        q.put_many([json.dumps({"n": i}).encode() for i in range(n)])


def opened(spout: QueueSpout, task_index: int = 0, topology: str = "t") -> list:
    emitted: list = []
    spout.emit = lambda values, msg_id=None, **_: emitted.append((values, msg_id))
    spout.open({}, Context(topology, "queue", task_index + 1, task_index, 2, {}, 0, "."))
    return emitted


def stats(path, name: str = "jobs"):
    with EmbeddedQueue(path, name) as q:
        return q.statistics()


def letters(path, name: str = "jobs.dlq") -> list[dict]:
    with EmbeddedQueue(path, name) as q:
        items = q.open("reader", 100)
        return [json.loads(i.payload) for i in items]


def test_items_are_opened_in_batches_acked_and_counted(path):
    fill(path, 5)
    spout = QueueSpout("jobs", path, batch_size=2)
    out = opened(spout)
    spout.next_tuple()
    assert out == [([{"n": 0}], 1), ([{"n": 1}], 2)]
    assert stats(path).open == 2
    spout.ack(1)
    spout.ack(1)  # double
    spout.ack(99)  # unknown
    spout.fail(99)
    assert spout.statistics() == {"acked": 0, "failed": 0, "dead_lettered": 0,
                                  "ignored_acks": 2, "ignored_fails": 1, "acks_pending": 1,
                                  "held": 1, "retry_waiting": 0}
    spout.deactivate()
    spout.next_tuple()  # writes the acks, opens nothing
    assert spout.statistics()["acked"] == 1 and spout.statistics()["acks_pending"] == 0
    assert spout.progress() == 1
    assert (stats(path).acked, stats(path).visible) == (1, 3)
    spout.close()  # releases item 2
    assert (stats(path).visible, stats(path).open) == (4, 0)


def test_a_failed_item_is_aborted_then_dead_lettered_after_max_retries(path):
    fill(path, 1)
    spout = QueueSpout("jobs", path, max_retries=3, retry_delay=0)
    out = opened(spout)
    for _ in range(3):
        spout.next_tuple()
        spout.fail(out[-1][1])
    spout.next_tuple()
    assert [m for _, m in out] == [1, 1, 1]  # two retries, then nothing left
    assert spout.statistics()["dead_lettered"] == 1 and spout.statistics()["failed"] == 2
    (letter,) = letters(path)
    assert letter["error"] == "failed 3 times (a bolt failed it or it timed out)"
    assert (letter["source"], letter["id"], json.loads(letter["payload"])) == ("jobs", 1, {"n": 0})
    assert (stats(path).visible, stats(path).open) == (0, 0)
    spout.close()


def test_a_malformed_item_is_dead_lettered_at_once_and_the_rest_flow(path):
    with EmbeddedQueue(path, "jobs") as q:
        q.put_many([b'{"n": 1}', b"{oops", b'{"n": 2}'])
    spout = QueueSpout("jobs", path)
    out = opened(spout)
    spout.next_tuple()
    assert out == [([{"n": 1}], 1), ([{"n": 2}], 3)]
    (letter,) = letters(path)
    assert letter["error"].startswith("cannot decode: invalid JSON") and letter["id"] == 2
    assert spout.statistics()["dead_lettered"] == 1
    spout.close()


def test_a_new_incarnation_takes_back_what_its_predecessor_held(path):
    fill(path, 3)
    dead = QueueSpout("jobs", path)
    opened(dead)
    dead.next_tuple()  # holds all three, then "dies" (its handle is never closed)
    assert stats(path).open == 3
    again = QueueSpout("jobs", path)
    out = opened(again)  # same topology, component and task index: same consumer id
    again.next_tuple()
    assert [m for _, m in out] == [1, 2, 3]
    other = QueueSpout("jobs", path)
    assert opened(other, task_index=1) == [] and stats(path).open == 3  # not task 1's to take
    again.close()
    other.close()


def test_deactivate_stops_opening(path):
    fill(path, 2)
    spout = QueueSpout("jobs", path, batch_size=1)
    out = opened(spout)
    spout.deactivate()
    spout.next_tuple()
    assert out == []
    spout.activate()
    spout.next_tuple()
    assert len(out) == 1
    spout.close()


def test_bad_arguments_are_rejected_when_defined():
    with pytest.raises(ValueError, match=r"QueueSpout\('jobs'\): decode"):
        QueueSpout("jobs", decode="yaml")
    with pytest.raises(ValueError, match=r"QueueSpout\('jobs'\): batch_size"):
        QueueSpout("jobs", batch_size=0)


# -- in the in-memory twin -------------------------------------------------------------------

class FailOdd(Bolt):
    """Fails the first delivery of every odd item; passes the rest on."""

    outputs = ["value"]

    def prepare(self, config, context):
        self.failed: set = set()

    def process(self, tup):
        n = tup[0]["n"]
        if n % 2 and n not in self.failed:
            self.failed.add(n)
            self.fail(tup)
            return
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


def test_every_item_reaches_the_sink_once_acked_and_the_queue_empties(path):
    fill(path, 40)
    topo = Topology("queue-mem")
    topo.spout("jobs", QueueSpout("jobs", path, batch_size=8, retry_delay=0), parallelism=2)
    topo.bolt("mid", FailOdd).shuffle_grouping("jobs")
    topo.bolt("sink", ListSink).shuffle_grouping("mid")
    with InMemoryCluster(topo, ackers=1) as cluster:
        cluster.run_until_idle()
        got = sorted(v["n"] for (v,) in cluster.sink("sink"))
        spouts = [cluster.user_object(t) for t in cluster.plan.component_tasks()["jobs"]]
        counts = [s.statistics() for s in spouts]
    assert got == list(range(40))
    assert sum(c["failed"] for c in counts) == 20
    assert sum(c["acked"] + c["acks_pending"] for c in counts) == 40
    s = stats(path)
    assert (s.visible, s.open, s.acked, s.aborted) == (0, 0, 40, 20)


# -- multiprocess: kill the spout while it holds opened items ---------------------------------

class Gate(Bolt):
    """Passes tuples on, but holds them (unacked) until the file `gate` exists, so the spout
    upstream keeps items open until the test opens the gate."""

    outputs = ["value"]

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def prepare(self, config, context):
        self.waiting: list = []

    def process(self, tup):
        self.waiting.append(tup)
        self.process_tick(tup)

    def process_tick(self, tup):
        """Also on a tick: the spout may be at max_spout_pending, sending nothing new."""
        if os.path.exists(self.gate):
            for t in self.waiting:
                self.emit(list(t.values), anchors=[t])
                self.ack(t)
            self.waiting.clear()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_killing_a_queue_spout_holding_opened_items_loses_none(path, tmp_path,
                                                               tupleflow_processes):
    n = 300
    fill(path, n)
    gate = tmp_path / "gate"
    topo = Topology("queue-kill", message_timeout=30.0)
    topo.spout("jobs", QueueSpout("jobs", path, batch_size=20), parallelism=1)
    topo.bolt("gate", Gate(str(gate)), tick_freq_secs=0.2).shuffle_grouping("jobs")
    topo.bolt("sink", ListSink).shuffle_grouping("gate")
    with EmbeddedQueue(path, "jobs") as q, topo.submit(ackers=1, max_spout_pending=50) as running:
        wait_for(lambda: q.statistics().open >= 50, 30, "the spout to hold opened items")
        ours = {p.pid: p for p in tupleflow_processes()}
        (victim,) = [s for s in running.statistics() if s.component == "jobs"]
        held = q.statistics().open
        ours[victim.pid].send_signal(signal.SIGKILL)
        running.wait_until(replaced(victim), timeout=30)
        gate.touch()
        wait_for(lambda: q.statistics().visible == q.statistics().open == 0, 60,
                 "the queue to empty")
        wait_for(lambda: len({v[0]["n"] for v in read_sink(running.run_dir, "sink")}) == n, 30,
                 "every item at the sink")
    records = read_sink(running.run_dir, "sink")
    assert {v[0]["n"] for v in records} == set(range(n))  # 0 lost
    assert stats(path).released >= held  # the new incarnation took back what the dead one held
    print(f"\n[queue kill] held {held} open items at the kill; {len(records) - n} duplicates")
    with contextlib.suppress(psutil.Error):
        assert not ours[victim.pid].is_running() or ours[victim.pid].status() == "zombie"
