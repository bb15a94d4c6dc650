"""Where a sentence's complete latency goes, hop by hop: ``sentences.py --hops`` (issue 17).

The half-rate run's components, stamped: the spout stamps each sentence as it emits it
and as it is acked; the split stamps each sentence (its text and its root) as its
``process`` starts; the count stamps the first word of each sentence (its root) as its
``process`` starts. Every stamp is ``time.monotonic()``, one clock for all the processes
of the machine. Each process also times its garbage collections (``gc.callbacks``). At
the end (``close``, ``cleanup``) each writes its stamps to a file of the hops directory,
and the benchmark joins them (spout to split by the sentence's text, split to count by
its root) into three hops a sentence:

=========  ==================================================================
``spout``  emitted -> the split starts it: the spout's batch (up to one flush
           interval), the stream manager, the split's queue
``split``  the split starts it -> the count starts its first word: the split's
           batch, the stream manager, the count's queue
``count``  the count starts its first word -> the spout's ``ack``: its words, the
           rest of the count's frame, the COMPLETED frame, the spout's reading
=========  ==================================================================

Meanwhile a thread of the benchmark reads, every :data:`SAMPLE_EVERY` seconds, the time
each process of the topology has waited for a CPU so far (the second field of
``/proc/PID/schedstat``, its main thread) and the machine's runnable threads
(``/proc/loadavg``).

It prints ``HOPS`` lines: the hops' means over all sentences and over the slowest 1 %,
the spout's ``next_tuple`` calls per sentence (how much its loop calls it for nothing),
which hop was the longest for how many of those, and per episode of slow sentences (a
stretch of them emitted within :data:`EPISODE_GAP` of each other) how long it lasted,
which process waited for a CPU and how long, and which collected garbage.
"""

from __future__ import annotations

import gc
import os
import pickle
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass

SAMPLE_EVERY = 0.005  # seconds between two readings of the processes' CPU waits
EPISODE_GAP = 0.02  # seconds between two slow sentences' emits that start a new episode
SLOWEST = 0.01  # the share of sentences looked at closely: the p99's
EPISODES_SHOWN = 8  # the longest episodes printed
HOPS = ("spout", "split", "count")


# --- in the topology's processes ------------------------------------------------------


class Stamps:
    """One process's stamps, its garbage collections, and where they are written."""

    def __init__(self, config: dict, role: str, index: int) -> None:
        self.path = os.path.join(config["hops_dir"], f"{role}-{index}.pickle")
        self.collections: list[tuple[float, float, int]] = []  # start, seconds, generation
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.monotonic()
        if phase == "start":
            self._started = now
        else:
            self.collections.append((self._started, now - self._started, info["generation"]))
        # (a tuple each: few, a collection is rare)

    def write(self, stamps, **more) -> None:
        gc.callbacks.remove(self._on_gc)
        with open(self.path + ".part", "wb") as f:
            pickle.dump({"stamps": stamps, "gc": self.collections, **more}, f)
        os.replace(self.path + ".part", self.path)  # whole, or not there


class StampedSpout:
    """Mixed into the paced spout: stamps each sentence's emit and ack (by its msg_id,
    a countdown from the spout's share)."""

    def open(self, config, context):
        super().open(config, context)
        self.hops = Stamps(config, "spout", context.task_index)
        n = self.left
        self.texts, self.sent_at, self.acked_at = [None] * n, _zeros(n), _zeros(n)
        emit, texts, sent_at, clock = self.emit, self.texts, self.sent_at, time.monotonic

        def stamped(values, msg_id):
            texts[msg_id], sent_at[msg_id] = values[0], clock()
            emit(values, msg_id=msg_id)

        self.emit = stamped
        self.calls = 0  # next_tuple calls, emitting or not: how much the spout's loop spins

    def next_tuple(self):
        self.calls += 1
        super().next_tuple()

    def ack(self, msg_id):
        super().ack(msg_id)
        self.acked_at[msg_id] = time.monotonic()

    def close(self):
        self.hops.write((self.texts, self.sent_at, self.acked_at), calls=self.calls)


