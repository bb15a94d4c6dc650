"""Spout throughput from the embedded sources, against the word-count spout, in one run.

Workload
    The words of Heron's word count (``_common.vocabulary``, drawn with
    ``_common.word_chooser``) are loaded, before anything is timed, as JSON strings into
    an embedded-log topic of ``--partitions`` partitions and into an embedded queue. Each
    source's spout (``LogSpout``, ``QueueSpout``; ``--spouts`` tasks) decodes them and
    emits ``[word]`` to the counting bolts of ``benchmarks/wordcount.py`` by a fields
    grouping, acking off and on. The word-count spout (``wordcount.WordSpout``, no source
    behind it) runs in the same process, with the same options, as the reference.

Implementations (``--only NAME``; the default runs all four)
    wordcount   benchmarks/wordcount.py's tupleflow run, acking off and on.
    log         LogSpout -> count; each run has its own checkpoint directory.
    queue       QueueSpout -> count; the queue is refilled before each run
                (``--queue-tuples`` items: sqlite is slower than the log).
    kill        LogSpout -> count with acking on, ``--kill-tuples`` records; once the rate
                is steady the spout's process is SIGKILLed; its stream manager restarts it
                and it resumes from its checkpoint. Measured: the seconds from the kill
                until the new incarnation emits (seconds_to_resume), and until the count
                rate over a 0.5 s window that starts after that is back to 90 % of the rate
                before (seconds_to_full_rate).

Output (one line each; ``seconds`` is the count bolts' first-to-last executed window)::

    RESULT name=tupleflow-log workload=sources acking=off spouts=1 bolts=1 tuples=200000
           seconds=4.1 tps=48000
    RESULT name=log-vs-wordcount workload=sources acking=off ratio=0.83 target=0.70
    RESULT name=kill-resume workload=sources acking=on rate_before=21000
           seconds_to_resume=0.60 seconds_to_full_rate=1.40 target=3.0

    python benchmarks/sources.py --tuples 200000 --queue-tuples 50000 --kill-tuples 2000000
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    BenchmarkError,
    Measurement,
    base_parser,
    check_equal,
    selected,
    timeout_for,
    vocabulary,
    word_chooser,
)
from wordcount import (
    AckingCountBolt,
    CountBolt,
    counting_window,
    engine_options,
    total,
    tupleflow_run,
)

from runtime import Topology
from runtime.sources import EmbeddedLog, EmbeddedQueue, LogSpout, QueueSpout

WORKLOAD = "sources"
POLL_SECONDS = 0.05
STEADY_SECONDS = 1.5  # of counting before the kill
RATE_WINDOW = 0.5  # seconds over which the rate after the kill is measured
FULL_RATE = 0.9  # "back to full rate": this fraction of the rate before the kill
KILL_TARGET_SECONDS = 3.0
LOG_TARGET_RATIO = 0.70


# --- loading (never timed) --------------------------------------------------


def words(n: int) -> list[bytes]:
    vocab, choose = vocabulary(), word_chooser()
    return [json.dumps(choose(vocab)).encode() for _ in range(n)]


def load_log(root: Path, topic: str, n: int, partitions: int) -> None:
    with EmbeddedLog(root) as log:
        log.create_topic(topic, partitions)
        payloads = words(n)
        for p in range(partitions):
            log.append_many(topic, payloads[p::partitions], partition=p)


def load_queue(path: Path, n: int) -> None:
    with EmbeddedQueue(path, "words") as q:
        payloads = words(n)
        for i in range(0, n, 10_000):
            q.put_many(payloads[i : i + 10_000])


# --- runs -------------------------------------------------------------------


def topology(name: str, spout, args, acking: bool) -> Topology:
    topo = Topology(name)
    topo.spout("source", spout, parallelism=args.spouts)
    bolt = AckingCountBolt if acking else CountBolt
    topo.bolt("count", bolt, parallelism=args.bolts).fields_grouping("source", ["word"])
    return topo


def source_run(args, kind: str, spout, tuples: int, acking: bool) -> Measurement:
    config = {"ackers": 1 if acking else 0, **engine_options(args)}
    topo = topology(f"sources-{kind}", spout, args, acking)
    field = "acked" if acking else "emitted"

    def done(stats) -> bool:
        return min(total(stats, "source", field), total(stats, "count", "executed")) >= tuples

    with topo.submit(containers=args.containers, config=config) as running:
        try:
            stats = running.wait_until(done, timeout=timeout_for(tuples), interval=POLL_SECONDS)
        except TimeoutError as exc:
            raise BenchmarkError(f"tupleflow-{kind}: {exc}") from None
    check_equal(f"tupleflow-{kind}", '"count" executed', total(stats, "count", "executed"), tuples)
    check_equal(f"tupleflow-{kind}", "failed tuples", sum(r.failed for r in stats), 0)
    return Measurement(f"tupleflow-{kind}", WORKLOAD, acking, args.spouts, args.bolts, tuples,
                       counting_window(stats))


def run_log(args, directory: Path, acking: bool) -> Measurement:
    checkpoints = tempfile.mkdtemp(prefix="ck-", dir=directory)  # a fresh reader every run
    spout = LogSpout("words", directory / "log", fields=("word",), checkpoint_dir=checkpoints)
    return source_run(args, "log", spout, args.tuples, acking)


def run_queue(args, directory: Path, acking: bool) -> Measurement:
    path = Path(tempfile.mkdtemp(prefix="queue-", dir=directory)) / "queue.db"
    load_queue(path, args.queue_tuples)
    spout = QueueSpout("words", path, fields=("word",))
    return source_run(args, "queue", spout, args.queue_tuples, acking)


def run_wordcount(args, directory: Path, acking: bool) -> Measurement:
    return tupleflow_run(args, args.tuples, "wordcount", acking, rate=None)


# --- kill and resume --------------------------------------------------------


def run_kill(args, directory: Path) -> str:
    """Kill the log spout at a steady rate; seconds until the count rate is back."""
    load_log(directory / "kill-log", "words", args.kill_tuples, args.partitions)
    spout = LogSpout("words", directory / "kill-log", fields=("word",),
                     checkpoint_dir=directory / "ck-kill", commit_interval=0.2)
    config = {"ackers": 1, "stats_interval": 0.1, **engine_options(args)}
    topo = topology("sources-kill", spout, args, True)
    with topo.submit(containers=args.containers, config=config) as running:
        series = Series(running)
        series.wait(lambda: series.counted_for() >= STEADY_SECONDS, 60, "a steady rate")
        before = series.rate(1.0)
        victim = next(s for s in running.statistics() if s.component == "source")
        killed_at, killed_wall = time.monotonic(), time.time()
        os.kill(victim.pid, signal.SIGKILL)  # an instance of the topology this run started
        series.wait(lambda: series.resumed(victim, killed_wall), 30, "restarted spout emitting")
        resumed_at = series.times[-1]
        # the rate is measured only over windows after the new incarnation emits, so tuples
        # of the dead one still draining through the bolts cannot pass for a recovery
        series.wait(lambda: series.rate(RATE_WINDOW, since=resumed_at) >= FULL_RATE * before,
                    30, "the rate to come back")
        seconds = series.times[-1] - killed_at
        if series.counted() >= args.kill_tuples:
            raise BenchmarkError("kill: the log ran out before the rate was back; "
                                 "use more --kill-tuples")
    return (f"RESULT name=kill-resume workload={WORKLOAD} acking=on rate_before={before:.0f}"
            f" seconds_to_resume={resumed_at - killed_at:.2f}"
            f" seconds_to_full_rate={seconds:.2f} target={KILL_TARGET_SECONDS}")


class Series:
    """The count bolts' executed total, sampled every POLL_SECONDS."""

    def __init__(self, running) -> None:
        self.running, self.times, self.counts = running, [], []

    def sample(self) -> None:
        self.times.append(time.monotonic())
        self.counts.append(total(self.running.statistics(), "count", "executed"))

    def resumed(self, victim, killed_wall: float) -> bool:
        """Whether a new process of the victim's task has reported tuples emitted."""
        return any(s.task == victim.task and s.pid != victim.pid and s.state == "running"
                   and s.emitted and (s.reported or 0) > killed_wall
                   for s in self.running.statistics())

    def counted(self) -> int:
        return self.counts[-1] if self.counts else 0

    def counted_for(self) -> float:
        """Seconds since the first sample with a count."""
        started = [t for t, c in zip(self.times, self.counts, strict=True) if c]
        return self.times[-1] - started[0] if started else 0.0

    def rate(self, window: float, since: float = 0.0) -> float:
        """Tuples a second over the last `window` seconds (0 until that window is after
        `since`)."""
        end = self.times[-1]
        start = next((i for i, t in enumerate(self.times) if t >= end - window), None)
        if start is None or self.times[start] < since or end - self.times[start] <= 0:
            return 0.0
        return (self.counts[-1] - self.counts[start]) / (end - self.times[start])

    def wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        self.sample()
        while not predicate():
            if time.monotonic() > deadline:
                raise BenchmarkError(f"kill: no {what} within {timeout} s")
            time.sleep(POLL_SECONDS)  # the sampling period, not a synchronisation
            self.sample()


