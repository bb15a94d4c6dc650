"""Tracing on real processes (issue 20): a traced sentence tree's hops and parents, and
"who held it" for a bolt that never acks one chosen word (1 and 2 containers), a holder
killed while it holds, and a copy lost in transit. Every wait is on a condition, with a
deadline; nothing waits on a sleep."""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pytest

from runtime import Bolt, Spout, Topology
from runtime.observe.traces import TRANSIT
from runtime.testing import wait_for

from . import test_tracing as _in_memory
from .test_tracing import Count, Sentences, Split

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(_in_memory)  # its spout and bolts, by value too

FAST = {"spout_wait": 0.005, "stats_interval": 0.05, "flush_interval": 0.002}


def sentence_topology(name: str, holder=Count, *, holder_tasks: int = 2) -> Topology:
    """8 sentences; sentence 3's word "hold" is kept for ever by the count task."""
    topo = Topology(name, **FAST)
    topo.spout("sentences", Sentences(8, odd={3: "w1 hold w3"}))
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("count", holder, parallelism=holder_tasks).fields_grouping("split", ["word"])
    return topo


def trace_of(running, msg_id, status, hops=None, timeout=60.0):
    """The trace of ``msg_id`` once it has ``status`` and (if given) ``hops`` processed
    hops: each task reports with its own statistics, so a tree fills in over a few
    ``stats_interval``s, and the spout's word may come before a bolt's."""
    def ready(t):
        return (t is not None and t.status == status and
                (hops is None or sum(h.executed_ms is not None for h in t.hops) == hops))
    def found():
        t = running.lineage(msg_id)
        return t if ready(t) else None

    return wait_for(found, timeout, f"the trace of {msg_id} {status}")


def check_sentence_tree(t, words: int) -> None:
    """1 + words hops: the split's, then one per word, each the split hop's child."""
    assert len(t.hops) == 1 + words
    assert t.hops[0].component == "split" and t.hops[0].parent is None
    assert [h.parent for h in t.hops[1:]] == [0] * words
    assert sorted(h.values[0] for h in t.hops[1:]) == sorted(t.values[0].split())
    assert all(h.component == "count" for h in t.hops[1:])
    assert all(h.executed_ms is not None and h.queued_ms >= 0 for h in t.hops)


@pytest.mark.parametrize("containers", [1, 2])
def test_a_bolt_that_never_acks_one_word_is_named_as_its_holder(containers):
    topo = sentence_topology(f"held{containers}")
    with topo.submit(containers=containers, ackers=1, trace=1.0, message_timeout=3.0) as running:
        running.wait_active(timeout=30)
        ok = trace_of(running, 0, "acked", hops=5)
        check_sentence_tree(ok, 4)
        assert ok.held_by is None and ok.complete_ms > 0
        assert all(h.outcome == "acked" for h in ok.hops)
        held = trace_of(running, 3, "timed_out", hops=5)
        check_sentence_tree(held, 4)
        hold = next(h for h in held.hops if h.values == ("hold",))
        assert hold.outcome is None
        assert held.held_by == ("count", hold.task)
        assert [t.msg_id for t in running.traces(status="timed_out")] == [3]
        newest_first = [t.msg_id for t in running.traces()]
        assert sorted(newest_first) == list(range(8)) and newest_first[0] == 7


class Stuck(Bolt):
    """Holds "hold" and writes its pid where the test can find it, so it can be killed."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.kept, self.dir = [], config["flag_dir"]

    def process(self, tup):
        if tup.values[0] == "hold":
            self.kept.append(tup)
            with open(os.path.join(self.dir, "holder.pid"), "w") as f:
                f.write(str(os.getpid()))
        else:
            self.ack(tup)


def test_a_holder_killed_while_holding_is_named(tmp_path):
    topo = sentence_topology("killed", Stuck)
    with topo.submit(ackers=1, trace=1.0, message_timeout=4.0,
                     config={"flag_dir": str(tmp_path)}) as running:
        running.wait_active(timeout=30)
        # the hop of "hold" reached the master (processed, not acked) before the kill
        wait_for(lambda: (t := running.lineage(3)) is not None and any(
            h.values == ("hold",) and h.executed_ms is not None for h in t.hops),
            30, "the hop of 'hold' reported")
        pid = int((tmp_path / "holder.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        held = trace_of(running, 3, "timed_out")
        hold = next(h for h in held.hops if h.values == ("hold",))
        assert held.held_by == ("count", hold.task)
        restarts = {s.task: s.restarts for s in running.statistics()}
        assert restarts[hold.task] >= 1


class Gate(Bolt):
    """Blocks in ``process`` on the sentence-3 word "w1" until the test kills it: the
    words sent to it after that never reach its ``process``."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.dir = config["flag_dir"]

    def process(self, tup):
        if tup.values[0] == "block":
            with open(os.path.join(self.dir, "gate.pid"), "w") as f:
                f.write(str(os.getpid()))
            while True:  # until killed (the test's deadline kills the topology anyway)
                time.sleep(0.05)
        self.ack(tup)


