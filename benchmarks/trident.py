"""Exact word count (persistent_aggregate) from the embedded log and from Kafka, in one run.

Workload
    ``--sentences`` sentences of three words (the word count's vocabulary and chooser, see
    _common.py) are loaded, before anything is timed, as JSON strings into a topic of 4
    partitions (sentence n to partition n % 4) of the embedded log and of librdkafka's mock
    cluster (an in-process Kafka-protocol broker on loopback: not a real broker's speed).
    Each topology is the batch spout (``BatchLogSpout`` or ``KafkaBatchSpout``,
    ``--batch`` sentences a batch, ``each`` splitting them into words) feeding
    ``persistent_aggregate(Count())`` into a ``SQLiteMap``, 2 aggregator tasks, 1 acker.

Implementations (``--only NAME``; the default runs both)
    log     BatchLogSpout
    kafka   KafkaBatchSpout

Output (one line each, wrapped here)::

    RESULT name=trident-log workload=trident batch=1000 sentences=20000 batches=20
           words=57000 seconds=1.234 wps=46191
    RESULT name=kafka-vs-log workload=trident batch=1000 ratio=0.91

``seconds`` runs from the completion of batch 1 (start-up excluded) to the completion of
the last batch, read from the spout's ledger every 20 ms; ``words`` are those of batches
2 to the last. Each run checks that the state equals the true counts and prints ``FAILED
...`` on stderr instead when it does not::

    python benchmarks/trident.py --sentences 20000 --batch 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import BenchmarkError, checked_seconds, vocabulary, word_chooser

from runtime import BatchLogSpout, Count, KafkaBatchSpout, SQLiteMap, Topology
from runtime.sources import EmbeddedLog
from runtime.trident._spout import BatchLedger

PARTITIONS = 4  # the mock cluster's topic has 4
TIMEOUT = 600.0  # seconds a run may take


def sentences(n: int) -> list[str]:
    choose, words = word_chooser(), vocabulary()
    return [" ".join(choose(words) for _ in range(3)) for _ in range(n)]


def split(values):
    return [[w] for w in values[0].split()]


def log_source(folder: Path, lines: list[str], batch: int, ledger: Path):
    with EmbeddedLog(folder / "log") as log:
        log.create_topic("sentences", PARTITIONS)
        for p in range(PARTITIONS):
            log.append_many("sentences", [json.dumps(s).encode() for s in lines[p::PARTITIONS]],
                            partition=p)
    return BatchLogSpout("sentences", folder / "log", fields=["word"], batch_size=batch,
                         each=split, ledger=ledger), None


def kafka_source(folder: Path, lines: list[str], batch: int, ledger: Path):
    from confluent_kafka import Producer

    producer = Producer({"test.mock.num.brokers": 1})  # the cluster lives while it does
    brokers = ",".join(f"{b.host}:{b.port}"
                       for b in producer.list_topics(timeout=10).brokers.values())
    for n, s in enumerate(lines):
        producer.produce("sentences", json.dumps(s).encode(), partition=n % PARTITIONS)
        producer.poll(0)
    if producer.flush(60):
        raise BenchmarkError("kafka: the mock cluster did not take every sentence")
    return KafkaBatchSpout("sentences", brokers, fields=["word"], batch_size=batch,
                           each=split, ledger=ledger), producer


SOURCES = {"log": log_source, "kafka": kafka_source}


def run(name: str, lines: list[str], batch: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"trident-{name}-") as tmp:
        folder = Path(tmp)
        ledger_path = folder / "ledger.sqlite"
        spout, keep_alive = SOURCES[name](folder, lines, batch, ledger_path)
        state = SQLiteMap(folder / "counts.db")
        topo = Topology(f"bench-trident-{name}", ackers=1)
        topo.spout("sentences", spout)
        topo.persistent_aggregate("count", "sentences", ["word"], Count(), state, parallelism=2)
        ends = {p: len(lines[p::PARTITIONS]) for p in range(PARTITIONS)}
        ledger = BatchLedger(ledger_path)
        with topo.submit():
            first, start = _wait(lambda: ledger.completed() >= 1 and ledger.meta(1))
            last, end = _wait(lambda: _finished(ledger, ends))
        ledger.close()
        if Counter(state.snapshot()) != Counter(w for s in lines for w in s.split()):
            raise BenchmarkError(f"{name}: the state is not the true count")
        del keep_alive
    words = 3 * (len(lines) - sum(e - s for _p, s, e in first))
    seconds = checked_seconds(name, end - start)
    return {"batches": last, "words": words, "seconds": seconds, "wps": words / seconds}


def _finished(ledger: BatchLedger, ends: dict[int, int]):
    last = ledger.last()
    if last and ledger.completed() == last[0] and {p: e for p, _s, e in last[1]} == ends:
        return last[0]
    return None


def _wait(predicate):
    """Poll ``predicate`` every 20 ms: its first true value and the time it was seen."""
    deadline = time.monotonic() + TIMEOUT
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"timed out after {TIMEOUT} s")
        time.sleep(0.02)
    return value, time.monotonic()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sentences", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--only", action="append", choices=sorted(SOURCES))
    args = p.parse_args(argv)
    lines, results, failed = sentences(args.sentences), {}, False
    for name in args.only or list(SOURCES):
        try:
            r = results[name] = run(name, lines, args.batch)
        except BenchmarkError as error:
            print(f"FAILED {error}", file=sys.stderr, flush=True)
            failed = True
            continue
        print(f"RESULT name=trident-{name} workload=trident batch={args.batch} "
              f"sentences={args.sentences} batches={r['batches']} words={r['words']} "
              f"seconds={r['seconds']:.3f} wps={r['wps']:.0f}", flush=True)
    if {"log", "kafka"} <= set(results):
        ratio = results["kafka"]["wps"] / results["log"]["wps"]
        print(f"RESULT name=kafka-vs-log workload=trident batch={args.batch} "
              f"ratio={ratio:.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
