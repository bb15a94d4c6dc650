"""At least once through the in-memory twin, on a fake clock: Storm's acking tests
(seed 001; Storm's ``integration_test.clj``: test-acking, test-ack-branching,
test-acking-self-anchor, test-timeout, test-reset-timeout) ported to the runtime, plus
max spout pending and its auto-tuner.

Every test runs real executors and a real acker task; time moves only when a test says
``cluster.advance(seconds)``. A root times out between ``message_timeout`` and 1.5 x
``message_timeout`` after it was emitted (rotating buckets, never early).
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter, deque

import pytest

from runtime import BasicBolt, Bolt, FailedException, Spout, Topology, Tuple, wire
from runtime.acking._ids import RootIds, new_id, root_task
from runtime.acking._ledger import AckLedger
from runtime.acking._tracking import SpoutTracker
from runtime.engine.tracing import Tracer
from runtime.model.api import TupleSource
from runtime.testing import InMemoryCluster, ListSink, ListSpout

TIMEOUT = 10.0  # message_timeout of the timeout tests (Storm's tests use 10 s too)


# -- components ------------------------------------------------------------------------------

class Feeder(Spout):
    """Storm's FeederSpout with an ack/fail tracker: the test calls ``feed(values, msg_id)``
    on the live object; ``acked`` and ``failed`` list the msg_ids called back, in order."""

    def __init__(self, fields=("num",)) -> None:
        self.outputs = list(fields)

    def open(self, config, context):
        self.queue: deque = deque()
        self.acked: list = []
        self.failed: list = []
        self.calls = 0
        self.checked = 0  # len(acked) at the last new_acks()

    def feed(self, values, msg_id=None) -> None:
        self.queue.append((values, msg_id))

    def next_tuple(self):
        self.calls += 1
        if self.queue:
            values, msg_id = self.queue.popleft()
            self.emit(values, msg_id=msg_id)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)

    def new_acks(self) -> int:
        """How many acks arrived since the last call (Storm's ack-tracking checker)."""
        n, self.checked = len(self.acked) - self.checked, len(self.acked)
        return n


class Numbers(Spout):
    """Emits ``[n]`` with ``msg_id=n`` for n = 0, 1, ... (forever when ``total`` is None),
    counting its ``next_tuple`` calls."""

    outputs = ["n"]

    def __init__(self, total: int | None = None) -> None:
        self.total = total

    def open(self, config, context):
        self.n = self.calls = 0
        self.acked: list = []
        self.failed: list = []

    def next_tuple(self):
        self.calls += 1
        if self.total is None or self.n < self.total:
            self.emit([self.n], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Batches(Numbers):
    """Numbers that emits ``per_call`` of them a ``next_tuple`` call, as a log or Kafka
    spout emits its ``batch_size``; ``in_flight`` lists its own count of tuples emitted
    and not yet acked or failed at each call."""

    def __init__(self, per_call: int, total: int | None = None) -> None:
        super().__init__(total)
        self.per_call = per_call

    def open(self, config, context):
        super().open(config, context)
        self.in_flight: list[int] = []

    def next_tuple(self):
        self.calls += 1
        self.in_flight.append(self.n - len(self.acked) - len(self.failed))
        for _ in range(self.per_call):
            if self.total is not None and self.n >= self.total:
                return
            self.emit([self.n], msg_id=self.n)
            self.n += 1


class Branching(Bolt):
    """Storm's branching-bolt: emits ``fanout`` tuples anchored to the input, then acks it."""

    outputs = ["num"]

    def __init__(self, fanout: int) -> None:
        self.fanout = fanout

    def process(self, tup):
        for i in range(self.fanout):
            self.emit([i], anchors=[tup])
        self.ack(tup)


class Agg(Bolt):
    """Storm's agg-bolt: once ``size`` inputs are in, emits one tuple anchored to all of
    them (a multi-anchored join) and acks them."""

    outputs = ["num"]

    def __init__(self, size: int) -> None:
        self.size = size

    def prepare(self, config, context):
        self.seen: list = []

    def process(self, tup):
        self.seen.append(tup)
        if len(self.seen) == self.size:
            self.emit([1], anchors=self.seen)
            for t in self.seen:
                self.ack(t)
            self.seen = []


class Identity(Bolt):
    outputs = ["num"]

    def process(self, tup):
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


class DupAnchor(Bolt):
    """Storm's dup-anchor: one output anchored twice to the same input."""

    outputs = ["num"]

    def process(self, tup):
        self.emit([1], anchors=[tup, tup])
        self.ack(tup)


class AckEveryOther(Bolt):
    """Storm's ack-every-other: acks the 1st, 3rd, 5th... input and drops the others."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.n = 0

    def process(self, tup):
        self.n += 1
        if self.n % 2:
            self.ack(tup)


class Holder(Bolt):
    """Keeps every input without acking it until the test calls ``release(n)``; on each
    tick it calls ``reset_timeout`` on what it holds when ``resetting`` is set."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.held: list[Tuple] = []
        self.resetting = False
        self.resets = 0

    def process(self, tup):
        self.held.append(tup)

    def process_tick(self, tup):
        if self.resetting:
            for held in self.held:
                self.reset_timeout(held)
            self.resets += 1

    def release(self, n: int | None = None) -> None:
        n = len(self.held) if n is None else n
        for tup in self.held[:n]:
            self.ack(tup)
        del self.held[:n]


class PathNode(Bolt):
    """A node of a tuple tree whose tuples carry their path ("r", "r.0", "r.0.1"...):
    emits ``fanout`` children anchored to the input, then acks it, except the input whose
    path is ``fail_at``, which it fails (after emitting its children)."""

    outputs = ["path"]

    def __init__(self, fanout: int, fail_at: str | None) -> None:
        self.fanout, self.fail_at = fanout, fail_at

    def process(self, tup):
        path = tup["path"]
        for i in range(self.fanout):
            self.emit([f"{path}.{i}"], anchors=[tup])
        if path == self.fail_at:
            self.fail(tup)
        else:
            self.ack(tup)


class Splitter(BasicBolt):
    """A BasicBolt: emits each word (anchored for it), raises FailedException on "bad"."""

    outputs = ["word"]

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word])
        if "bad" in tup["sentence"].split():
            raise FailedException("a bad sentence")


class Unanchored(Bolt):
    """Emits its input on without an anchor, then acks it."""

    outputs = ["num"]

    def process(self, tup):
        self.emit(list(tup.values))
        self.ack(tup)


class FailAll(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        self.fail(tup)


class DoubleAcker(Bolt):
    """Emits one child anchored to the input, acks the input twice, and acks a tuple
    that no spout tracks (as if it had been made up)."""

    outputs = ["num"]

    def prepare(self, config, context):
        self.stranger = Tuple([0], TupleSource.of("nowhere", 99, "default", ["num"]))

    def process(self, tup):
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)
        self.ack(tup)
        self.ack(self.stranger)
        self.fail(self.stranger)


class FailFirstTwo(Bolt):
    """Fails the first two times it sees a value, then acks it; records what it acked."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.seen: Counter = Counter()

    def process(self, tup):
        self.seen[tup["n"]] += 1
        if self.seen[tup["n"]] <= 2:
            self.fail(tup)
        else:
            self.emit(list(tup.values), anchors=[tup])
            self.ack(tup)


class DropFirst(Bolt):
    """Drops (neither acks nor fails) the first delivery of each value: only a timeout
    gets it replayed."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.seen: Counter = Counter()

    def process(self, tup):
        self.seen[tup["n"]] += 1
        if self.seen[tup["n"]] > 1:
            self.emit(list(tup.values), anchors=[tup])
            self.ack(tup)


# -- helpers ---------------------------------------------------------------------------------

def tasks(cluster: InMemoryCluster, component: str) -> tuple[int, ...]:
    return cluster.plan.component_tasks()[component]


def obj(cluster: InMemoryCluster, component: str):
    """The live user object of a component that has one task."""
    (task,) = tasks(cluster, component)
    return cluster.user_object(task)


