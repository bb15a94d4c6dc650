"""Sentences split into words and counted: word count with anchored trees (issue 17).

Workload
    The 175,000-word vocabulary of ``wordcount.py`` (``_common.vocabulary``, built when
    a spout opens). A spout emits ``--sentences`` sentences in total, split over its
    tasks: each is one string field, ``--words-per-sentence`` (10) random words joined
    by spaces, emitted with a message id when acking is on. A ``BasicBolt`` "split"
    (shuffle grouping) emits each word of its sentence, anchored to it by the runtime,
    and its input is acked when ``process`` returns; a plain bolt "count" (fields
    grouping on "word") counts the words in a dict and acks each one. With acking on
    (``ackers=1``) every sentence is a tree of 11 tuples that the acker follows to its
    end: the case ``wordcount.py`` does not show, as its trees are single tuples, which
    a bolt settles with the spout directly.

Implementations (``--only NAME`` picks some; the default runs all three)
    tupleflow    the topology above, on this repository's engine (public API only).
    python-loop  one process makes each sentence, splits it and counts its words in a
                 dict: no framework, no processes, no serialization.
    zmq-pipe     three processes: a producer sends msgpack frames of 1000 sentences
                 over a zmq PUSH/PULL ipc socket to a splitter, which splits them and
                 sends the words on, in frames of 1000, to a counter.
    As in ``wordcount.py``, the baselines are the limits: python-loop the most one
    Python core does with this workload, zmq-pipe the most three processes do when
    the sentences and the words cross sockets in batches, with no acking.

Fairness
    Every implementation makes a sentence with the function ``sentence_maker``
    returns (``--words-per-sentence`` calls of the bound ``choice`` of
    ``_common.word_chooser`` and one ``str.join``), splits it with ``str.split()`` and
    counts with ``dict.get``. Building the vocabulary is never inside a measured window.

Reading the output
    One line per implementation, and a second tupleflow line with acking on, for
    example (each one line, wrapped here)::

        RESULT name=tupleflow workload=sentences acking=on spouts=1 bolts=2
               tuples=200000 seconds=3.279 tps=60985 splitters=1 counters=1 words=10
               max_spout_pending=5000 p50_ms=81.39 p99_ms=96.79
        RESULT name=tupleflow workload=sentences-half-rate acking=on spouts=1 bolts=2
               tuples=152462 seconds=5.155 tps=29578 splitters=1 counters=1 words=10
               max_spout_pending=5000 p50_ms=7.19 p99_ms=162.77

    ``tuples`` are sentences and ``tps`` sentences per second; ``bolts`` counts the
    split and count tasks (not the acker); ``splitters``, ``counters``, ``words`` (per
    sentence) and ``max_spout_pending`` (when given) repeat the options. tupleflow's
    window runs from the first word any "count" instance executed to the last one
    (the instances' own clocks; start-up is excluded); the baselines time the loop, or
    the counter from its first frame to the end of its last, and print ``spouts=1
    bolts=2 acking=off`` whatever the options say. With acking on, tupleflow adds the
    complete latency of the sentences (``p50_ms``, ``p99_ms``: the worst spout task's),
    and runs again for about 5 s with its spouts paced to half the rate just measured
    (``workload=sentences-half-rate``): the latency below saturation.

    Checks: at most once, every implementation's words counted add up to sentences ×
    words per sentence; at least once, moreover, the spouts are acked for every
    sentence (each spout raises on a second ack of one sentence) and nothing fails,
    times out or restarts. A failed check or a run that times out prints ``FAILED ...``
    on stderr instead of a RESULT line, and the exit status is 1.

    ``--cpu`` adds, after tupleflow's first RESULT line, a line per role (spout, split,
    count, acker, stmgr, master, benchmark) and their total::

        CPU name=tupleflow workload=sentences acking=on role=split processes=1
            seconds=2.280 us_per_sentence=11.40

    the CPU time (user + system, psutil) its processes spent from the moment every
    instance was ready, the spouts held paused until then (so start-up is not
    counted), to the end of the run, per sentence. psutil counts in clock ticks (10 ms):
    give a few seconds' worth of sentences. On a shared machine the CPU per sentence
    varies far less from run to run than the throughput does.

Where the half-rate latency goes (issue 17): ``--only tupleflow --acking on --hops``
    stamps every sentence of the half-rate run at each hop (spout -> split -> count ->
    the spout's ack) and prints ``HOPS`` lines after its RESULT line: the hops' means
    over all sentences and over the slowest 1 %, each process's share of a CPU, its wait
    for one and its garbage collections, and the episodes of slow sentences
    (``benchmarks/_hops.py`` says what each hop holds). ``--half-rate N`` runs only the
    half-rate run, paced to N sentences/s: the same load for two trees compared.

The slow-bolt scenario (issue 17): ``--only tupleflow --count-sleep-ms 10 --seconds 120``
    runs the topology above with counters that sleep 10 ms a word and a spout without
    end, acking on and the engine's defaults (``--target-latency none``: no latency
    bound, Storm's behaviour), and prints one line (``benchmarks/_slow_bolt.py``)::

        RESULT name=tupleflow workload=sentences-slow-bolt acking=on count_sleep_ms=10
               seconds=120 acked=2390 failed=0 timed_out=0 p50_ms=... p99_ms=...
               throttled_after_s=0.25 max_spout_pending=4

Run it as a script, with ``runtime`` importable (installed, or the repository root on
PYTHONPATH)::

    python benchmarks/sentences.py --sentences 300000 --acking on --max-spout-pending 5000
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sys
import tempfile
import time
from itertools import repeat

import _common
import _hops
import _slow_bolt
import msgpack
import zmq
from _common import (
    WORD_SEED,
    BenchmarkError,
    Measurement,
    add_engine_options,
    batch_sizes,
    check_equal,
    checked_seconds,
    complete_latencies,
    cpu_seconds,
    cpu_shares,
    engine_options,
    executing_window,
    positive_int,
    run_processes,
    selected,
    share,
    started_paused,
    timeout_for,
    total,
    vocabulary,
    word_chooser,
)

from runtime import BasicBolt, Bolt, Spout, Topology

WORKLOAD = "sentences"
BATCH = 1000  # sentences, then words, per zmq-pipe frame
# How often tupleflow's statistics are polled: as often as instances report them
# (stats_interval, 0.25 s); faster polling would only load the machine under test.
POLL_SECONDS = 0.25
HALF_RATE_SECONDS = 5.0  # about how long the half-rate latency run lasts
SPOUT, SPLIT, COUNT = "sentences", "split", "count"  # component ids
ACKER = "__acker"  # the acker's component id (runtime/model/constants.py)
ROLES = {SPOUT: "spout", SPLIT: "split", COUNT: "count", ACKER: "acker"}
ROLE_ORDER = ("spout", "split", "count", "acker", "stmgr", "master", "benchmark")


def sentence_maker(seed: int, words_per_sentence: int):
    """``make() -> str``: ``words_per_sentence`` random words of the vocabulary, joined
    by spaces; the vocabulary is built here, not in ``make``.

    >>> make = sentence_maker(1, 3)
    >>> len(make().split())
    3
    """
    words, choose = vocabulary(), word_chooser(seed)

    def make() -> str:
        return " ".join(map(choose, repeat(words, words_per_sentence)))

    return make


# --- tupleflow --------------------------------------------------------------


class SentenceSpout(Spout):
    """Emits its share of ``config["sentences"]`` random sentences, one per call."""

    outputs = ["sentence"]

    def open(self, config, context):
        seed = WORD_SEED + context.task_index
        self.make = sentence_maker(seed, config["words_per_sentence"])
        self.left = share(config["sentences"], context.task_index, context.parallelism)

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([self.make()])


class AckingSentenceSpout(SentenceSpout):
    """``SentenceSpout`` whose sentences are tracked: the countdown is the message id.
    A flag per id catches a sentence acked twice (the raise is counted as an error)."""

    def open(self, config, context):
        super().open(config, context)
        self.unacked = bytearray(b"\x01") * self.left

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([self.make()], msg_id=self.left)

    def ack(self, msg_id):
        if not self.unacked[msg_id]:
            raise BenchmarkError(f"sentence {msg_id} acked twice")
        self.unacked[msg_id] = 0


class PacedSentenceSpout(AckingSentenceSpout):
    """``AckingSentenceSpout`` kept to ``config["rate"]`` sentences per second per task,
    counted from its activation, for the latency below the maximum throughput."""

    def open(self, config, context):
        super().open(config, context)
        self.rate = config["rate"]
        self.activate()

    def activate(self):
        self.started, self.sent = time.monotonic(), 0

    def next_tuple(self):
        if self.sent >= (time.monotonic() - self.started) * self.rate:
            return  # ahead of schedule: emit nothing, the runtime idles briefly
        self.sent += 1
        super().next_tuple()


class SplitBolt(BasicBolt):
    """Emits each word of its sentence, anchored to it (it is a ``BasicBolt``)."""

    outputs = ["word"]

    def process(self, tup):
        emit = self.emit
        for word in tup.values[0].split():
            emit([word])


class CountBolt(Bolt):
    """Counts the words it receives in a dict; a sink."""

    outputs = []

    def prepare(self, config, context):
        self.counts = {}

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1


class AckingCountBolt(CountBolt):
    """``CountBolt`` that acks every word it counts."""

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.ack(tup)


class StampedSentenceSpout(_hops.StampedSpout, PacedSentenceSpout):
    """The paced spout, stamping its sentences (``--hops``)."""


class StampedSplitBolt(_hops.StampedSplit, SplitBolt):
    """The split, stamping its sentences (``--hops``)."""


class StampedCountBolt(_hops.StampedCount, AckingCountBolt):
    """The acking count, stamping its sentences' first words (``--hops``)."""


