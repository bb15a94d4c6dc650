"""The engine's C closures (runtime/engine/_hot*.c) against their Python specs
(runtime/engine/wiring.py): built where they should be, chosen at wiring time, and
indistinguishable from the Python closures in what they send, ack and raise, on the
fast path and off it (docs/internals/performance-log.md, "Issue 17, twelfth pass")."""

from __future__ import annotations

import os
import random
import sys
import time
from collections import deque

import cloudpickle
import pytest

from runtime import BasicBolt, Bolt, Spout, Topology, wire
from runtime.acking import _ids
from runtime.engine import hot
from runtime.testing import InMemoryCluster, ListSpout

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # its bolts, to real processes

PURE = hot.pure_python()  # this environment runs in pure Python (no C compiler)


def test_the_c_closures_were_built_in_this_checkout():
    """Not skipped in silence: only TUPLEFLOW_PURE_PYTHON=1 says that this environment
    (no C compiler, no Python headers) runs the engine in pure Python."""
    if PURE:
        pytest.skip("TUPLEFLOW_PURE_PYTHON is set: this environment runs in pure Python")
    assert hot._hot is not None, (
        "runtime/engine/_hot.c was not built: run `pip install -e .` (what `make` does) "
        "or `python setup.py build_ext --inplace`; where no C compiler exists, set "
        "TUPLEFLOW_PURE_PYTHON=1")
    assert os.path.dirname(hot._hot.__file__) == os.path.dirname(hot.__file__)


class Words(Spout):
    """Emits ``items`` one per call: (args, kwargs) of ``emit``; records what raised."""

    outputs = {"default": ["sentence"], "side": ["sentence"]}

    def __init__(self, items: list) -> None:
        self.items = items

    def open(self, config, context):
        self.n, self.acked, self.failed, self.errors = 0, [], [], []

    def next_tuple(self):
        if self.n < len(self.items):
            args, kwargs = self.items[self.n]
            self.n += 1
            try:
                self.emit(*args, **kwargs)
            except (TypeError, ValueError) as exc:
                self.errors.append((type(exc).__name__, str(exc)))

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Children(BasicBolt):
    """Each word a child, the usual way; words starting with "odd" are emitted the
    unusual ways the C closures hand to their Python specs."""

    outputs = {"default": ["word", "n"], "side": ["word", "n"]}

    def prepare(self, config, context):
        self.errors = []

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word, 1]) if not word.startswith("odd") else self.odd(word, tup)

    def odd(self, word, tup):
        ways = [((word, 1),), ([word, 1], "default"), ([word, 1],), ([word],), (5,),
                ([b"bytes", 1],), ([word, 1], "side"), ([word, 1], "nowhere")]
        for args in ways:
            try:
                self.emit(*args)
            except (TypeError, ValueError) as exc:
                self.errors.append((type(exc).__name__, str(exc)))
        self.emit([word, 2], anchors=[tup])
        self.emit(values=[word, 3])
        self.emit([word, 4], stream="default", anchors=None)


