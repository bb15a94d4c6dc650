"""Persistent aggregation in real processes: a word count over the embedded log into a
SQLite file or a real redis-server, with acking on, while an aggregator instance (or the
spout) is SIGKILLed mid-run. The counts must come out exactly right, and every process
must have called multi_put at most once per batch and multi_get once per batch it ended.

The test appends the log in chunks while the topology runs, so the kill lands while
batches are flowing; the waits poll the spout's ledger and the master's statistics."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import cloudpickle
import pytest

from runtime import BatchLogSpout, Count, RedisMap, SQLiteMap, Topology
from runtime.sources import EmbeddedLog
from runtime.testing import replaced, wait_for
from runtime.trident import read_statistics
from runtime.trident._spout import BatchLedger

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CHUNKS, PER_CHUNK = 15, 250  # sentences appended to the log, chunk by chunk
GATE_TXID = 3  # the batch during whose write an instance is killed
SENTENCES = [f"w{i % 31} w{(i * 7) % 53} w{(i * 13) % 97}" for i in range(CHUNKS * PER_CHUNK)]
TRUTH = Counter(w for s in SENTENCES for w in s.split())


def split(values):
    return [[w] for w in values[0].split()]


def topology(name: str, state, root, ledger) -> Topology:
    topo = Topology(name, ackers=1, message_timeout=3.0)
    topo.spout("sentences", BatchLogSpout("sentences", root, fields=["word"], batch_size=300,
                                          each=split, ledger=ledger))
    topo.persistent_aggregate("count", "sentences", ["word"], Count(), state, parallelism=2)
    return topo


def append(log: EmbeddedLog, chunk: int) -> None:
    part = SENTENCES[chunk * PER_CHUNK:(chunk + 1) * PER_CHUNK]
    log.append_many("sentences", [json.dumps(s).encode() for s in part])


def consumed_all(ledger: BatchLedger, log: EmbeddedLog) -> bool:
    """The last batch reaches the end of every partition, and it is complete."""
    last = ledger.last()
    if last is None or ledger.completed() != last[0]:
        return False
    ends = {p: end for p, _start, end in last[1]}
    return all(ends.get(p, 0) == log.end_offset("sentences", p) for p in range(2))


class Gate:
    """Holds the first process that reaches ``multi_put`` of batch ``txid`` (``where`` =
    "before" or "after" the write): it writes its pid to ``reached`` and waits there until
    the test creates ``release`` (or kills it). Later processes pass straight through."""

    def __init__(self, folder, txid: int, where: str) -> None:
        self.folder, self.txid, self.where = str(folder), txid, where

    def reached(self):
        return os.path.join(self.folder, "reached")

    def release(self) -> None:
        open(os.path.join(self.folder, "release"), "w").close()

    def at(self, txid: int, where: str) -> None:
        if (txid, where) != (self.txid, self.where):
            return
        try:
            fd = os.open(self.reached(), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        released = os.path.join(self.folder, "release")
        wait_for(lambda: os.path.exists(released), 120, "the test to release the gate")


def gated(base):
    class Gated(base):
        def __init__(self, gate: Gate, *args) -> None:
            super().__init__(*args)
            self.gate = gate

        def multi_put(self, keys, values):
            txid = values[0].txid
            self.gate.at(txid, "before")
            super().multi_put(keys, values)
            self.gate.at(txid, "after")

    Gated.__name__ = f"Gated{base.__name__}"
    return Gated


GatedSQLiteMap, GatedRedisMap = gated(SQLiteMap), gated(RedisMap)


def ours(pid: int, tupleflow_processes):
    """The psutil process of ``pid`` if it is one of this test's (never a reused pid)."""
    found = {p.pid: p for p in tupleflow_processes()}
    assert pid in found, f"pid {pid} is not one of this test's processes"
    return found[pid]


def spout_process(running, tupleflow_processes):
    stats = [s for s in running.statistics() if s.component == "sentences"]
    return stats[0], ours(stats[0].pid, tupleflow_processes)


