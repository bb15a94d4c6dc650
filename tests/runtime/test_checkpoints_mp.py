"""Checkpointed state with real processes (issue 21, part 2): a stateful word count from
the embedded log, whose counter tasks, checkpoint spout and log spouts are SIGKILLed at
random moments; the committed state must equal a batch count of the log every time.

Waits poll the store and the master's statistics with deadlines; the only sleeps pace
the chaos."""

from __future__ import annotations

import contextlib
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
from runtime.testing import PacedLogSpout, PassOn, StatefulWordCount, replaced, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORDS = [f"w{(i * 7) % 101}" for i in range(30_000)]
RATE = 2500  # words a second per spout task: the run lasts long enough to be hit
INTERVAL = 0.3  # seconds between checkpoints


def fill_log(root, words=WORDS) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic("words", 4)
        for i in range(0, len(words), 1000):
            log.append_many("words", [f'"{w}"'.encode() for w in words[i:i + 1000]],
                            partition=(i // 1000) % 4)


def word_count(root, name: str) -> Topology:
    topo = Topology(name)
    topo.spout("words", PacedLogSpout("words", root=str(root), fields=["word"], batch_size=100,
                                      rate=RATE), parallelism=2)
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


def run_with_kills(root, name: str, kills: int, seed: int, tupleflow_processes, **options):
    """Submit, SIGKILL ``kills`` random victims, wait for the whole log to be committed;
    return the committed state, what was killed and the checkpoint figures."""
    rng = random.Random(seed)
    fill_log(root)
    killed = []
    with word_count(root, name).submit(checkpoint_interval=INTERVAL, **options) as running:
        victims = ["count", "__checkpoint", "words"]
        for i in range(kills):
            before = committed_id(running)
            wait_for(lambda b=before: committed_id(running) > b, 60, "a checkpoint to commit")
            time.sleep(rng.uniform(0.0, 0.6))  # paces the chaos; not a synchronisation
            chosen, proc = victim(running, victims[i % len(victims)], rng, tupleflow_processes)
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
                killed.append((chosen.component, chosen.task))
            running.wait_until(replaced(chosen), timeout=30)
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