class Count(Bolt):
    """Acks each word; "odd" words are acked the unusual ways (twice, by keyword, with
    nothing or the wrong thing, which raise)."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.counts, self.errors = {}, []

    def process(self, tup):
        word, n = str(tup.values[0]), (tup.values[1] if len(tup.values) > 1 else 1)
        self.counts[word] = self.counts.get(word, 0) + n
        if not word.startswith("odd"):
            return self.ack(tup)
        self.ack(tup=tup)
        self.ack(tup)  # a second ack changes nothing
        for args in ((), (None,), (tup, tup)):
            try:
                self.ack(*args)
            except (TypeError, AttributeError) as exc:
                self.errors.append((type(exc).__name__, str(exc)))


# by the C closures they make the spout's and the split's emits: the split's tasks, and
# its one subscriber's on its default stream (EmitChild with one task's batch, EmitChild
# with a pick, EmitKeyed), by a shuffle or on the word
TARGETS = {"one": ("EmitRun", "EmitChild", 1, 1, False),
           "shuffled": ("EmitRun", "EmitChild", 1, 2, False),
           "keyed": ("EmitRun", "EmitKeyed", 1, 3, True),
           "picked": ("EmitPicked", "EmitKeyed", 2, 3, True)}


def _topology(items: list, target: str, spout: Spout | None = None) -> Topology:
    _, _, splitters, tasks, keyed = TARGETS[target]
    topo = Topology("hot")
    topo.spout("feed", Words(items) if spout is None else spout)
    topo.bolt("split", Children, parallelism=splitters).shuffle_grouping("feed")
    count = topo.bolt("count", Count, parallelism=tasks)
    count.fields_grouping("split", ["word"]) if keyed else count.shuffle_grouping("split")
    topo.bolt("side", Count).shuffle_grouping("split", "side")
    topo.bolt("whole", Count).shuffle_grouping("feed", "side")
    return topo


ITEMS = [
    *((([f"w{i} x{i % 3} odd{i}"],), {"msg_id": i}) for i in range(12)),
    ((["by position"], "default", 99), {}),  # msg_id by position
    ((("a tuple",),), {"msg_id": 100}),
    ((["x", "y"],), {"msg_id": 101}),  # the wrong arity
    (([],), {"msg_id": 102}),
    ((["side"],), {"stream": "side", "msg_id": 103}),
    ((["untracked w"],), {}),
    ((["bad"],), {"msg_id": 104, "strm": "x"}),  # an unknown keyword
    ((["dup"], "default"), {"stream": "default", "msg_id": 105}),
]


class _Tee(deque):
    """The cluster's frame queue, keeping every frame put on it in ``sent``."""

    def __init__(self, frames, sent: list) -> None:
        super().__init__(frames)
        self.sent = sent

    def append(self, frame) -> None:
        self.sent.append(frame)
        super().append(frame)


def _run(monkeypatch, pure: bool, target: str, ackers: int = 1,
         topology: Topology | None = None) -> dict:
    """One run of the topology above (or of ``topology``), its ids seeded: what every
    task sent, acked, counted and raised."""
    monkeypatch.setenv("TUPLEFLOW_PURE_PYTHON", "1" if pure else "0")
    _ids._ids.seed(17)
    random.seed(17)  # the shuffle grouping's start
    sent: list = []
    topology = _topology(ITEMS, target) if topology is None else topology
    with InMemoryCluster(topology, ackers=ackers, batch_size=5,
                         target_latency=None,
                         message_timeout=30.0) as cluster:
        cluster.frames = _Tee(cluster.frames, sent)  # every executor sends through it
        cluster.run_until_idle()
        users = {task: cluster.user_object(task) for task in sorted(cluster.executors)
                 if cluster.plan.task(task).component != "__acker"}
        kinds = {type(getattr(u, name, None)).__name__ for u in users.values()
                 for name in ("emit", "ack")}
        seen = {task: (getattr(u, "acked", None), getattr(u, "failed", None),
                       getattr(u, "counts", None), u.errors) for task, u in users.items()}
        return {"sent": sent, "seen": seen, "kinds": kinds,
                "stats": sorted((s.component, s.task, s.acked, s.failed, s.emitted)
                                for s in cluster.statistics()),
                "exceptions": [(e["component"], e["error"]) for e in cluster.exceptions]}


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C closures to compare")
@pytest.mark.parametrize("target", TARGETS)
def test_the_c_closures_send_ack_and_raise_exactly_as_the_python_ones(monkeypatch, target):
    """The C emits drawing their edge ids from the generator new_id draws from, seeded
    the same: the same frames, byte for byte, the same acks, counts and errors, with
    the C closures in use in one run and none in the other."""
    monkeypatch.setattr(hot, "C_EDGE_IDS", False)
    c, python = _run(monkeypatch, False, target), _run(monkeypatch, True, target)
    assert {"Ack", *TARGETS[target][:2]} <= c["kinds"]
    assert not {"Ack", "EmitChild", "EmitKeyed", "EmitRun", "EmitPicked"} & python["kinds"]
    feed = next(seen for seen in python["seen"].values() if seen[2] is None)
    assert sorted(feed[0]) == [*range(12), 99, 100, 103] and feed[3]  # some refused
    assert any(seen[3] for seen in python["seen"].values() if seen[2])  # bad acks raised
    anchored = [b for h, b in python["sent"] if wire.parse_header(h).kind == wire.ANCHORED]
    assert len(anchored) >= 3 and sum(map(len, map(wire.decode_batch, anchored))) > 100
    for key in ("seen", "stats", "exceptions", "sent"):
        assert c[key] == python[key], key


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C closures to compare")
@pytest.mark.parametrize("target", TARGETS)
def test_with_their_own_edge_ids_the_c_emits_decide_every_tree_the_same(monkeypatch, target):
    """The C emits' own generator (the default): other edge ids, so other bytes, but
    the same frames in the same order, and the same acks, counts and errors."""
    c, python = _run(monkeypatch, False, target), _run(monkeypatch, True, target)
    for key in ("seen", "stats", "exceptions"):
        assert c[key] == python[key], key
    assert [h for h, _ in c["sent"]] == [h for h, _ in python["sent"]]
    assert c["sent"] != python["sent"]