class StampedSplit:
    """Mixed into the split: stamps each sentence (its text and root) as it starts it."""

    def prepare(self, config, context):
        super().prepare(config, context)
        self.hops = Stamps(config, "split", context.task_index)
        # texts, roots, times: a str, an int and a float are not tracked by the garbage
        # collector, where a tuple of them would be (the stamps would set off collections)
        self.texts, self.roots, self.times = [], array("Q"), array("d")

    def process(self, tup):
        self.texts.append(tup.values[0])
        self.roots.append(tup.ids)
        self.times.append(time.monotonic())
        super().process(tup)

    def cleanup(self):
        self.hops.write((self.texts, list(self.roots), list(self.times)))


class StampedCount:
    """Mixed into the acking count: stamps the first word of each sentence (by its root)
    as it starts it; a sentence's words come together, in one frame (acker.md, "A
    BasicBolt's child")."""

    def prepare(self, config, context):
        super().prepare(config, context)
        self.hops, self.last = Stamps(config, "count", context.task_index), None
        self.roots, self.times = array("Q"), array("d")  # no tuples: see StampedSplit

    def process(self, tup):
        root = tup.ids  # read before the ack clears it
        if root != self.last:
            self.last = root
            self.roots.append(root)
            self.times.append(time.monotonic())
        super().process(tup)

    def cleanup(self):
        self.hops.write((list(self.roots), list(self.times)))


def _zeros(n: int) -> array:
    return array("d", bytes(8 * n))


# --- in the benchmark -------------------------------------------------------------------


class Watch:
    """The benchmark's side of a stamped run: the stamps' directory (named in the
    topology's ``config``), the CPU-wait sampler, and the HOPS lines, read once the
    ``files`` processes have written their stamps (as they stop, after the topology is
    killed: leave the ``with`` block of the topology first)."""

    def __init__(self, config: dict, files: int) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="tupleflow-hops-")
        config["hops_dir"] = self._dir.name
        self.files = files
        self.waits: CpuWaits | None = None
        self._lines: list[str] = []

    def __enter__(self) -> Watch:
        return self

    def start(self, roles: dict[int, str]) -> None:
        self.waits = CpuWaits(roles)
        self.waits.start()

    def stop(self) -> None:
        self.waits.stop()

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None:
                self._lines = report(read_all(self._dir.name, self.files), self.waits)
        finally:
            self._dir.cleanup()

    def lines(self) -> list[Line]:
        return [Line(text) for text in self._lines]


@dataclass(frozen=True)
class Line:
    """A printed line that is not a Measurement (the benchmark prints ``line()``)."""

    text: str

    def line(self) -> str:
        return self.text