def stat(cluster: InMemoryCluster, component: str):
    (s,) = [s for s in cluster.statistics() if s.component == component]
    return s


def acker_pending(cluster: InMemoryCluster) -> int:
    return sum(s.pending for s in cluster.statistics() if s.component == "__acker")


def no_crash(cluster: InMemoryCluster) -> None:
    assert cluster.exceptions == [], [e["error"] for e in cluster.exceptions]


def advance_by_steps(cluster: InMemoryCluster, seconds: float, step: float = 0.5) -> None:
    """Move the clock in small steps, as an instance's timers would fire."""
    for _ in range(round(seconds / step)):
        cluster.advance(step)


def feeder_into(name: str, *bolts) -> Topology:
    """A feeder spout "feed" followed by a chain of (id, bolt) shuffle-grouped in order."""
    topo = Topology(name)
    topo.spout("feed", Feeder(["num"]))
    upstream = "feed"
    for comp_id, bolt in bolts:
        topo.bolt(comp_id, bolt).shuffle_grouping(upstream)
        upstream = comp_id
    return topo



class CrashOnce(Bolt):
    """Raises on ``n == 3`` the first time (a marker file in the run directory remembers
    it across the restart); passes everything else on, anchored, and acks it."""

    outputs = ["n"]

    def prepare(self, config, context):
        self.marker = os.path.join(context.run_dir, "crashed-once")

    def process(self, tup):
        if tup["n"] == 3 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("the task dies with the tuple")
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


# -- tuple trees: fan-out, joins, DAGs -----------------------------------------------------

def test_fan_out_completes_only_when_every_branch_is_acked():
    topo = feeder_into("fanout", ("split", Branching(3)), ("hold", Holder))
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        feed.feed([1], msg_id="a")
        cluster.run_until_idle()
        assert len(hold.held) == 3 and feed.acked == [] and acker_pending(cluster) == 1
        for left in (2, 1):
            hold.release(1)
            cluster.run_until_idle()
            assert feed.acked == [] and len(hold.held) == left
        hold.release(1)
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == (["a"], [])
        assert acker_pending(cluster) == 0 and stat(cluster, "feed").pending == 0
        no_crash(cluster)


@pytest.mark.parametrize("ackers", [1, 3])
def test_acking_across_branches_joins_and_several_spouts(ackers):
    """Storm's test-acking: three feeders, branching bolts, a join of any 3 tuples
    (multi-anchored across roots), then more branching."""
    topo = Topology("acking")
    for i, fanout in ((1, 2), (2, 4), (3, 1)):
        topo.spout(f"feed{i}", Feeder(["num"]))
        topo.bolt(f"branch{i}", Branching(fanout)).shuffle_grouping(f"feed{i}")
    agg = topo.bolt("agg", Agg(3))
    for i in (1, 2, 3):
        agg.shuffle_grouping(f"branch{i}")
    topo.bolt("branch", Branching(2)).shuffle_grouping("agg")
    topo.bolt("ack", ListSink).shuffle_grouping("branch")
    with InMemoryCluster(topo, ackers=ackers) as cluster:
        f1, f2, f3 = (obj(cluster, f"feed{i}") for i in (1, 2, 3))
        ids = itertools.count()

        def feed(feeder, expected):
            feeder.feed([1], msg_id=next(ids))
            cluster.run_until_idle()
            assert [f.new_acks() for f in (f1, f2, f3)] == expected

        feed(f1, [0, 0, 0])  # 2 tuples wait in the join
        feed(f2, [1, 1, 0])  # 6: two joins of 3, both trees done
        feed(f1, [0, 0, 0])  # 2 wait
        feed(f1, [1, 0, 0])  # 4: one join; the 4th tuple (2nd root) waits
        feed(f3, [0, 0, 0])  # 2 wait
        feed(f2, [1, 1, 1])  # 6: two joins, everything done
        assert [f.failed for f in (f1, f2, f3)] == [[], [], []]
        assert acker_pending(cluster) == 0
        no_crash(cluster)


def test_all_grouping_copies_are_each_part_of_the_tree():
    topo = Topology("all")
    topo.spout("feed", Feeder(["num"]))
    topo.bolt("hold", Holder, parallelism=3).all_grouping("feed")
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed = obj(cluster, "feed")
        holders = [cluster.user_object(t) for t in tasks(cluster, "hold")]
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert [len(h.held) for h in holders] == [1, 1, 1]
        for holder in holders[:2]:
            holder.release()
            cluster.run_until_idle()
            assert feed.acked == []
        holders[2].release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([1], [])


def test_a_spout_tuple_that_nobody_subscribes_to_is_acked_at_once():
    topo = Topology("nobody")
    topo.spout("feed", Feeder(["num"]))
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed = obj(cluster, "feed")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([1], [])
        assert stat(cluster, "feed").pending == 0 and acker_pending(cluster) == 0


def test_ack_branching_a_diamond_joined_by_a_multi_anchored_tuple():
    """Storm's test-ack-branching: the spout tuple goes to two bolts, whose outputs are
    joined (4 at a time) into one tuple anchored to all of them."""
    topo = Topology("diamond")
    topo.spout("feed", Feeder(["num"]))
    topo.bolt("left", Identity).shuffle_grouping("feed")
    topo.bolt("right", Identity).shuffle_grouping("feed")
    topo.bolt("join", Agg(4)).shuffle_grouping("left").shuffle_grouping("right")
    topo.bolt("hold", Holder).shuffle_grouping("join")
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert feed.new_acks() == 0 and len(obj(cluster, "join").seen) == 2
        feed.feed([2], msg_id=2)
        cluster.run_until_idle()
        assert feed.new_acks() == 0 and len(hold.held) == 1  # the join is not acked yet
        hold.release()
        cluster.run_until_idle()
        assert feed.new_acks() == 2 and sorted(feed.acked) == [1, 2]
        assert feed.failed == [] and acker_pending(cluster) == 0
        no_crash(cluster)


def test_the_same_input_anchored_twice():
    """Storm's test-acking-self-anchor."""
    topo = feeder_into("self-anchor", ("dup", DupAnchor), ("ack", ListSink))
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed = obj(cluster, "feed")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert feed.new_acks() == 1
        for i in (2, 3, 4):
            feed.feed([1], msg_id=i)
        cluster.run_until_idle()
        assert feed.new_acks() == 3 and feed.failed == []
        no_crash(cluster)


def test_a_doubly_anchored_tuple_held_keeps_its_root_open():
    topo = feeder_into("self-anchor-held", ("dup", DupAnchor), ("hold", Holder))
    with InMemoryCluster(topo, ackers=1) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert feed.acked == [] and len(hold.held) == 1
        hold.release()
        cluster.run_until_idle()
        assert feed.acked == [1] and feed.failed == []


# -- timeouts --------------------------------------------------------------------------------

def test_unacked_tuples_fail_after_the_timeout_and_not_before():
    """Storm's test-timeout: a bolt acks every other tuple, message_timeout 10 s."""
    topo = feeder_into("timeout", ("ack-every-other", AckEveryOther))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        cluster.advance(11)
        for i in (1, 2, 3):
            feed.feed([i], msg_id=i)
        cluster.run_until_idle()
        emitted = cluster.clock()
        assert sorted(feed.acked) == [1, 3] and feed.failed == []
        advance_by_steps(cluster, 9)
        assert sorted(feed.acked) == [1, 3] and feed.failed == []
        while not feed.failed and cluster.clock() - emitted < 2 * TIMEOUT:
            cluster.advance(0.5)
        failed_after = cluster.clock() - emitted
        assert feed.failed == [2], f"not failed {failed_after} s after it was emitted"
        assert TIMEOUT <= failed_after <= 1.5 * TIMEOUT + 0.5
        advance_by_steps(cluster, 3 * TIMEOUT)
        assert sorted(feed.acked) == [1, 3] and feed.failed == [2]  # once, and only it
        spout = stat(cluster, "feed")
        assert (spout.acked, spout.failed, spout.timed_out, spout.pending) == (2, 1, 1, 0)
        assert acker_pending(cluster) == 0
        no_crash(cluster)


