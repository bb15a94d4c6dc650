"""One-field streams send bare values (runtime/wire/__init__.py, "One-field streams"): what a bolt
sees, what is sent, and every path a tuple of such a stream can take. In memory."""

from __future__ import annotations

from collections import deque

import pytest

from runtime import Bolt, Spout, Topology, Tuple, wire
from runtime.testing import InMemoryCluster, ListSink, ListSpout


class Seen(Bolt):
    """Keeps what it was given: the Tuple's class check, its values and a field by name."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.seen = []

    def process(self, tup):
        self.seen.append((isinstance(tup, Tuple), type(tup.values), tup.values,
                          tup[tup.fields[0]], tup.stream))
        self.ack(tup)


def sent_frames(cluster: InMemoryCluster) -> list[tuple[wire.Header, list]]:
    """Every frame sent from now on, decoded (the cluster's executors send through it)."""
    sent: list = []

    class Tee(deque):  # the cluster's frame queue, which every executor sends through
        def append(self, frame) -> None:
            sent.append((wire.parse_header(frame[0]), wire.decode_batch(frame[1])))
            super().append(frame)

    cluster.frames = Tee(cluster.frames)
    return sent


class TwoStreams(Spout):
    outputs = {"default": ["word"], "pairs": ["word", "n"]}

    def open(self, config, context):
        self.left = 3

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([f"w{self.left}"])
            self.emit([f"w{self.left}", self.left], stream="pairs")


def seen_by(cluster, component):
    (task,) = cluster.plan.component_tasks()[component]
    return cluster.user_object(task).seen


@pytest.mark.parametrize("ackers", [0, 1])
def test_a_one_field_stream_travels_bare_and_bolts_get_value_lists(ackers):
    topo = Topology("bare")
    topo.spout("words", TwoStreams)
    topo.bolt("one", Seen).shuffle_grouping("words")
    topo.bolt("two", Seen).shuffle_grouping("words", "pairs")
    with InMemoryCluster(topo, ackers=ackers) as cluster:
        sent = sent_frames(cluster)
        cluster.run_until_idle()
        tuples = {h.stream: batch for h, batch in sent if h.kind == wire.DATA}
        ids = cluster.plan.stream_ids()
        assert tuples[ids[("words", "default")]] == ["w2", "w1", "w0"]
        assert tuples[ids[("words", "pairs")]] == [["w2", 2], ["w1", 1], ["w0", 0]]
        assert seen_by(cluster, "one") == [(True, list, [w], w, "default")
                                           for w in ("w2", "w1", "w0")]
        assert [s[2] for s in seen_by(cluster, "two")] == [["w2", 2], ["w1", 1], ["w0", 0]]
        assert cluster.exceptions == []


@pytest.mark.parametrize("ackers", [0, 1])
def test_a_value_that_is_itself_a_list_arrives_whole(ackers):
    values = [[[1, 2]], [[]], [[["x"]]], [None]]
    topo = Topology("nested")
    topo.spout("lists", ListSpout(values, fields=["xs"]))
    topo.bolt("sink", ListSink).shuffle_grouping("lists")
    with InMemoryCluster(topo, ackers=ackers) as cluster:
        cluster.run_until_idle()
        assert sorted(cluster.sink("sink"), key=repr) == sorted(values, key=repr)
        assert cluster.exceptions == []


class TrackedAndNot(Spout):
    """Emits every word twice: tracked (a run) and untracked (a batch)."""

    outputs = ["word"]

    def open(self, config, context):
        self.words = [f"word{i}" for i in range(40)]

    def next_tuple(self):
        if self.words:
            word = self.words.pop()
            self.emit([word], msg_id=word)
            self.emit([word])


def test_a_word_goes_to_the_same_task_tracked_or_not():
    topo = Topology("same-task")
    topo.spout("words", TrackedAndNot)
    topo.bolt("count", Seen, parallelism=3).fields_grouping("words", ["word"])
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = sent_frames(cluster)
        cluster.run_until_idle()
        kinds = {h.kind for h, _ in sent}
        assert {wire.RUN, wire.DATA} <= kinds  # both ways were taken
        where: dict[str, set[int]] = {}
        for task in cluster.plan.component_tasks()["count"]:
            for _, _, values, word, _ in cluster.user_object(task).seen:
                assert values == [word]
                where.setdefault(word, set()).add(task)
        assert len(where) == 40 and all(len(tasks) == 1 for tasks in where.values())
        assert sum(len(cluster.user_object(t).seen)
                   for t in cluster.plan.component_tasks()["count"]) == 80


class KeysTrackedAndNot(Spout):
    """Every key twice, tracked and untracked, on a stream of one field or of two."""

    outputs: list[str] = []

    def open(self, config, context):
        self.keys = [f"key{i}" for i in range(30)] + list(range(30)) + [1.5, None, b"b"]

    def next_tuple(self):
        if self.keys:
            key = self.keys.pop()
            values = [key] if len(self.outputs) == 1 else [key, "x"]
            self.emit(values, msg_id=repr(key))
            self.emit(values)


@pytest.mark.parametrize("fields", [["k"], ["k", "other"]])
@pytest.mark.parametrize("subscribers", [1, 2])
def test_a_key_goes_to_the_same_task_by_every_fields_grouping_path(fields, subscribers):
    """Untracked (the batch split, of bare values or of lists) and tracked: in a run (one
    subscriber) or in a tracked batch (two), all through ``groupings.field_hash``."""
    spout = type("Keys", (KeysTrackedAndNot,), {"outputs": fields})
    topo = Topology("same-task-every-path")
    topo.spout("keys", spout)
    for i in range(subscribers):
        topo.bolt(f"seen{i}", Seen, parallelism=3).fields_grouping("keys", ["k"])
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = sent_frames(cluster)
        cluster.run_until_idle()
        tracked = wire.RUN if subscribers == 1 else wire.TRACKED
        assert {tracked, wire.DATA} <= {h.kind for h, _ in sent}  # both ways were taken
        for i in range(subscribers):
            where: dict = {}
            for task in cluster.plan.component_tasks()[f"seen{i}"]:
                for _, _, _, key, _ in cluster.user_object(task).seen:
                    where.setdefault(repr(key), set()).add(task)
            assert len(where) == 63 and all(len(tasks) == 1 for tasks in where.values())
        assert cluster.exceptions == []


class Splitter(Bolt):
    """Anchors each word of a sentence to it (tracked frames of a one-field stream)."""

    outputs = ["word"]

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word], anchors=[tup])
        self.ack(tup)