class CpuWaits(threading.Thread):
    """Samples, every ``SAMPLE_EVERY``, each process's time on a CPU and waiting for one
    so far (its main thread's, ns), the times it was put on a CPU, the times it went to
    sleep (its wake-ups: a preempted thread is put on a CPU again without having slept,
    so under load the first count runs ahead of the second), and the machine's runnable
    threads: ``samples`` holds ``(time, runnable, [(on cpu, waiting, slices, sleeps)
    per pid])``."""

    def __init__(self, roles: dict[int, str]) -> None:
        super().__init__(name="cpu-waits", daemon=True)
        self.pids = list(roles)
        self.roles = [roles[p] for p in self.pids]
        self.samples: list[tuple[float, int, list[tuple[int, int, int, int]]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(SAMPLE_EVERY):
            self.samples.append((time.monotonic(), _runnable(), list(map(_schedstat, self.pids))))

    def stop(self) -> None:
        self.halt.set()
        self.join()

    def usage(self, start: float, end: float) -> dict[str, tuple[float, float, int, int]]:
        """Seconds each role spent on a CPU and waiting for one between ``start`` and
        ``end`` (to the samples' resolution), how many times it was put on one, and how
        many times it went to sleep."""
        inside = [s for s in self.samples if start - SAMPLE_EVERY <= s[0] <= end + SAMPLE_EVERY]
        if len(inside) < 2:
            return {}
        out: dict[str, tuple[float, float, int, int]] = {}
        for role, first, last in zip(self.roles, inside[0][2], inside[-1][2]):
            ran, waited, slices, sleeps = out.get(role, (0.0, 0.0, 0, 0))
            out[role] = (ran + (last[0] - first[0]) / 1e9, waited + (last[1] - first[1]) / 1e9,
                         slices + last[2] - first[2], sleeps + last[3] - first[3])
        return out

    def runnable(self, start: float, end: float) -> int:
        """The most runnable threads seen between ``start`` and ``end``."""
        return max((s[1] for s in self.samples if start <= s[0] <= end), default=0)


def _schedstat(pid: int) -> tuple[int, int, int, int]:
    """A process's main thread: nanoseconds on a CPU, waiting on a run queue, the times
    it was put on a CPU (each wake-up at least once), and its voluntary context switches
    (``/proc/PID/status``: each a sleep, so each a wake-up after it)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            ran, waited, slices = f.read().split()
        with open(f"/proc/{pid}/status") as f:
            sleeps = next(line for line in f if line.startswith("voluntary_ctxt"))
        return int(ran), int(waited), int(slices), int(sleeps.split()[1])
    except (OSError, ValueError, StopIteration):
        return 0, 0, 0, 0


def _runnable() -> int:
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[0])


@dataclass(frozen=True)
class Sentence:
    """One sentence's four stamps (monotonic seconds)."""

    emitted: float
    split: float
    count: float
    acked: float

    @property
    def hops(self) -> tuple[float, float, float]:
        return self.split - self.emitted, self.count - self.split, self.acked - self.count

    @property
    def total(self) -> float:
        return self.acked - self.emitted


def read_all(directory: str, files: int, timeout: float = 30.0) -> dict[str, list]:
    """Every process's stamps by role, once ``files`` files are there (the processes
    write them as they stop, after the topology is killed)."""
    deadline = time.monotonic() + timeout
    while len(_written(directory)) < files and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for processes that are stopping, not synchronising
    found: dict[str, list] = {}
    for name in _written(directory):
        with open(os.path.join(directory, name), "rb") as f:
            found.setdefault(name.split("-")[0], []).append(pickle.load(f))
    return found


def _written(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith(".pickle")]


def joined(found: dict[str, list]) -> tuple[list[Sentence], int]:
    """The sentences whose four stamps were all found, and how many were not."""
    split = {text: (root, t) for part in found["split"] for text, root, t in zip(*part["stamps"])}
    count: dict[int, float] = {}
    for part in found["count"]:
        for root, t in zip(*part["stamps"]):
            count.setdefault(root, t)
    sentences, missing = [], 0
    for part in found["spout"]:
        for text, sent, acked in zip(*part["stamps"]):
            root, at_split = split.get(text, (None, 0.0))
            at_count = count.get(root)
            if at_count is None or not acked:
                missing += 1
            else:
                sentences.append(Sentence(sent, at_split, at_count, acked))
    return sentences, missing


def report(found: dict[str, list], waits: CpuWaits) -> list[str]:
    """The HOPS lines: all sentences, the slowest 1 %, each process over the run, and
    the longest episodes of slow sentences."""
    sentences, missing = joined(found)
    if not sentences:
        return [f"HOPS set=all sentences=0 missing={missing}"]
    sentences.sort(key=lambda s: s.total)
    slow = sentences[-max(1, int(len(sentences) * SLOWEST)):]
    start = min(s.emitted for s in sentences)
    end = max(s.acked for s in sentences)
    calls = sum(part["calls"] for part in found["spout"])
    lines = [_summary("all", sentences, missing), _summary("slowest", slow, missing),
             f"HOPS spout_calls={calls} calls_per_sentence={calls / len(sentences):.2f}"]
    lines += _processes(found, waits, start, end)
    return lines + [_episode(e, found, waits, start) for e in _episodes(slow)]


def _summary(which: str, sentences: list[Sentence], missing: int) -> str:
    n = len(sentences)
    means = [sum(s.hops[i] for s in sentences) / n * 1e3 for i in range(3)]
    longest = [0, 0, 0]
    for s in sentences:
        longest[s.hops.index(max(s.hops))] += 1
    totals = sorted(s.total for s in sentences)
    return (f"HOPS set={which} sentences={n} missing={missing}"
            f" p50_ms={totals[n // 2] * 1e3:.2f} max_ms={totals[-1] * 1e3:.2f} "
            + " ".join(f"{h}_ms={m:.2f}" for h, m in zip(HOPS, means)) + " longest="
            + ",".join(f"{h}:{k}" for h, k in zip(HOPS, longest)))


def _processes(found: dict[str, list], waits: CpuWaits, start: float, end: float) -> list[str]:
    """Per role over the run: its share of a CPU, its wait for one, how often a second
    it was put on one and how often it woke from a sleep, its garbage collections (how
    many, their total, the longest); and the machine's runnable threads."""
    seconds = end - start
    lines = []
    for role, (ran, waited, slices, sleeps) in waits.usage(start, end).items():
        collections = [c for part in found.get(role, ()) for c in part["gc"]
                       if start <= c[0] <= end]
        lines.append(f"HOPS process={role} cpu={ran / seconds:.2f} cpu_wait_ms={waited * 1e3:.1f}"
                     f" on_cpu_per_s={slices / seconds:.0f} wakeups_per_s={sleeps / seconds:.0f}"
                     f" gc={len(collections)} gc_ms={sum(c[1] for c in collections) * 1e3:.1f}"
                     f" gc_max_ms={max((c[1] for c in collections), default=0) * 1e3:.2f}")
    runnable = sorted(s[1] for s in waits.samples if start <= s[0] <= end) or [0]
    middle, high = runnable[len(runnable) // 2], runnable[int(len(runnable) * 0.99)]
    return lines + [f"HOPS run_seconds={seconds:.2f} runnable_p50={middle} runnable_p99={high}"]


def _episodes(slow: list[Sentence]) -> list[list[Sentence]]:
    """The slow sentences in stretches emitted within EPISODE_GAP of each other, the
    most sentences first."""
    ordered = sorted(slow, key=lambda s: s.emitted)
    episodes = [[ordered[0]]]
    for s in ordered[1:]:
        if s.emitted - episodes[-1][-1].emitted > EPISODE_GAP:
            episodes.append([])
        episodes[-1].append(s)
    return sorted(episodes, key=len, reverse=True)[:EPISODES_SHOWN]


def _episode(episode: list[Sentence], found: dict[str, list], waits: CpuWaits,
             start: float) -> str:
    first = min(s.emitted for s in episode)
    last = max(s.acked for s in episode)
    worst = max(episode, key=lambda s: s.total)
    waited = {role: w for role, (_, w, _, _) in waits.usage(first, last).items()}
    collected = {role: sum(c[1] for part in parts for c in part["gc"] if first <= c[0] <= last)
                 for role, parts in found.items()}
    return (f"HOPS episode_at_s={first - start:.3f} length_ms={(last - first) * 1e3:.1f}"
            f" sentences={len(episode)} worst_ms={worst.total * 1e3:.1f} worst_hops_ms="
            + "/".join(f"{h * 1e3:.1f}" for h in worst.hops)
            + f" runnable_max={waits.runnable(first, last)} cpu_wait_ms="
            + ",".join(f"{r}:{s * 1e3:.1f}" for r, s in waited.items() if s >= 0.0005)
            + " gc_ms=" + ",".join(f"{r}:{s * 1e3:.1f}" for r, s in collected.items() if s))