class Plain(Spout):
    """Emits 23 words the plain way, every fifth with a msg_id, and the odd calls of
    ITEMS after them. Its calls are written here, not read from a list: a keyword
    name that came through a pickle is not the interned str the C types compare by
    identity, and such a call always goes the Python way."""

    outputs = {"default": ["sentence"], "side": ["sentence"]}

    def open(self, config, context):
        self.n, self.acked, self.failed, self.errors = 0, [], [], []

    def next_tuple(self):
        n, self.n = self.n, self.n + 1
        if n < 23:
            self.emit([f"w{n}"]) if n % 5 else self.emit([f"w{n}"], msg_id=n)
        elif n < 24:
            for args in (([f"p{n}"], "default", n), (["x", "y"],), ([],), (("tuple",),)):
                try:
                    self.emit(*args)
                except (TypeError, ValueError) as exc:
                    self.errors.append((type(exc).__name__, str(exc)))

    def ack(self, msg_id):
        self.acked.append(msg_id)


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C closures to compare")
@pytest.mark.parametrize("target", ["one", "keyed"])
def test_at_most_once_the_c_emits_send_and_raise_exactly_as_the_python_ones(monkeypatch,
                                                                          target):
    """No acker: the spout's plain emit (EmitOne; a msg_id's tuple acked at once) and
    the bolts' data loop (Stride), its batches flushed when full, the odd calls too."""
    topology = _topology([], target, Plain())
    c, python = (_run(monkeypatch, pure, target, ackers=0, topology=topology)
                 for pure in (False, True))
    assert {"EmitOne"} <= c["kinds"] and "EmitOne" not in python["kinds"]
    feed = next(seen for seen in python["seen"].values() if seen[2] is None)
    assert feed[0] == [0, 5, 10, 15, 20, 23] and len(feed[3]) == 2  # (a tuple is taken)
    assert sum(wire.parse_header(h).kind == wire.DATA for h, _ in python["sent"]) >= 5
    for key in ("seen", "stats", "exceptions", "sent"):
        assert c[key] == python[key], key


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C generator")
def test_the_c_edge_ids_are_drawn_as_new_id_draws_and_anew_in_a_forked_child():
    draws = [hot._hot.draw() for _ in range(20_000)]
    assert all(0 < d < 2**63 for d in draws) and len(set(draws)) == len(draws)
    assert 9_000 < sum(d >> 62 for d in draws) < 11_000  # the top bit, half the time
    hot._hot.seed(bytes(range(32)))
    first = [hot._hot.draw() for _ in range(3)]
    hot._hot.seed(bytes(range(32)))
    assert [hot._hot.draw() for _ in range(3)] == first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next draw, to the parent
        os.write(write, hot._hot.draw().to_bytes(8, "big"))
        os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 8), "big")
    os.waitpid(pid, 0)
    os.close(read)
    assert child != hot._hot.draw()  # reseeded at the fork (from os.urandom)
    hot._hot.seed(os.urandom(32))


