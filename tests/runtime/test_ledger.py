"""The acker ledger (seeds 000 §2.3 and 001) and Storm's RotatingMap.

The tests drive the ledger with the messages Storm's collectors would send it: a small
model of those collectors (``Collectors``) gives every anchor its own random edge id,
exactly as Storm's ``BoltOutputCollectorImpl`` does, so the XOR values are the real ones.
Storm's own acking tests (``core_test.clj``: test-acking, test-ack-branching,
test-acking-self-anchor, test-timeout, test-reset-timeout) are ported at this level, then
a property test runs 10,000 random tuple DAGs delivered in shuffled order.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from functools import reduce
from operator import xor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.acking._ids import RootIds, new_id, root_task
from runtime.acking._ledger import (
    ACK,
    FAIL,
    INIT,
    RESET,
    AckLedger,
    Completed,
    Failed,
    LedgerStatistics,
    Renewed,
    _decisions,
)
from runtime.acking._rotating import RotatingMap

# --- a model of Storm's collectors -------------------------------------------------------


@dataclass(eq=False)
class Tup:
    """A tuple in flight: root id -> XOR of the edge ids it came in on, and its ack val."""

    roots: dict[int, int] = field(default_factory=dict)
    ack_val: int = 0  # XOR of the edge ids of the tuples anchored to this one


class Collectors:
    """Storm's spout and bolt output collectors, reduced to what they send the acker.

    Storm's spouts send an init for every root (``explicit_only``, the default: the
    ported Storm tests below use it). Without it, as tupleflow's spouts do, a spout tuple
    sent to exactly one task gets a self-initialising root (its edge id is the root id,
    and no init is sent); any other spout tuple gets a plain root and an init."""

    def __init__(self, seed: int = 0, explicit_only: bool = True) -> None:
        self.rng = random.Random(seed)
        self.messages: list[tuple] = []
        self.explicit_only = explicit_only
        self.self_init: set[int] = set()

    def new_id(self) -> int:
        return self.rng.getrandbits(63) or 1

    def spout_emit(self, task: int, consumers: int = 1) -> tuple[int, list[Tup]]:
        """A spout tuple sent to ``consumers`` tasks: a new root and one tuple each."""
        if consumers == 1 and not self.explicit_only:
            ids = RootIds(task)
            root = ids.prefix | (self.rng.getrandbits(ids.random_bits) or 1)
            self.self_init.add(root)
            return root, [Tup({root: root})]
        root = self.new_id()
        tuples = [Tup({root: self.new_id()}) for _ in range(consumers)]
        edges = [t.roots[root] for t in tuples]
        self.messages.append(("init", root, task, reduce(xor, edges, 0)))
        return root, tuples

    def emit(self, anchors: list[Tup]) -> Tup:
        """A bolt emits a tuple anchored to ``anchors``: one new edge id per anchor."""
        child = Tup()
        for anchor in anchors:
            edge = self.new_id()
            anchor.ack_val ^= edge
            for root in anchor.roots:
                child.roots[root] = child.roots.get(root, 0) ^ edge
        return child

    def ack(self, t: Tup) -> None:
        self.messages += [("ack", root, edges ^ t.ack_val) for root, edges in t.roots.items()]

    def fail(self, t: Tup) -> None:
        self.messages += [("fail", root) for root in t.roots]

    def ack_input(self, t: Tup, children: list[Tup]) -> None:
        """A bolt acks its input ``t`` once it emitted ``children`` anchored to it."""
        self.ack(t)

    def take(self) -> list[tuple]:
        """The messages sent since the last ``take``."""
        taken, self.messages = self.messages, []
        return taken


class Combining(Collectors):
    """tupleflow's bolts as the acker sees them (docs/internals/acker.md, "Acks
    combined" and "An ack folded into a child"): each of ``tasks`` bolt tasks XORs its
    acks per root until it flushes (at random), a combined value equal to a
    self-initialising root is its whole tree complete and goes to the spout, never to
    the acker (``leaves``), and a BasicBolt's input whose last child has its one root
    folds its ack into that child's. ``open`` counts each root's tuples not acked yet:
    a leaf found while one is open would be a completion called early."""

    def __init__(self, seed: int, tasks: int = 3) -> None:
        super().__init__(seed, explicit_only=False)
        self.buffers: list[dict[int, int]] = [{} for _ in range(tasks)]
        self.leaves: list[int] = []
        self.open: Counter = Counter()

    def spout_emit(self, task: int, consumers: int = 1) -> tuple[int, list[Tup]]:
        root, tuples = super().spout_emit(task, consumers)
        self.open[root] += len(tuples)
        return root, tuples

    def emit(self, anchors: list[Tup]) -> Tup:
        child = super().emit(anchors)
        self.open.update(child.roots.keys())
        return child

    def ack(self, t: Tup) -> None:
        task = self.rng.randrange(len(self.buffers))
        buffer = self.buffers[task]
        for root, edges in t.roots.items():
            buffer[root] = buffer.get(root, 0) ^ edges ^ t.ack_val
            self.open[root] -= 1
        if self.rng.random() < 0.3:
            self.flush(task)

    def ack_input(self, t: Tup, children: list[Tup]) -> None:
        last = children[-1] if children else None
        if (last is None or len(t.roots) != 1 or last.roots.keys() != t.roots.keys()
                or self.rng.random() < 0.3):
            return self.ack(t)
        ((root, edges),) = t.roots.items()
        last.roots[root] ^= edges ^ t.ack_val  # the child's ack carries the input's too
        self.open[root] -= 1

    def flush(self, task: int) -> None:
        for root, value in self.buffers[task].items():
            if value == root and root in self.self_init:
                assert self.open[root] == 0, "a tree called complete with a tuple open"
                self.leaves.append(root)
            else:
                self.messages.append(("ack", root, value))
        self.buffers[task].clear()

    def take(self) -> list[tuple]:
        for task in range(len(self.buffers)):
            self.flush(task)
        return super().take()


def deliver(ledger: AckLedger, message: tuple, now: float) -> list:
    """Hand one collector message to the ledger method of the same name."""
    kind, *args = message
    return getattr(ledger, kind)(*args, now=now)


def deliver_each(ledger: AckLedger, messages: list[tuple], now: float = 0.0) -> list[list]:
    """The decisions returned for each message, in order."""
    return [deliver(ledger, m, now) for m in messages]


def deliver_all(ledger: AckLedger, messages: list[tuple], now: float = 0.0) -> list:
    return [d for ds in deliver_each(ledger, messages, now) for d in ds]


# --- new_id ----------------------------------------------------------------------------------


def test_new_id_is_a_nonzero_63_bit_int_never_taken_for_a_self_initialising_root():
    ids = [new_id() for _ in range(10_000)]
    assert all(0 < i < 2**63 for i in ids)
    assert len(set(ids)) == len(ids)
    assert max(ids).bit_length() == 63
    assert {root_task(i) for i in ids} == {None}


@pytest.mark.parametrize(("task", "bits"), [(0, 1), (1, 1), (5, 3), (65535, 16), (9, 4)])
def test_self_initialising_roots_carry_their_spout_task(task, bits):
    ids = RootIds(task, bits)
    roots = [ids.new() for _ in range(2000)]
    assert len(set(roots)) == len(roots)
    assert all(r >> 63 == 1 and r < 2**64 for r in roots)
    assert {root_task(r, bits) for r in roots} == {task}
    assert max(r & ((1 << (63 - bits)) - 1) for r in roots).bit_length() == 63 - bits


@pytest.mark.parametrize(("task", "bits"), [(2, 1), (-1, 4), (0, 0), (1, 33)])
def test_a_task_that_does_not_fit_the_field_is_refused(task, bits):
    with pytest.raises(ValueError, match="does not fit"):
        RootIds(task, bits)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_children_draw_different_ids():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its first id and leave at once
        os.write(write_end, new_id().to_bytes(8, "little"))
        os._exit(0)
    os.close(write_end)
    child_id = int.from_bytes(os.read(read_end, 8), "little")
    os.close(read_end)
    os.waitpid(pid, 0)
    assert child_id != new_id()


# --- RotatingMap -----------------------------------------------------------------------------


def test_rotating_map_get_put_remove_contains_len():
    m = RotatingMap(3)
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    assert (m.get("a"), m.get("b"), m.get("c"), m.get("c", 0)) == (1, 2, None, 0)
    assert ("a" in m, m.contains("b"), "c" in m, len(m)) == (True, True, False, 2)
    assert (m.remove("a"), m.remove("a"), len(m)) == (1, None, 1)


def test_rotating_map_keys_expire_after_as_many_rotations_as_buckets():
    m = RotatingMap(3)
    m.put("a", 1)
    assert [m.rotate(), m.rotate(), m.rotate()] == [{}, {}, {"a": 1}]
    assert "a" not in m and len(m) == 0


def test_rotating_map_put_makes_a_key_the_youngest_and_replace_keeps_its_age():
    m = RotatingMap(2)
    m.put("old", 1)
    m.put("young", 1)
    m.rotate()
    m.put("old", 2)  # moved to the newest bucket
    m.replace("young", 2)  # stays in the older bucket
    m.replace("new", 3)  # absent: starts in the newest bucket
    assert m.rotate() == {"young": 2}
    assert m.rotate() == {"old": 2, "new": 3}


@pytest.mark.parametrize("buckets", [0, 1])
def test_rotating_map_needs_two_buckets(buckets):
    with pytest.raises(ValueError):
        RotatingMap(buckets)


operations = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["put", "replace"]), st.integers(0, 5), st.integers()),
        st.tuples(st.just("remove"), st.integers(0, 5)),
        st.tuples(st.just("rotate")),
    ),
    max_size=50,
)


@given(buckets=st.integers(2, 4), ops=operations)
def test_rotating_map_matches_a_model_of_ages(buckets, ops):
    m, model = RotatingMap(buckets), {}  # model: key -> [value, rotations survived]
    for op, *args in ops:
        if op == "put":
            model[args[0]] = [args[1], 0]
        elif op == "replace":
            model[args[0]] = [args[1], model.get(args[0], [None, 0])[1]]
        elif op == "remove":
            assert m.remove(args[0]) == model.pop(args[0], [None])[0]
            continue
        else:
            for entry in model.values():
                entry[1] += 1
            expired = {k: v for k, (v, age) in model.items() if age == buckets}
            model = {k: e for k, e in model.items() if k not in expired}
            assert m.rotate() == expired
            continue
        getattr(m, op)(*args)
    assert {k: m.get(k) for k in range(6) if k in m} == {k: v for k, (v, _) in model.items()}
    assert len(m) == len(model)


# --- Storm's acking tests, at the ledger level ------------------------------------------------


def test_a_single_tuple_completes_when_acked():
    c, ledger = Collectors(), AckLedger(30)
    root, [t] = c.spout_emit(task=4)
    c.ack(t)
    assert deliver_each(ledger, c.take()) == [[], [Completed(root, 4)]]


def test_a_spout_tuple_with_no_consumers_completes_on_init():
    c, ledger = Collectors(), AckLedger(30)
    root, _ = c.spout_emit(task=0, consumers=0)
    assert deliver_all(ledger, c.take()) == [Completed(root, 0)]


def test_fan_out_completes_only_after_the_last_leaf():
    """Spout -> a bolt that emits two children anchored to its input -> an acking bolt."""
    c, ledger = Collectors(), AckLedger(30)
    root, [t] = c.spout_emit(task=1)
    kids = [c.emit([t]), c.emit([t])]
    c.ack(t)
    for kid in kids:
        c.ack(kid)
    assert deliver_each(ledger, c.take()) == [[], [], [], [Completed(root, 1)]]


def test_diamond_branches_joined_by_one_tuple():
    """test-ack-branching: spout -> two identity bolts -> a join anchored to both."""
    c, ledger = Collectors(), AckLedger(30)
    root, (left, right) = c.spout_emit(task=2, consumers=2)
    left_out, right_out = c.emit([left]), c.emit([right])
    c.ack(left)
    c.ack(right)
    joined = c.emit([left_out, right_out])
    c.ack(left_out)
    c.ack(right_out)
    c.ack(joined)
    decisions = deliver_each(ledger, c.take())
    assert decisions[-1] == [Completed(root, 2)]
    assert not any(decisions[:-1])


def test_the_same_input_anchored_twice():
    """test-acking-self-anchor: emit(anchors=[t, t]) gets two edges, both must come back."""
    c, ledger = Collectors(), AckLedger(30)
    root, [t] = c.spout_emit(task=3)
    kid = c.emit([t, t])
    c.ack(t)
    assert deliver_all(ledger, c.take()) == []  # a shared edge id would cancel out here
    c.ack(kid)
    assert deliver_all(ledger, c.take()) == [Completed(root, 3)]


def test_a_tuple_anchored_to_two_roots_holds_both():
    c, ledger = Collectors(), AckLedger(30)
    (r1, [a]), (r2, [b]) = c.spout_emit(task=1), c.spout_emit(task=2)
    joined = c.emit([a, b])
    c.ack(a)
    c.ack(b)
    assert deliver_all(ledger, c.take()) == []
    c.ack(joined)
    assert set(deliver_all(ledger, c.take())) == {Completed(r1, 1), Completed(r2, 2)}


def test_a_failed_multi_anchored_tuple_fails_every_root():
    c, ledger = Collectors(), AckLedger(30)
    (r1, [a]), (r2, [b]) = c.spout_emit(task=1), c.spout_emit(task=2)
    joined = c.emit([a, b])
    c.ack(a)
    c.ack(b)
    c.fail(joined)
    assert set(deliver_all(ledger, c.take())) == {Failed(r1, 1, "fail"), Failed(r2, 2, "fail")}


def test_unanchored_emits_are_not_tracked():
    c, ledger = Collectors(), AckLedger(30)
    root, [t] = c.spout_emit(task=0)
    loose = c.emit([])
    c.ack(t)
    c.fail(loose)  # fails nothing: it belongs to no tree
    assert deliver_all(ledger, c.take()) == [Completed(root, 0)]


class AckingTopology:
    """test-acking: spouts 1-3 -> branching bolts (2, 4, 1) -> aggregate of 3 -> branch 2 -> ack.

    Everything runs synchronously; ``feed`` returns how many roots of each spout
    completed during that feed, like Storm's ack-tracking feeders.
    """

    BRANCHES = {1: 2, 2: 4, 3: 1}

    def __init__(self) -> None:
        self.c, self.ledger, self.held = Collectors(), AckLedger(30), []

    def feed(self, spout: int) -> dict[int, int]:
        _, [t] = self.c.spout_emit(task=spout)
        for kid in self.branch(t, self.BRANCHES[spout]):
            self.aggregate(kid)
        done = deliver_all(self.ledger, self.c.take())
        return dict(Counter(d.spout_task for d in done if isinstance(d, Completed)))

    def branch(self, t: Tup, n: int) -> list[Tup]:
        kids = [self.c.emit([t]) for _ in range(n)]
        self.c.ack(t)
        return kids

    def aggregate(self, t: Tup) -> None:
        self.held.append(t)
        if len(self.held) == 3:
            out = self.c.emit(self.held)
            for held in self.held:
                self.c.ack(held)
            self.held = []
            for kid in self.branch(out, 2):
                self.c.ack(kid)


def test_acking_topology_from_storm():
    topology = AckingTopology()
    assert topology.feed(1) == {}  # two tuples wait in the aggregate
    assert topology.feed(2) == {1: 1, 2: 1}  # six tuples: two aggregates fire
    assert topology.feed(1) == {}
    assert topology.feed(1) == {1: 1}  # the first of these two roots completes
    assert topology.feed(3) == {}
    assert topology.feed(2) == {1: 1, 2: 1, 3: 1}
    assert topology.ledger.statistics() == LedgerStatistics(0, 6, 0, 0, 0)


# --- timeouts ----------------------------------------------------------------------------------


def test_ack_every_other_with_a_ten_second_timeout():
    """test-timeout: the acked roots complete at once; the other fails only after 10 s."""
    c, ledger = Collectors(), AckLedger(10)
    ledger.expire(now=0)
    spouted = [c.spout_emit(task=0) for _ in range(3)]
    for i, (_, [t]) in enumerate(spouted):
        if i % 2 == 0:
            c.ack(t)
    (r1, _), (r2, _), (r3, _) = spouted
    assert set(deliver_all(ledger, c.take(), now=11)) == {Completed(r1, 0), Completed(r3, 0)}
    assert ledger.expire(now=20) == []  # 9 s later: not yet
    assert ledger.expire(now=32) == [Failed(r2, 0, "timeout")]  # 21 s later
    assert ledger.statistics() == LedgerStatistics(0, 2, 0, 1, 0)


@pytest.mark.parametrize("buckets", [2, 3, 5])
@pytest.mark.parametrize("offset", [0.0, 0.001, 1.7, 2.499, 2.5, 4.999])
def test_a_timeout_fires_after_timeout_secs_and_within_one_rotation(buckets, offset):
    ledger = AckLedger(10, buckets=buckets)
    ledger.expire(now=100)
    start = 100 + offset
    ledger.init(7, 1, 12345, now=start)
    times = [start + i / 100 for i in range(2500)]
    fired = [now for now in times if ledger.expire(now) == [Failed(7, 1, "timeout")]]
    assert len(fired) == 1
    assert start + 10 < fired[0] <= start + 10 + ledger.rotation_secs + 0.01


def test_reset_timeout_keeps_a_root_alive_for_twice_the_timeout():
    """test-reset-timeout: a slow bolt resets the timeout, then acks after 2x the timeout."""
    c, ledger = Collectors(), AckLedger(10)
    root, [t] = c.spout_emit(task=5)
    assert deliver_all(ledger, c.take(), now=0) == []
    for now in range(1, 21):
        assert ledger.expire(now) == []
        if now % 6 == 0:
            assert ledger.reset_timeout(root, now) == [Renewed(root, 5)]
    c.ack(t)
    assert deliver_all(ledger, c.take(), now=21) == [Completed(root, 5)]


def test_reset_timeout_of_an_unknown_root_is_ignored():
    ledger = AckLedger(10)
    assert ledger.reset_timeout(99, now=0) == []
    assert ledger.statistics().pending == 0


def test_a_long_silence_expires_everything_once():
    ledger = AckLedger(10)
    ledger.init(1, 0, 5, now=0)
    ledger.ack(2, 5, now=1)  # an ack whose init never comes
    assert ledger.expire(now=10**6) == [Failed(1, 0, "timeout")]
    assert ledger.statistics() == LedgerStatistics(0, 0, 0, 1, 1)


def test_a_clock_that_steps_back_expires_nothing():
    ledger = AckLedger(10)
    ledger.init(1, 0, 5, now=100)
    assert ledger.expire(now=0) == []
    assert ledger.expire(now=109) == []
    assert ledger.expire(now=116) == [Failed(1, 0, "timeout")]


# --- messages in any order -----------------------------------------------------------------------


def small_tree() -> tuple[int, list[tuple]]:
    """A spout tuple to two bolts; one emits a child, anchored twice; all acked."""
    c = Collectors(7)
    root, (a, b) = c.spout_emit(task=6, consumers=2)
    kid = c.emit([a, a])
    c.ack(a)
    c.ack(b)
    c.ack(kid)
    return root, c.take()


def test_every_delivery_order_completes_exactly_on_the_last_message():
    root, messages = small_tree()
    for order in itertools.permutations(messages):
        decisions = deliver_each(AckLedger(30), list(order))
        assert decisions == [[]] * (len(messages) - 1) + [[Completed(root, 6)]], order


def test_acks_before_init_are_kept_without_a_spout_task():
    root, messages = small_tree()
    ledger = AckLedger(30)
    assert deliver_all(ledger, messages[1:]) == []
    assert ledger.statistics().pending == 1
    assert deliver_all(ledger, messages[:1]) == [Completed(root, 6)]


@pytest.mark.parametrize("position", range(3))
def test_a_fail_fails_the_root_as_soon_as_the_init_is_in(position):
    c = Collectors()
    root, (a, b) = c.spout_emit(task=2, consumers=2)
    c.ack(a)
    c.fail(b)
    init, *rest = c.take()
    messages = rest[:position] + [init] + rest[position:]
    decisions = deliver_each(AckLedger(30), messages)
    decided_at = max(messages.index(init), messages.index(("fail", root)))
    assert decisions[decided_at] == [Failed(root, 2, "fail")]
    assert sum(map(len, decisions)) == 1


def test_acks_whose_init_never_comes_expire_silently():
    root, messages = small_tree()
    ledger = AckLedger(10)
    assert deliver_all(ledger, messages[1:], now=0) == []
    assert ledger.expire(now=100) == []
    assert ledger.statistics() == LedgerStatistics(0, 0, 0, 0, 1)
    # the init comes after all: its tree can no longer add up, so it times out
    assert deliver_all(ledger, messages[:1], now=101) == []
    assert ledger.expire(now=200) == [Failed(root, 6, "timeout")]


# --- settings and records ------------------------------------------------------------------------


@pytest.mark.parametrize(("timeout", "buckets"), [(0, 3), (-1, 3), (10, 1)])
def test_bad_settings_are_rejected(timeout, buckets):
    with pytest.raises(ValueError):
        AckLedger(timeout, buckets=buckets)


def test_a_negative_spout_task_is_rejected():
    with pytest.raises(ValueError):
        AckLedger(10).init(1, -1, 5, now=0)


def test_records_are_frozen():
    ledger = AckLedger(10)
    for record in (Completed(1, 2), Failed(1, 2, "fail"), ledger.statistics()):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, dataclasses.fields(record)[0].name, 3)


def test_rotation_period_divides_the_timeout_between_buckets():
    assert AckLedger(30).rotation_secs == 15
    assert AckLedger(30, buckets=2).rotation_secs == 30
    assert AckLedger(30, buckets=7).rotation_secs == 5


# --- the property: random DAGs, random fates, shuffled delivery ----------------------------------

# -- self-initialising roots (what tupleflow's spouts send) ---------------------------------


def test_a_self_initialising_root_completes_with_no_init():
    root = RootIds(task=6).new()
    ledger = AckLedger(30)
    child = new_id()
    assert ledger.ack(root, root ^ child, now=0.0) == []  # acked, anchoring one child
    assert ledger.statistics().pending == 1
    assert ledger.ack(root, child, now=0.1) == [Completed(root, 6)]
    assert ledger.statistics() == LedgerStatistics(0, 1, 0, 0, 0)


def test_a_self_initialising_root_completes_on_its_last_message_in_any_order():
    root, a, b = RootIds(task=1).new(), new_id(), new_id()
    messages = [("ack", root, root ^ a ^ b), ("ack", root, a), ("ack", root, b)]
    for order in itertools.permutations(messages):
        decisions = deliver_each(AckLedger(30), list(order))
        assert decisions == [[], [], [Completed(root, 1)]]


def test_a_failed_self_initialising_root_is_decided_once_and_its_tombstone_leaves_quietly():
    root, child = RootIds(task=3).new(), new_id()
    ledger = AckLedger(10)
    assert ledger.fail(root, now=0.0) == [Failed(root, 3, "fail")]
    # the rest of its tree still reports: nothing is decided again
    assert ledger.ack(root, root ^ child, now=0.5) == []
    assert ledger.ack(root, child, now=0.6) == []
    assert ledger.reset_timeout(root, now=0.7) == []
    assert ledger.expire(now=100) == []
    assert ledger.statistics() == LedgerStatistics(0, 0, 1, 0, 0)


def test_a_self_initialising_root_times_out_from_the_first_message_about_it():
    root, child = RootIds(task=2).new(), new_id()
    ledger = AckLedger(10)  # rotations every 5 s
    assert ledger.ack(root, root ^ child, now=3.0) == []  # the child is lost
    assert ledger.expire(now=13.0) == []
    assert ledger.expire(now=15.0) == [Failed(root, 2, "timeout")]
    assert ledger.ack(root, child, now=16.0) == []  # too late: the tombstone takes it
    assert ledger.expire(now=100.0) == []
    assert ledger.statistics() == LedgerStatistics(0, 0, 0, 1, 0)


def test_reset_timeout_of_an_unheard_self_initialising_root_is_forwarded_to_its_spout():
    root = RootIds(task=4).new()
    ledger = AckLedger(10)
    assert ledger.reset_timeout(root, now=0.0) == [Renewed(root, 4)]
    assert ledger.statistics().pending == 0
    assert ledger.reset_timeout(12345, now=0.0) == []  # a plain root nobody announced


def test_an_init_for_a_self_initialising_root_is_refused():
    with pytest.raises(ValueError, match="self-initialising"):
        AckLedger(10).init(RootIds(task=1).new(), 1, 99, now=0.0)


def test_the_task_field_width_is_the_ledgers_to_know():
    root = RootIds(task=5, bits=3).new()
    assert AckLedger(10, task_bits=3).ack(root, root, now=0.0) == [Completed(root, 5)]


TIMEOUT = 2.0  # seconds; a batch's messages are delivered well within it
STEP = 0.001  # seconds between two deliveries
ROOTS_PER_BATCH = 50


def grow_batch(c: Collectors, rng: random.Random) -> dict[int, dict]:
    """Spout tuples and their random DAGs; returns each root's task and expected fate.

    Each bolt execution emits 0-3 children anchored to its input, sometimes also to
    another pending tuple (a join, possibly across roots) or to its input twice, then
    acks (96 %), fails (2 %) or loses (2 %: the task died) its input.
    """
    roots, pending = {}, []
    for _ in range(ROOTS_PER_BATCH):
        task = rng.randrange(8)
        root, tuples = c.spout_emit(task, consumers=rng.choice([0, 1, 1, 2, 3]))
        roots[root] = {"task": task, "fates": set()}
        pending += [(t, 0) for t in tuples]
    while pending:
        t, depth = pending.pop(rng.randrange(len(pending)))
        children = []
        for _ in range(rng.choice([0, 1, 1, 2, 3]) if depth < 3 else 0):
            anchors = [t] + [t] * (rng.random() < 0.05)
            if pending and rng.random() < 0.2:
                anchors.append(rng.choice(pending)[0])
            children.append(c.emit(anchors))
            pending.append((children[-1], depth + 1))
        fate = rng.choices(["ack", "fail", "lost"], weights=[96, 2, 2])[0]
        if fate == "ack":
            c.ack_input(t, children)
        elif fate == "fail":
            c.fail(t)
        for root in t.roots:
            roots[root]["fates"].add(fate)
    return roots


def expected_outcome(fates: set[str]) -> str:
    if "fail" in fates:
        return "fail"
    return "timeout" if "lost" in fates else "complete"


def run_property(dags: int, buckets: int, seed: int, explicit_only: bool,
                 combining: bool = False) -> None:
    rng = random.Random(seed)
    c = Combining(seed) if combining else Collectors(seed, explicit_only)
    ledger = AckLedger(TIMEOUT, buckets=buckets)
    now, roots, decided = 100.0, {}, {}  # decided: root -> (decision, now, message index)
    first_message, last_message, init_at, first_fail = {}, {}, {}, {}
    index = 0
    for _ in range(dags // ROOTS_PER_BATCH):
        batch = grow_batch(c, rng)
        roots.update(batch)
        messages = c.take()
        for root in getattr(c, "leaves", ()):  # completed at a bolt: the spout is told
            assert root not in decided, f"decided twice: {root}"
            decided[root] = (Completed(root, batch[root]["task"]), now, "leaf")
        if combining:
            c.leaves.clear()
        rng.shuffle(messages)
        for message in messages:
            kind, root = message[0], message[1]
            first_message.setdefault(root, (index, now))
            last_message[root] = index
            if kind == "init":
                init_at[root] = (index, now)
            if kind == "fail":
                first_fail.setdefault(root, index)
            for decision in deliver(ledger, message, now):
                assert decision.root_id not in decided, f"decided twice: {decision}"
                decided[decision.root_id] = (decision, now, index)
            now += STEP
            index += 1
    for _ in range(int(5 * TIMEOUT / 0.01)):  # quiet time: timeouts, then tombstones, go
        for decision in ledger.expire(now):
            assert decision.root_id not in decided, f"decided twice: {decision}"
            decided[decision.root_id] = (decision, now, None)
        now += 0.01

    # a self-initialising root nobody sent a message about is the spout's to time out
    unheard = {r for r in c.self_init if r not in first_message and r not in leaves(decided)}
    assert decided.keys() == roots.keys() - unheard
    assert all("lost" in roots[r]["fates"] for r in unheard)
    outcomes = Counter()
    for root, info in roots.items():
        if root in unheard:
            continue
        decision, at, delivered_by = decided[root]
        outcome = expected_outcome(info["fates"])
        outcomes[outcome] += 1
        assert decision.spout_task == info["task"]
        # a self-initialising root's init is implied by the first message about it
        init_index, init_now = init_at.get(root) or first_message.get(root, (None, None))
        if outcome == "complete":
            assert decision == Completed(root, info["task"])
            if delivered_by == "leaf":  # the acker never heard of it
                assert root not in first_message
            else:
                assert delivered_by == last_message[root]  # not one message early
        elif outcome == "fail":
            assert decision == Failed(root, info["task"], "fail")
            assert delivered_by == max(init_index, first_fail[root])
        else:
            assert decision == Failed(root, info["task"], "timeout")
            assert init_now + TIMEOUT < at <= init_now + TIMEOUT + ledger.rotation_secs + 0.011

    late = sum(  # failed plain roots that got messages after their decision: orphans
        1
        for root, (d, _, i) in decided.items()
        if isinstance(d, Failed) and i is not None and last_message[root] > i
        and root not in c.self_init
    )
    assert ledger.statistics() == LedgerStatistics(
        0, outcomes["complete"] - len(leaves(decided)), outcomes["fail"], outcomes["timeout"],
        late)
    assert all(outcomes[o] > dags / 100 for o in ("complete", "fail", "timeout"))
    if not explicit_only:
        assert len(c.self_init) > dags / 3


@pytest.mark.parametrize(("dags", "buckets", "explicit_only"),
                         [(10_000, 3, False), (2_000, 2, False), (2_000, 5, False),
                          (4_000, 3, True)])
def test_random_dags_in_random_order(dags, buckets, explicit_only):
    """Storm's protocol (an init for every root) and tupleflow's (self-initialising roots
    for spout tuples sent to one task, plain roots with an init for the others)."""
    run_property(dags, buckets, seed=dags + buckets, explicit_only=explicit_only)


@pytest.mark.parametrize(("dags", "buckets"), [(10_000, 3), (2_000, 2)])
def test_random_dags_with_combined_and_folded_acks(dags, buckets):
    """tupleflow's bolts: acks XORed per root per task until a flush, a whole tree
    completed at a bolt told to the spout (never to the acker), a BasicBolt's ack folded
    into its last child. Each root is still decided once, by the right message, and a
    tree is never called complete while one of its tuples is open (``Combining``)."""
    run_property(dags, buckets, seed=7 * dags + buckets, explicit_only=False, combining=True)


def leaves(decided: dict) -> set[int]:
    """The roots a bolt found complete (``Combining``)."""
    return {root for root, (_, _, by) in decided.items() if by == "leaf"}


# -- the batched path ---------------------------------------------------------------------

SELF_ROOTS = [RootIds(2, 3).prefix | n for n in (1, 2, 3)]  # spout task 2


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from([INIT, ACK, FAIL, RESET]),
                          st.sampled_from([1, 2, 3, 4, 5, 6, *SELF_ROOTS]),
                          st.sampled_from([0, 1, 2, 3, 7, *SELF_ROOTS]), st.integers(0, 3),
                          st.floats(0, 4)),
                max_size=60))
def test_a_batch_has_exactly_the_effect_of_its_messages_one_by_one(script):
    """``apply`` of many messages in one call carries its state from one message to the
    next exactly as separate calls do (explicit and self-initialising roots mixed)."""
    single, batched, now = AckLedger(10.0, task_bits=3), AckLedger(10.0, task_bits=3), 0.0
    for start in range(0, len(script), 7):
        chunk = script[start:start + 7]
        now += sum(dt for *_, dt in chunk)
        expected = []
        for op, root, value, spout, _ in chunk:
            expected += single.apply([op, root, value], now, spout)
        flat = [x for op, root, value, _, _ in chunk for x in (op, root, value)]
        sender = chunk[0][3] if chunk else 0
        if all(spout == sender for *_, spout, _ in chunk):
            assert same(batched.apply(flat, now, sender), expected)
        else:  # INITs of different spouts come in different frames
            for op, root, value, spout, _ in chunk:
                batched.apply([op, root, value], now, spout)
    assert batched.statistics() == single.statistics()
    assert same(batched.expire(now + 100), single.expire(now + 100))


# Acks of self-initialising roots of two spout tasks, as bolts send them: values that
# complete a root in two or three messages (a, then root ^ a; or a, b, root ^ a ^ b),
# stray ones, a bool, and the small ints a bool equals; FAILs leave tombstones.
_A, _B = 0x5A5A_1234_5678_9ABC, 0x0F0F_8765_4321_0FED
_BULK_ROOTS = [RootIds(task, 3).prefix | n for task in (1, 6) for n in (5, 6, 7, 8, 9, 10)]


@st.composite
def _bulk_message(draw):
    root = draw(st.sampled_from(_BULK_ROOTS))
    op = draw(st.sampled_from([ACK] * 30 + [FAIL]))
    big = [_A, _B, root ^ _A, root ^ _B, root ^ _A ^ _B, root]
    value = draw(st.sampled_from(big * 8 + [7, 1, 0, True, 3.5]))
    return op, root, value


@settings(max_examples=400)
@given(st.lists(st.tuples(st.lists(_bulk_message(), min_size=1, max_size=8),
                          st.sampled_from([0.0, 0.1, 4.0, 11.0])), max_size=12))
def test_a_batch_of_acks_settled_in_c_has_the_effect_of_its_messages_one_by_one(frames):
    """``settle`` takes a batch of acks of distinct self-initialising roots by whole
    lists (``_settle_acks``), the rest one message at a time: both ways leave the same
    decisions, counters and timeouts, with roots held in older buckets, repeated roots,
    bools, stray values and tombstones mixed in."""
    single, batched, now = AckLedger(10.0, task_bits=3), AckLedger(10.0, task_bits=3), 0.0
    completed: dict[int, list] = {}
    for messages, dt in frames:
        now += dt
        expected = []
        for op, root, value in messages:
            expected += single.apply([op, root, value], now)
        out: list[int] = []
        batched.settle([x for m in messages for x in m], now, 0, out, completed)
        filed = [Completed(root, task) for task, roots in completed.items() for root in roots]
        completed.clear()
        assert same(_decisions(out) + filed, expected)
    assert batched.statistics() == single.statistics()
    assert same(batched.expire(now + 100), single.expire(now + 100))


def test_a_batch_of_acks_completes_its_trees_in_one_step():
    """Two counters' acks of ten sentences, one message each a sentence from each: the
    second counter's batch completes all ten, filed under their spout tasks."""
    ledger, completed = AckLedger(10.0, task_bits=3), {}
    roots = [RootIds(task, 3).prefix | n for task in (1, 6) for n in range(1, 6)]
    first = [x for r in roots for x in (ACK, r, _A)]
    second = [x for r in roots for x in (ACK, r, r ^ _A)]
    out: list[int] = []
    ledger.settle(first, 0.0, 0, out, completed)
    assert (out, completed, ledger.statistics().pending) == ([], {}, 10)
    ledger.settle(second, 0.5, 0, out, completed)
    assert out == [] and completed == {1: roots[:5], 6: roots[5:]}
    assert ledger.statistics() == LedgerStatistics(0, 10, 0, 0, 0)


