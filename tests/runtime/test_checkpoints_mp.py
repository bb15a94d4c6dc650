"""Checkpointed state with real processes (issue 21, part 2): a stateful word count from
the embedded log, whose counter tasks, checkpoint spout and log spouts are SIGKILLed at
random moments; the committed state must equal a batch count of the log every time.

Waits poll the store and the master's statistics with deadlines; the only sleeps pace
the chaos."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter

import cloudpickle
import psutil
import pytest

from runtime import Topology
from runtime.sources import EmbeddedLog
from runtime.testing import (
    ListSink,
    ListSpout,
    PacedLogSpout,
    PassOn,
    StatefulWordCount,
    read_sink,
    replaced,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORDS = [f"w{(i * 7) % 101}" for i in range(30_000)]
RATE = 2500  # words a second per spout task, until the kills are over (then unpaced)
INTERVAL = 0.3  # seconds between checkpoints
GO = "go"  # a file in the run directory: once it exists the spouts are no longer paced


def go(running) -> None:
    """End the spouts' pace (``rate_until=GO``): the faults are over, and the rest of the
    input only has to be read, as fast as the topology takes it."""
    open(os.path.join(running.run_dir, GO), "w").close()  # noqa: SIM115 - closed at once


def fill_log(root, words=WORDS) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic("words", 4)
        for i in range(0, len(words), 1000):
            log.append_many("words", [f'"{w}"'.encode() for w in words[i:i + 1000]],
                            partition=(i // 1000) % 4)


def word_count(root, name: str) -> Topology:
    topo = Topology(name)
    topo.spout("words", PacedLogSpout("words", root=str(root), fields=["word"], batch_size=100,
                                      rate=RATE, rate_until=GO), parallelism=2)
    topo.bolt("upper", PassOn, parallelism=2).shuffle_grouping("words")
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("upper", ["word"])
    return topo


def counted(running) -> int:
    return sum(running.state("count").values())


def committed_id(running) -> int:
    return (running.checkpoint() or {"id": 0})["id"]


def victim(running, component, rng, tupleflow_processes):
    """A random running instance of ``component``, as a psutil process of this test."""
    ours = {p.pid: p for p in tupleflow_processes()}
    stats = running.wait_until(lambda s: any(x.component == component and x.state == "running"
                                             and x.pid in ours for x in s), timeout=30)
    chosen = rng.choice([s for s in stats if s.component == component
                         and s.state == "running" and s.pid in ours])
    return chosen, ours[chosen.pid]


def kill_in_turn(running, victims, rng, tupleflow_processes, pause: float = 0.6,
                 before_kill=lambda: None) -> list[tuple[str, int]]:
    """SIGKILL a random task of each of ``victims`` in turn, each after a new checkpoint
    committed and up to ``pause`` seconds more, and wait for its replacement; calls
    ``before_kill()`` just before each. Returns the (component, task) killed."""
    killed = []
    for i, component in enumerate(victims):
        before = committed_id(running)
        wait_for(lambda b=before: committed_id(running) > b, 180 if i == 0 else 60,
                 "a checkpoint to commit")  # the first after every container started
        time.sleep(rng.uniform(0.0, pause))  # paces the chaos; not a synchronisation
        chosen, proc = victim(running, component, rng, tupleflow_processes)
        before_kill()
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
            killed.append((chosen.component, chosen.task))
        running.wait_until(replaced(chosen), timeout=30)
    return killed


def run_with_kills(root, name: str, kills: int, seed: int, tupleflow_processes, **options):
    """Submit, SIGKILL ``kills`` random victims, wait for the whole log to be committed;
    return the committed state, what was killed and the checkpoint figures."""
    rng = random.Random(seed)
    fill_log(root)
    with word_count(root, name).submit(checkpoint_interval=INTERVAL, **options) as running:
        victims = ["count", "__checkpoint", "words"]
        killed = kill_in_turn(running, [victims[i % 3] for i in range(kills)], rng,
                              tupleflow_processes)
        go(running)
        wait_for(lambda: counted(running) >= len(WORDS), 120, "the whole log to be committed")
        state = running.state("count")
        checkpoint = running.checkpoint()
        stats = running.statistics()
    return state, killed, checkpoint, stats


def test_sigkills_of_counters_checkpoint_spout_and_log_spouts_count_each_word_once(
        tmp_path, tupleflow_processes):
    seed = random.randrange(1 << 30)
    state, killed, checkpoint, stats = run_with_kills(
        tmp_path, "ckpt-chaos", 6, seed, tupleflow_processes)
    print(f"\n[checkpoints] seed {seed}; killed {killed}; last checkpoint {checkpoint}")
    assert len(killed) == 6
    assert state == dict(Counter(WORDS)), f"seed {seed}"
    assert sum(s.restarts for s in stats if s.component in ("count", "words")) >= 4


def test_redis_store_holds_the_same_exact_state(tmp_path, redis_server, tupleflow_processes):
    state, killed, _, _ = run_with_kills(tmp_path, "ckpt-redis", 2, 7, tupleflow_processes,
                                         state_store=redis_server.url)
    assert len(killed) == 2
    assert state == dict(Counter(WORDS))


def test_two_containers_count_each_word_once_after_kills(tmp_path, tupleflow_processes):
    """The barriers, markers and PREPARED messages cross the stream managers: the counters,
    the checkpoint spout and the log spouts are spread over two containers, each killed
    once mid-stream; the committed state is still the batch count."""
    state, killed, checkpoint, stats = run_with_kills(
        tmp_path, "ckpt-two", 3, 21, tupleflow_processes, containers=2)
    print(f"\n[checkpoints, 2 containers] killed {killed}; last checkpoint {checkpoint}")
    assert [c for c, _ in killed] == ["count", "__checkpoint", "words"]
    assert {s.container for s in stats if s.component == "count"} == {0, 1}
    assert {s.container for s in stats if s.component == "words"} == {0, 1}
    assert state == dict(Counter(WORDS))


def test_a_killed_container_rolls_back_and_counts_each_word_once(tmp_path, tupleflow_processes):
    """A whole container (its stream manager, so every task it holds) SIGKILLed between
    two checkpoints: its tasks come back in a new container, the topology rolls back, and
    the committed state is still the batch count."""
    fill_log(tmp_path)
    with word_count(tmp_path, "ckpt-container").submit(checkpoint_interval=INTERVAL,
                                                       containers=2) as running:
        wait_for(lambda: committed_id(running) > 1, 60, "a second checkpoint to commit")
        before = counted(running)
        old = psutil.Process(running.status()["containers"][1])
        old.send_signal(signal.SIGKILL)
        wait_for(lambda: running.status()["containers"].get(1) not in (None, old.pid), 60,
                 "a new stream manager for container 1")
        go(running)
        wait_for(lambda: counted(running) >= len(WORDS), 120, "the whole log to be committed")
        state = running.state("count")
        stats = running.statistics()
    assert before < len(WORDS)  # the kill came mid-stream
    assert any(s.restarts for s in stats if s.container == 1)
    assert state == dict(Counter(WORDS))


def test_without_checkpoints_a_stateful_bolt_counts_in_its_process(tmp_path):
    """The instance process gives a StatefulBolt its (unsaved) state after prepare, as the
    in-memory twin does: the counts reach a sink."""
    topo = Topology("plain-state")
    topo.spout("s", ListSpout([["a"], ["b"], ["a"]], fields=["word"]))
    topo.bolt("count", StatefulWordCount).shuffle_grouping("s")
    topo.bolt("sink", ListSink).shuffle_grouping("count")
    with topo.submit() as running:
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) == 3, 60, "three counts")
        counts = read_sink(running.run_dir, "sink")
    assert sorted(map(tuple, counts)) == [("a", 1), ("a", 2), ("b", 1)]


def submit_rewindless(name: str, spout):
    """``spout`` (two tasks, one that cannot rewind) -> 2 x PassOn -> 2 x StatefulWordCount,
    submitted with checkpoints, and the warning that its tuples are at least once."""
    topo = Topology(name)
    topo.spout("words", spout, parallelism=2)
    topo.bolt("upper", PassOn, parallelism=2).shuffle_grouping("words")
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("upper", ["word"])
    with pytest.warns(UserWarning, match="spout 'words' cannot be rewound.*at least once"):
        return topo.submit(checkpoint_interval=INTERVAL)


def test_a_replaying_spout_that_cannot_rewind_loses_no_update_after_kills(
        tmp_path, tupleflow_processes):
    """A ListSpout(replay=True) cannot rewind: its acks wait for the checkpoint holding its
    tuples to commit, a rollback fails the rest and it emits them again. With the counters
    and the checkpoint spout SIGKILLed (not the spout, whose process holds its pending
    tuples), the committed state is the batch count."""
    words = WORDS[:6000]
    spout = ListSpout([[w] for w in words], fields=["word"], replay=True, rate=150,
                      rate_until=GO)
    with submit_rewindless("ckpt-queue-mp", spout) as running:
        seen: list[int] = []
        killed = kill_in_turn(running, ["count", "__checkpoint", "count", "count"],
                              random.Random(5), tupleflow_processes,
                              before_kill=lambda: seen.append(counted(running)))
        go(running)
        wait_for(lambda: counted(running) >= len(words), 120, "every word committed")
        state = running.state("count")
    print(f"\n[queue spout] killed {killed}; committed before each kill {seen}")
    assert len(killed) == 4 and sum(n < len(words) for n in seen) >= 3
    assert state == dict(Counter(words))


def test_a_redis_queue_spout_loses_no_update_after_kills(tmp_path, tupleflow_processes,
                                                        redis_url):
    """The same with a real broker: a RedisQueueSpout cannot rewind either (a queue has no
    position to go back to). Its acks (XACK) wait for the checkpoint holding its items to
    commit; a rollback fails the others, which it aborts so that they are opened again.
    The queue is filled a fifth at a time, just before each kill of a counter or the
    checkpoint spout (so each lands with items in flight) and after the last."""
    from runtime.sources import RedisQueueSpout
    from runtime.sources._redis import RedisQueue

    words = WORDS[:5000]
    chunks = [words[i:i + 1000] for i in range(0, len(words), 1000)]

    def put(chunk: list[str]) -> None:
        with RedisQueue("words", redis_url) as q:
            q.put_many([f'"{w}"'.encode() for w in chunk])

    put(chunks.pop(0))
    spout = RedisQueueSpout("words", redis_url, fields=["word"], batch_size=50,
                            max_retries=None, retry_delay=0.05)
    with submit_rewindless("ckpt-redis-mp", spout) as running:
        seen: list[int] = []

        def before_kill() -> None:
            seen.append(counted(running))
            put(chunks.pop(0))

        killed = kill_in_turn(running, ["count", "__checkpoint", "count", "count"],
                              random.Random(7), tupleflow_processes, before_kill=before_kill)
        wait_for(lambda: counted(running) >= len(words), 120, "every word committed")
        state = running.state("count")

        def queue_stats():
            with RedisQueue("words", redis_url) as q:
                return q.statistics()

        # acks go out once their checkpoint commits, batched: each item acked, once
        queue = wait_for(lambda: (s := queue_stats()).acked >= len(words) and s, 60,
                         "every item acked")
    print(f"\n[redis queue spout] killed {killed}; committed before each kill {seen}; "
          f"queue {queue}")
    assert len(killed) == 4 and not chunks
    assert sum(n < len(words) for n in seen) >= 3
    assert state == dict(Counter(words))
    assert queue.acked == len(words) and queue.visible == queue.open == queue.dead == 0
