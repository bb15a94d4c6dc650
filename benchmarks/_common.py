"""Helpers shared by the benchmarks: vocabulary, word picking, options, RESULT lines.

Every benchmark prints one line per measurement, in one fixed shape, so that
runs can be compared with ``grep RESULT``::

    >>> print(Measurement("python-loop", "wordcount", False, 1, 1, 1000, 0.5).line())
    ... # doctest: +NORMALIZE_WHITESPACE
    RESULT name=python-loop workload=wordcount acking=off spouts=1 bolts=1
           tuples=1000 seconds=0.500 tps=2000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import queue
import random
import statistics
import string
import time
from dataclasses import dataclass

import psutil

VOCABULARY_SIZE = 175_000  # Heron paper §7.3: "~175k words"
VOCABULARY_SEED = 2015  # the vocabulary is the same in every process and every run
WORD_SEED = 7  # seed of the baselines' word stream; spout task i uses WORD_SEED + i
SHORTEST_WORD, LONGEST_WORD = 3, 10


class BenchmarkError(RuntimeError):
    """A measurement is invalid: counts do not add up, or a run timed out."""


@functools.cache
def vocabulary(size: int = VOCABULARY_SIZE, seed: int = VOCABULARY_SEED) -> tuple[str, ...]:
    """``size`` distinct pseudo-words of 3-10 lowercase letters, identical on every call.

    >>> words = vocabulary(5)
    >>> len(set(words)), words == vocabulary(5)
    (5, True)
    """
    rng, words = random.Random(seed), {}
    while len(words) < size:
        words.setdefault(_pseudo_word(rng), None)
    return tuple(words)


def _pseudo_word(rng: random.Random) -> str:
    length = rng.randint(SHORTEST_WORD, LONGEST_WORD)
    return "".join(rng.choices(string.ascii_lowercase, k=length))


def word_chooser(seed: int = WORD_SEED):
    """The one per-word generator every implementation calls: ``choose(words) -> word``.

    A bound ``random.Random(seed).choice``: one method call, one Mersenne Twister draw
    and one index per word, the same cost in a spout, a baseline loop or a producer.

    >>> choose = word_chooser(1)
    >>> choose(vocabulary(5)) in vocabulary(5)
    True
    """
    return random.Random(seed).choice


def share(total: int, index: int, parallelism: int) -> int:
    """Task ``index``'s share of ``total`` items split over ``parallelism`` tasks.

    >>> [share(10, i, 3) for i in range(3)]
    [4, 3, 3]
    """
    return total // parallelism + int(index < total % parallelism)


def timeout_for(tuples: int) -> float:
    """Seconds a run may take before it is declared hung (assumes >= 10k tuples/s)."""
    return max(60.0, tuples / 10_000)


def check_equal(name: str, what: str, got: int, expected: int) -> None:
    """Raise ``BenchmarkError`` unless ``got == expected``."""
    if got != expected:
        raise BenchmarkError(f"{name}: {what} is {got}, expected {expected}")


@dataclass(frozen=True)
class Measurement:
    """One measured run; ``line()`` is what the benchmark prints."""

    name: str
    workload: str
    acking: bool
    spouts: int
    bolts: int
    tuples: int
    seconds: float
    extra: tuple[tuple[str, object], ...] = ()  # more key=value pairs, e.g. latencies

    @property
    def tps(self) -> int:
        return round(self.tuples / self.seconds)

    def line(self) -> str:
        return (
            f"RESULT name={self.name} workload={self.workload}"
            f" acking={'on' if self.acking else 'off'} spouts={self.spouts}"
            f" bolts={self.bolts} tuples={self.tuples}"
            f" seconds={self.seconds:.3f} tps={self.tps}"
            + "".join(f" {key}={value}" for key, value in self.extra)
        )


def checked_seconds(name: str, seconds: float) -> float:
    """``seconds`` if it is a usable measurement window, else ``BenchmarkError``."""
    if seconds <= 0:
        raise BenchmarkError(f"{name}: empty measurement window ({seconds} s); use more --tuples")
    return seconds


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def base_parser(description: str, default_tuples: int = 2_000_000) -> argparse.ArgumentParser:
    """The options every topology benchmark takes."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    count = positive_int
    parser.add_argument("--tuples", type=count, default=default_tuples, help="tuples in total")
    parser.add_argument("--spouts", type=count, default=1, help="spout parallelism")
    parser.add_argument("--bolts", type=count, default=1, help="bolt parallelism")
    add_engine_options(parser)
    return parser


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """``--acking``, ``--containers``, ``--batch-size``, ``--flush-interval`` and ``--only``:
    the options of ``base_parser`` that do not depend on the topology's shape."""
    count = positive_int
    parser.add_argument("--acking", choices=("off", "on"), default="off", help="at least once")
    parser.add_argument("--containers", type=count, default=1, help="tupleflow containers")
    parser.add_argument("--batch-size", type=count, help="tupleflow batch_size (default: engine's)")
    parser.add_argument("--flush-interval", type=float, help="tupleflow flush_interval, seconds")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run only this implementation (repeatable)"
    )


def engine_options(args) -> dict:
    """The engine settings given on the command line (the engine's defaults otherwise)."""
    options = {"batch_size": args.batch_size, "flush_interval": args.flush_interval}
    return {k: v for k, v in options.items() if v is not None}


def selected(parser: argparse.ArgumentParser, names: list[str], only: list[str] | None):
    """The implementations to run, in ``names`` order; unknown ``--only`` names are usage errors."""
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        parser.error(f"unknown --only {', '.join(unknown)}; choose from {', '.join(names)}")
    return [name for name in names if not only or name in only]