# --- command line -----------------------------------------------------------

THROUGHPUT = {"wordcount": run_wordcount, "log": run_log, "queue": run_queue}


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__, default_tuples=200_000)
    parser.add_argument("--partitions", type=int, default=4, help="embedded-log partitions")
    parser.add_argument("--queue-tuples", type=int, default=50_000, help="items in the queue")
    parser.add_argument("--kill-tuples", type=int, default=2_000_000, help="records, kill run")
    parser.add_argument("--modes", default="off,on", help="acking modes to run: off,on")
    args = parser.parse_args(argv)
    names = selected(parser, [*THROUGHPUT, "kill"], args.only)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tupleflow-sources-") as tmp:
        directory = Path(tmp)
        if "log" in names:
            load_log(directory / "log", "words", args.tuples, args.partitions)
        for mode in args.modes.split(","):
            acking = mode == "on"
            tps = {}
            for name in (n for n in names if n in THROUGHPUT):
                try:
                    m = THROUGHPUT[name](args, directory, acking)
                except BenchmarkError as error:
                    print(f"FAILED {error}", file=sys.stderr, flush=True)
                    failed += 1
                    continue
                tps[name] = m.tps
                print(m.line(), flush=True)
            if "log" in tps and "wordcount" in tps:
                print(f"RESULT name=log-vs-wordcount workload={WORKLOAD} acking={mode}"
                      f" ratio={tps['log'] / tps['wordcount']:.2f} target={LOG_TARGET_RATIO}",
                      flush=True)
        if "kill" in names:
            try:
                print(run_kill(args, directory), flush=True)
            except BenchmarkError as error:
                print(f"FAILED {error}", file=sys.stderr, flush=True)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
