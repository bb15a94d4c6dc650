"""At least once across processes: the acker tasks, the spout's ack callbacks in its own
process, max spout pending, and no spout<->acker deadlock under backpressure.

Each test waits on the master's statistics with a deadline; none sleeps to synchronise.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict

import cloudpickle
import pytest

from runtime import BasicBolt, Bolt, Topology
from runtime.testing import ListSink, ListSpout, SlowBolt, WordCount, read_sink

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = {"spout_wait": 0.005}


# -- components ------------------------------------------------------------------------------

class RecordingSpout(ListSpout):
    """A ListSpout that also appends ``"<pid> ack|fail <msg_id>"`` to a file of its own in
    the run directory, from inside its ack and fail callbacks."""

    def open(self, config, context):
        super().open(config, context)
        path = os.path.join(context.run_dir, f"callbacks-{context.task_id}.txt")
        self._log = open(path, "a")  # noqa: SIM115 - closed in close()

    def _record(self, what: str, msg_id) -> None:
        self._log.write(f"{os.getpid()} {what} {msg_id}\n")
        self._log.flush()

    def ack(self, msg_id):
        super().ack(msg_id)
        self._record("ack", msg_id)

    def fail(self, msg_id):
        super().fail(msg_id)
        self._record("fail", msg_id)

    def close(self):
        self._log.close()


class Split(BasicBolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word])


class InFlight(ListSpout):
    """Emits ``[n, in_flight]``: how many of its tuples were in flight (emitted, not yet
    acked or failed) when ``next_tuple`` was called for it."""

    def open(self, config, context):
        super().open(config, context)
        self.out: set = set()

    def next_tuple(self):
        if self.todo:
            i = self.todo.popleft()
            self.emit([i, len(self.out)], msg_id=i)
            self.out.add(i)

    def ack(self, msg_id):
        super().ack(msg_id)
        self.out.discard(msg_id)

    def fail(self, msg_id):
        super().fail(msg_id)
        self.out.discard(msg_id)


class InFlightBatches(InFlight):
    """InFlight that emits up to ``per_call`` tuples a call, as a log or Kafka spout
    emits its ``batch_size``: each carries the count in flight at its call."""

    def __init__(self, tuples, per_call: int, fields) -> None:
        super().__init__(tuples, fields=fields)
        self.per_call = per_call

    def next_tuple(self):
        at_call = len(self.out)
        for _ in range(self.per_call):
            if not self.todo:
                return
            i = self.todo.popleft()
            self.emit([i, at_call], msg_id=i)
            self.out.add(i)


class HoldAndReset(Bolt):
    """Holds every input for ``hold`` seconds (its own clock), calling ``reset_timeout``
    on each held tuple at every tick, then acks it."""

    outputs: list[str] = []

    def __init__(self, hold: float) -> None:
        self.hold = hold

    def prepare(self, config, context):
        self.held: list = []

    def process(self, tup):
        self.held.append((time.monotonic() + self.hold, tup))

    def process_tick(self, tup):
        now = time.monotonic()
        for due, held in self.held:
            if now >= due:
                self.ack(held)
            else:
                self.reset_timeout(held)
        self.held = [(due, held) for due, held in self.held if now < due]


# -- helpers ---------------------------------------------------------------------------------

def total(stats, component: str, field: str) -> int:
    return sum(getattr(s, field) for s in stats if s.component == component)


def of(stats, component: str) -> list:
    return [s for s in stats if s.component == component]


def settled(stats, spout: str) -> bool:
    """Nothing in flight: no spout tuple pending at the spout, no root in any acker."""
    return total(stats, spout, "pending") == 0 and total(stats, "__acker", "pending") == 0


def callbacks(run_dir: str) -> list[tuple[int, int, str, int]]:
    """Every recorded callback: (spout task, pid, "ack"/"fail", msg_id)."""
    out = []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("callbacks-"):
            task = int(name[len("callbacks-"):-len(".txt")])
            with open(os.path.join(run_dir, name)) as f:
                for line in f:
                    pid, what, msg_id = line.split()
                    out.append((task, int(pid), what, int(msg_id)))
    return out


# -- an at-least-once word count -------------------------------------------------------------

VOCABULARY = [f"w{i}" for i in range(30)]
SENTENCES = [" ".join(VOCABULARY[(i * k) % 30] for k in (1, 7, 11)) for i in range(3000)]


def test_at_least_once_word_count_across_two_containers_acks_everything_once():
    topo = Topology("alo-wordcount", **QUIET)
    topo.spout("sentences", RecordingSpout([[s] for s in SENTENCES], fields=["sentence"]),
               parallelism=2)
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("count", WordCount, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("count")
    expected = Counter(w for s in SENTENCES for w in s.split())
    with topo.submit(containers=2, ackers=2) as running:
        assert running.topology is topo  # the scheduler's handle keeps its definition
        plan = running.plan
        assert {t.container for t in plan.tasks} == {0, 1}
        assert len(plan.component_tasks()["__acker"]) == 2
        stats = running.wait_until(
            lambda s: total(s, "sentences", "acked") == len(SENTENCES)
            and total(s, "__acker", "acked") == len(SENTENCES)  # (their reports may lag)
            and settled(s, "sentences"), timeout=60)
        records = read_sink(running.run_dir, "sink")
        calls = callbacks(running.run_dir)
    spouts = {s.task: s for s in of(stats, "sentences")}
    assert total(stats, "sentences", "failed") == 0
    assert total(stats, "sentences", "timed_out") == 0
    assert all(s.restarts == 0 for s in stats)
    # the counts are exact: each word counted 1, 2, ..., n times, nothing twice
    assert len(records) == sum(expected.values())
    by_word = defaultdict(list)
    for word, count in records:
        by_word[word].append(count)
    assert {w: sorted(c) for w, c in by_word.items()} == {
        w: list(range(1, n + 1)) for w, n in expected.items()}
    # each ack ran once, in the process of the spout task that emitted the tuple
    assert sorted(msg_id for _t, _p, what, msg_id in calls if what == "ack") == list(
        range(len(SENTENCES)))
    assert not [c for c in calls if c[2] == "fail"]
    for task, pid, _what, msg_id in calls:
        assert pid == spouts[task].pid != os.getpid()
        assert msg_id % 2 == spouts[task].task - min(spouts)  # ListSpout: i % parallelism


def limited_run(spout, n: int, limit: int) -> tuple[list, list, list]:
    """``spout`` (tuples ``[n, in_flight]``) -> a slow bolt (2 tasks) -> a sink, with
    ``max_spout_pending=limit``, until its ``n`` tuples are acked and settled: the last
    statistics, the sink's records and each report's ``(pending, max_spout_pending)``."""
    topo = Topology("pending", **QUIET)
    topo.spout("numbers", spout)
    slow = SlowBolt(0.0002, fields=["n", "in_flight"])
    topo.bolt("slow", slow, parallelism=2).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("slow")
    seen_pending = []

    def done(stats):
        (spout,) = of(stats, "numbers")
        if spout.reported is not None:  # (before its first report the master knows nothing)
            seen_pending.append((spout.pending, spout.max_spout_pending))
        return spout.acked == n and settled(stats, "numbers")

    with topo.submit(containers=2, ackers=1, max_spout_pending=limit) as running:
        stats = running.wait_until(done, timeout=60)
        records = read_sink(running.run_dir, "sink")
    assert total(stats, "numbers", "failed") == 0
    assert sorted(i for i, _ in records) == list(range(n))
    return stats, records, seen_pending


def test_max_spout_pending_bounds_the_tuples_in_flight():
    limit, n = 20, 3000
    spout = InFlight([[i] for i in range(n)], fields=["n", "in_flight"])
    _, records, seen_pending = limited_run(spout, n, limit)
    in_flight = [k for _, k in records]
    assert max(in_flight) == limit - 1  # next_tuple ran with at most limit - 1 in flight
    assert all(p <= limit and m == limit for p, m in seen_pending), seen_pending
    assert any(p > 0 for p, _ in seen_pending)


def test_max_spout_pending_bounds_a_spout_that_emits_a_batch_a_call():
    # Storm's rule: next_tuple only while fewer than the limit are in flight, whatever a
    # call emits; counting calls let such a spout run to several times its limit
    limit, per_call, n = 20, 10, 3000
    spout = InFlightBatches([[i] for i in range(n)], per_call, fields=["n", "in_flight"])
    _, records, seen_pending = limited_run(spout, n, limit)
    at_calls = [k for _, k in records]
    assert limit - per_call <= max(at_calls) <= limit - 1  # reached, and never passed
    assert max(p for p, _ in seen_pending) <= limit + per_call - 1, seen_pending


TUPLES = 6000
PAYLOAD = "x" * 1000  # so that bytes, not just tuples, pile up behind the slow bolt


def test_no_spout_acker_deadlock_under_backpressure():
    """A fast spout, a slow bolt, small water marks, acking on: the spout is held back
    again and again, and must keep draining its acks meanwhile; every tuple completes."""
    topo = Topology("ack-pressure", **QUIET)
    topo.spout("numbers", ListSpout([[i, PAYLOAD] for i in range(TUPLES)],
                                    fields=["n", "payload"]))
    topo.bolt("slow", SlowBolt(0.0005, fields=["n", "payload"])).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("slow")
    options = {"backpressure_high": 16 * 1024, "backpressure_low": 8 * 1024,
               "batch_size": 100, "ackers": 1,
               "target_latency": None}  # no latency bound: backpressure holds the spout
    with topo.submit(containers=2, **options) as running:
        stats = running.wait_until(lambda s: total(s, "numbers", "acked") == TUPLES
                                   and settled(s, "numbers"), timeout=75)
        events = running.events()
        received = sorted(v[0] for v in read_sink(running.run_dir, "sink"))
    assert any(e["kind"] == "backpressure_on" for e in events), "no backpressure happened"
    assert total(stats, "numbers", "failed") == 0
    assert received == list(range(TUPLES))


def test_reset_timeout_keeps_tuples_alive_across_processes():
    timeout = 2.0
    topo = Topology("reset", **QUIET)
    topo.spout("numbers", RecordingSpout([[i] for i in range(3)], fields=["n"]))
    topo.bolt("hold", HoldAndReset(2.5 * timeout), tick_freq_secs=0.25).shuffle_grouping(
        "numbers")
    with topo.submit(ackers=1, message_timeout=timeout) as running:
        stats = running.wait_until(lambda s: total(s, "numbers", "acked")
                                   + total(s, "numbers", "failed") == 3, timeout=30)
        calls = callbacks(running.run_dir)
    assert sorted((what, msg_id) for _t, _p, what, msg_id in calls) == [
        ("ack", 0), ("ack", 1), ("ack", 2)]
    assert total(stats, "numbers", "timed_out") == 0
