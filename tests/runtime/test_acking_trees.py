"""At least once on trees of tuples, through the in-memory twin (issue 17): a bolt's
tracked tuples travel as ANCHORED triples, a task's acks of one root are XORed into one
per flush, a BasicBolt's ack is folded into its last child, and a tree found whole at a
bolt is told to its spout task, not to the acker (docs/internals/acker.md, "One root,
flat", "Acks combined", "An ack folded into a child")."""

from __future__ import annotations

import functools
import random
from collections import deque

import pytest

from runtime import BasicBolt, Bolt, FailedException, Spout, Topology, wire
from runtime.testing import InMemoryCluster

# each test runs with the C closures and with the Python ones (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("closures")


class Sentences(Spout):
    """Emits ``sentences`` sentences of words ``w0 w1 ...``, each with its index as msg_id."""

    outputs = ["sentence"]

    def __init__(self, sentences: list[str]) -> None:
        self.sentences = sentences

    def open(self, config, context):
        self.n = 0
        self.acked: list = []
        self.failed: list = []

    def next_tuple(self):
        if self.n < len(self.sentences):
            self.emit([self.sentences[self.n]], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Split(BasicBolt):
    """Emits each word of its sentence (anchored by the runtime); "bad" fails it, and
    "slow" asks the acker for more time first."""

    outputs = ["word"]

    def process(self, tup):
        words = tup.values[0].split()
        if "slow" in words:
            self.reset_timeout(tup)
        for word in words:
            self.emit([word])
        if "bad" in words:
            raise FailedException("a bad sentence")


class Count(Bolt):
    """Counts words; acks each, except "lost" (neither acked nor failed) and "no"
    (failed)."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.counts: dict = {}

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        if word == "no":
            self.fail(tup)
        elif word != "lost":
            self.ack(tup)


def sentences_topology(sentences: list[str], counters: int = 1, splitters: int = 1) -> Topology:
    topo = Topology("trees")
    topo.spout("feed", Sentences(sentences))
    topo.bolt("split", Split, parallelism=splitters).shuffle_grouping("feed")
    topo.bolt("count", Count, parallelism=counters).fields_grouping("split", ["word"])
    return topo


class _Tee(deque):
    """The cluster's frame queue, keeping every frame put on it, decoded, in ``sent``."""

    def __init__(self, frames, sent: list) -> None:
        super().__init__(frames)
        self.sent = sent

    def append(self, frame) -> None:
        header, body = frame
        self.sent.append((wire.parse_header(header), wire.decode_batch(body)))
        super().append(frame)


def frames_of(cluster: InMemoryCluster) -> list:
    """Every frame an executor sends from now on, as (header, decoded body)."""
    sent: list = []
    cluster.frames = _Tee(cluster.frames, sent)  # every executor sends through it
    return sent


def words(n: int, per: int) -> list[str]:
    return [" ".join(f"w{i}x{k}" for k in range(per)) for i in range(n)]


def kinds(sent: list, kind: int) -> list:
    return [(h, body) for h, body in sent if h.kind == kind]


@pytest.mark.parametrize("batch_size", [2000, 7])
def test_one_counter_completes_every_tree_without_the_acker(batch_size):
    """spout -> split (BasicBolt) -> count: the split's ack rides on its last word, the
    count XORs a sentence's words into one value, equal to the root: the tree is whole,
    and the spout hears it straight from the count. A batch that fills up mid-sentence
    waits for the sentence's last word (batch_size 7: frames of 10 words)."""
    topo = sentences_topology(words(20, 10))
    # no latency bound: the spout emits all 20 sentences at once, so the frames' sizes
    # are the batches' (the bound's own tests are in test_latency_bound.py)
    with InMemoryCluster(topo, ackers=1, batch_size=batch_size,
                         target_latency=None) as cluster:
        sent = frames_of(cluster)
        cluster.run_until_idle()
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert sorted(feed.acked) == list(range(20)) and feed.failed == []
        assert kinds(sent, wire.ACKS) == []  # not one message to the acker
        assert kinds(sent, wire.TRACKED) == [] and kinds(sent, wire.ANCHORED)
        assert {len(body) for _, body in kinds(sent, wire.ANCHORED)} <= {30, 600}
        (split,) = cluster.plan.component_tasks()["split"]
        assert all(h.src != split for h, _ in kinds(sent, wire.COMPLETED))
        stats = {s.component: s for s in cluster.statistics()}
        assert (stats["split"].acked, stats["count"].acked) == (20, 200)
        assert (stats["__acker"].executed, stats["__acker"].pending) == (0, 0)
        assert cluster.exceptions == []


def test_an_anchored_batch_is_flat_root_and_ack_val_triples():
    with InMemoryCluster(sentences_topology(["a b c"]), ackers=1) as cluster:
        sent = frames_of(cluster)
        cluster.run_until_idle()
        ((_, body),) = kinds(sent, wire.ANCHORED)
        assert body[0::3] == ["a", "b", "c"]
        (root,) = set(body[1::3])
        (_, (first, count, others)), = kinds(sent, wire.COMPLETED)
        assert (first, count, others) == (root, 1, []) and root >> 63 == 1
        edges = body[2::3]  # each word's edge id, its ack value as the counter gets it
        assert all(0 < e < 1 << 63 for e in edges[:2])  # drawn edges; the last holds the
        assert edges[0] ^ edges[1] ^ edges[2] == root  # split's ack too: all XOR to root


@pytest.mark.parametrize(("counters", "splitters"), [(2, 1), (3, 2)])
def test_several_counters_send_one_ack_per_root_each(counters, splitters):
    """A sentence's words spread over the counters: each sends the acker one XOR per
    sentence, whatever its number of words, and the acker completes every tree."""
    with InMemoryCluster(sentences_topology(words(30, 10), counters, splitters),
                         ackers=2) as cluster:
        sent = frames_of(cluster)
        cluster.run_until_idle()
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert sorted(feed.acked) == list(range(30)) and feed.failed == []
        messages = [m for _, body in kinds(sent, wire.ACKS) for m in body]
        assert set(messages[0::3]) <= {wire.ACK_ACK}
        per_task: dict = {}
        for h, body in kinds(sent, wire.ACKS):
            for root in body[1::3]:
                per_task[(h.src, root)] = per_task.get((h.src, root), 0) + 1
        assert per_task and max(per_task.values()) == 1  # one per root per counter flush
        assert len(messages) // 3 <= 30 * counters
        assert sum(s.pending for s in cluster.statistics() if s.component == "__acker") == 0
        assert cluster.exceptions == []


@pytest.mark.parametrize("sentence", ["a no c", "a b bad", "lost b c", "a slow c"])
def test_a_failed_lost_or_renewed_word_decides_its_sentence_once(sentence):
    """Folding and combining change nothing of the outcomes: a failed word or sentence
    fails it, a lost word times it out, a reset keeps it and it completes."""
    topo = sentences_topology(["x y z", sentence, "p q r"])
    with InMemoryCluster(topo, ackers=1, message_timeout=10.0) as cluster:
        cluster.run_until_idle()
        for _ in range(60):
            cluster.advance(0.5)
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        bad = {"a no c", "a b bad", "lost b c"}
        assert sorted(feed.acked) == ([0, 2] if sentence in bad else [0, 1, 2])
        assert feed.failed == ([1] if sentence in bad else [])
        assert sum(s.pending for s in cluster.statistics() if s.component == "__acker") == 0


class Chain(Bolt):
    """Emits 0-3 children anchored to its input, sometimes to it twice or also to a kept
    tuple (across trees), then acks, fails (1 in 40) or keeps its input to ack later."""

    outputs = ["sentence"]

    def prepare(self, config, context):
        self.rng = random.Random(context.task_id)
        self.kept: list = []

    def process(self, tup):
        depth = len(tup.values[0])
        for _ in range(self.rng.choice([0, 1, 2, 3]) if depth < 4 else 0):
            anchors = [tup] * self.rng.choice([1, 1, 1, 2])
            if self.kept and self.rng.random() < 0.2:
                anchors.append(self.kept[0])
            self.emit([tup.values[0] + "."], anchors=anchors)
        if self.rng.random() < 0.025:
            self.fail(tup)
        elif self.rng.random() < 0.2:
            self.kept.append(tup)
        else:
            self.ack(tup)
        while len(self.kept) > 2:
            self.ack(self.kept.pop(0))

    def process_tick(self, tup):
        while self.kept:
            self.ack(self.kept.pop())


class Shuffled(InMemoryCluster):
    """The twin with every frame put at a random place of the queue: frames between two
    tasks overtake each other, acks overtake the tuples whose trees they complete."""

    def __init__(self, *args, seed: int, **kwargs) -> None:
        self.rng = random.Random(seed)
        super().__init__(*args, **kwargs)

    def _send(self, header: bytes, body: bytes) -> None:
        self.frames.insert(self.rng.randrange(len(self.frames) + 1), (header, body))


@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("seed", [None, 1, 2])
def test_random_trees_through_basic_and_plain_bolts_with_batching(eager, seed):
    """Random DAGs (joins across trees, double anchors, held tuples, fails) through a
    BasicBolt and two layers of plain bolts (their ANCHORED frames in the data loop),
    flushed at once or batched on the timer, the frames delivered in order or shuffled
    (``seed``), beside one-tuple trees (leaves): each tree is acked or failed exactly
    once, nothing is left at the acker, and each leaf's ack is counted once."""
    topo = Topology("random-trees")
    topo.spout("feed", Sentences(["s"] * 300))
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("feed")
    topo.bolt("a", Chain, parallelism=2, tick_freq_secs=1).shuffle_grouping(
        "split").shuffle_grouping("a")
    topo.bolt("b", Chain, tick_freq_secs=1).fields_grouping("a", ["sentence"])
    topo.spout("solo", Sentences(["w"] * 300))  # one-tuple trees, in RUN frames
    topo.bolt("leaf", Count).shuffle_grouping("solo")
    # no latency bound: all 300 trees are in flight in the 10 simulated seconds
    twin = InMemoryCluster if seed is None else functools.partial(Shuffled, seed=seed)
    with twin(topo, ackers=2, eager_flush=eager, message_timeout=30.0,
              target_latency=None) as cluster:
        for _ in range(40):
            cluster.run_until_idle()
            cluster.advance(0.25)
        cluster.run_until_idle()
        feed, solo = (cluster.user_object(*cluster.plan.component_tasks()[spout])
                      for spout in ("feed", "solo"))
        decided = feed.acked + feed.failed
        assert sorted(decided) == list(range(300))  # each once
        assert feed.failed and feed.acked
        for _ in range(20):  # the tombstones of failed trees, and late acks, expire quietly
            cluster.advance(5.0)
        assert sorted(feed.acked + feed.failed) == list(range(300))
        assert sorted(solo.acked) == list(range(300)) and not solo.failed
        stats = cluster.statistics()
        assert sum(s.pending for s in stats if s.component == "__acker") == 0
        assert [s.acked for s in stats if s.component == "leaf"] == [300]
        assert cluster.exceptions == []


@pytest.mark.parametrize("body", [[["a"], 5], [["a"], 5, "x"], [["a"], "r", 1],
                                  [["a"], 5, 1.5, ["b"]]])
def test_a_malformed_anchored_body_is_refused_as_a_wire_error(body):
    with InMemoryCluster(sentences_topology(["a"]), ackers=1) as cluster:
        (split,), (count,) = (cluster.plan.component_tasks()[c] for c in ("split", "count"))
        stream = cluster.plan.stream_ids()[("split", "default")]
        ex = cluster.executors[count]
        with pytest.raises(wire.WireError):
            ex.on_frame(wire.data_header(wire.ANCHORED, stream, count, split),
                        wire.pack(body))


class Mixed(BasicBolt):
    """Per sentence, children every way a BasicBolt can emit: on the default stream
    (the written-out way), anchored by hand, on a second stream; "arity" emits a child
    of the wrong arity, which must be refused naming the component."""

    outputs = {"default": ["word"], "side": ["word"]}

    def process(self, tup):
        first, *rest = tup.values[0].split()
        if first == "arity":
            self.emit([first, first])
        self.emit([first])
        self.emit([first], anchors=[tup])
        self.emit([first], stream="side")
        for word in rest:
            self.emit([word])


def test_every_way_a_basic_bolt_emits_keeps_its_trees_whole():
    """The BasicBolt's written-out default-stream emit (wiring._basic_default_first)
    and the general ways it falls back to, mixed in one input and over two counters:
    every tree completes once and the acker holds nothing; a wrong arity is refused."""
    topo = Topology("mixed")
    topo.spout("feed", Sentences(words(40, 5) + ["arity w"]))
    topo.bolt("split", Mixed).shuffle_grouping("feed")
    topo.bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("side", Count).shuffle_grouping("split", "side")
    with InMemoryCluster(topo, ackers=1, batch_size=7, target_latency=None,
                         message_timeout=30.0) as cluster:
        cluster.run_until_idle()
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert sorted(feed.acked) == list(range(40)) and feed.failed == []
        acked = {}
        for s in cluster.statistics():
            acked[s.component] = acked.get(s.component, 0) + s.acked
        assert (acked["count"], acked["side"]) == (40 * 6, 40)
        assert sum(s.pending for s in cluster.statistics() if s.component == "__acker") == 0
        (error,) = cluster.exceptions
        assert error["component"] == "split" and "emitted 2 values" in error["error"]


class Echo(Bolt):
    """Emits its input again, anchored to it, then acks it."""

    outputs = ["sentence"]

    def process(self, tup):
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


def test_a_tracked_tuple_counts_as_emitted_once_however_many_tasks_it_goes_to():
    """Tracked tuples of one copy count as emitted as their batch is sent, those sent
    to k != 1 tasks at their emit, and their copies not again: whatever the way (a
    BasicBolt's children written out, anchored by hand, on a second stream; a spout's and
    a plain bolt's tuples copied to several tasks), each tuple counts once, and no
    reading between the steps is below the one before."""
    topo = Topology("emitted")
    topo.spout("feed", Sentences(words(10, 3)))  # to split, and to both echo tasks
    topo.bolt("split", Mixed).shuffle_grouping("feed")
    topo.bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("side", Count).shuffle_grouping("split", "side")
    topo.bolt("echo", Echo, parallelism=2).all_grouping("feed")
    topo.bolt("tail", Count, parallelism=2).all_grouping("echo")  # two copies each
    with InMemoryCluster(topo, ackers=1, batch_size=4, eager_flush=False,
                         target_latency=None) as cluster:
        readings = []  # read between single steps, while copies wait in their batches
        for _ in range(60):
            cluster.step(1)
            readings.append({s.task: s.emitted for s in cluster.statistics()})
            cluster.advance(0.01)
        assert min(min(reading.values()) for reading in readings) >= 0
        for before, after in zip(readings, readings[1:]):
            assert all(after[task] >= n for task, n in before.items()), (before, after)
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert sorted(feed.acked) == list(range(10)) and feed.failed == []
        emitted: dict = {}
        for s in cluster.statistics():
            emitted[s.component] = emitted.get(s.component, 0) + s.emitted
        # split: per sentence its first word three ways, then the two others
        assert emitted == {"feed": 10, "split": 50, "echo": 20, "count": 0, "side": 0,
                           "tail": 0, "__acker": 0}
        assert cluster.exceptions == []


class RenewingCount(Count):
    """:class:`Count` that asks for more time for "renew" before acking it: a bolt's
    tuple of one root (its ack value in ``ack_val``) turned into its ``{root: value}``."""

    def process(self, tup):
        if tup.values[0] == "renew":
            self.reset_timeout(tup)
            self.reset_timeout(tup)  # a second time: already a map
        super().process(tup)


@pytest.mark.parametrize("counters", [1, 2])
def test_a_renewed_word_of_an_anchored_frame_still_completes_its_tree(counters):
    topo = Topology("renewed")
    topo.spout("feed", Sentences(["a renew b", "renew", "c d renew"]))
    topo.bolt("split", Split).shuffle_grouping("feed")
    topo.bolt("count", RenewingCount, parallelism=counters).fields_grouping(
        "split", ["word"])
    with InMemoryCluster(topo, ackers=1, target_latency=None) as cluster:
        cluster.run_until_idle()
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert (sorted(feed.acked), feed.failed) == ([0, 1, 2], [])
        assert sum(s.pending for s in cluster.statistics() if s.component == "__acker") == 0
        assert cluster.exceptions == []


class _Red(str):
    """A str subclass as a key: it hashes as its str, through ``field_hash``."""


# keys of every kind a fields grouping hashes: str (written out in the BasicBolt's emit),
# a str subclass and every other type (through ``pick`` itself); equal values, equal hash
KEYS = ["storm", "", "naïve", "w7", _Red("red"), "red", 7, 7.0, True, 1, -3, 1.5, b"ab",
        None, [1, "a"], (1, "a")]


class Indexes(Spout):
    """Emits each index of ``KEYS`` once, tracked (its index as msg_id)."""

    outputs = ["i"]

    def open(self, config, context):
        self.n, self.acked = 0, []

    def next_tuple(self):
        if self.n < len(KEYS):
            self.emit([self.n], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)


class Keys(BasicBolt):
    """Emits ``KEYS[i]`` on its default stream (alone, or after ``i`` when ``fields``
    has two), so that a tracked child takes the written-out emit."""

    outputs = ["key"]

    def process(self, tup):
        i = tup.values[0]
        self.emit([KEYS[i]] if len(self.outputs) == 1 else [i, KEYS[i]])


class Where(Bolt):
    """Keeps each key it gets with its task index, and acks it."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.got, self.index = [], context.task_index

    def process(self, tup):
        self.got.append((tup.values[-1], self.index))
        self.ack(tup)


@pytest.mark.parametrize("fields", [["key"], ["i", "key"]])
@pytest.mark.parametrize("ackers", [1, 0])
def test_a_basic_bolts_children_reach_the_fields_task_of_their_key_tracked_or_not(
        fields, ackers):
    """The written-out emit hashes a str key itself (FieldsGrouping.str_key); a str
    subclass and any other key go through the grouping's ``pick``, and untracked tuples
    through the batch split at the flush: every key, tracked (``ackers=1``) or not, reaches
    the task ``field_hash(key) % n``, and every tree completes."""
    from runtime.groupings import field_hash

    topo = Topology("keys")
    topo.spout("feed", Indexes())
    keys = type("TwoKeys" if len(fields) == 2 else "OneKey", (Keys,), {"outputs": fields})
    topo.bolt("keys", keys).shuffle_grouping("feed")
    topo.bolt("where", Where, parallelism=3).fields_grouping("keys", ["key"])
    with InMemoryCluster(topo, ackers=ackers, batch_size=4, target_latency=None) as cluster:
        cluster.run_until_idle()
        got = [pair for task in cluster.plan.component_tasks()["where"]
               for pair in cluster.user_object(task).got]
        assert sorted(map(repr, (key for key, _ in got))) == sorted(
            repr(list(k) if type(k) is tuple else str(k) if type(k) is _Red else k)
            for k in KEYS)  # (msgpack carries a tuple as a list, a str subclass as str)
        assert [index for _, index in got] == [field_hash(key) % 3 for key, _ in got]
        assert len({index for _, index in got}) == 3  # the keys are spread over the tasks
        feed = cluster.user_object(*cluster.plan.component_tasks()["feed"])
        assert sorted(feed.acked) == list(range(len(KEYS)))
        assert cluster.exceptions == []