def test_an_idle_acker_asks_to_be_woken_only_to_look_for_timeouts():
    """Each ACKS frame's outcomes go as it is settled, and a timeout's at the look that
    finds it, so nothing of the acker's waits for a flush timer: it asks to be woken for
    its next look (EXPIRE_EVERY), not every flush interval, as it did (~340 wake-ups a
    second for nothing, idle)."""
    topo = feeder_into("idle-acker", ("count", Identity))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT,
                         flush_interval=0.002) as cluster:
        (acker,) = tasks(cluster, "__acker")
        executor, now = cluster.executors[acker], cluster.clock()
        assert executor.on_timer(now) - now > 100 * 0.002
        (spout,) = tasks(cluster, "feed")
        sent = []
        executor.send = lambda header, body: sent.append(
            (wire.parse_header(header), wire.decode_batch(body)))
        root = 12345  # a plain root whose tree the acker keeps, never acked
        executor.on_frame(wire.data_header(wire.ACKS, 0, acker, spout),
                          wire.pack([wire.ACK_INIT, root, 999]))
        executor.on_timer(now + 1.5 * TIMEOUT + 1.0)  # past its timeout
        assert [(h.kind, h.dest, body) for h, body in sent] == [
            (wire.ACKED, spout, [root, wire.ACKED_TIMEOUT])]  # in the same call


def test_the_trees_a_batch_of_acks_completes_go_to_the_spout_as_one_completed_frame():
    """Two counters' acks of five sentences (one message each a sentence from each): the
    acker settles the second batch in C and sends its five roots in one ``COMPLETED``
    frame, as a bolt sends its leaves, not as ``ACKED`` pairs; roots that are no stretch
    (drawn at random here) go as a list, in root order."""
    topo = feeder_into("completing-acker", ("count", Identity))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        (acker,), (spout,) = tasks(cluster, "__acker"), tasks(cluster, "feed")
        executor, sent = cluster.executors[acker], []
        executor.send = lambda header, body: sent.append(
            (wire.parse_header(header), wire.decode_batch(body)))
        ids, part = RootIds(spout, cluster.plan.root_bits()), new_id()
        roots = [ids.new() for _ in range(5)]
        for values in ([part] * 5, [root ^ part for root in roots]):
            executor.on_frame(wire.data_header(wire.ACKS, 0, acker, spout), wire.pack(
                [x for root, value in zip(roots, values) for x in (wire.ACK_ACK, root, value)]))
        assert [(h.kind, h.dest, body) for h, body in sent] == [
            (wire.COMPLETED, spout, [0, 0, sorted(roots)])]
        assert executor.report()["acked"] == 5 and acker_pending(cluster) == 0


def completing_acker(cluster: InMemoryCluster):
    """The acker task of ``cluster``, its frames sent to a list, ``(header, body)`` each."""
    (acker,) = tasks(cluster, "__acker")
    executor, sent = cluster.executors[acker], []
    executor.send = lambda header, body: sent.append(
        (wire.parse_header(header), wire.decode_batch(body)))
    return executor, sent


def acks_frame(acker: int, src: int, pairs) -> tuple[bytes, bytes]:
    """An ACKS frame acking ``(root, value)`` pairs."""
    return (wire.data_header(wire.ACKS, 0, acker, src),
            wire.pack([x for root, value in pairs for x in (wire.ACK_ACK, root, value)]))


def test_an_ackers_completions_of_runs_go_as_stretches_one_frame_a_spout_task():
    """Runs of two spout tasks' roots, their trees completed by two counters' acks in
    shuffled frames (a run's roots completed by two frames, roots of both tasks in one
    frame): each spout task gets one ``COMPLETED`` frame a flush, its stretches as
    ``first, count`` pairs, joined where one frame's ends as another's begins, and no
    list of roots (acker.md, "Frames"; performance-log.md, "Issue 17, tenth pass")."""
    topo = feeder_into("stretching-acker", ("count", Identity))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        executor, sent = completing_acker(cluster)
        bits, acker, part = cluster.plan.root_bits(), executor.task, new_id()
        a, b = RootIds(1, bits).run_start(), RootIds(2, bits).run_start()
        runs = [range(a, a + 40), range(a + 50, a + 60), range(b, b + 30)]
        roots = [r for run in runs for r in run]
        rng = random.Random(17)
        rng.shuffle(roots)
        executor.on_frame(*acks_frame(acker, 9, [(r, part) for r in roots]))
        assert sent == []  # every tree still waits on the other counter's part
        first = {*range(a, a + 20), *runs[2]}  # the other counter's first frame's trees
        executor.drains = True  # the outcomes go once the drain ends
        for frame in ([r for r in roots if r in first], [r for r in roots if r not in first]):
            executor.on_frame(*acks_frame(acker, 9, [(r, r ^ part) for r in frame]))
        executor.drained()
        assert sorted((h.kind, h.dest, body) for h, body in sent) == [
            (wire.COMPLETED, 1, [a, 40, a + 50, 10, []]),
            (wire.COMPLETED, 2, [b, 30, []])]
        assert executor.report()["acked"] == 80 and acker_pending(cluster) == 0