def test_a_bool_in_a_batch_of_acks_is_rejected_as_it_is_alone():
    """msgpack decodes a bool where an int was due; XORed in C it would count as 0 or 1."""
    ledger, roots = AckLedger(10.0, task_bits=3), _BULK_ROOTS[:4]
    assert ledger.apply([x for r in roots for x in (ACK, r, True if r == roots[2] else _A)],
                        0.0) == []
    assert (ledger.rejected, ledger.statistics().pending) == (1, 3)


def same(decisions: list, others: list) -> bool:
    """Equal as multisets: roots timing out in one rotation come in no meaningful order."""
    return sorted(map(repr, decisions)) == sorted(map(repr, others))


def test_apply_skips_and_counts_malformed_messages():
    ledger, self_root = AckLedger(10.0), RootIds(4).new()
    assert ledger.apply([INIT, 5, 0, "junk", 1, 1, 9, 1, 1, ACK, [5], 1, ACK, 6, "x",
                         INIT, self_root, 1, ACK, 7], 0.0, 2) == [Completed(5, 2)]
    assert ledger.rejected == 6  # junk op, op 9, unhashable root, bad value, an init
    assert ledger.statistics().pending == 0  # of a self-initialising root, a short tail


# -- the live view: ages and oldest (running.acker_state) ------------------------------------