def build_topology(args, acking: bool, paced: bool = False) -> Topology:
    stamped = paced and args.hops  # the half-rate run, hop by hop
    spout = PacedSentenceSpout if paced else AckingSentenceSpout if acking else SentenceSpout
    spout = StampedSentenceSpout if stamped else spout
    topology = Topology("sentences-bench")
    topology.spout(SPOUT, spout, parallelism=args.spouts)
    split = StampedSplitBolt if stamped else SplitBolt
    topology.bolt(SPLIT, split, parallelism=args.splitters).shuffle_grouping(SPOUT)
    count = StampedCountBolt if stamped else AckingCountBolt if acking else CountBolt
    topology.bolt(COUNT, count, parallelism=args.counters).fields_grouping(SPLIT, ["word"])
    return topology


def run_tupleflow(args) -> list:
    """At full speed; with acking on, also at half the measured rate, for latency. With
    ``--count-sleep-ms``, the slow-bolt scenario instead."""
    if args.count_sleep_ms:
        config = {**run_config(args, 0, None), "ackers": 1,
                  "count_sleep": args.count_sleep_ms / 1000}
        return [_slow_bolt.run(args, build_slow_bolt(args), config, SPOUT)]
    if args.half_rate and args.acking == "on":  # only the half-rate run, at this rate
        first, rate = [], args.half_rate
    else:
        first = tupleflow_run(args, args.sentences, WORKLOAD, rate=None)
        if args.acking == "off":
            return first
        rate = first[0].tps / 2
    sentences = min(args.sentences, max(1000, int(rate * HALF_RATE_SECONDS)))
    return first + tupleflow_run(args, sentences, WORKLOAD + "-half-rate", rate)