def test_an_ackers_stretches_settle_at_the_spout_exactly_the_trees_it_completed():
    """Seeded cases: runs and single roots of two spout tasks, one counter's part of every
    tree, then the other's completing acks in shuffled frames of random sizes, with gaps
    (trees never completed), one-tuple trees acked twice (completed twice by the
    ledger) and drains of random lengths; each spout task's tracker, fed the acker's
    ``COMPLETED`` frames as a spout feeds it, acks every completed tree's msg_id exactly
    once, counts the second completions stale and still holds exactly the rest."""
    topo = feeder_into("stretch-model", ("count", Identity))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        executor, sent = completing_acker(cluster)
        acker, bits = executor.task, cluster.plan.root_bits()
        for seed in range(40):
            rng = random.Random(seed)
            trackers, msg_ids, part = {}, {}, new_id()
            for task in (1, 2):
                trackers[task] = t = SpoutTracker(TIMEOUT, now=0.0)
                ids, first = RootIds(task, bits), RootIds(task, bits).run_start()
                for _ in range(rng.randint(1, 8)):
                    run = range(first, first + rng.randint(1, 90))
                    t.add_run(first, [("m", r) for r in run], [0.0] * len(run))
                    msg_ids.update((r, ("m", r)) for r in run)
                    first = run.stop + rng.choice([0, 0, 5])
                    if rng.random() < 0.3:  # a root emitted on its own
                        root = ids.new()
                        t.emitted(root, ("m", root), 0.0)
                        msg_ids[root] = ("m", root)
            roots = list(msg_ids)
            rng.shuffle(roots)
            single = set(rng.sample(roots, rng.randint(0, 4)))  # one-tuple trees
            done = [r for r in roots if r in single or rng.random() < 0.9]  # gaps
            twice = rng.sample(sorted(single), len(single) // 2)  # acked again, later
            executor.on_frame(*acks_frame(acker, 9, [(r, part) for r in roots
                                                     if r not in single]))
            order = sorted(done, key=lambda r: (r + rng.randrange(20)) if rng.random() < 0.2
                           else r)  # mostly in root order, as a counter's acks come
            order += twice
            executor.drains, sent[:] = True, []
            while order:
                cut = rng.randint(1, 150)
                frame, order = order[:cut], order[cut:]
                executor.on_frame(*acks_frame(acker, 9, [
                    (r, r if r in single else r ^ part) for r in frame]))
                if rng.random() < 0.5:
                    executor.drained()
            executor.drained()
            acked = {1: [], 2: []}
            for h, body in sent:  # (a frame of fewer than 4 acks settles the long way)
                t = trackers[h.dest]
                if h.kind == wire.ACKED:
                    acked[h.dest] += t.settle(body, 1.0)[0]
                    continue
                assert h.kind == wire.COMPLETED and len(body) % 2 == 1
                pairs = iter(body[:-1])
                acked[h.dest] += t.complete_stretches(zip(pairs, pairs), 1.0)
                acked[h.dest] += t.complete(body[-1], 1.0) if body[-1] else []
            for task, t in trackers.items():
                mine = [r for r in done if root_task(r, bits) == task]
                assert sorted(acked[task]) == sorted(msg_ids[r] for r in mine)
                assert t.stale == sum(root_task(r, bits) == task for r in twice)
                assert t.in_flight == len([r for r in roots if root_task(r, bits) == task]) \
                    - len(mine)
            executor.ledger = AckLedger(TIMEOUT, task_bits=bits)  # the gaps' trees forgotten


def test_a_spouts_tracer_reads_an_ackers_stretches():
    """The traced roots a ``COMPLETED`` frame of several stretches names are done; the
    others still wait (runtime/engine/tracing_spout.py, ``on_completed``)."""
    tracer = Tracer("feed", 1, {}, lambda header, body: None, True, 0.0, TIMEOUT,
                    lambda: 0.0, spout=True)
    tracer.roots = {root: (root, 0.0) for root in (10, 21, 30, 41, 50)}
    tracer.on_completed([9, 3, 20, 2, 49, 1, [41]])
    assert sorted(tracer.roots) == [30, 50]
    assert [record[:3] for record in tracer.records] == [
        ("done", 10, "acked"), ("done", 21, "acked"), ("done", 41, "acked")]
    tracer.on_completed([45, 6, []])  # one stretch (a bolt's leaves: the usual frame)
    assert sorted(tracer.roots) == [30]
    tracer.on_completed([0, 0, []])  # an acker's frame of no stretch
    assert sorted(tracer.roots) == [30]


def test_a_big_clock_jump_times_out_at_once():
    topo = feeder_into("jump", ("hold", Holder))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        cluster.advance(9)
        assert feed.failed == []
        cluster.advance(12)
        assert feed.failed == [1] and feed.acked == []


def test_reset_timeout_keeps_a_held_tuple_alive_past_twice_the_timeout():
    """Storm's test-reset-timeout: a bolt holds the tuple and calls reset_timeout on it
    every 2 s (on ticks) for 25 s, then acks it: the root is acked, never failed."""
    topo = Topology("reset")
    topo.spout("feed", Feeder(["num"]))
    topo.bolt("hold", Holder, tick_freq_secs=2).shuffle_grouping("feed")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        hold.resetting = True
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        advance_by_steps(cluster, 2.5 * TIMEOUT)
        assert hold.resets >= 10 and len(hold.held) == 1
        assert (feed.acked, feed.failed) == ([], []), "reset_timeout did not hold the root"
        hold.release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([1], [])
        spout = stat(cluster, "feed")
        assert (spout.acked, spout.failed, spout.timed_out) == (1, 0, 0)
        assert spout.complete_latency_ms["count"] == 1
        assert spout.complete_latency_ms["p50"] == pytest.approx(2.5 * TIMEOUT * 1000, rel=0.1)
        assert acker_pending(cluster) == 0  # the renewed root's ack went to the acker too
        no_crash(cluster)


def test_without_reset_timeout_the_same_held_tuple_fails():
    topo = Topology("no-reset")
    topo.spout("feed", Feeder(["num"]))
    topo.bolt("hold", Holder, tick_freq_secs=2).shuffle_grouping("feed")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        advance_by_steps(cluster, 2.5 * TIMEOUT)
        hold.release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([], [1])


# -- explicit fail ---------------------------------------------------------------------------

@pytest.mark.parametrize("fail_at", ["r", "r.1", "r.2.1", "r.0.0.2"])
def test_an_explicit_fail_anywhere_in_the_tree_fails_the_root_exactly_once(fail_at):
    """A tree of 1 -> 3 -> 6 -> 18 tuples; one node anywhere fails, every other one acks."""
    topo = Topology("fail")
    topo.spout("feed", Feeder(["path"]))
    topo.bolt("a", PathNode(3, fail_at)).shuffle_grouping("feed")
    topo.bolt("b", PathNode(2, fail_at)).shuffle_grouping("a")
    topo.bolt("c", PathNode(3, fail_at)).shuffle_grouping("b")
    topo.bolt("leaf", PathNode(0, fail_at)).shuffle_grouping("c")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        feed.feed(["r"], msg_id="root")
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([], ["root"])
        assert stat(cluster, "leaf").executed == 18  # the rest of the tree still ran
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert (feed.acked, feed.failed) == ([], ["root"])
        spout = stat(cluster, "feed")
        assert (spout.failed, spout.timed_out, spout.pending) == (1, 0, 0)
        no_crash(cluster)


def test_every_tuple_of_a_tree_failing_still_fails_the_root_once():
    topo = feeder_into("fail-all", ("split", Branching(5)), ("fail", FailAll))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        for i in range(3):
            feed.feed([i], msg_id=i)
        cluster.run_until_idle()
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert feed.acked == [] and sorted(feed.failed) == [0, 1, 2]


def node_fate(path: str, depth_left: int) -> tuple[int, str]:
    """How many children the tree node ``path`` has, and what its bolt does with it:
    "ack" (most), "fail", or "drop" (neither: the task loses it). Deterministic."""
    rng = random.Random(path)
    children = rng.choice([0, 1, 2, 3]) if depth_left else 0
    return children, rng.choices(["ack", "fail", "drop"], weights=[92, 3, 5])[0]


def expected_outcome(path: str, depth_left: int) -> str:
    """"fail" if a node of the tree fails, else "timeout" if one is dropped, else "ack"."""
    actions = set(tree_actions(path, depth_left))
    return "fail" if "fail" in actions else "timeout" if "drop" in actions else "ack"


def tree_actions(path: str, depth_left: int):
    children, action = node_fate(path, depth_left)
    yield action
    for i in range(children):
        yield from tree_actions(f"{path}.{i}", depth_left - 1)


class RandomNode(Bolt):
    outputs = ["path"]

    def __init__(self, depth_left: int) -> None:
        self.depth_left = depth_left

    def process(self, tup):
        children, action = node_fate(tup["path"], self.depth_left)
        for i in range(children):
            self.emit([f"{tup['path']}.{i}"], anchors=[tup])
        if action != "drop":
            (self.ack if action == "ack" else self.fail)(tup)


def test_random_trees_are_acked_exactly_when_complete_and_failed_exactly_once():
    """600 random trees of up to 1 + 3 + 9 + 27 tuples over several tasks and ackers:
    a root is acked exactly when every node acked, failed at once when a node failed,
    failed only after the timeout when a node was lost; never both, never twice."""
    trees = [f"t{i}" for i in range(600)]
    depth = 3
    expected = {t: expected_outcome(t, depth) for t in trees}
    assert set(Counter(expected.values())) == {"ack", "fail", "timeout"}  # a real mix
    topo = Topology("random-trees")
    topo.spout("feed", Feeder(["path"]), parallelism=2)
    upstream = "feed"
    for level in range(depth + 1):
        topo.bolt(f"n{level}", RandomNode(depth - level), parallelism=2).shuffle_grouping(
            upstream)
        upstream = f"n{level}"
    # target_latency=None: no latency bound, whose limit the lost trees would fill while
    # the fake clock stands still
    with InMemoryCluster(topo, ackers=3, message_timeout=TIMEOUT,
                         target_latency=None) as cluster:
        feeders = [cluster.user_object(t) for t in tasks(cluster, "feed")]
        for i, tree in enumerate(trees):
            feeders[i % 2].feed([tree], msg_id=tree)
        cluster.run_until_idle()

        def outcomes():
            acked = [m for f in feeders for m in f.acked]
            failed = [m for f in feeders for m in f.failed]
            return acked, failed

        acked, failed = outcomes()
        assert sorted(acked) == sorted(t for t, o in expected.items() if o == "ack")
        assert sorted(failed) == sorted(t for t, o in expected.items() if o == "fail")
        advance_by_steps(cluster, TIMEOUT - 1)
        assert outcomes() == (acked, failed)  # never early
        advance_by_steps(cluster, TIMEOUT)
        acked2, failed2 = outcomes()
        assert acked2 == acked
        assert sorted(failed2) == sorted(t for t, o in expected.items() if o != "ack")
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert outcomes() == (acked2, failed2)  # nothing twice
        assert acker_pending(cluster) == 0  # late acks of failed trees expired too
        assert sum(s.pending for s in cluster.statistics() if s.component == "feed") == 0
        no_crash(cluster)


# -- what is not tracked ---------------------------------------------------------------------

def test_unanchored_emits_do_not_keep_the_root_open():
    topo = feeder_into("unanchored", ("relay", Unanchored), ("fail", FailAll))
    topo.bolt("hold", Holder).shuffle_grouping("relay")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        feed.feed([1], msg_id=1)
        cluster.run_until_idle()
        assert len(obj(cluster, "hold").held) == 1 and stat(cluster, "fail").executed == 1
        assert (feed.acked, feed.failed) == ([1], [])
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert (feed.acked, feed.failed) == ([1], [])


def test_spout_emits_without_msg_id_are_not_tracked():
    topo = feeder_into("untracked", ("hold", Holder))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        for i in range(5):
            feed.feed([i])
        cluster.run_until_idle()
        assert len(hold.held) == 5 and all(t.ids is None for t in hold.held)
        assert stat(cluster, "feed").pending == 0 and acker_pending(cluster) == 0
        assert stat(cluster, "__acker").executed == 0  # not one message to the acker
        advance_by_steps(cluster, 2 * TIMEOUT)
        hold.release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([], [])
        no_crash(cluster)


def test_with_no_ackers_a_spout_is_acked_at_emit():
    topo = feeder_into("at-most-once", ("fail", FailAll))
    topo.bolt("hold", Holder).shuffle_grouping("feed")
    with InMemoryCluster(topo, ackers=0, message_timeout=TIMEOUT) as cluster:
        assert tasks(cluster, "feed") and "__acker" not in cluster.plan.component_tasks()
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        for i in range(4):
            feed.feed([i], msg_id=i)
        cluster.run_until_idle()
        assert feed.acked == [0, 1, 2, 3] and feed.failed == []
        assert all(t.ids is None for t in hold.held)
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert feed.acked == [0, 1, 2, 3] and feed.failed == []
        assert stat(cluster, "feed").acked == 4
        no_crash(cluster)


# -- BasicBolt -------------------------------------------------------------------------------

def test_basic_bolt_anchors_and_acks_automatically():
    topo = Topology("basic")
    topo.spout("feed", Feeder(["sentence"]))
    topo.bolt("split", Splitter).shuffle_grouping("feed")
    topo.bolt("hold", Holder).shuffle_grouping("split")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        feed.feed(["the quick fox"], msg_id="s")
        cluster.run_until_idle()
        assert [t["word"] for t in hold.held] == ["the", "quick", "fox"]
        assert all(t.ids for t in hold.held)  # anchored: they carry the root
        assert feed.acked == [] and stat(cluster, "split").acked == 1
        hold.release(2)
        cluster.run_until_idle()
        assert feed.acked == []
        hold.release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == (["s"], [])
        no_crash(cluster)


def test_basic_bolt_failed_exception_fails_the_root():
    topo = Topology("basic-fail")
    topo.spout("feed", Feeder(["sentence"]))
    topo.bolt("split", Splitter).shuffle_grouping("feed")
    topo.bolt("sink", ListSink).shuffle_grouping("split")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed = obj(cluster, "feed")
        feed.feed(["all good"], msg_id="good")
        feed.feed(["a bad one"], msg_id="bad")
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == (["good"], ["bad"])
        split = stat(cluster, "split")
        assert (split.executed, split.acked, split.failed) == (2, 1, 1)
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert (feed.acked, feed.failed) == (["good"], ["bad"])
        no_crash(cluster)  # FailedException is not a crash


# -- where ack and fail run, and replay ------------------------------------------------------

class FailOdd(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        (self.fail if tup["n"] % 2 else self.ack)(tup)


def test_ack_and_fail_run_on_the_spout_task_that_emitted_the_tuple():
    n = 30
    topo = Topology("own-task")
    topo.spout("nums", ListSpout([[i] for i in range(n)], fields=["n"]), parallelism=3)
    topo.bolt("judge", FailOdd, parallelism=2).shuffle_grouping("nums")
    with InMemoryCluster(topo, ackers=2) as cluster:
        cluster.run_until_idle()
        spouts = {t: cluster.user_object(t) for t in tasks(cluster, "nums")}
        by_task = {s.task: s for s in cluster.statistics() if s.component == "nums"}
    for index, (task, spout) in enumerate(sorted(spouts.items())):
        mine = set(range(index, n, 3))
        assert spout.acked == {i for i in mine if i % 2 == 0}
        assert sorted(spout.failed) == sorted(i for i in mine if i % 2)
        assert (by_task[task].acked, by_task[task].failed) == (
            len(spout.acked), len(spout.failed))


def test_a_replaying_list_spout_replays_failures_until_all_are_acked():
    n = 20
    topo = Topology("replay")
    topo.spout("nums", ListSpout([[i] for i in range(n)], fields=["n"], replay=True))
    topo.bolt("flaky", FailFirstTwo).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("flaky")
    with InMemoryCluster(topo, ackers=1) as cluster:
        cluster.run_until_idle()
        spout = obj(cluster, "nums")
        assert spout.acked == set(range(n))
        assert Counter(spout.failed) == {i: 2 for i in range(n)}
        assert sorted(v for (v,) in cluster.sink("sink")) == list(range(n))
        assert stat(cluster, "nums").pending == 0


def test_a_replaying_list_spout_replays_timeouts_until_all_are_acked():
    n = 10
    topo = Topology("replay-timeouts")
    topo.spout("nums", ListSpout([[i] for i in range(n)], fields=["n"], replay=True))
    topo.bolt("lossy", DropFirst).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("lossy")
    # target_latency=None: no latency bound, whose limit the lost tuples would fill while
    # the fake clock stands still
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT,
                         target_latency=None) as cluster:
        cluster.run_until_idle()
        spout = obj(cluster, "nums")
        assert spout.acked == set() and spout.failed == []
        for _ in range(4 * int(TIMEOUT)):
            cluster.advance(0.5)
            cluster.run_until_idle()
        assert spout.acked == set(range(n)) and sorted(spout.failed) == list(range(n))
        assert sorted(v for (v,) in cluster.sink("sink")) == list(range(n))
        assert stat(cluster, "nums").timed_out == n


def test_a_tuple_lost_with_a_crashed_task_times_out_and_is_replayed():
    """Seed 001's first failure case: the task died, so its tuples' roots time out."""
    n = 8
    topo = Topology("crash")
    topo.spout("nums", ListSpout([[i] for i in range(n)], fields=["n"], replay=True))
    topo.bolt("crashy", CrashOnce).shuffle_grouping("nums")
    topo.bolt("sink", ListSink).shuffle_grouping("crashy")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        cluster.run_until_idle()
        spout = obj(cluster, "nums")
        assert cluster.restarts[tasks(cluster, "crashy")[0]] == 1
        first = set(spout.acked)
        assert 3 not in first and spout.failed == []  # lost, not failed: it waits
        advance_by_steps(cluster, 9)
        assert spout.failed == []
        for _ in range(4 * int(TIMEOUT)):
            cluster.advance(0.5)
            cluster.run_until_idle()
        assert spout.acked == set(range(n)) and 3 in spout.failed
        assert sorted(spout.failed) == sorted(set(range(n)) - first)  # each once
        assert sorted(set(v for (v,) in cluster.sink("sink"))) == list(range(n))


# -- max spout pending -----------------------------------------------------------------------

def held_numbers(total: int | None, **options) -> InMemoryCluster:
    topo = Topology("pending")
    topo.spout("nums", Numbers(total))
    topo.bolt("hold", Holder).shuffle_grouping("nums")
    return InMemoryCluster(topo, ackers=1, **options)


def test_next_tuple_is_not_called_while_max_spout_pending_tuples_are_in_flight():
    with held_numbers(20, max_spout_pending=5) as cluster:
        spout, hold = obj(cluster, "nums"), obj(cluster, "hold")
        cluster.run_until_idle()
        assert (spout.calls, spout.n, len(hold.held)) == (5, 5, 5)
        for _ in range(10):
            cluster.step()
        assert spout.calls == 5  # still full: not called once more
        s = stat(cluster, "nums")
        assert (s.pending, s.max_spout_pending) == (5, 5)
        hold.release(2)
        cluster.run_until_idle()
        assert (spout.calls, spout.n, len(hold.held)) == (7, 7, 5)
        assert stat(cluster, "nums").pending == 5
        while spout.n < 20:
            hold.release()
            cluster.run_until_idle()
            assert stat(cluster, "nums").pending <= 5
        hold.release()
        cluster.run_until_idle()
        assert sorted(spout.acked) == list(range(20)) and spout.failed == []
        assert stat(cluster, "nums").pending == 0


def test_timeouts_free_max_spout_pending_slots_too():
    with held_numbers(None, max_spout_pending=3, message_timeout=TIMEOUT) as cluster:
        spout = obj(cluster, "nums")
        cluster.run_until_idle()
        assert spout.n == 3
        advance_by_steps(cluster, 2 * TIMEOUT)
        cluster.run_until_idle()
        assert sorted(spout.failed) == [0, 1, 2] and spout.n == 6


def test_a_spout_emitting_several_roots_a_call_is_called_only_under_its_limit():
    # Storm looks at max spout pending before each nextTuple; counting calls instead let
    # a LogSpout of batch_size 50 keep 1,000 roots in flight under a limit of 200 (the
    # slow-consumer chaos scenario, whose blocks of 500 then timed out and were replayed)
    topo = Topology("pending")
    topo.spout("nums", Batches(per_call=3, total=30))
    topo.bolt("hold", Holder).shuffle_grouping("nums")
    with InMemoryCluster(topo, ackers=1, max_spout_pending=5) as cluster:
        spout, hold = obj(cluster, "nums"), obj(cluster, "hold")
        cluster.run_until_idle()
        assert (spout.calls, spout.n) == (2, 6)  # 0 then 3 in flight at the calls: 6 > 5
        for _ in range(10):
            cluster.step()
        assert spout.calls == 2 and stat(cluster, "nums").pending == 6
        hold.release(2)
        cluster.run_until_idle()
        assert (spout.calls, spout.n) == (3, 9)  # one call at 4 in flight, then held
        while spout.n < 30:
            hold.release(3)
            cluster.run_until_idle()
            assert stat(cluster, "nums").pending <= 5 + 3 - 1
        hold.release()
        cluster.run_until_idle()
        assert max(spout.in_flight) == 4 and sorted(spout.acked) == list(range(30))


class IdleThenBatches(Batches):
    """Batches whose first ``idle`` calls emit nothing, as a LogSpout on an empty log."""

    def __init__(self, per_call: int, idle: int, total: int | None = None) -> None:
        super().__init__(per_call, total)
        self.idle = idle

    def next_tuple(self):
        if self.idle:
            self.idle -= 1
            return
        super().next_tuple()


@pytest.mark.parametrize("idle", [0, 5_000])
def test_a_batching_spout_that_starts_idle_is_held_under_its_limit_at_its_first_batch(idle):
    # calls that emitted nothing used to double the calls between two looks at the limit,
    # up to 1,024: the first busy turn then kept 4,800 roots in flight under 200
    topo = Topology("pending")
    topo.spout("nums", IdleThenBatches(per_call=50, idle=idle, total=100_000))
    topo.bolt("hold", Holder).shuffle_grouping("nums")
    with InMemoryCluster(topo, ackers=1, max_spout_pending=200) as cluster:
        spout, most = obj(cluster, "nums"), 0
        while spout.n < 200:
            cluster.step()
            most = max(most, stat(cluster, "nums").pending)
        for _ in range(20):
            cluster.step()
            most = max(most, stat(cluster, "nums").pending)
        assert spout.idle == 0 and most == spout.n <= 200 + 50 - 1
        assert max(spout.in_flight) < 200


def tuning_period(cluster, interval):
    """Five steps of the spout with every held tuple acked, then one tuning interval."""
    hold = obj(cluster, "hold")
    for _ in range(5):
        cluster.step()
        hold.release()
        cluster.deliver()
    cluster.advance(interval)


def test_max_spout_pending_auto_runs_the_tuner():
    interval = 1.0
    with held_numbers(None, max_spout_pending="auto", tune_interval=interval) as cluster:
        start = stat(cluster, "nums")
        assert (start.max_spout_pending, start.tuner_turns) == (1000, 0)
        seen = []
        for _ in range(5):
            tuning_period(cluster, interval)
            s = stat(cluster, "nums")
            seen.append((s.tuner_turns, s.tuner_action, s.max_spout_pending))
    assert seen[0] == (0, None, 1000)  # the first turn only takes the baseline
    assert seen[1] == (1, "increase", 1250)
    assert [turns for turns, _, _ in seen] == [0, 1, 2, 3, 4]
    assert all(action in ("increase", "decrease", "no_change") for _, action, _ in seen[1:])


def test_each_tuner_turn_is_reported_as_data():
    """The statistics carry the last turn: both periods' progress (acks), the similarity
    test, the move, the values, and the total progress a what-if replay reads."""
    interval = 1.0
    with held_numbers(None, max_spout_pending="auto", tune_interval=interval) as cluster:
        reported = []
        assert stat(cluster, "nums").tuner_turn is None
        for _ in range(4):
            tuning_period(cluster, interval)
            reported.append(stat(cluster, "nums").tuner_turn)
    assert reported[0] is None  # the baseline reading is no turn
    first, second, third = reported[1:]
    assert (first["previous"], first["similar"], first["action"], first["before"],
            first["after"]) == (None, None, "increase", 1000, 1250)
    assert second["previous"] == first["progress"] and third["previous"] == second["progress"]
    assert second["total"] - first["total"] == second["progress"] > 0
    for turn in (second, third):
        similar = abs(turn["progress"] - turn["previous"]) <= turn["band"]
        assert turn["similar"] == similar and turn["band"] == 0.05 * turn["previous"]
        assert turn["move"] in ("increase", "decrease", "no_change", "restore")


# -- acks that must change nothing -----------------------------------------------------------

def test_a_double_ack_and_an_ack_of_an_untracked_tuple_change_nothing():
    topo = feeder_into("double-ack", ("double", DoubleAcker), ("hold", Holder))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        feed, hold = obj(cluster, "feed"), obj(cluster, "hold")
        for i in range(3):
            feed.feed([i], msg_id=i)
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([], [])  # the held children keep them open
        hold.release()
        cluster.run_until_idle()
        assert (feed.acked, feed.failed) == ([0, 1, 2], [])
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert (feed.acked, feed.failed) == ([0, 1, 2], [])
        feed.feed([3], msg_id=3)  # and the topology goes on
        cluster.run_until_idle()
        hold.release()
        cluster.run_until_idle()
        assert feed.acked == [0, 1, 2, 3]
        no_crash(cluster)


# -- what travels: self-initialising roots -----------------------------------------------------

def acker_bodies(cluster: InMemoryCluster, sent: list) -> list:
    """The decoded bodies of the ACKS frames sent while the test runs (kept in ``sent``)."""
    return [wire.decode_batch(body) for header, body in sent
            if wire.parse_header(header).kind == wire.ACKS]


class _Tee(deque):
    """The cluster's frame queue, keeping a copy of every frame put on it in ``sent``."""

    def __init__(self, frames, sent: list, keep=lambda frame: frame) -> None:
        super().__init__(frames)
        self.sent, self.keep = sent, keep

    def append(self, frame) -> None:
        self.sent.append(self.keep(frame))
        super().append(frame)


def recording_frames(cluster: InMemoryCluster) -> list:
    sent: list = []
    cluster.frames = _Tee(cluster.frames, sent)  # every executor sends through it
    return sent


def completions_from_bolts(cluster: InMemoryCluster, sent: list) -> list[tuple[int, int]]:
    """``(spout task, root)`` of every completion a bolt sent straight to a spout (an
    acker sends the trees a batch of acks completed as COMPLETED frames too)."""
    found, ackers = [], set(tasks(cluster, "__acker"))
    for header, body in sent:
        h = wire.parse_header(header)
        if h.kind == wire.COMPLETED and h.src not in ackers:
            first, count, others = wire.decode_batch(body)
            found += [(h.dest, root) for root in [*range(first, first + count), *others]]
    return found


@pytest.mark.parametrize(("chain", "leaves_sent", "acks_sent"), [
    (("count",), 5, 0),  # "count" anchors nothing (no subscriber): each tree is one leaf
    (("count", "sink"), 0, 10),  # "count" anchors one child each: two acks per tree
])
def test_a_spout_tuple_sent_to_one_task_needs_no_init(chain, leaves_sent, acks_sent):
    """A one-tuple tree completes without the acker: the bolt tells the spout task written
    in the root. Bigger trees go through the acker, which needs no init either."""
    topo = feeder_into("leaves", *[(name, Identity) for name in chain])
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = recording_frames(cluster)
        feed = obj(cluster, "feed")
        for n in range(5):
            feed.feed([n], msg_id=n)
        cluster.run_until_idle()
        assert sorted(feed.acked) == [0, 1, 2, 3, 4] and feed.failed == []
        (spout_task,) = tasks(cluster, "feed")
        assert not [h for h, _ in sent if wire.parse_header(h).kind == wire.ACKS
                    and wire.parse_header(h).src == spout_task]  # no init from the spout
        leaves = completions_from_bolts(cluster, sent)
        messages = [m for body in acker_bodies(cluster, sent) for m in body]
        assert (len(leaves), len(messages) // 3) == (leaves_sent, acks_sent)
        assert {task for task, _ in leaves} <= {spout_task}
        assert messages[0::3] == [wire.ACK_ACK] * acks_sent
        roots = [root for _, root in leaves] + messages[1::3]
        assert all(root >> 63 == 1 for root in roots)  # self-initialising
        acker = stat(cluster, "__acker")
        assert (acker.executed, acker.pending) == (acks_sent, 0)
        no_crash(cluster)


class HoldThenAckAll(Bolt):
    """Keeps its inputs and acks them all together on the tuple numbered ``last``."""

    outputs: list[str] = []

    def __init__(self, last: int) -> None:
        self.last = last

    def prepare(self, config, context):
        self.held: list[Tuple] = []

    def process(self, tup):
        self.held.append(tup)
        if tup.values[0] == self.last:
            for held in self.held:
                self.ack(held)
            self.held.clear()


def test_leaves_of_several_spout_tasks_go_each_to_its_own_task():
    topo = Topology("two-spouts")
    topo.spout("a", Feeder(["num"]))
    topo.spout("b", Feeder(["num"]))
    topo.bolt("count", HoldThenAckAll(last=99)).global_grouping("a").global_grouping("b")
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = recording_frames(cluster)
        a, b = obj(cluster, "a"), obj(cluster, "b")
        for n in range(3):
            a.feed([n], msg_id=f"a{n}")
            b.feed([n], msg_id=f"b{n}")
        cluster.run_until_idle()
        assert (a.acked, b.acked) == ([], [])  # held
        a.feed([99], msg_id="a99")
        cluster.run_until_idle()
        assert sorted(a.acked) == ["a0", "a1", "a2", "a99"]
        assert sorted(b.acked) == ["b0", "b1", "b2"]
        leaves = completions_from_bolts(cluster, sent)
        (ta,), (tb,) = tasks(cluster, "a"), tasks(cluster, "b")
        assert sorted(task for task, _ in leaves) == [ta] * 4 + [tb] * 3
        assert stat(cluster, "__acker").executed == 0
        no_crash(cluster)


def test_an_int_id_that_is_no_self_initialising_root_is_left_to_the_acker():
    """A TRACKED frame may only carry an int id for a self-initialising root; one that is
    not (a foreign or broken sender) is not taken for a spout task: the acker decides,
    and the root it never saw an init for expires there quietly."""
    topo = feeder_into("foreign", ("count", AckEveryOther))
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        sent = recording_frames(cluster)
        (spout,), (bolt,) = tasks(cluster, "feed"), tasks(cluster, "count")
        stream = cluster.plan.stream_ids()[("feed", "default")]
        cluster.executors[bolt].on_frame(wire.data_header(wire.TRACKED, stream, bolt, spout),
                                         wire.pack([[7], 12345]))
        cluster.run_until_idle()
        assert completions_from_bolts(cluster, sent) == []
        assert [m for body in acker_bodies(cluster, sent) for m in body] == [
            wire.ACK_ACK, 12345, 12345]
        assert acker_pending(cluster) == 1
        advance_by_steps(cluster, 2 * TIMEOUT)
        assert acker_pending(cluster) == 0 and obj(cluster, "feed").failed == []
        no_crash(cluster)


def test_a_spout_tuple_sent_to_two_tasks_gets_a_plain_root_and_an_init():
    topo = Topology("two-copies")
    topo.spout("feed", Feeder(["num"]))
    topo.bolt("a", Identity).shuffle_grouping("feed")
    topo.bolt("b", Identity).shuffle_grouping("feed")
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = recording_frames(cluster)
        feed = obj(cluster, "feed")
        feed.feed([1], msg_id="x")
        cluster.run_until_idle()
        assert feed.acked == ["x"]
        inits = [m for messages in acker_bodies(cluster, sent)
                 for m in zip(*[iter(messages)] * 3) if m[0] == wire.ACK_INIT]
        assert len(inits) == 1 and inits[0][1] >> 63 == 0
        no_crash(cluster)


@pytest.mark.parametrize("body", [[1, 2], [[1], 2], {"a": 1}, 7, [[], [], [], []]])
def test_a_malformed_acks_body_is_refused_as_a_wire_error(body):
    topo = feeder_into("bad-acks", ("count", Identity))
    with InMemoryCluster(topo, ackers=1) as cluster:
        (acker,) = tasks(cluster, "__acker")
        (bolt,) = tasks(cluster, "count")
        with pytest.raises(wire.WireError):
            cluster.executors[acker].on_frame(wire.data_header(wire.ACKS, 0, acker, bolt),
                                              wire.pack(body))


@pytest.mark.parametrize("body", [[1], [1, 0, 2], [[1, 0]], [5, 9], [5, "ok"], [[5], 0]])
def test_a_malformed_acked_body_is_refused_as_a_wire_error(body):
    topo = feeder_into("bad-acked", ("count", Identity))
    with InMemoryCluster(topo, ackers=1) as cluster:
        (spout,) = tasks(cluster, "feed")
        (acker,) = tasks(cluster, "__acker")
        with pytest.raises(wire.WireError):
            cluster.executors[spout].on_frame(wire.data_header(wire.ACKED, 0, spout, acker),
                                              wire.pack(body))


@pytest.mark.parametrize("body", [["x"], [[1]], [1.5], {"a": 1}, [1, 2], [1 << 63, -1, []],
                                  [1 << 63, 2, ["x"]], [1 << 63, 2, 3], [1.0, 2, []]])
def test_a_malformed_completed_body_is_refused_as_a_wire_error(body):
    topo = feeder_into("bad-completed", ("count", Identity))
    with InMemoryCluster(topo, ackers=1) as cluster:
        (spout,), (bolt,) = tasks(cluster, "feed"), tasks(cluster, "count")
        with pytest.raises(wire.WireError):
            cluster.executors[spout].on_frame(wire.data_header(wire.COMPLETED, 0, spout, bolt),
                                              wire.pack(body))
        with pytest.raises(wire.WireError):  # and a bolt takes none at all
            cluster.executors[bolt].on_frame(wire.data_header(wire.COMPLETED, 0, bolt, bolt),
                                             wire.pack([1 << 63, 1, []]))


@pytest.mark.parametrize("body", [
    [12345, [[1]]],  # no self-initialising first root
    [1 << 63, "x"],
    [[1 << 63], [[1]]],
    [(1 << 64) - 1, [[1], [2]]],  # the second root would not fit 64 bits
    [1 << 63, [[1]], 3],
])
def test_a_malformed_run_is_refused_as_a_wire_error(body):
    topo = feeder_into("bad-run", ("count", Identity))
    with InMemoryCluster(topo, ackers=1) as cluster:
        (spout,), (bolt,) = tasks(cluster, "feed"), tasks(cluster, "count")
        stream = cluster.plan.stream_ids()[("feed", "default")]
        with pytest.raises(wire.WireError):
            cluster.executors[bolt].on_frame(wire.data_header(wire.RUN, stream, bolt, spout),
                                             wire.pack(body))
        assert stat(cluster, "count").executed == 0


class Burst(Spout):
    """Emits ``n`` tracked tuples in one ``next_tuple`` call; every ``slow_every``-th goes
    by a stream name equal to "default" but built at run time, which takes the checked
    way of ``emit`` rather than its fast path."""

    outputs = ["n"]

    def __init__(self, n: int, slow_every: int = 0) -> None:
        self.n, self.slow_every = n, slow_every

    def open(self, config, context):
        self.done = False
        self.acked: list = []
        self.failed: list = []

    def next_tuple(self):
        if self.done:
            return
        self.done = True
        default = "".join(["def", "ault"])
        for i in range(self.n):
            slow = self.slow_every and i % self.slow_every == self.slow_every - 1
            self.emit([i], stream=default if slow else "default", msg_id=i)

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Order(Bolt):
    outputs: list[str] = []

    def prepare(self, config, context):
        self.seen: list = []

    def process(self, tup):
        self.seen.append(tup.values[0])
        self.ack(tup)


def burst_into_order(n: int, slow_every: int, **options):
    topo = Topology("burst")
    topo.spout("burst", Burst(n, slow_every))
    topo.bolt("order", Order).shuffle_grouping("burst")
    return InMemoryCluster(topo, ackers=1, **options)


def test_a_spouts_tracked_tuples_travel_as_runs_of_consecutive_roots():
    with burst_into_order(10, 0, batch_size=4) as cluster:
        sent = recording_frames(cluster)
        cluster.run_until_idle()
        spout = obj(cluster, "burst")
        assert sorted(spout.acked) == list(range(10)) and spout.failed == []
        runs = [wire.decode_batch(body) for header, body in sent
                if wire.parse_header(header).kind == wire.RUN]
        assert [len(values) for _, values in runs] == [4, 4, 2]  # batch_size per run
        assert [v for _, values in runs for v in values] == list(range(10))  # one field: bare
        firsts = [first for first, _ in runs]
        assert firsts[1] == firsts[0] + 4 and firsts[2] == firsts[1] + 4
        assert all(first >> 63 == 1 for first in firsts)
        completed = sorted(root for _, root in completions_from_bolts(cluster, sent))
        assert completed == list(range(firsts[0], firsts[0] + 10))
        assert not [h for h, _ in sent if wire.parse_header(h).kind == wire.TRACKED]
        assert stat(cluster, "burst").pending == 0
        no_crash(cluster)


@pytest.mark.parametrize("slow_every", [1, 2, 3])
def test_runs_and_checked_tracked_emits_keep_the_emit_order(slow_every):
    with burst_into_order(12, slow_every, batch_size=5) as cluster:
        sent = recording_frames(cluster)
        cluster.run_until_idle()
        assert obj(cluster, "order").seen == list(range(12))
        spout = obj(cluster, "burst")
        assert sorted(spout.acked) == list(range(12)) and spout.failed == []
        kinds = {wire.parse_header(h).kind for h, _ in sent}
        assert wire.TRACKED in kinds and (wire.RUN in kinds) == (slow_every > 1)
        no_crash(cluster)


def test_a_run_holding_a_value_msgpack_cannot_carry_fails_only_that_tuple():
    class Bad(Spout):
        outputs = ["v"]

        def open(self, config, context):
            self.done, self.acked, self.failed = False, [], []

        def next_tuple(self):
            if not self.done:
                self.done = True
                for i in range(5):
                    self.emit([object() if i == 2 else i], msg_id=i)

        def ack(self, msg_id):
            self.acked.append(msg_id)

        def fail(self, msg_id):
            self.failed.append(msg_id)

    topo = Topology("bad-run-value")
    topo.spout("bad", Bad())
    topo.bolt("order", Order).shuffle_grouping("bad")
    with InMemoryCluster(topo, ackers=1) as cluster:
        cluster.run_until_idle()
        spout = obj(cluster, "bad")
        assert (sorted(spout.acked), spout.failed) == ([0, 1, 3, 4], [2])
        assert obj(cluster, "order").seen == [0, 1, 3, 4]
        assert stat(cluster, "bad").dropped == 1


class ReplayInFail(Numbers):
    """``Numbers`` that emits a failed tuple again from ``fail`` itself (not from a later
    ``next_tuple``)."""

    def fail(self, msg_id):
        super().fail(msg_id)
        self.emit([msg_id], msg_id=msg_id)


def test_a_tuple_emitted_from_fail_is_timed_from_that_emit():
    """The emit time of a run's tuple is read before each chunk of next_tuple calls and
    before each call into the spout: a replay emitted by ``fail`` long after the last
    chunk is timed from the replay, not from that chunk."""
    topo = Topology("replay-in-fail")
    topo.spout("feed", ReplayInFail(1))
    topo.bolt("drop", DropFirst).shuffle_grouping("feed")
    with InMemoryCluster(topo, ackers=1, message_timeout=TIMEOUT) as cluster:
        cluster.run_until_idle()
        feed = obj(cluster, "feed")
        while not feed.failed:
            cluster.advance(0.5)
        assert cluster.clock() >= TIMEOUT
        cluster.run_until_idle()  # the replay, emitted by fail, is acked with no delay
        assert (feed.acked, feed.failed) == ([0], [0])
        latency = stat(cluster, "feed").complete_latency_ms
        assert latency["count"] == 1 and latency["p99"] < 1.0  # ms: not the timeout
        no_crash(cluster)


def test_a_spout_sending_to_several_tasks_keeps_a_run_per_task():
    topo = Topology("runs-per-task")
    topo.spout("words", Burst(60))
    topo.bolt("count", Order, parallelism=3).fields_grouping("words", ["n"])
    with InMemoryCluster(topo, ackers=1, batch_size=8) as cluster:
        sent = recording_frames(cluster)
        cluster.run_until_idle()
        spout = obj(cluster, "words")
        assert sorted(spout.acked) == list(range(60)) and not spout.failed
        runs: dict[int, list] = {}
        for header, body in sent:
            h = wire.parse_header(header)
            if h.kind == wire.RUN:
                runs.setdefault(h.dest, []).append(wire.decode_batch(body))
        assert set(runs) == set(tasks(cluster, "count"))
        for task, frames in runs.items():  # consecutive roots per task, across its frames
            roots = [first + i for first, values in frames for i in range(len(values))]
            assert roots == list(range(roots[0], roots[0] + len(roots)))
            numbers = [n for _, batch in frames for n in batch]  # one field: bare values
            assert numbers == cluster.user_object(task).seen  # in emit order
        starts = sorted(frames[0][0] for frames in runs.values())  # far apart: own ranges
        assert all(b - a > 60 for a, b in zip(starts, starts[1:]))
        completed = completions_from_bolts(cluster, sent)
        assert len(completed) == 60 and not [h for h, _ in sent
                                             if wire.parse_header(h).kind == wire.TRACKED]
        assert stat(cluster, "words").pending == 0 and acker_pending(cluster) == 0
        no_crash(cluster)
