"""Soak: the sentence topology for ``--minutes`` minutes under random faults (issue 23).

Sentences from the embedded log (a replayable source: ``{"k": key, "s": seq, "text": ...}``,
each key's sentences in order) go ``src (2) -> split (2) -> count (2, fields grouping on the
word) -> sink (2, fields grouping on the key)`` in two containers with two ackers, paced at
``--rate`` sentences a second. Every ``--fault-every`` seconds on average (3 to 8 s by
default, at random) one instance of a random component (a spout, a bolt or an acker) is
killed with SIGKILL.

Every ``--sample`` seconds the resident memory of every process is read; a ``RSS`` line
gives it per role (the master, each stream manager, and for each component its largest
instance: a leak in an instance grows it, while a restart, which the faults cause all the
time, only makes one instance small for a while) and the sum of every process. After the
run the sink's words go through the per-key sequence checker, the key being ``(sentence
key, word position)``: a word that never arrived is lost.

The last line::

    RESULT name=soak minutes=10 sentences=... words=... faults=... lost=0 duplicates=...
           rss_warm_mb=... rss_peak_mb=... worst_role=master worst_ratio=1.05 flat=yes ok=yes

Per role, the warm level is the median RSS over the 30 s after the warm-up (the first 10% of
the run, at least 30 s) and the ratio is the highest RSS after it over that level;
``worst_ratio`` is the highest ratio of any role, ``flat`` says whether it is <= 1.2 (the
issue's bound), ``lost`` counts the words of sentences the log spouts committed (acked)
that never reached the sink, ``undone`` the sentences not committed when the wait for the
last ones ended, and ``ok`` says whether it is flat, nothing was lost and nothing undone.
``rss_warm_mb`` and ``rss_peak_mb`` are the same for the sum over every process (noisy: a
killed instance is missing from it until it is back). A ``# roles`` line gives every role's ratio.

Run: ``python benchmarks/soak.py --minutes 10``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import cloudpickle
import psutil
from chaos import PARTITIONS, Paced, wait_flowing

from runtime import BasicBolt, Bolt, Topology
from runtime.sources import EmbeddedLog, LogSpout
from runtime.sources._log_spout import read_checkpoints
from runtime.testing import ListSink, SequenceChecker, read_sink

if __name__ != "__main__":
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = 50
WORDS = ["the", "cow", "jumped", "over", "the", "moon", "an", "apple", "a", "day", "keeps",
         "the", "doctor", "away", "four", "score", "and", "seven", "years", "ago", "snow",
         "white", "and", "the", "seven", "dwarfs"]
BOUND = 1.2  # flat: the peak after warm-up is at most this times the warm level
OPTIONS = {"ackers": 2, "message_timeout": 5.0, "max_spout_pending": 200,
           "stats_interval": 1.0}
VICTIMS = ("src", "split", "count", "sink", "__acker")


def sentence(i: int) -> str:
    """Sentence i: 4 to 7 words, as many for every sentence of its key (i % KEYS), so that
    each (key, word position) gets every sequence number 0, 1, 2 ..."""
    n = 4 + (i % KEYS) % 4
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n))


class PacedLogSpout(Paced, LogSpout):
    pass


class Split(BasicBolt):
    outputs = ["k", "s", "pos", "word"]

    def process(self, tup):
        for pos, word in enumerate(tup["text"].split()):
            self.emit([tup["k"], tup["s"], pos, word])


class Count(Bolt):
    """Counts words (the state a restart loses: at-least-once counts are not exact)."""

    outputs = ["k", "s", "pos", "count"]

    def prepare(self, config, context):
        self.counts: dict[str, int] = defaultdict(int)

    def process(self, tup):
        self.counts[tup["word"]] += 1
        self.emit([tup["k"], tup["s"], tup["pos"], self.counts[tup["word"]]], anchors=[tup])
        self.ack(tup)


def fill_log(root: str, sentences: int) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic("soak", PARTITIONS)
        by_partition: dict[int, list[bytes]] = defaultdict(list)
        for i in range(sentences):
            body = {"k": i % KEYS, "s": i // KEYS, "text": sentence(i)}
            by_partition[(i % KEYS) % PARTITIONS].append(json.dumps(body).encode())
        for p, payloads in by_partition.items():
            log.append_many("soak", payloads, partition=p)


def topology(root: str, ck: str, rate: float) -> Topology:
    spout = PacedLogSpout("soak", root, checkpoint_dir=ck, fields=("k", "s", "text"),
                          batch_size=20, max_uncommitted=500, commit_interval=0.5)
    spout.rate = rate / 2
    topo = Topology("soak", **OPTIONS)
    topo.spout("src", spout, parallelism=2)
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("src")
    topo.bolt("count", Count, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("sink", ListSink, parallelism=2).fields_grouping("count", ["k"])
    return topo


def rss_by_role(running) -> tuple[dict[str, int], int]:
    """Resident bytes per role (master, stmgr<c>, each component's largest instance), and
    the sum over every process."""
    status = running.status()
    roles = {"master": status["pid"], **{f"stmgr{c}": pid
                                         for c, pid in status["containers"].items()}}
    out = {role: _rss(pid) for role, pid in roles.items()}
    total = sum(out.values())
    for s in running.statistics():
        if s.pid:
            rss = _rss(s.pid)
            out[s.component] = max(out.get(s.component, 0), rss)
            total += rss
    return out, total


def _rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def kill_random(running, rng: random.Random) -> str | None:
    component = rng.choice(VICTIMS)
    alive = [s for s in running.statistics() if s.component == component
             and s.state == "running" and s.pid]
    if not alive:
        return None
    victim = rng.choice(alive)
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim.pid, signal.SIGKILL)
    return f"{component}[{victim.task}]"


def expected(sentences: int, committed: dict[int, int] | None = None
             ) -> dict[tuple[int, int], int]:
    """(key, word position) -> how many sentences of that key have a word there; with
    ``committed`` (partition -> committed offset), only the sentences acked at the source."""
    out: dict[tuple[int, int], int] = defaultdict(int)
    offsets: dict[int, int] = defaultdict(int)  # partition -> offset of sentence i
    for i in range(sentences):
        p = (i % KEYS) % PARTITIONS
        offsets[p] += 1
        if committed is not None and offsets[p] > committed.get(p, 0):
            continue
        for pos in range(len(sentence(i).split())):
            out[(i % KEYS, pos)] += 1
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=300.0, help="sentences a second")
    parser.add_argument("--fault-every", type=float, nargs=2, default=(3.0, 8.0),
                        metavar=("MIN", "MAX"), help="seconds between faults, at random")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between RSS reads")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds of warm-up (default: 10%% of the run, at least 30 s); "
                             "the master keeps per-second metrics for 10 minutes, so its "
                             "memory grows for 600 s by design: use --warmup 600 to see past it")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    seconds = args.minutes * 60
    sentences = int(args.rate * seconds)
    folder = tempfile.mkdtemp(prefix="tupleflow-soak-")
    print(f"# soak seed={seed} minutes={args.minutes} sentences={sentences}", flush=True)
    try:
        fill_log(os.path.join(folder, "log"), sentences)
        result = soak(args, rng, folder, sentences, seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(result, flush=True)
    return 0 if "ok=yes" in result else 1


def soak(args, rng, folder: str, sentences: int, seconds: float) -> str:
    topo = topology(os.path.join(folder, "log"), os.path.join(folder, "ck"), args.rate)
    samples: list[tuple[float, dict[str, int], int]] = []
    faults = 0
    with topo.submit(containers=2) as running:
        wait_flowing(running)
        start = time.monotonic()
        next_fault = start + rng.uniform(*args.fault_every)
        next_sample = start
        while time.monotonic() - start < seconds:
            now = time.monotonic()
            if now >= next_fault:
                faults += kill_random(running, rng) is not None
                next_fault = now + rng.uniform(*args.fault_every)
            if now >= next_sample:
                roles, total = rss_by_role(running)
                samples.append((now - start, roles, total))
                print(f"RSS t={now - start:.0f} total_mb={total / 2**20:.0f} "
                      + " ".join(f"{r}={b / 2**20:.0f}" for r, b in sorted(roles.items())),
                      flush=True)
                next_sample = now + args.sample
            time.sleep(0.2)  # the loop's period: pacing faults and samples, not a sync
        words = settle(running, sentences)
    committed = read_checkpoints(Path(folder) / "ck", "soak")
    return verdict(samples, words, sentences, committed, faults, args.minutes, args.warmup)


def settle(running, sentences: int, timeout: float = 300.0) -> list:
    """Faults over: wait until every sentence's words reached the sink (or the timeout)."""
    want = sum(expected(sentences).values())
    deadline = time.monotonic() + timeout
    while True:
        words = read_sink(running.run_dir, "sink")
        if len({(k, s, pos) for k, s, pos, _ in words}) >= want or time.monotonic() > deadline:
            return words
        time.sleep(5.0)  # re-reading the sink is costly: a slow poll of a condition


def verdict(samples, words, sentences: int, committed: dict[int, int], faults: int,
            minutes: float, warmup: float | None = None) -> str:
    """Lost: a word of a sentence the source counts done (below the committed offsets) that
    never reached the sink. Sentences not done when the wait ended are ``undone``."""
    checker = SequenceChecker()
    for k, s, pos, _count in words:
        checker.see((k, pos), s)
    seq = checker.report(expected(sentences, committed))
    undone = sentences - sum(committed.values())
    seconds = minutes * 60
    warm_at = warmup if warmup is not None else max(30.0, 0.1 * seconds)
    level, peak = flatness([(t, total) for t, _, total in samples], warm_at)
    roles = {role: ratio(flatness([(t, r[role]) for t, r, _ in samples if r.get(role)],
                                  warm_at))
             for role in {role for _, r, _ in samples for role in r}}
    worst = max(roles, key=roles.get)
    flat = roles[worst] <= BOUND
    ok = flat and seq.total_lost == 0 and undone == 0  # words beyond a commit: in flight
    print(f"# sequence: {seq}", flush=True)
    print("# roles (peak after warm-up / warm level): "
          + " ".join(f"{r}={x:.2f}" for r, x in sorted(roles.items())), flush=True)
    return (f"RESULT name=soak minutes={minutes:g} sentences={sentences} "
            f"words={seq.received} faults={faults} lost={seq.total_lost} undone={undone} "
            f"duplicates={seq.duplicates} rss_warm_mb={level / 2**20:.0f} "
            f"rss_peak_mb={peak / 2**20:.0f} worst_role={worst} "
            f"worst_ratio={roles[worst]:.2f} flat={'yes' if flat else 'no'} "
            f"ok={'yes' if ok else 'no'}")


def flatness(points: list[tuple[float, int]], warm_at: float) -> tuple[float, float]:
    """(warm level, peak after warm-up) of ``(t, bytes)`` points: the level is the median
    over the 30 s after ``warm_at`` (the last point when the run is shorter).

    >>> flatness([(0, 5), (10, 10), (20, 12), (30, 11), (40, 13)], 10)
    (11, 13)
    """
    warm = [b for t, b in points if warm_at <= t < warm_at + 30.0] or [points[-1][1]]
    later = [b for t, b in points if t >= warm_at] or warm
    return statistics.median(warm), max(later)


def ratio(level_peak: tuple[float, float]) -> float:
    level, peak = level_peak
    return peak / level if level else 1.0


if __name__ == "__main__":
    sys.exit(main())