class Blocking(Spout):
    """Sentence 0 "block" (it stops the only count task), then sentence 1 "lost"."""

    outputs = ["sentence"]

    def open(self, config, context):
        self.i, self.dir = 0, config["flag_dir"]

    def next_tuple(self):
        if self.i == 0:
            self.emit(["block"], msg_id=0)
            self.i = 1
        elif self.i == 1 and os.path.exists(os.path.join(self.dir, "gate.pid")):
            self.emit(["lost"], msg_id=1)
            self.i = 2


def test_a_copy_sent_to_a_task_killed_before_it_received_it_is_in_transit(tmp_path):
    topo = Topology("transit", **FAST)
    topo.spout("sentences", Blocking())
    topo.bolt("split", Split).shuffle_grouping("sentences")
    topo.bolt("count", Gate).shuffle_grouping("split")
    with topo.submit(ackers=1, trace=1.0, message_timeout=4.0,
                     config={"flag_dir": str(tmp_path)}) as running:
        running.wait_active(timeout=30)
        # "lost" was sent to the count task (the split's sent record reached the master),
        # which is stuck in process("block") and will never read it
        wait_for(lambda: (t := running.lineage(1)) is not None and len(t.hops) == 2,
                 30, "the copy of 'lost' sent towards the stuck task")
        os.kill(int((tmp_path / "gate.pid").read_text()), signal.SIGKILL)
        lost = trace_of(running, 1, "timed_out")
        assert lost.hops[1].values == ("lost",) and lost.hops[1].executed_ms is None
        assert lost.held_by == (TRANSIT, None)


@pytest.mark.timeout(400)  # starting Spark takes tens of seconds on a loaded machine
def test_a_traced_tree_across_two_spark_containers(spark_cluster):
    """The Spark scheduler runs the same instances: a traced tree crosses its containers
    (TCP + CURVE between stream managers) with every hop and its parent."""
    from runtime.processes.spark_scheduler import spark_session

    session = spark_session(spark_cluster.master_url, {"advertise_host": "127.0.0.1",
                                                       "bind_host": "127.0.0.1"})
    try:
        topo = sentence_topology("spark-traced")
        with topo.submit(scheduler="spark", master=spark_cluster.master_url, containers=2,
                         ackers=1, trace=1.0, message_timeout=5.0) as running:
            running.wait_active(timeout=180)
            ok = trace_of(running, 0, "acked", hops=5, timeout=60)
            check_sentence_tree(ok, 4)
            held = trace_of(running, 3, "timed_out", hops=5, timeout=60)
            hold = next(h for h in held.hops if h.values == ("hold",))
            assert held.held_by == ("count", hold.task)
            containers = {t.task: t.container for t in running.plan.tasks}
            assert len({containers[h.task] for t in (ok, held) for h in t.hops}) == 2
    finally:
        session.stop()


class Sleepy(Bolt):
    """Acks each word after a quarter of a second: it falls behind, queues fill."""

    outputs: list[str] = []

    def process(self, tup):
        time.sleep(0.25)  # the bolt's work, not a synchronisation
        self.ack(tup)


def test_a_slow_bolt_is_named_as_the_holder():
    """Low water marks make backpressure likely, but whether it engages depends on how
    the frames queue (the instance's socket takes many): the test does not require it."""
    topo = Topology("slow", **FAST)
    topo.spout("sentences", Sentences(40))
    topo.bolt("split", Split).shuffle_grouping("sentences")
    topo.bolt("count", Sleepy).shuffle_grouping("split")
    tasks = topo.physical_plan().component_tasks()
    with topo.submit(ackers=1, trace=1.0, message_timeout=2.0, target_latency=None,
                     backpressure_high=256, backpressure_low=128) as running:
        timed_out = wait_for(lambda: running.traces(status="timed_out"), 60,
                             "a traced tree timed out")
        holders = {t.held_by for t in timed_out}
        assert ("count", tasks["count"][0]) in holders
        assert holders <= {("count", tasks["count"][0]), ("split", tasks["split"][0])}