def test_anchored_emits_on_a_one_field_stream_complete_their_trees():
    topo = Topology("anchored")
    topo.spout("sentences", ListSpout([["a b"], ["c d e"]], fields=["sentence"]))
    topo.bolt("split", Splitter).shuffle_grouping("sentences")
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("split")
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = sent_frames(cluster)
        cluster.run_until_idle()
        tracked = [batch for h, batch in sent if h.kind == wire.ANCHORED]  # a bolt's: triples
        assert tracked and all(type(entry) is str for batch in tracked for entry in batch[::3])
        assert sorted(cluster.sink("sink")) == [["a"], ["b"], ["c"], ["d"], ["e"]]
        (spout,) = [cluster.user_object(t) for t in cluster.plan.component_tasks()["sentences"]]
        assert sorted(spout.acked) == [0, 1] and spout.failed == []
        assert cluster.exceptions == []


@pytest.mark.parametrize("ackers", [0, 1])
def test_a_value_that_cannot_be_sent_is_dropped_and_reported_by_field(ackers):
    topo = Topology("unsendable")
    topo.spout("numbers", ListSpout([[1], [object()], [3]], fields=["n"]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with InMemoryCluster(topo, ackers=ackers) as cluster:
        cluster.run_until_idle()
        assert sorted(cluster.sink("sink")) == [[1], [3]]
        (report,) = cluster.exceptions
        assert not report["fatal"] and "cannot send field(s) n (object)" in report["error"]


class Emits(Spout):
    outputs = ["word"]

    def __init__(self, values, msg_id=None):
        self.values, self.msg_id = values, msg_id

    def next_tuple(self):
        self.emit(self.values, msg_id=self.msg_id)


@pytest.mark.parametrize("values", [{"a"}, {"k": "a"}])
@pytest.mark.parametrize(("ackers", "msg_id"), [(0, None), (0, 7), (1, 7)])
def test_emitting_values_that_cannot_be_read_by_position_is_a_clear_error(values, ackers,
                                                                            msg_id):
    topo = Topology("unreadable")
    topo.spout("words", Emits(values, msg_id))
    topo.bolt("sink", ListSink).shuffle_grouping("words")
    with InMemoryCluster(topo, ackers=ackers) as cluster:
        cluster.step(1)
        assert cluster.exceptions and cluster.exceptions[0]["fatal"]
        error = cluster.exceptions[0]["error"]
        assert "stream 'default': emitted a " in error and "emit a list of values" in error
        assert cluster.sink("sink") == []


class ListsAndTuples(Spout):
    """Tracked words on a one-field stream, as a list (the run's one-step unpack) and as
    a tuple (the checked way, which takes a tuple too), then a list of two values."""

    outputs = ["word"]

    def open(self, config, context):
        self.left, self.acked = 40, []

    def next_tuple(self):
        if self.left:
            self.left -= 1
            word = f"w{self.left}"
            self.emit([word] if self.left % 2 else (word,), msg_id=word)

    def ack(self, msg_id):
        self.acked.append(msg_id)


def test_a_tracked_one_field_emit_takes_lists_in_runs_and_anything_else_the_checked_way():
    topo = Topology("tracked-bare")
    topo.spout("words", ListsAndTuples)
    topo.bolt("seen", Seen).shuffle_grouping("words")
    with InMemoryCluster(topo, ackers=1) as cluster:
        sent = sent_frames(cluster)
        cluster.run_until_idle()
        words = [f"w{i}" for i in range(40)]
        assert {wire.RUN, wire.TRACKED} <= {h.kind for h, _ in sent}  # both ways taken
        assert sorted(s[3] for s in seen_by(cluster, "seen")) == sorted(words)
        (task,) = cluster.plan.component_tasks()["words"]
        spout = cluster.user_object(task)
        assert sorted(spout.acked) == sorted(words)  # each once
        with pytest.raises(ValueError, match="emitted 2 values but the stream declares 1"):
            spout.emit(["a", "b"], msg_id="two")
        with pytest.raises(ValueError, match="emitted a set"):
            spout.emit({"a"}, msg_id="set")
        assert cluster.exceptions == []
