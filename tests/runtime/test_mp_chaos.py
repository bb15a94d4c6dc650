"""Chaos: an at-least-once word count of 20,000 messages keeps every message while its
processes are killed or stopped under it (issue 3, item 8; seed 001's failure cases).

The spout replays what fails, and a message is done only when it is acked. The sink
records each (message, word position) it receives; a message is *lost* when one of its
words never reached the sink. Each test asserts that none is lost and reports how many
duplicates the replays caused (printed, and recorded as the ``duplicates`` property).

Waits poll the master's statistics with deadlines; the only sleeps pace the chaos.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter, deque

import cloudpickle
import psutil
import pytest

from runtime import BasicBolt, Bolt, Spout, Topology
from runtime.testing import ListSink, read_sink, replaced

from .test_checkpoints_mp import GO, go

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MESSAGES = 20_000
WORDS = 3  # per message
OPTIONS = {
    "ackers": 2,
    "message_timeout": 4.0,  # replays come quickly
    "max_spout_pending": 500,  # per spout task: keeps complete latency well under it
    "spout_wait": 0.005,
}
RATE = 1000  # messages a second per spout task until go(): the run lasts long enough to be hit
BOLTS = ("split", "count", "sink")


def sentence(i: int) -> str:
    return " ".join(f"w{(i * k) % 101}" for k in (1, 7, 13))


# -- components ------------------------------------------------------------------------------

class Messages(Spout):
    """Emits its share of messages ``[i, sentence(i)]`` with ``msg_id=i``, at most ``rate``
    a second until :func:`go`, then as fast as max spout pending lets it; a failed message
    goes back in the queue, and a message is done only once acked. ``acked`` counts
    distinct messages done.

    The pace counts from ``open``: every instance must be ready before the spouts are
    activated (10 s at a load of 25), so they then fill max spout pending at once, which
    the ackers' test needs (roots in flight when an acker dies time out). With
    ``from_activation`` (the bolt-kill test) it counts from the first ``next_tuple``
    instead, and the last message is kept until :func:`go`, so that the run outlasts the
    kills: counted from ``open``, a slow start let the spouts emit their share at once and
    the run ended after two kills (1 in 13 rounds under load, wt-flake8)."""

    outputs = ["msg", "sentence"]

    def __init__(self, total: int, rate: int, *, from_activation: bool = False) -> None:
        self.total, self.rate, self.from_activation = total, rate, from_activation

    def open(self, config, context):
        self.todo = deque(range(context.task_index, self.total, context.parallelism))
        self.done: set[int] = set()
        self.emitted, self.t0 = 0, None if self.from_activation else time.monotonic()
        self.go = os.path.join(context.run_dir, GO)

    def next_tuple(self):
        if self.t0 is None:
            self.t0 = time.monotonic()
        if self.go is not None and os.path.exists(self.go):
            self.go, self.rate = None, float("inf")
        kept = 1 if self.go is not None and self.from_activation else 0
        if len(self.todo) > kept and self.emitted < (time.monotonic() - self.t0) * self.rate:
            i = self.todo.popleft()
            self.emit([i, sentence(i)], msg_id=i)
            self.emitted += 1

    def ack(self, msg_id):
        self.done.add(msg_id)

    def fail(self, msg_id):
        if msg_id not in self.done:
            self.todo.append(msg_id)


class Split(BasicBolt):
    outputs = ["msg", "pos", "word"]

    def process(self, tup):
        for pos, word in enumerate(tup["sentence"].split()):
            self.emit([tup["msg"], pos, word])


class Count(Bolt):
    outputs = ["msg", "pos", "word", "count"]

    def prepare(self, config, context):
        self.counts: Counter = Counter()

    def process(self, tup):
        word = tup["word"]
        self.counts[word] += 1
        self.emit([tup["msg"], tup["pos"], word, self.counts[word]], anchors=[tup])
        self.ack(tup)


def word_count(name: str, *, from_activation: bool = False) -> Topology:
    topo = Topology(name, **OPTIONS)
    topo.spout("messages", Messages(MESSAGES, RATE, from_activation=from_activation),
               parallelism=2)
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("messages")
    topo.bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("count")
    return topo


# -- helpers ---------------------------------------------------------------------------------

def of(stats, component: str) -> list:
    return [s for s in stats if s.component == component]


def total(stats, component: str, field: str) -> int:
    return sum(getattr(s, field) for s in of(stats, component))


def all_acked(stats) -> bool:
    """Every message acked at the spouts (each acks a message at most once: a replay is
    emitted only after the earlier tuple failed)."""
    return total(stats, "messages", "acked") == MESSAGES


def victim(running, components, rng, tupleflow_processes) -> tuple[object, psutil.Process]:
    """A random running instance of ``components``, as a psutil process of this test
    (so that a pid reused since the last report is never signalled)."""
    ours = {p.pid: p for p in tupleflow_processes()}
    stats = [s for s in running.statistics() if s.component in components
             and s.state == "running" and s.pid in ours]
    assert stats, f"no running instance of {components} to pick"
    chosen = rng.choice(stats)
    return chosen, ours[chosen.pid]


def until_done(running, timeout: float = 30.0):
    """Wait until every message is acked; then check that none was lost."""
    stats = running.wait_until(all_acked, timeout=timeout, interval=0.1)
    return stats, read_sink(running.run_dir, "sink")


def check_and_report(records, stats, record_property, what: str) -> int:
    """Assert that no message lost a word; report and return the duplicates."""
    seen = Counter((msg, pos) for msg, pos, _word, _count in records)
    lost = [(m, p) for m in range(MESSAGES) for p in range(WORDS) if (m, p) not in seen]
    assert not lost, f"{len(lost)} words of {len({m for m, _ in lost})} messages lost: " \
        f"{lost[:10]}"
    assert {(msg, word) for msg, _pos, word, _ in records} == {
        (m, w) for m in range(MESSAGES) for w in sentence(m).split()}
    duplicates = len(records) - len(seen)
    replays = total(stats, "messages", "failed")
    record_property("duplicates", duplicates)
    record_property("replays", replays)
    print(f"\n[chaos] {what}: 0 lost of {MESSAGES} messages ({MESSAGES * WORDS} words); "
          f"{duplicates} duplicate words at the sink; {replays} spout tuples failed "
          f"and replayed")
    return duplicates


def restarts(stats, components) -> int:
    return sum(s.restarts for s in stats if s.component in components)


# -- (a) kill -9 random bolt instances ---------------------------------------------------------

@pytest.mark.timeout(150)
def test_kill_random_bolt_instances_every_few_seconds(record_property, tupleflow_processes):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    record_property("seed", seed)
    killed = []
    with word_count("chaos-bolts", from_activation=True).submit(containers=2) as running:
        # a bound on waiting, as for the ackers' test: at load 30 two helpers saw every
        # instance still starting after 20 s (each start is ~0.3 s of CPU, queued)
        running.wait_until(lambda s: total(s, "sink", "executed") > 0, timeout=60)
        while not all_acked(running.statistics()) and len(killed) < 8:
            chosen, proc = victim(running, BOLTS, rng, tupleflow_processes)
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
                killed.append((chosen.component, chosen.task))
            if len(killed) == 3:
                go(running)  # the faults the test needs are made: the run may end
            time.sleep(rng.uniform(2.0, 3.0))  # paces the chaos; not a synchronisation
        stats, records = until_done(running)
    print(f"\n[chaos] seed {seed}; killed {killed}")
    assert len(killed) >= 3, f"the run ended before the chaos did: {killed}"
    assert restarts(stats, BOLTS) >= len(killed)
    assert all(s.restarts == 0 for s in of(stats, "messages"))
    check_and_report(records, stats, record_property, f"{len(killed)} bolt kills")


# -- (b) kill -9 the ackers ------------------------------------------------------------------

@pytest.mark.timeout(150)
def test_kill_the_ackers(record_property, tupleflow_processes):
    killed = []
    with word_count("chaos-ackers").submit(containers=2) as running:
        acker_tasks = running.plan.component_tasks()["__acker"]
        # a bound on waiting (see the stopped bolt's test): 20 s ran out once in CI
        running.wait_until(lambda s: total(s, "messages", "acked") > 2000, timeout=60)
        for task in (acker_tasks[0], acker_tasks[-1]):
            chosen, proc = victim_of(running, task, tupleflow_processes)
            proc.send_signal(signal.SIGKILL)
            killed.append(task)
            running.wait_until(replaced(chosen), timeout=20)
            time.sleep(2.0)  # paces the chaos; not a synchronisation
        go(running)
        stats, records = until_done(running)
    assert restarts(stats, ("__acker",)) == len(killed)
    assert total(stats, "messages", "timed_out") > 0  # the dead ackers' roots timed out
    check_and_report(records, stats, record_property, f"acker kills {killed}")


def victim_of(running, task: int, tupleflow_processes):
    """The current process of ``task`` (see :func:`victim`)."""
    ours = {p.pid: p for p in tupleflow_processes()}
    stats = running.wait_until(lambda s: any(x.task == task and x.state == "running"
                                             and x.pid in ours for x in s), timeout=20)
    (chosen,) = [s for s in stats if s.task == task]
    return chosen, ours[chosen.pid]


# -- (c) SIGSTOP a bolt past the heartbeat timeout ---------------------------------------------

@pytest.mark.timeout(150)
def test_a_bolt_stopped_past_the_heartbeat_timeout(record_property, tupleflow_processes):
    rng = random.Random(1)
    with word_count("chaos-stop").submit(containers=2, heartbeat_timeout=2.0) as running:
        # a bound on waiting, not a speed: two containers start in ~2 s on a quiet machine,
        # and in ~20 s with the machine's two cores loaded 10 times over
        running.wait_until(lambda s: total(s, "messages", "acked") > 2000, timeout=60)
        chosen, proc = victim(running, ("count",), rng, tupleflow_processes)
        proc.suspend()  # SIGSTOP
        try:
            running.wait_until(replaced(chosen), timeout=20)
        finally:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()  # SIGCONT (the old incarnation, if it still exists)
        go(running)
        stats, records = until_done(running)
        events = running.events()
    assert [e["task"] for e in events if e["kind"] == "hung"] == [chosen.task]
    check_and_report(records, stats, record_property,
                     f"{chosen.component}[{chosen.task}] stopped, replaced, continued")