def test_the_python_closures_are_chosen_when_asked(monkeypatch, closures):
    monkeypatch.setenv("TUPLEFLOW_PURE_PYTHON", "1" if closures == "python" else "0")
    topo = Topology("choice")
    topo.spout("feed", Words([]))
    topo.bolt("split", Children).shuffle_grouping("feed")
    topo.bolt("keyed", Count, parallelism=2).fields_grouping("split", ["word"])
    with InMemoryCluster(topo, ackers=1) as cluster:
        tasks = cluster.plan.component_tasks()
        spout, split, count = (cluster.user_object(tasks[c][0])
                               for c in ("feed", "split", "keyed"))
        kinds = [type(f).__name__ for f in (spout.emit, split.emit, count.ack)]
        kinds += [type(f).__name__ for f in cluster.executors[tasks["keyed"][0]].bolt._strides]
    if closures == "python":
        assert kinds == ["function"] * 6
    else:
        assert kinds == ["EmitRun", "EmitKeyed", "Ack", "Stride", "Stride", "Stride"]
        assert split.emit.spec.__name__ == "emit_keyed"  # the spec it hands odd calls to


class Refs(BasicBolt):
    """Notes what its emit kept of the input and of the values it was given."""

    outputs = ["word"]

    def prepare(self, config, context):
        self.held = []

    def process(self, tup):
        values = [tup.values[0]]
        before = sys.getrefcount(tup), sys.getrefcount(values)
        self.emit(values)
        self.held.append((sys.getrefcount(tup) - before[0],
                          sys.getrefcount(values) - before[1]))