def tupleflow_run(args, sentences: int, workload: str, rate: float | None) -> list:
    """One run: its Measurement, then (``--cpu``, full speed only) its CpuShares."""
    acking, words = args.acking == "on", sentences * args.words_per_sentence
    topology = build_topology(args, acking, paced=bool(rate))
    config = run_config(args, sentences, rate)
    hops = _hops.Watch(config, args.spouts + args.splitters + args.counters) if (
        rate and args.hops) else None
    watching = hops or contextlib.nullcontext()
    with watching, started_paused(topology, args.containers, config) as running:
        roles = process_roles(running)
        before = cpu_seconds(roles)
        if hops:
            hops.start(roles)
        running.resume()
        stats = wait_until_done(running, sentences, words, acking)
        after = cpu_seconds(roles)
        if hops:
            hops.stop()
    check_tupleflow(stats, sentences, words, acking)
    measured = measurement(args, workload, sentences, stats)
    if hops:
        return [measured, *hops.lines()]
    if not args.cpu or rate:
        return [measured]
    return [measured, *cpu_shares(measured, roles, before, after, ROLE_ORDER)]


def measurement(args, workload: str, sentences: int, stats) -> Measurement:
    acking = args.acking == "on"
    extra = shape(args) + (complete_latencies(stats, SPOUT) if acking else ())
    return Measurement("tupleflow", workload, acking, args.spouts, args.splitters + args.counters,
                       sentences, executing_window(stats, COUNT), extra)


