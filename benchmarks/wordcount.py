"""Heron's word count (SIGMOD 2015, seed 002 §7.3) on tupleflow and on two baselines.

Workload
    A 175,000-word vocabulary of pseudo-words (3-10 lowercase letters, built
    deterministically from a seeded ``random.Random``, no downloads) is built when a
    spout opens. Each ``next_tuple`` picks one word at random and emits it; a fields
    grouping on "word" sends it to one of the counting bolts, which keep a dict of
    counts. Spouts and bolts do next to no work, so the run measures the overhead of
    moving tuples. ``--tuples`` words are emitted in total, split over the spout tasks.

Implementations (``--only NAME`` picks some; the default runs all three)
    tupleflow    the topology above, on this repository's engine (``runtime``).
    python-loop  one process draws the words and counts them in a dict: no framework,
                 no processes, no serialization.
    zmq-pipe     a producer process sends msgpack batches of 1000 words over a zmq
                 PUSH/PULL ipc socket to a consumer process that unpacks and counts.
    The two baselines are the physical limits we measure ourselves against:
    python-loop is the most one Python core can do with this workload, zmq-pipe the
    most two processes can do when tuples cross a socket in batches. tupleflow cannot
    beat zmq-pipe with one spout and one bolt; the gap is the engine's own cost.

Fairness
    Every implementation draws a word with ``choose(words)``, where ``choose`` is the
    bound ``random.Random(seed).choice`` returned by ``_common.word_chooser``: one
    ``choice`` call (one Mersenne Twister draw, one index) per word, in the spout, the
    loop and the producer alike.
    Building the vocabulary is never inside a measured window.

Reading the output
    One line per implementation, for example (one line, wrapped here)::

        RESULT name=zmq-pipe workload=wordcount acking=off spouts=1 bolts=1
               tuples=2000000 seconds=1.118 tps=1788571

    ``seconds`` is the measured window and ``tps = tuples / seconds``. tupleflow's
    window runs from the first tuple any counting bolt executed to the last one
    (``first_executed``/``last_executed`` in the instances' statistics), so process
    start-up is excluded; python-loop times its loop; zmq-pipe times the consumer
    from its first batch to the end of its last. The baselines always run one
    producer and one counter without acking, so they print ``spouts=1 bolts=1
    acking=off`` whatever the options say. Every implementation checks that its
    counts add up to ``--tuples``; when one does not, or a run times out, it prints
    ``FAILED ...`` on stderr instead of a RESULT line, and the exit status is 1.

    ``--cpu`` adds, after tupleflow's full-speed RESULT line, a line per role (spout,
    count, acker, stmgr, master, benchmark) and their total, as ``sentences.py --cpu``
    does::

        CPU name=tupleflow workload=wordcount acking=on role=spout processes=1
            seconds=3.920 ns_per_tuple=784.00

    the CPU time (user + system, psutil) its processes spent from the moment every
    instance was ready, the spouts held paused until then (so start-up is not counted),
    to the end of the run, per word. Which process is saturated, and what at least once
    adds to each, is read from these (docs/internals/performance-log.md, "Issue 17,
    eleventh pass").

Run it as a script (``make bench`` does), with ``runtime`` importable (installed, or
the repository root on PYTHONPATH)::

    python benchmarks/wordcount.py --tuples 2000000 --spouts 1 --bolts 1 --acking off
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time

import msgpack
import zmq
from _common import (
    PER_TUPLE,
    WORD_SEED,
    BenchmarkError,
    Measurement,
    base_parser,
    check_equal,
    checked_seconds,
    cpu_seconds,
    cpu_shares,
    process_roles,
    run_processes,
    selected,
    share,
    started_paused,
    timeout_for,
    vocabulary,
    word_chooser,
)

from runtime import Bolt, Spout, Topology

WORKLOAD = "wordcount"
BATCH = 1000  # words per zmq-pipe frame
# How often tupleflow's statistics are polled: as often as instances report them
# (stats_interval, 0.25 s). The window is timed by the instances' own clocks, so polling
# faster does not sharpen it; it only loads the machine under test: every 20 ms it cost
# the master and this process ~30 ns of CPU per tuple (1.7 % of the topology's CPU).
POLL_SECONDS = 0.25
HALF_RATE_SECONDS = 5.0  # about how long the half-rate latency run lasts
ROLES = {"words": "spout", "count": "count", "__acker": "acker"}  # component -> role
ROLE_ORDER = ("spout", "count", "acker", "stmgr", "master", "benchmark")


# --- tupleflow --------------------------------------------------------------


class WordSpout(Spout):
    """Emits its share of ``config["tuples"]`` random words, one per ``next_tuple``."""

    outputs = ["word"]

    def open(self, config, context):
        self.words = vocabulary()
        self.choose = word_chooser(WORD_SEED + context.task_index)
        self.left = share(config["tuples"], context.task_index, context.parallelism)

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([self.choose(self.words)])


class AckingWordSpout(WordSpout):
    """``WordSpout`` whose tuples are tracked: the countdown is the message id."""

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([self.choose(self.words)], msg_id=self.left)


class PacedWordSpout(AckingWordSpout):
    """``AckingWordSpout`` kept to ``config["rate"]`` tuples per second per task, for
    measuring latency below the maximum throughput (the full-speed run does not pay for
    the pacing)."""

    def open(self, config, context):
        super().open(config, context)
        self.rate = config["rate"]
        self.started, self.sent = time.monotonic(), 0

    def next_tuple(self):
        if self.sent >= (time.monotonic() - self.started) * self.rate:
            return  # ahead of schedule: emit nothing, the runtime idles briefly
        if self.left:
            self.left -= 1
            self.sent += 1
            self.emit([self.choose(self.words)], msg_id=self.left)


class CountBolt(Bolt):
    """Counts the words it receives in a dict; a sink."""

    outputs = []

    def prepare(self, config, context):
        self.counts = {}

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1


class AckingCountBolt(CountBolt):
    """``CountBolt`` that acks every tuple it counts."""

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.ack(tup)


def build_topology(spouts: int, bolts: int, acking: bool, paced: bool = False) -> Topology:
    spout, bolt = (AckingWordSpout, AckingCountBolt) if acking else (WordSpout, CountBolt)
    if paced:
        spout = PacedWordSpout
    topology = Topology("wordcount-bench")
    topology.spout("words", spout, parallelism=spouts)
    topology.bolt("count", bolt, parallelism=bolts).fields_grouping("words", ["word"])
    return topology


def run_tupleflow(args) -> list:
    """At full speed (with ``--cpu``, its CPU lines after it); with acking on, also at
    half the measured rate, for latency."""
    acking = args.acking == "on"
    first = tupleflow_run(args, args.tuples, WORKLOAD, acking, rate=None)
    if not acking:
        return first
    rate = first[0].tps / 2
    tuples = min(args.tuples, max(1000, int(rate * HALF_RATE_SECONDS)))
    return first + tupleflow_run(args, tuples, "wordcount-half-rate", acking, rate)


def tupleflow_run(args, tuples: int, workload: str, acking: bool, rate: float | None) -> list:
    """One run: its Measurement, then (``--cpu``, full speed only) its CpuShares."""
    config = {"tuples": tuples, "ackers": 1 if acking else 0, **engine_options(args)}
    if rate:
        config["rate"] = rate / args.spouts
    topology = build_topology(args.spouts, args.bolts, acking, paced=bool(rate))
    timeout = timeout_for(tuples) + HALF_RATE_SECONDS * 2
    if not args.cpu or rate:
        with topology.submit(scheduler="local", containers=args.containers,
                             config=config) as running:
            stats = wait_until_counted(running, tuples, timeout, acking)
        return [measured(args, tuples, workload, acking, stats)]
    with started_paused(topology, args.containers, config) as running:
        roles = process_roles(running, ROLES)
        before = cpu_seconds(roles)
        running.resume()
        stats = wait_until_counted(running, tuples, timeout, acking)
        after = cpu_seconds(roles)
    run = measured(args, tuples, workload, acking, stats)
    return [run, *cpu_shares(run, roles, before, after, ROLE_ORDER, PER_TUPLE)]


def measured(args, tuples: int, workload: str, acking: bool, stats) -> Measurement:
    check_tupleflow(stats, tuples)
    extra = latencies(stats) if acking else ()
    return Measurement("tupleflow", workload, acking, args.spouts, args.bolts, tuples,
                       counting_window(stats), extra)


def latencies(stats) -> tuple[tuple[str, str], ...]:
    """The spout tuples' complete latency: the worst p50 and p99 over the spout tasks."""
    summaries = [r.complete_latency_ms for r in stats if r.component == "words"]
    if not all(summaries):
        raise BenchmarkError("tupleflow: a spout task reported no complete latency")
    return (("p50_ms", f"{max(s['p50'] for s in summaries):.2f}"),
            ("p99_ms", f"{max(s['p99'] for s in summaries):.2f}"))


