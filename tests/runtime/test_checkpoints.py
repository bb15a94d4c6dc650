"""Checkpointed state in the in-memory cluster: the protocol's alignment, commit and
rollback (issue 21, part 2), with the memory store and a real embedded log."""

from __future__ import annotations

import random
import sys
from collections import Counter

import cloudpickle
import pytest

from runtime import Topology, TopologyError, wire
from runtime.model.api import rewindable
from runtime.model.constants import CHECKPOINTER
from runtime.sources import EmbeddedLog, KafkaSpout, LogSpout
from runtime.state import State, StatefulBolt, _protocol
from runtime.testing import InMemoryCluster, ListSpout, PassOn, StatefulWordCount

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORDS = [f"w{i % 37}" for i in range(3000)]
INTERVAL = 1.0


def fill_log(root, words=WORDS, partitions=3) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic("words", partitions)
        for i, w in enumerate(words):
            log.append_json("words", w, key=i)


def word_count(root, *, spouts=2, uppers=2, counters=2) -> Topology:
    topo = Topology("ckpt-count")
    topo.spout("words", LogSpout("words", root=str(root), fields=["word"], batch_size=50),
               parallelism=spouts)
    topo.bolt("upper", PassOn, parallelism=uppers).shuffle_grouping("words")
    topo.bolt("count", StatefulWordCount, parallelism=counters).fields_grouping("upper", ["word"])
    return topo


def cluster(topo) -> InMemoryCluster:
    return InMemoryCluster(topo, checkpoint_interval=INTERVAL, state_store="memory")


def drain(c: InMemoryCluster, rounds: int = 200) -> None:
    """Run and checkpoint until the log is read and a checkpoint after it committed."""
    for _ in range(rounds):
        c.step(5)
        c.advance(INTERVAL)
    c.run_until_idle()
    c.advance(INTERVAL)  # one more checkpoint, after everything was counted
    c.advance(INTERVAL)


def test_the_committed_state_equals_a_batch_count(tmp_path):
    fill_log(tmp_path)
    with cluster(word_count(tmp_path)) as c:
        drain(c)
        assert c.state("count") == dict(Counter(WORDS))


def test_nothing_moves_before_the_first_rollback_names_the_epoch(tmp_path):
    fill_log(tmp_path)
    with cluster(word_count(tmp_path)) as c:
        spout = c.executors[next(t for t in c.plan.tasks if t.component == "words").task]
        assert (spout.epoch, spout.step(10)) == (0, 0)  # the ROLLBACK is still on its way
        c.deliver()
        assert spout.epoch >= 1 and spout.step(10) > 0
        assert c.state("count") == {}  # nothing committed yet


def chaos(c: InMemoryCluster, rng: random.Random, components, rounds: int, *,
          odds: float = 0.1, steps: int = 5, pause: float = 2.0) -> int:
    """``rounds`` rounds of up to ``steps`` spout calls, each followed, with ``odds``, by
    a restart from scratch of a random task of ``components``, then up to ``pause``
    checkpoint intervals of the fake clock. Returns the kills."""
    victims = [t.task for t in c.plan.tasks if t.component in components]
    kills = 0
    for _ in range(rounds):
        c.step(rng.randint(1, steps))
        if rng.random() < odds:
            c.kill(rng.choice(victims))
            kills += 1
        c.advance(INTERVAL * rng.random() * pause)
    return kills


@pytest.mark.parametrize("seed", range(6))
def test_kills_at_random_points_apply_no_update_twice(tmp_path, seed):
    """A counter task, the checkpoint spout, a log spout and a stateless bolt are
    restarted from scratch at random moments: the committed state stays exact."""
    fill_log(tmp_path)
    rng = random.Random(seed)
    with cluster(word_count(tmp_path)) as c:
        kills = chaos(c, rng, {t.component for t in c.plan.tasks} - {"__acker"}, 120)
        drain(c)
        assert kills > 3
        assert c.state("count") == dict(Counter(WORDS))
        ck = next(t.task for t in c.plan.tasks if t.component == CHECKPOINTER)
        assert c.executors[ck].committed > 0