def run_config(args, sentences: int, rate: float | None) -> dict:
    acking = args.acking == "on"
    config = {"sentences": sentences, "words_per_sentence": args.words_per_sentence,
              "ackers": 1 if acking else 0, **engine_options(args)}
    if acking and args.max_spout_pending is not None:
        config["max_spout_pending"] = args.max_spout_pending
    if args.target_latency != "default":
        config["target_latency"] = args.target_latency
    if rate:
        config["rate"] = rate / args.spouts
    return config


def shape(args) -> tuple[tuple[str, object], ...]:
    """The RESULT line's fields that repeat the topology's options."""
    pending = args.max_spout_pending if args.acking == "on" else None
    return (("splitters", args.splitters), ("counters", args.counters),
            ("words", args.words_per_sentence)) + (
        (("max_spout_pending", pending),) if pending is not None else ())


def process_roles(running) -> dict[int, str]:
    """Every process of the topology, and this one, by pid: what it is."""
    return _common.process_roles(running, ROLES)


def wait_until_done(running, sentences: int, words: int, acking: bool) -> list:
    """Wait until every count of ``expected`` is reached (each instance reports on its
    own schedule); stop at the first failure or restart."""
    counts = expected(sentences, words, acking)

    def done(stats) -> bool:
        check_no_failures(stats)
        return all(total(stats, component, field) >= n for component, field, n in counts)

    timeout = timeout_for(words) + HALF_RATE_SECONDS * 2
    try:
        return running.wait_until(done, timeout=timeout, interval=POLL_SECONDS)
    except TimeoutError as exc:
        raise BenchmarkError(f"tupleflow: {exc}") from None


def expected(sentences: int, words: int, acking: bool) -> list[tuple[str, str, int]]:
    """``(component, statistic, count)``: what a complete, correct run reports."""
    counts = [(SPOUT, "emitted", sentences), (SPLIT, "executed", sentences),
              (SPLIT, "emitted", words), (COUNT, "executed", words)]
    if acking:
        counts += [(SPOUT, "acked", sentences), (SPLIT, "acked", sentences),
                   (COUNT, "acked", words)]
    return counts


def check_no_failures(stats) -> None:
    for field in ("restarts", "failed", "errors"):
        check_equal("tupleflow", field, sum(getattr(r, field) for r in stats), 0)


def check_tupleflow(stats, sentences: int, words: int, acking: bool) -> None:
    check_no_failures(stats)
    for component, field, count in expected(sentences, words, acking):
        got = total(stats, component, field)
        check_equal("tupleflow", f'tuples {field} by "{component}"', got, count)


# --- tupleflow, a slow bolt (issue 17) ------------------------------------------


class EndlessSentenceSpout(SentenceSpout):
    """Tracked sentences without end (the slow-bolt scenario); a second ack of one raises."""

    def open(self, config, context):
        super().open(config, context)
        self.number, self.unacked = 0, set()

    def next_tuple(self):
        self.number += 1
        self.unacked.add(self.number)
        self.emit([self.make()], msg_id=self.number)

    def ack(self, msg_id):
        self.unacked.remove(msg_id)  # KeyError: acked twice


class SleepyCountBolt(AckingCountBolt):
    """``AckingCountBolt`` that sleeps ``config["count_sleep"]`` seconds a word first."""

    def prepare(self, config, context):
        super().prepare(config, context)
        self.sleep = config["count_sleep"]

    def process(self, tup):
        time.sleep(self.sleep)
        super().process(tup)


def build_slow_bolt(args) -> Topology:
    """The learner's topology of issue 17: counters that sleep per word, a spout
    without end (run by ``_slow_bolt.run``)."""
    topology = Topology("sentences-slow-bolt")
    topology.spout(SPOUT, EndlessSentenceSpout, parallelism=args.spouts)
    topology.bolt(SPLIT, SplitBolt, parallelism=args.splitters).shuffle_grouping(SPOUT)
    topology.bolt(COUNT, SleepyCountBolt, parallelism=args.counters).fields_grouping(
        SPLIT, ["word"])
    return topology


# --- python-loop ------------------------------------------------------------


def run_python_loop(args) -> list[Measurement]:
    make = sentence_maker(WORD_SEED, args.words_per_sentence)
    start = time.perf_counter()
    counts = count_sentences(make, args.sentences)
    seconds = time.perf_counter() - start
    words = args.sentences * args.words_per_sentence
    check_equal("python-loop", "sum of counts", sum(counts.values()), words)
    return [baseline("python-loop", args, seconds)]