def engine_options(args) -> dict:
    """The engine settings given on the command line (the engine's defaults otherwise)."""
    options = {"batch_size": args.batch_size, "flush_interval": args.flush_interval}
    return {k: v for k, v in options.items() if v is not None}


def wait_until_counted(running, tuples: int, timeout: float, acking: bool = False) -> list:
    """Wait until the spouts report ``tuples`` emitted (and, with acking, acked) and the
    "count" bolts as many executed (each instance reports on its own schedule)."""
    spout_field = "acked" if acking else "emitted"

    def done(stats) -> bool:
        return min(total(stats, "words", spout_field), total(stats, "count", "executed")) >= tuples

    try:
        return running.wait_until(done, timeout=timeout, interval=POLL_SECONDS)
    except TimeoutError as exc:
        raise BenchmarkError(f"tupleflow: {exc}") from None


def total(stats, component: str, field: str) -> int:
    return sum(getattr(record, field) for record in stats if record.component == component)


def check_tupleflow(stats, tuples: int) -> None:
    emitted, executed = total(stats, "words", "emitted"), total(stats, "count", "executed")
    check_equal("tupleflow", 'tuples emitted by "words"', emitted, tuples)
    check_equal("tupleflow", 'tuples executed by "count"', executed, tuples)
    check_equal("tupleflow", "instance restarts", sum(r.restarts for r in stats), 0)
    check_equal("tupleflow", "failed tuples", sum(r.failed for r in stats), 0)