class OneCounter:
    """The counter task of a running word count with one counter, fed by hand: ``data``
    and ``message`` hand it frames as from upper task ``a`` or ``b``."""

    def __init__(self, c: InMemoryCluster) -> None:
        c.run_until_idle()
        self.count = next(t.task for t in c.plan.tasks if t.component == "count")
        self.a, self.b = (t.task for t in c.plan.tasks if t.component == "upper")
        self.gate = c.executors[self.count]
        self.sid = c.plan.stream_ids()[("upper", "default")]

    def data(self, src: int, word: str) -> None:
        self.gate.on_frame(wire.data_header(wire.DATA, self.sid, self.count, src),
                           wire.encode_batch([word]))

    def message(self, op: int, src: int, cid, epoch: int | None = None) -> None:
        epoch = self.gate.epoch if epoch is None else epoch
        self.gate.on_frame(*_protocol.frame(op, epoch, cid, self.count, src))

    def counted(self, word: str):
        return self.gate.user.state.get(word)


@pytest.fixture
def counter(tmp_path):
    fill_log(tmp_path, words=[])
    with cluster(word_count(tmp_path, counters=1)) as c:
        yield OneCounter(c)


def test_a_bolt_holds_the_input_of_a_task_whose_barrier_came_until_all_came(counter):
    """Alignment, frame by frame: after the barrier from upper task A, A's tuples wait;
    B's are processed; once B's barrier comes the state is saved without A's later tuples,
    then A's are processed."""
    k, a, b = counter, counter.a, counter.b
    k.data(a, "x")
    k.message(_protocol.BARRIER, a, 99)
    k.data(a, "after")  # held: A already sent barrier 99
    k.data(b, "y")  # B's: before its barrier
    assert (k.counted("after"), k.counted("y")) == (None, 1)
    k.message(_protocol.BARRIER, b, 99)
    saved = State.from_snapshot(k.gate.store.load(99, _protocol.state_key("count", 0)))
    assert (saved.get("x"), saved.get("y"), saved.get("after")) == (1, 1, None)
    assert k.counted("after") == 1  # let go once aligned


def test_frames_sent_before_a_rollback_are_dropped_until_the_marker(counter):
    k, epoch = counter, counter.gate.epoch + 1
    k.message(_protocol.ROLLBACK, 999, None, epoch)
    k.data(k.a, "old")
    assert k.counted("old") is None  # A's marker has not come: sent before the rollback
    assert k.gate.report()["checkpoint"]["discarded_frames"] == 1
    k.message(_protocol.MARKER, k.a, None, epoch)
    k.data(k.a, "new")
    assert k.counted("new") == 1


def test_a_marker_of_a_newer_epoch_rolls_back_before_the_rollback_itself_comes(counter):
    """A's MARKER may overtake the checkpoint spout's ROLLBACK: it rolls back just as well."""
    k = counter
    k.data(k.a, "lost")
    k.message(_protocol.MARKER, k.a, None, k.gate.epoch + 1)
    assert k.counted("lost") is None  # restored to no checkpoint: empty
    k.data(k.a, "kept")
    k.data(k.b, "dropped")  # B's marker has not come
    assert (k.counted("kept"), k.counted("dropped")) == (1, None)


def test_checkpoints_need_ackers_off():
    topo = Topology("t")
    topo.spout("s", ListSpout([["a"]], fields=["w"]))
    with pytest.raises(TopologyError, match="ackers=0"):
        topo.physical_plan(1, checkpoint_interval=1.0, ackers=1)


def test_a_spout_that_cannot_rewind_is_warned_about():
    topo = Topology("t")
    topo.spout("s", ListSpout([["a"]], fields=["w"]))
    topo.bolt("c", StatefulWordCount).shuffle_grouping("s")
    with pytest.warns(UserWarning, match="spout 's' cannot be rewound.*at least once"):
        InMemoryCluster(topo, checkpoint_interval=1.0, state_store="memory").close()


def test_a_bad_state_store_is_refused_at_definition():
    topo = Topology("t")
    topo.spout("s", ListSpout([["a"]], fields=["w"]))
    with pytest.raises(TopologyError, match="state_store"):
        topo.physical_plan(1, checkpoint_interval=1.0, state_store="postgres")


def test_without_checkpoints_a_stateful_bolt_runs_on_an_unsaved_empty_state():
    topo = Topology("plain")
    topo.spout("s", ListSpout([["a"], ["b"], ["a"]], fields=["word"]))
    topo.bolt("c", StatefulWordCount).shuffle_grouping("s")
    with InMemoryCluster(topo) as c:
        c.run_until_idle()
        counter = c.user_object(next(t.task for t in c.plan.tasks if t.component == "c"))
        assert dict(counter.state.items()) == {"a": 2, "b": 1}


class Ordered(StatefulBolt):
    """Records the order of its lifecycle calls."""

    outputs = ["word"]

    def prepare(self, config, context):
        self.calls = ["prepare"]

    def init_state(self, state):
        self.calls.append(f"init_state({len(state)} keys)")
        self.state = state

    def process(self, tup):
        self.calls.append("process")