class Acks(Bolt):
    """Notes what its ack kept of the input."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.held = []

    def process(self, tup):
        before = sys.getrefcount(tup)
        self.ack(tup)
        self.held.append(sys.getrefcount(tup) - before)


def test_neither_way_keeps_a_reference_to_what_it_was_given(closures):
    """``BoltSide.execute`` reuses a Tuple nobody kept, told by its reference count:
    the ``ack`` and the emits must hold none once they return."""
    topo = Topology("refs")
    topo.spout("feed", Words([(([f"w{i}"],), {"msg_id": i}) for i in range(20)]))
    topo.bolt("split", Refs).shuffle_grouping("feed")
    topo.bolt("count", Acks).shuffle_grouping("split")
    with InMemoryCluster(topo, ackers=1, target_latency=None) as cluster:
        cluster.run_until_idle()
        tasks = cluster.plan.component_tasks()
        split, count = (cluster.user_object(tasks[c][0]) for c in ("split", "count"))
        assert type(split.emit).__name__ == ("EmitChild" if closures == "c" else "function")
        assert sorted(cluster.user_object(tasks["feed"][0]).acked) == list(range(20))
    assert split.held == [(0, 0)] * 20 and count.held == [0] * 20


class Kinds(Bolt):
    """Writes the kind of its ``ack`` and ``emit`` to a file of its own in the run
    directory, then acks its input."""

    outputs: list[str] = []

    def prepare(self, config, context):
        path = os.path.join(context.run_dir, f"kinds-{context.task_id}.txt")
        with open(path, "w") as f:
            f.write(f"{type(self.ack).__name__} {type(self.emit).__name__}\n")

    def process(self, tup):
        self.ack(tup)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_instances_of_a_running_topology_use_the_c_closures(closures):
    """The engine's processes import the extension from the same checkout as the test
    (an editable install builds it in place) and follow TUPLEFLOW_PURE_PYTHON."""
    topo = Topology("hot-mp", spout_wait=0.005)
    topo.spout("feed", ListSpout([[f"w{i}"] for i in range(50)], fields=["word"]))
    topo.bolt("kinds", Kinds).shuffle_grouping("feed")
    with topo.submit(ackers=1) as running:
        running.wait_until(lambda stats: sum(s.acked for s in stats
                                             if s.component == "feed") == 50, timeout=60)
        (name,) = [n for n in os.listdir(running.run_dir) if n.startswith("kinds-")]
        with open(os.path.join(running.run_dir, name)) as f:
            kinds = f.read().split()
    assert kinds == (["Ack", "function"] if closures == "c" else ["function", "function"])


def consecutive_cases(rng: random.Random) -> list[list[int]]:
    """Roots as a bolt's leaves hold them: runs in order (at either end of the id space
    and across 2**63), and runs with a gap, a repeat, two roots swapped, or reversed."""
    cases = []
    for start in (1, _ids.SELF_INIT - 3, _ids.SELF_INIT, (1 << 64) - 9,
                  _ids.SELF_INIT | rng.getrandbits(62)):
        for n in (1, 2, 9):
            run = list(range(start, start + n))
            cases.append(run)
            if n > 1:
                cases += [run[:-1] + [run[-1] + 1], run[:-1] + [run[-2]],
                          [run[1], run[0], *run[2:]], run[::-1]]
    return cases


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C function to compare")
def test_the_c_consecutive_says_of_roots_what_the_python_says():
    """A bolt's leaves go as one ``first, count`` stretch when they count up by one: the C
    test (``_hot.consecutive``) answers as its spec (acks.py's ``_consecutive``) for
    every list of roots, and says False of what is no list of roots at all."""
    from runtime.engine import _hot, acks

    cases = consecutive_cases(random.Random(7))
    assert [_hot.consecutive(c) for c in cases] == [acks._consecutive(c) for c in cases]
    assert sum(map(acks._consecutive, cases)) == 15  # (the runs in order, and only they)
    for odd in ([], [-2, -1], [1 << 64, (1 << 64) + 1], [True, 2], [1.0, 2.0], ["a"]):
        assert _hot.consecutive(odd) is False
    with pytest.raises(TypeError):
        _hot.consecutive((1, 2))


def test_a_bolts_leaves_go_as_one_stretch_only_when_they_count_up(closures):
    """Leaves acked in order (a spout's run, the usual case) go as ``[first, count, []]``;
    any others as their list, ``[0, 0, roots]``: with the C test and with the Python."""
    from runtime.acking._ids import RootIds
    from runtime.engine.acks import AckOut
    from runtime.engine.stats import TaskCounts

    topo = Topology("leaves-out")
    topo.spout("feed", ListSpout([[1]], fields=["n"]))
    topo.bolt("count", Bolt).shuffle_grouping("feed")
    plan = topo.physical_plan(1, ackers=1)
    (spout,), (bolt,) = plan.component_tasks()["feed"], plan.component_tasks()["count"]
    sent, counts = [], TaskCounts(time.monotonic, time.time, False)
    out = AckOut(plan, bolt, lambda h, b: sent.append(
        (wire.parse_header(h).dest, wire.decode_batch(b))), counts)
    start = RootIds(spout, plan.root_bits()).run_start()
    for leaves in ([start, start + 1, start + 2], [start + 5, start + 4, start + 6]):
        out.leaves += leaves
        out.flush()
    assert sent == [(spout, [start, 3, []]), (spout, [0, 0, [start + 5, start + 4, start + 6]])]


def _leaf(root: int, ids=None):
    """A spout tuple's only copy as a RUN frame gives it: ``ids`` is ``ack_val``."""
    from runtime.model.api import OneFieldTuple, TupleSource

    tup = OneFieldTuple(["w"], TupleSource.of("feed", 1, "default", ["n"]))
    tup.ids = tup.ack_val = root
    if ids is not None:  # the same value, another object: a one-root tuple, combined
        tup.ids = ids
    return tup


def _leaf_bolt(closures):
    """A bolt Executor whose frames land in ``sent`` (dest, body), its spout task, and
    the first root of one of that spout task's runs."""
    from runtime.acking._ids import RootIds
    from runtime.engine.executor import Executor

    topo = Topology("leaves-acked")
    topo.spout("feed", ListSpout([[1]], fields=["n"]))
    topo.bolt("count", Bolt).shuffle_grouping("feed")
    plan = topo.physical_plan(1, ackers=1)
    (spout,), (bolt,) = plan.component_tasks()["feed"], plan.component_tasks()["count"]
    sent: list = []
    ex = Executor(plan, topo.components, bolt, lambda h, b: sent.append(
        (wire.parse_header(h).dest, wire.decode_batch(b))))
    ex.start()
    assert type(ex.user.ack).__name__ == ("Ack" if closures == "c" else "function")
    return ex, sent, spout, RootIds(spout, plan.root_bits()).run_start()


def test_leaves_acked_in_order_go_as_one_stretch_and_others_in_the_order_acked(closures):
    """The C ack keeps the leaves it takes in order as a stretch (``_hot.LeafRun``), not
    an int each on the list: what it sends, counts and says waits must be what the
    Python ack's list gives, the stretch's roots first, for every mix of leaves in
    order, out of order, acked through ``BoltSide.ack`` and found whole at the flush."""
    ex, sent, spout, s = _leaf_bolt(closures)
    ack, acks = ex.user.ack, ex.acks

    def flush(*tuples):
        for tup in tuples:
            ack(tup)
        waiting = acks.waiting()
        ex.flush()
        return waiting, acks.waiting(), sent.pop(), ex.acked
    # in order: one stretch, as the Python's consecutive leaves go
    assert flush(*map(_leaf, range(s, s + 4))) == (True, False, (spout, [s, 4, []]), 4)
    assert flush(_leaf(s + 9)) == (True, False, (spout, [s + 9, 1, []]), 5)
    # out of order: each root, in the order acked (the stretch spilled first)
    order = [s + 5, s + 6, s + 4, s + 7]
    assert flush(*map(_leaf, order)) == (True, False, (spout, [0, 0, order]), 9)
    # a leaf acked through BoltSide.ack while a stretch is open, then more in order
    ack(_leaf(s + 20))
    ack(_leaf(s + 21))
    ex.bolt.ack(_leaf(s + 30))
    got = flush(_leaf(s + 22), _leaf(s + 23))
    assert got == (True, False, (spout, [0, 0, [s + 20, s + 21, s + 30, s + 22, s + 23]]), 14)
    # a one-root tuple whose acks make its whole tree, found at the flush: after them
    ack(_leaf(s + 40))
    ack(_leaf(s + 40 + 10, ids=s + 40 + 10 + 0))
    got = flush(_leaf(s + 41))
    assert got == (True, False, (spout, [0, 0, [s + 40, s + 41, s + 50]]), 17)
    # a stretch whose next root is not the next one ends there
    assert flush(_leaf(s + 60), _leaf(s + 62)) == (
        True, False, (spout, [0, 0, [s + 60, s + 62]]), 19)
    assert not sent


@pytest.mark.skipif(PURE, reason="TUPLEFLOW_PURE_PYTHON is set: no C LeafRun")
def test_a_leaf_run_takes_only_roots_and_is_emptied_by_take():
    from runtime.engine.hot import _hot

    run, leaves = _hot.LeafRun(), []
    ack = _hot.Ack(lambda tup: None, leaves, [], {}, *_tuple_types(), lambda tup: None, run)
    top = (1 << 64) - 1  # no stretch carries on to it: it goes on the list
    for root in (top - 2, top - 1, top):
        ack(_leaf(root))
    assert (len(run), leaves, run.take(), run.take(), len(run)) == (
        2, [top], (top - 2, 2), None, 0)
    for odd in (-1, 1 << 64, "7"):  # no stretch starts with what is no root
        leaves.clear()
        ack(_leaf(odd))
        assert (leaves, len(run)) == ([odd], 0)
    leaves.clear()
    for root in (7, 8, 10, 9):
        ack(_leaf(root))
    assert (leaves, run.take()) == ([10, 9], (7, 2))
    with pytest.raises(TypeError):
        _hot.Ack(lambda tup: None, leaves, [], {}, *_tuple_types(), lambda tup: None, [])


def _tuple_types():
    from runtime.model.api import OneFieldTuple, Tuple

    return Tuple, OneFieldTuple