# --- tupleflow's statistics -------------------------------------------------------


def total(stats, component: str, field: str) -> int:
    """``field`` summed over the instances of ``component`` (``InstanceStats`` records)."""
    return sum(getattr(record, field) for record in stats if record.component == component)


def executing_window(stats, component: str) -> float:
    """From the first tuple any ``component`` instance executed to the last one."""
    tasks = [r for r in stats if r.component == component and r.first_executed is not None]
    if not tasks:
        raise BenchmarkError(f"tupleflow: no {component!r} instance reports a first_executed time")
    first = min(r.first_executed for r in tasks)
    return checked_seconds("tupleflow", max(r.last_executed for r in tasks) - first)


def complete_latencies(stats, spout: str) -> tuple[tuple[str, str], ...]:
    """The complete latency of ``spout``'s tuples: the worst p50 and p99 over its tasks."""
    summaries = [r.complete_latency_ms for r in stats if r.component == spout]
    if not all(summaries):
        raise BenchmarkError("tupleflow: a spout task reported no complete latency")
    return (("p50_ms", f"{max(s['p50'] for s in summaries):.2f}"),
            ("p99_ms", f"{max(s['p99'] for s in summaries):.2f}"))


@contextlib.contextmanager
def started_paused(topology, containers: int, config: dict):
    """Submit with the spouts paused before their activation, and wait until every
    instance is ready: the processes are then done with their start-up."""
    with topology.submit(scheduler="local", containers=containers, config=config) as running:
        running.pause()
        try:
            running.wait_active(timeout=60)
        except TimeoutError as exc:
            raise BenchmarkError(f"tupleflow: {exc}") from None
        yield running


def process_roles(running, roles: dict[str, str]) -> dict[int, str]:
    """Every process of the topology, and this one, by pid: what it is (an instance's
    role is ``roles`` of its component)."""
    status = running.status()
    found = {status["pid"]: "master", os.getpid(): "benchmark"}
    found.update(dict.fromkeys(status["containers"].values(), "stmgr"))
    found.update({r.pid: roles[r.component] for r in running.statistics() if r.pid})
    return found


PER_SENTENCE = ("us_per_sentence", 1e6)  # a CPU line's last field, and its scale
PER_TUPLE = ("ns_per_tuple", 1e9)


@dataclass(frozen=True)
class CpuShare:
    """The CPU time the processes of one role spent in a run, per tuple of the run (a
    sentence, a word): ``per`` names the field and its scale."""

    run: Measurement
    role: str
    processes: int
    seconds: float
    per: tuple[str, float] = PER_SENTENCE

    def line(self) -> str:
        name, scale = self.per
        return (f"CPU name={self.run.name} workload={self.run.workload}"
                f" acking={'on' if self.run.acking else 'off'} role={self.role}"
                f" processes={self.processes} seconds={self.seconds:.3f}"
                f" {name}={self.seconds / self.run.tuples * scale:.2f}")


def cpu_shares(run: Measurement, roles: dict, before: dict, after: dict,
               order: tuple[str, ...], per: tuple[str, float] = PER_SENTENCE) -> list[CpuShare]:
    """One CpuShare per role, in ``order``, and their total."""
    spent = {pid: after[pid] - before[pid] for pid in after.keys() & before.keys()}
    shares = []
    for role in order:
        pids = [pid for pid in spent if roles[pid] == role]
        if pids:
            shares.append(CpuShare(run, role, len(pids), sum(spent[p] for p in pids), per))
    return shares + [CpuShare(run, "total", len(spent), sum(spent.values()), per)]


def cpu_seconds(pids) -> dict[int, float]:
    """CPU time so far (user + system, all threads, in seconds) of each of ``pids`` that
    is still alive."""
    seconds = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(pid).cpu_times()
            seconds[pid] = times.user + times.system
    return seconds


# --- baselines made of processes ---------------------------------------------------


def batch_sizes(items: int, batch: int) -> list[int]:
    """``items`` cut in batches of ``batch``, the last one shorter.

    >>> batch_sizes(2500, 1000)
    [1000, 1000, 500]
    """
    full, rest = divmod(items, batch)
    return [batch] * full + ([rest] if rest else [])


def run_processes(name: str, processes, reports, timeout: float):
    """Start ``processes`` and return the first item put on ``reports``; always reap
    them. ``BenchmarkError`` (naming the baseline ``name``) if one fails or none reports."""
    for process in processes:
        process.start()
    try:
        report = await_report(name, processes, reports, timeout)
    finally:
        reap(processes)
    for process in processes:
        check_equal(name, f"exit code of {process.name}", process.exitcode, 0)
    return report


def await_report(name: str, processes, reports, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return reports.get(timeout=0.1)
        except queue.Empty:
            for process in processes:
                if process.exitcode not in (None, 0):
                    message = f"{name}: {process.name} exited with {process.exitcode}"
                    raise BenchmarkError(message) from None
    raise BenchmarkError(f"{name}: no report within {timeout:.0f} s")


def reap(processes, grace: float = 5.0) -> None:
    for process in processes:
        process.join(grace)
        if process.is_alive():
            process.terminate()
            process.join()


def paired_cost_pct(on: list[float], off: list[float]) -> float:
    """The cost from each round's own pair: ``(1 - median of on / off) * 100``. A rate
    that drifts over the run (the machine gets busier) moves both windows of a round,
    and the medians of each side apart.

    >>> round(paired_cost_pct([90, 45, 60], [100, 50, 50]), 1)
    10.0
    """
    return (1 - statistics.median(a / b for a, b in zip(on, off) if b)) * 100