def counting_window(stats) -> float:
    """From the first tuple any "count" instance executed to the last one."""
    counters = [r for r in stats if r.component == "count" and r.first_executed is not None]
    if not counters:
        raise BenchmarkError('tupleflow: no "count" instance reports a first_executed time')
    first = min(r.first_executed for r in counters)
    return checked_seconds("tupleflow", max(r.last_executed for r in counters) - first)


# --- python-loop ------------------------------------------------------------


def run_python_loop(args) -> list[Measurement]:
    words, choose = vocabulary(), word_chooser()
    start = time.perf_counter()
    counts = count_random_words(words, choose, args.tuples)
    seconds = time.perf_counter() - start
    check_equal("python-loop", "sum of counts", sum(counts.values()), args.tuples)
    return [baseline("python-loop", args.tuples, seconds)]


def count_random_words(words, choose, tuples: int) -> dict[str, int]:
    counts = {}
    get = counts.get
    for _ in range(tuples):
        word = choose(words)
        counts[word] = get(word, 0) + 1
    return counts


def baseline(name: str, tuples: int, seconds: float) -> Measurement:
    return Measurement(name, WORKLOAD, False, 1, 1, tuples, checked_seconds(name, seconds))


# --- zmq-pipe ---------------------------------------------------------------


def run_zmq_pipe(args) -> list[Measurement]:
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    with tempfile.TemporaryDirectory(prefix="tupleflow-bench-") as directory:
        address = f"ipc://{directory}/words.sock"
        processes = [
            context.Process(target=consume, args=(address, reports), name="zmq-pipe consumer"),
            context.Process(target=produce, args=(address, args.tuples), name="zmq-pipe producer"),
        ]
        counted, seconds = run_processes("zmq-pipe", processes, reports,
                                         timeout_for(args.tuples))
    check_equal("zmq-pipe", "consumer's total", counted, args.tuples)
    return [baseline("zmq-pipe", args.tuples, seconds)]


def produce(address: str, tuples: int) -> None:
    """Send ``tuples`` random words in msgpack frames of ``BATCH``, then an empty frame."""
    words, choose = vocabulary(), word_chooser()
    with zmq.Context() as context, context.socket(zmq.PUSH) as push:
        push.connect(address)
        for size in batch_sizes(tuples, BATCH):
            push.send(msgpack.packb([choose(words) for _ in range(size)]))
        push.send(b"")


def batch_sizes(total: int, batch: int) -> list[int]:
    full, rest = divmod(total, batch)
    return [batch] * full + ([rest] if rest else [])


def consume(address: str, reports) -> None:
    """Count words until the empty frame; report ``(total, seconds)``."""
    with zmq.Context() as context, context.socket(zmq.PULL) as pull:
        pull.bind(address)
        reports.put(count_frames(pull.recv))


def count_frames(recv) -> tuple[int, float]:
    """Count the words of every frame; time from the first frame to the last one counted."""
    counts = {}
    get = counts.get
    frame = recv()
    start = end = time.perf_counter()
    while frame:
        for word in msgpack.unpackb(frame):
            counts[word] = get(word, 0) + 1
        end = time.perf_counter()
        frame = recv()
    return sum(counts.values()), end - start


# --- command line -----------------------------------------------------------

IMPLEMENTATIONS = {
    "tupleflow": run_tupleflow,
    "python-loop": run_python_loop,
    "zmq-pipe": run_zmq_pipe,
}


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__)
    parser.add_argument("--cpu", action="store_true",
                        help="print each role's CPU per word (tupleflow, full speed)")
    args = parser.parse_args(argv)
    failed = 0
    for name in selected(parser, list(IMPLEMENTATIONS), args.only):
        try:
            for measurement in IMPLEMENTATIONS[name](args):
                print(measurement.line(), flush=True)
        except BenchmarkError as error:
            print(f"FAILED {error}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