def count_sentences(make, sentences: int) -> dict[str, int]:
    counts = {}
    get = counts.get
    for _ in range(sentences):
        for word in make().split():
            counts[word] = get(word, 0) + 1
    return counts


def baseline(name: str, args, seconds: float) -> Measurement:
    extra = (("splitters", 1), ("counters", 1), ("words", args.words_per_sentence))
    return Measurement(name, WORKLOAD, False, 1, 2, args.sentences,
                       checked_seconds(name, seconds), extra)


# --- zmq-pipe ---------------------------------------------------------------


def run_zmq_pipe(args) -> list[Measurement]:
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    words = args.sentences * args.words_per_sentence
    with tempfile.TemporaryDirectory(prefix="tupleflow-bench-") as directory:
        sentences_at, words_at = f"ipc://{directory}/sentences.sock", f"ipc://{directory}/words.sock"
        make = (args.sentences, args.words_per_sentence)
        processes = [
            context.Process(target=count, args=(words_at, reports), name="zmq-pipe counter"),
            context.Process(target=split, args=(sentences_at, words_at), name="zmq-pipe splitter"),
            context.Process(target=produce, args=(sentences_at, *make), name="zmq-pipe producer"),
        ]
        counted, seconds = run_processes("zmq-pipe", processes, reports, timeout_for(words))
    check_equal("zmq-pipe", "counter's total", counted, words)
    return [baseline("zmq-pipe", args, seconds)]


def produce(address: str, sentences: int, words_per_sentence: int) -> None:
    """Send ``sentences`` random sentences in msgpack frames of ``BATCH``, then an
    empty frame."""
    make = sentence_maker(WORD_SEED, words_per_sentence)
    with zmq.Context() as context, context.socket(zmq.PUSH) as push:
        push.connect(address)
        for size in batch_sizes(sentences, BATCH):
            push.send(msgpack.packb([make() for _ in range(size)]))
        push.send(b"")


def split(inbound: str, outbound: str) -> None:
    """Split the sentences of every frame and send their words on in frames of
    ``BATCH``, until the empty frame, which is passed on."""
    with zmq.Context() as context, context.socket(zmq.PULL) as pull, \
            context.socket(zmq.PUSH) as push:
        pull.bind(inbound)
        push.connect(outbound)
        frame = pull.recv()
        while frame:
            words = [word for sentence in msgpack.unpackb(frame) for word in sentence.split()]
            for start in range(0, len(words), BATCH):
                push.send(msgpack.packb(words[start:start + BATCH]))
            frame = pull.recv()
        push.send(b"")


def count(address: str, reports) -> None:
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


def pending_limit(text: str) -> int | str:
    """``--max-spout-pending``: a positive int, or "auto" (the tuner sets it)."""
    return text if text == "auto" else positive_int(text)


def target_latency(text: str) -> float | str | None:
    """``--target-latency``: seconds > 0, none (no latency bound), or default."""
    if text in ("none", "default"):
        return None if text == "none" else text
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a number of seconds > 0 or none, not {text}")
    return value


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--sentences", type=positive_int, default=300_000, help="sentences in total")
    add("--words-per-sentence", type=positive_int, default=10, help="words in a sentence")
    add("--spouts", type=positive_int, default=1, help="spout parallelism")
    add("--splitters", type=positive_int, default=1, help="split bolt parallelism")
    add("--counters", type=positive_int, default=1, help="count bolt parallelism")
    add("--max-spout-pending", type=pending_limit, help="with acking: sentences in flight "
        "per spout task, or auto (default: the engine's, no limit)")
    add("--cpu", action="store_true", help="print each role's CPU per sentence (tupleflow)")
    add("--target-latency", type=target_latency, default="default", help="with acking: "
        "seconds of complete latency the default limit aims at, or none (Storm's: no limit)")
    add("--count-sleep-ms", type=float, default=0, help="the slow-bolt scenario (issue 17): "
        "each count sleeps this long a word, the spout never ends; acking on")
    add("--seconds", type=float, default=120.0, help="how long the slow-bolt scenario runs")
    add("--half-rate", type=float, help="with acking: run only the half-rate run, its spouts "
        "paced to this many sentences/s in all (default: half the full-rate run's)")
    add("--hops", action="store_true", help="with acking: stamp the half-rate run's sentences "
        "at each hop and print HOPS lines (benchmarks/_hops.py)")
    add_engine_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
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