def run_with_a_kill(name, state, victim, tmp_path, tupleflow_processes):
    """Run the word count; when the gate holds an aggregator in batch GATE_TXID's write,
    SIGKILL it (victim "count"), or SIGKILL the spout and then open the gate (victim
    "sentences"); append the rest of the log and wait until all of it is counted."""
    root, ledger_path = tmp_path / "log", tmp_path / "ledger.sqlite"
    with EmbeddedLog(root) as log:
        log.create_topic("sentences", 2)
        for chunk in range(CHUNKS // 3):
            append(log, chunk)
        ledger = BatchLedger(ledger_path)
        with topology(name, state, root, ledger_path).submit() as running:
            reached = Path(state.gate.reached())
            wait_for(lambda: reached.exists() and reached.read_text(), 60,
                     f"an aggregator to reach the gate of batch {GATE_TXID}")
            held = int(reached.read_text())
            if victim == "count":
                killed = next(s for s in running.statistics() if s.pid == held)
                ours(held, tupleflow_processes).send_signal(signal.SIGKILL)
            else:
                killed, proc = spout_process(running, tupleflow_processes)
                proc.send_signal(signal.SIGKILL)
                state.gate.release()  # the held batch commits; its ack finds no spout
            for chunk in range(CHUNKS // 3, CHUNKS):
                append(log, chunk)
            running.wait_until(replaced(killed), timeout=60)
            wait_for(lambda: consumed_all(ledger, log), 90, "every record counted")
            stats = read_statistics(running.run_dir, "count")
            final = running.statistics()
            restarts = sum(s.restarts for s in final if s.component == victim)
        batches = ledger.last()[0]
        ledger.close()
    assert restarts >= 1
    skipped = sum(s["batches"]["skipped_batches"] for s in stats)
    print(f"\n[trident] {name}: {batches} batches; killed {victim} task {killed.task} at "
          f"batch {GATE_TXID}; batch ends skipped as already applied: {skipped}")
    assert skipped >= 1, "the replayed batch was applied somewhere it had been already"
    return stats


def check_calls(stats) -> None:
    """Per process: at most one multi_put per txid; one multi_get per batch ended with
    tuples (committed, or skipped as already applied)."""
    assert stats, "no aggregator reported"
    for s in stats:
        batches, calls = s["batches"], s["map"]
        assert set(calls["puts_by_txid"].values()) <= {1}, s
        assert calls["multi_puts"] == batches["committed"], s
        assert calls["multi_gets"] == batches["committed"] + batches["skipped_batches"], s
    assert sum(s["batches"]["committed"] for s in stats) > 0


@pytest.mark.parametrize("victim, where", [("count", "before"), ("count", "after"),
                                           ("sentences", "before")])
def test_sqlite_word_count_is_exact_when_an_instance_is_killed(victim, where, tmp_path,
                                                               tupleflow_processes):
    gate = Gate(tmp_path, GATE_TXID, where)
    state = GatedSQLiteMap(gate, tmp_path / "counts.db", "words")
    stats = run_with_a_kill(f"tri-sql-{victim}-{where}", state, victim, tmp_path,
                            tupleflow_processes)
    assert Counter(state.snapshot()) == TRUTH
    check_calls(stats)


@pytest.mark.parametrize("victim, where", [("count", "after"), ("sentences", "before")])
def test_redis_word_count_is_exact_when_an_instance_is_killed(victim, where, redis_url,
                                                              tmp_path, tupleflow_processes):
    gate = Gate(tmp_path, GATE_TXID, where)
    state = GatedRedisMap(gate, redis_url, "wc")
    stats = run_with_a_kill(f"tri-redis-{victim}-{where}", state, victim, tmp_path,
                            tupleflow_processes)
    assert Counter(state.snapshot()) == TRUTH
    check_calls(stats)


def test_every_batch_reaches_its_tasks_before_its_marker_across_containers(tmp_path):
    """Tuples and end markers travel one link in order (instance -> stream manager ->
    peer stream manager -> instance): with no failure, no marker ever finds a tuple
    missing, over two containers and three aggregator tasks."""
    root, ledger_path = tmp_path / "log", tmp_path / "ledger.sqlite"
    state = SQLiteMap(tmp_path / "counts.db")
    topo = Topology("tri-order", ackers=1, message_timeout=30.0, batch_size=64)
    topo.spout("sentences", BatchLogSpout("sentences", root, fields=["word"], batch_size=200,
                                          each=split, ledger=ledger_path))
    topo.persistent_aggregate("count", "sentences", ["word"], Count(), state, parallelism=3)
    with EmbeddedLog(root) as log:
        log.create_topic("sentences", 2)
        for chunk in range(CHUNKS):
            append(log, chunk)
        ledger = BatchLedger(ledger_path)
        with topo.submit(containers=2) as running:
            wait_for(lambda: consumed_all(ledger, log), 90, "every record counted")
            stats = read_statistics(running.run_dir, "count")
            spout_failed = sum(s.failed for s in running.statistics()
                               if s.component == "sentences")
        ledger.close()
    assert Counter(state.snapshot()) == TRUTH
    assert {s["task"] for s in stats} == set(running.plan.component_tasks()["count"])
    assert [s["batches"]["failed"] for s in stats] == [0, 0, 0] and spout_failed == 0
    check_calls(stats)