def test_without_checkpoints_the_driver_gives_the_state_once_after_prepare():
    topo = Topology("plain-order")
    topo.spout("s", ListSpout([["a"], ["b"]], fields=["word"]))
    topo.bolt("c", Ordered).shuffle_grouping("s")
    with InMemoryCluster(topo) as c:
        c.run_until_idle()
        bolt = c.user_object(next(t.task for t in c.plan.tasks if t.component == "c"))
        assert bolt.calls == ["prepare", "init_state(0 keys)", "process", "process"]


def test_a_spout_is_rewindable_when_its_class_says_where_it_is_and_goes_back(tmp_path):
    assert rewindable(LogSpout("words", root=str(tmp_path), fields=["word"]))  # not opened
    assert rewindable(KafkaSpout.__new__(KafkaSpout))
    assert not rewindable(ListSpout([["a"]], fields=["w"]))


def test_a_cyclic_topology_cannot_be_checkpointed():
    topo = Topology("loop")
    topo.spout("s", ListSpout([["a"]], fields=["word"]))
    a = topo.bolt("a", PassOn).shuffle_grouping("s")
    topo.bolt("b", PassOn).shuffle_grouping("a")
    a.shuffle_grouping("b")
    with pytest.raises(ValueError, match="acyclic topology, and .* is a cycle"):
        InMemoryCluster(topo, checkpoint_interval=1.0, state_store="memory")


class CountsUnderAnotherName(StatefulBolt):
    """Keeps its state as ``self.counts``: what is saved is the state it was given."""

    outputs = ["word", "count"]

    def init_state(self, state):
        self.counts = state

    def process(self, tup):
        word = tup["word"]
        self.counts.put(word, self.counts.get(word, 0) + 1)


def test_the_state_given_is_saved_whatever_the_bolt_calls_it(tmp_path):
    fill_log(tmp_path)
    topo = Topology("ckpt-named")
    topo.spout("words", LogSpout("words", root=str(tmp_path), fields=["word"], batch_size=50))
    topo.bolt("count", CountsUnderAnotherName, parallelism=2).fields_grouping("words", ["word"])
    with cluster(topo) as c:
        drain(c)
        assert c.state("count") == dict(Counter(WORDS))


# -- a spout that cannot rewind: at least once ----------------------------------------------

def queue_count(words, *, replay: bool) -> Topology:
    topo = Topology("ckpt-queue")
    topo.spout("words", ListSpout([[w] for w in words], fields=["word"], replay=replay),
               parallelism=2)
    topo.bolt("upper", PassOn, parallelism=2).shuffle_grouping("words")
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("upper", ["word"])
    return topo


def run_queue(words, seed: int, *, replay: bool) -> tuple[dict, list, int]:
    """The counters and the checkpoint spout restarted at random moments; the spouts (a
    ListSpout, which cannot rewind, and replays what fails when ``replay``) never are.
    Returns the committed state, what the spouts acked and the kills."""
    rng = random.Random(seed)
    with cluster(queue_count(words, replay=replay)) as c:
        kills = chaos(c, rng, ("count", CHECKPOINTER), 100, odds=0.12, steps=4, pause=1.0)
        drain(c)
        spouts = c.plan.component_tasks()["words"]
        acked = sorted(i for t in spouts for i in c.user_object(t).acked)
        return c.state("count"), acked, kills


@pytest.mark.parametrize("seed", range(3))
def test_a_replaying_spout_that_cannot_rewind_is_at_least_once(seed):
    """Its acks wait for the checkpoint that holds their tuples to commit; at a rollback
    the rest are failed, and ListSpout(replay=True) emits them again: no update is lost
    (and, since only the counters and the checkpoint spout are killed, none is doubled)."""
    words = WORDS[:1500]
    state, acked, kills = run_queue(words, seed, replay=True)
    assert kills >= 3
    assert state == dict(Counter(words))
    assert acked == list(range(len(words)))  # each acked once its checkpoint committed


def test_a_spout_that_cannot_rewind_nor_replay_loses_what_a_rollback_undid():
    """Without replay, ``fail`` drops the tuple: the rollback's undone updates are gone
    (what the warning at submit says)."""
    words = WORDS[:1500]
    state, acked, kills = run_queue(words, 0, replay=False)
    assert kills >= 3
    assert sum(state.values()) < len(words)
    assert len(acked) == sum(state.values())  # acked: exactly the committed updates