def test_ages_follow_the_rotations_and_oldest_come_first():
    ledger = AckLedger(10.0)  # rotations every 5 s
    ledger.init(root_id=1, spout_task=4, xor_val=11, now=0.0)
    ledger.init(root_id=2, spout_task=5, xor_val=12, now=1.0)
    ledger.expire(now=6.0)  # one rotation: 1 and 2 are 1-6 s old
    ledger.init(root_id=3, spout_task=4, xor_val=13, now=6.5)
    assert ledger.ages(now=7.0) == [(0.0, 2.0, 1), (2.0, 7.0, 2), (7.0, 12.0, 0)]
    assert ledger.oldest(2) == [(1, 4, 1), (2, 5, 1)]
    assert ledger.oldest(10) == [(1, 4, 1), (2, 5, 1), (3, 4, 0)]
    ledger.ack(1, 11, now=7.5)  # completed: no longer pending, no longer oldest
    assert ledger.oldest(10) == [(2, 5, 1), (3, 4, 0)]


def test_oldest_leaves_out_roots_without_a_spout_task():
    ledger = AckLedger(10.0)
    ledger.ack(9, 5, now=0.0)  # an ack before its init: no spout task known yet
    assert ledger.oldest(5) == []
    assert sum(n for _, _, n in ledger.ages(now=0.0)) == 1  # but pending, as statistics says
