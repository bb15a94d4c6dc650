"""What checkpointed state costs, how fast it recovers, and whether it stays exact under
SIGKILLs (issue 21's targets), on a stateful word count from the embedded log.

Why
    A checkpoint every ``checkpoint_interval`` seconds saves each counter task's whole
    key-value map and each log spout's offsets in SQLite, and makes each bolt align on
    barriers; a kill rolls the whole topology back. This measures the throughput with and
    without checkpoints in interleaved pairs of the same run (the ratio is what to read on
    this noisy shared machine), the time from a kill to the processing rate being back,
    and the exactness of the committed state after many kills.

Reading the output (one line each)::

    RESULT name=checkpoint-cost pair=1 words=1000000 plain_wps=... checkpointed_wps=...
           cost=... plain_cpu_us=... checkpointed_cpu_us=... cpu_cost=...
           plain_task_cpu_us=... checkpointed_task_cpu_us=... task_cpu_cost=... checkpoints=...
    RESULT name=checkpoint-cost pairs=3 median_cost=... median_cpu_cost=...
           median_task_cpu_cost=...

``cost`` is the throughput lost (1 - checkpointed / plain words per second); ``cpu_cost``
the CPU per word added (checkpointed / plain - 1) over every instance process (from their
reports); ``task_cpu_cost`` the same for the stateful counter tasks alone, from psutil's
``cpu_times`` of their pids (user + system), the figure least at the mercy of the other
processes on a loaded machine: CPU time is charged to the task whatever waits it had.
All over the middle 80 % of each run.
    RESULT name=checkpoint-cost-inprocess rep=1 words=300000 plain_cpu_us=...
           checkpointed_cpu_us=... cpu_cost=... every_rounds=...
    RESULT name=checkpoint-cost-inprocess reps=5 median_cpu_cost=...

``checkpoint-cost-inprocess`` runs the same topology in the in-memory cluster (every task
in this one process, the same executors, the checkpoint wrapper and store included, the
fake clock advanced so that each run makes about six checkpoints, as a process run does
in its measured stretch), and compares this process's CPU time per word: no scheduling,
no batching that depends on the load, so the wrapper's own cost is what differs.
    RESULT name=checkpoint-recovery kill=count words_per_s_before=... recovery_s=...
    RESULT name=checkpoint-chaos kills=20 words=... exact=1 checkpoints=... rollbacks=...
           seconds=...

    python benchmarks/checkpoints.py --only cost --pairs 3 --words 1000000
    python benchmarks/checkpoints.py --only inprocess --reps 5 --words 300000
    python benchmarks/checkpoints.py --only recovery
    python benchmarks/checkpoints.py --only chaos --kills 20
    RESULT name=window-snapshot held=100000 payload=0 bytes=... bytes_per_tuple=...
           values_bytes_per_tuple=... overhead_bytes_per_tuple=...
           checkpoint_us_per_tuple=... restore_us_per_tuple=...
           checkpoint_gc_on_us_per_tuple=... restore_gc_on_us_per_tuple=... reps=5

``window-snapshot`` is what a checkpoint of a windowed task costs per tuple its open
windows hold (in this process, no topology): the bytes written (``overhead`` is what the
snapshot adds to the tuples' own packed values); at a barrier, the time to take the
snapshot and save it in SQLite; at a rollback, to load it and restore the windows; both
with the garbage collector paused, as ``Checkpointed`` does, and (``gc_on``) without.

    python benchmarks/checkpoints.py --only windows --held 100000 --payload 0 --payload 100
    RESULT name=window-split held=100000 payload=0 tasks=2->3 split_us_per_tuple=...
           snapshot_us_per_tuple=... split_vs_snapshot=... moved=... reps=5

``window-split`` is what a rebalance of a windowed component under checkpoints adds per
held tuple (issue 21; docs/internals/window-rebalance.md): ``split_windows`` merging the
committed snapshots of two tasks (``held`` tuples between them, of 1,009 keys) and
dealing them by key over three, beside taking those snapshots in the same reps (the
ratio is what to read on a noisy machine); medians of ``reps``, the collector paused.

    python benchmarks/checkpoints.py --only split --held 100000 --payload 0
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator

import psutil
from _common import BenchmarkError

from runtime import Duration, Topology, Window, WindowedBolt, wire
from runtime.model.api import Tuple, TupleSource
from runtime.sources import EmbeddedLog, LogSpout
from runtime.state import open_store
from runtime.state._gate import paused_gc
from runtime.testing import (
    InMemoryCluster,
    PacedLogSpout,
    PassOn,
    StatefulWordCount,
    replaced,
    wait_for,
)
from runtime.windows import WindowManager, split_windows

INTERVAL = 1.0  # checkpoint_interval of the cost and recovery runs (the figure)
OPTIONS = {"stats_interval": 0.1, "spout_wait": 0.002}


def words(n: int) -> list[str]:
    return [f"w{(i * 7919) % 1009}" for i in range(n)]


def fill_log(root: str, n: int) -> list[str]:
    ws = words(n)
    with EmbeddedLog(root) as log:
        log.create_topic("words", 4)
        for i in range(0, n, 5000):
            log.append_many("words", [f'"{w}"'.encode() for w in ws[i:i + 5000]],
                            partition=(i // 5000) % 4)
    return ws


def topology(root: str, name: str, spout=LogSpout, **spout_options) -> Topology:
    topo = Topology(name, **OPTIONS)
    topo.spout("words", spout("words", root=root, fields=["word"], batch_size=500,
                              **spout_options), parallelism=2)
    topo.bolt("upper", PassOn, parallelism=2).shuffle_grouping("words")
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("upper", ["word"])
    return topo


def executed(running, component: str = "count") -> int:
    return sum(s.executed for s in running.statistics() if s.component == component)


# -- cost: interleaved pairs -------------------------------------------------------------------
def cpu(running) -> float:
    """CPU seconds of every instance process so far (the checkpoint spout's included)."""
    return sum(s.cpu_seconds for s in running.statistics())


def counter_processes(running) -> list[psutil.Process]:
    """The stateful counter tasks' processes."""
    return [psutil.Process(s.pid) for s in running.statistics() if s.component == "count"]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of ``procs`` so far (psutil: the kernel's own account)."""
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


class TooShort(BenchmarkError):
    """The run ended before its middle could be measured: the counters' reports (every
    ``stats_interval``) moved from under a tenth of the words to their end in one or two
    steps, so the stretch between two of them holds too few words to time."""


def throughput(root: str, n: int, name: str, **submit) -> tuple[float, float, float,
                                                                dict | None]:
    """Words per second through the counters in the steady middle of the run, from a tenth
    of the log counted to nine tenths (start-up and the tail are not what is compared);
    the instances' CPU microseconds per word over the same stretch (from their reports),
    and the counter tasks' own (psutil, per word they executed). The counts come from the
    tasks' reports, so the stretch starts and ends at a report: one that holds under half
    the words (a fast machine counts a small log in a report or two) raises TooShort."""
    with topology(root, name).submit(**submit) as running:
        wait_for(lambda: executed(running) >= n // 10, 300, f"{name}: a tenth counted")
        counters = counter_processes(running)
        start, cpu0, n0 = time.monotonic(), cpu(running), executed(running)
        task0 = cpu_seconds(counters)
        wait_for(lambda: executed(running) >= n * 9 // 10, 600, f"{name}: nine tenths counted")
        task1 = cpu_seconds(counters)
        took, cpu1, n1 = time.monotonic() - start, cpu(running), executed(running)
        if [p.pid for p in counter_processes(running)] != [p.pid for p in counters]:
            raise BenchmarkError(f"{name}: a counter task restarted during the measurement")
        checkpoint = running.checkpoint() if submit else None
    words = n1 - n0
    if words < n // 2:
        raise TooShort(f"{name}: only {words} of {n} words between two reports")
    return words / took, (cpu1 - cpu0) / words * 1e6, (task1 - task0) / words * 1e6, checkpoint


def cost(n: int, pairs: int) -> None:
    """``pairs`` interleaved pairs over a log of ``n`` words, a line each as it ends. When
    the first pair's runs are too short to measure (TooShort), it starts again over a log
    twice as long (``words=`` in the lines says how many were used)."""
    printed = False
    while True:
        try:
            for line in cost_pairs(n, pairs):
                print(line, flush=True)
                printed = True
            return
        except TooShort as short:
            if printed:  # the machine sped up mid-run: the pairs so far are not comparable
                raise
            print(f"{short}: again with {2 * n} words", file=sys.stderr, flush=True)
            n *= 2


def cost_pairs(n: int, pairs: int) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="ckpt-cost-")
    fill_log(root, n)
    costs, cpu_costs, task_costs = [], [], []
    for pair in range(1, pairs + 1):
        order = ["plain", "checkpointed"] if pair % 2 else ["checkpointed", "plain"]
        rates: dict[str, float] = {}
        us: dict[str, float] = {}
        task_us: dict[str, float] = {}
        for kind in order:  # each run is a new topology name: the log is read from 0
            submit = ({"checkpoint_interval": INTERVAL} if kind == "checkpointed" else {})
            rates[kind], us[kind], task_us[kind], checkpoint = throughput(
                root, n, f"cost-{kind}-{pair}", **submit)
            if kind == "checkpointed":
                made = checkpoint["id"] if checkpoint else 0
        c, cc = 1 - rates["checkpointed"] / rates["plain"], us["checkpointed"] / us["plain"] - 1
        # the tasks' CPU is read in clock ticks (10 ms): a tiny run may read none
        tc = task_us["checkpointed"] / task_us["plain"] - 1 if task_us["plain"] else math.nan
        costs.append(c)
        cpu_costs.append(cc)
        task_costs.append(tc)
        yield (f"RESULT name=checkpoint-cost pair={pair} words={n} "
               f"plain_wps={rates['plain']:.0f} checkpointed_wps={rates['checkpointed']:.0f} "
               f"cost={c:.3f} plain_cpu_us={us['plain']:.2f} "
               f"checkpointed_cpu_us={us['checkpointed']:.2f} cpu_cost={cc:.3f} "
               f"plain_task_cpu_us={task_us['plain']:.2f} "
               f"checkpointed_task_cpu_us={task_us['checkpointed']:.2f} task_cpu_cost={tc:.3f} "
               f"checkpoints={made}")
    yield (f"RESULT name=checkpoint-cost pairs={pairs} median_cost={statistics.median(costs):.3f}"
           f" median_cpu_cost={statistics.median(cpu_costs):.3f}"
           f" median_task_cpu_cost={statistics.median(task_costs):.3f}")


# -- cost in one process: the in-memory cluster ---------------------------------------------
CHECKPOINTS_PER_RUN = 6  # as many as a process run makes in its measured stretch


def drive(c: InMemoryCluster, every: int | None) -> int:
    """Step until idle, advancing the clock a checkpoint interval every ``every`` rounds
    (and once at the end); the rounds it took."""
    rounds = 0
    while True:
        moved = c.step(100)
        rounds += 1
        if every and rounds % every == 0:
            c.advance(INTERVAL)
        if not moved:
            c.advance(INTERVAL)  # the timers due at the end (flushes, a last checkpoint)
            if not c.step(100):
                return rounds


def cpu_per_word(root: str, n: int, name: str, every: int | None,
                 **options) -> tuple[float, int]:
    """This process's CPU microseconds per word for one in-memory run, and its rounds; a
    checkpointed run must have committed every word."""
    with InMemoryCluster(topology(root, name), **options) as c:
        start = time.process_time()
        rounds = drive(c, every)
        used = time.process_time() - start
        if options and (counted := sum(c.state("count").values())) != n:
            raise BenchmarkError(f"{name}: {counted} words committed, not {n}")
    return used / n * 1e6, rounds


def in_process(n: int, reps: int) -> None:
    root = tempfile.mkdtemp(prefix="ckpt-inproc-")
    fill_log(root, n)
    _, rounds = cpu_per_word(root, n, "inproc-warmup", None)
    every = max(1, rounds // CHECKPOINTS_PER_RUN)
    costs = []
    for rep in range(1, reps + 1):
        order = ["plain", "checkpointed"] if rep % 2 else ["checkpointed", "plain"]
        us: dict[str, float] = {}
        for kind in order:
            options = ({"checkpoint_interval": INTERVAL, "state_store": "memory"}
                       if kind == "checkpointed" else {})
            us[kind], _ = cpu_per_word(root, n, f"inproc-{kind}-{rep}", every, **options)
        costs.append(us["checkpointed"] / us["plain"] - 1)
        print(f"RESULT name=checkpoint-cost-inprocess rep={rep} words={n} "
              f"plain_cpu_us={us['plain']:.2f} checkpointed_cpu_us={us['checkpointed']:.2f} "
              f"cpu_cost={costs[-1]:.3f} every_rounds={every}", flush=True)
    print(f"RESULT name=checkpoint-cost-inprocess reps={reps} "
          f"median_cpu_cost={statistics.median(costs):.3f}", flush=True)


# -- a windowed task's snapshot: bytes and time per held tuple ---------------------------------
class Sums(WindowedBolt):
    outputs = ["end", "sum"]

    def process_window(self, window):
        self.emit([window.end, sum(t["v"] for t in window.tuples)])


def holding(n: int, payload: int) -> Sums:
    """A windowed bolt whose one open event-time window holds ``n`` tuples ``[id, key, ts,
    v, text]`` (``text`` of ``payload`` characters) from two input tasks, none evaluated."""
    bolt = Sums()
    window = Window.tumbling(Duration(3600), timestamp_field="ts")
    bolt._windows = WindowManager(window, [("events", "default")])
    sources = [TupleSource.of("events", t, "default", ["id", "k", "ts", "v", "text"])
               for t in (1, 2)]
    text = "x" * payload
    for i in range(n):
        bolt.process(Tuple([i, f"k{i % 1009}", 1_000 + i, i % 13, text], sources[i % 2]))
    return bolt


def window_snapshot(n: int, payload: int, reps: int) -> None:
    """What a checkpoint of a windowed task costs per held tuple: the snapshot's bytes as
    the store writes them (msgpack), beside the tuples' values alone; the time of what
    ``Checkpointed`` does at a barrier (take the snapshot, save it in SQLite) and at a
    rollback (load it, restore the windows), with the garbage collector paused as it
    does, and with it on (the ``gc_on`` figures, in the same reps); medians of ``reps``."""
    bolt = holding(n, payload)
    values = len(wire.pack([t.values for _, _, t in bolt._windows._queue]))
    size = len(wire.pack(bolt.snapshot_windows()))
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="win-snap-") as run_dir:
        store = open_store("sqlite", run_dir)
        for rep in range(reps):
            for paused in ((True, False) if rep % 2 else (False, True)):
                pause = paused_gc if paused else contextlib.nullcontext
                with pause():
                    t0 = time.perf_counter()
                    store.save(rep, "window/w/0", bolt.snapshot_windows())
                with pause():
                    t1 = time.perf_counter()
                    bolt.restore_windows(store.load(rep, "window/w/0"))
                    t2 = time.perf_counter()
                suffix = "" if paused else "_gc_on"
                times.setdefault("checkpoint" + suffix, []).append(t1 - t0)
                times.setdefault("restore" + suffix, []).append(t2 - t1)
        store.close()
    if bolt.open_tuples != n:
        raise BenchmarkError(f"restored {bolt.open_tuples} tuples, not {n}")
    us = " ".join(f"{k}_us_per_tuple={statistics.median(times[k]) * 1e6 / n:.2f}"
                  for k in ("checkpoint", "restore", "checkpoint_gc_on", "restore_gc_on"))
    print(f"RESULT name=window-snapshot held={n} payload={payload} bytes={size} "
          f"bytes_per_tuple={size / n:.1f} values_bytes_per_tuple={values / n:.1f} "
          f"overhead_bytes_per_tuple={(size - values) / n:.1f} {us} reps={reps}", flush=True)


def window_split(n: int, payload: int, reps: int) -> None:
    """What dealing two tasks' held tuples over three costs per tuple, beside taking their
    snapshots (``Checkpointed``'s work at a barrier, without the store)."""
    bolts = [holding(n // 2, payload) for _ in range(2)]
    deal = [["events", "default", "fields", [1]]]  # a fields grouping on k
    times: dict[str, list[float]] = {"split": [], "snapshot": []}
    moved = 0
    with paused_gc():
        for _ in range(reps):
            t0 = time.perf_counter()
            saved = [{**b.snapshot_windows(), "deal": deal} for b in bolts]
            t1 = time.perf_counter()
            parts, moved = split_windows(saved, 3, 128)
            t2 = time.perf_counter()
            times["snapshot"].append(t1 - t0)
            times["split"].append(t2 - t1)
    if sum(len(p["windows"]["queue"]) for p in parts) != 2 * (n // 2):
        raise BenchmarkError("the split lost or repeated held tuples")
    split, snap = (statistics.median(times[k]) for k in ("split", "snapshot"))
    print(f"RESULT name=window-split held={2 * (n // 2)} payload={payload} tasks=2->3 "
          f"split_us_per_tuple={split * 1e6 / n:.2f} snapshot_us_per_tuple={snap * 1e6 / n:.2f}"
          f" split_vs_snapshot={split / snap:.2f} moved={moved} reps={reps}", flush=True)


# -- recovery: from a kill to the rate being back ----------------------------------------------
def rate_over(samples: list[tuple[float, int]], seconds: float) -> float:
    """Counted words per second over the last ``seconds`` of (time, total) samples."""
    t1, n1 = samples[-1]
    t0, n0 = next(((t, n) for t, n in reversed(samples) if t1 - t >= seconds), samples[0])
    return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


class Progress:
    """The counters' executed total, summed over incarnations (a new one starts at 0)."""

    def __init__(self, running) -> None:
        self.running, self.last, self.total = running, {}, 0
        self.samples: list[tuple[float, int]] = []

    def sample(self) -> None:
        for s in self.running.statistics():
            if s.component == "count":
                key = (s.task, s.incarnation)
                self.total += s.executed - self.last.get(key, 0)
                self.last[key] = s.executed
        self.samples.append((time.monotonic(), self.total))


def recovery(n: int) -> None:
    root = tempfile.mkdtemp(prefix="ckpt-recovery-")
    fill_log(root, n)
    with topology(root, "recovery").submit(checkpoint_interval=INTERVAL) as running:
        p = Progress(running)
        wait_for(lambda: (p.sample(), p.total > n // 5)[1], 300, "a fifth of the log counted")
        for _ in range(20):  # two seconds of the steady rate
            p.sample()
            time.sleep(0.1)  # sampling pace, not a synchronisation
        before = rate_over(p.samples, 2.0)
        victim = next(s for s in running.statistics() if s.component == "count")
        psutil.Process(victim.pid).send_signal(signal.SIGKILL)
        killed = time.monotonic()
        running.wait_until(replaced(victim), timeout=60)
        while rate_over(p.samples, 1.0) < 0.9 * before or p.samples[-1][0] < killed + 1.0:
            if time.monotonic() > killed + 120:
                raise BenchmarkError("the rate did not come back within 120 s")
            p.sample()
            time.sleep(0.05)
        back = p.samples[-1][0] - 1.0 - killed  # the window that reached it started then
        print(f"RESULT name=checkpoint-recovery kill=count words_per_s_before={before:.0f} "
              f"recovery_s={max(0.0, back):.2f}", flush=True)


# -- chaos: many kills, the committed state exact ----------------------------------------------
def chaos(n: int, kills: int, seed: int, interval: float) -> None:
    root = tempfile.mkdtemp(prefix="ckpt-chaos-")
    expected = dict(Counter(fill_log(root, n)))
    rng, done = random.Random(seed), []
    started = time.monotonic()
    topo = topology(root, "chaos", spout=PacedLogSpout, rate=max(500, n // (kills * 2)))
    with topo.submit(checkpoint_interval=interval) as running:
        for i in range(kills):
            last = (running.checkpoint() or {"id": 0})["id"]
            wait_for(lambda last=last: (running.checkpoint() or {"id": 0})["id"] > last, 120,
                     "a checkpoint to commit")
            time.sleep(rng.uniform(0.0, 2 * interval))  # paces the chaos
            component = ("count", "__checkpoint", "words")[i % 3]
            victim = rng.choice([s for s in running.statistics()
                                 if s.component == component and s.state == "running"])
            try:
                psutil.Process(victim.pid).send_signal(signal.SIGKILL)
                done.append(f"{component}[{victim.task}]")
            except psutil.NoSuchProcess:
                continue
            running.wait_until(replaced(victim), timeout=60)
        # The log may be counted and committed before the last kill; the state that counts
        # is the one committed after the last rollback (the start, then one per kill).
        rolled = 1 + len(done)
        wait_for(lambda: (running.checkpoint() or {"epoch": 0})["epoch"] >= rolled, 120,
                 "a checkpoint committed after the last kill's rollback")
        wait_for(lambda: sum(running.state("count").values()) >= n, 600,
                 "the whole log committed")
        state, checkpoint = running.state("count"), running.checkpoint()
    exact = state == expected
    print(f"RESULT name=checkpoint-chaos kills={len(done)} words={n} exact={int(exact)} "
          f"checkpoints={checkpoint['id']} epoch={checkpoint['epoch']} seed={seed} "
          f"seconds={time.monotonic() - started:.1f}", flush=True)
    print(f"# killed: {' '.join(done)}", flush=True)
    if not exact:
        wrong = {k: (state.get(k), v) for k, v in expected.items() if state.get(k) != v}
        raise BenchmarkError(f"state differs from the batch count on {len(wrong)} keys: "
                             f"{list(wrong.items())[:5]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["cost", "inprocess", "recovery", "chaos",
                                           "windows", "split"], action="append")
    parser.add_argument("--held", type=int, default=100_000, help="tuples a window holds")
    parser.add_argument("--payload", type=int, action="append",
                        help="characters of text per held tuple (repeat for several)")
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5, help="in-process pairs")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--chaos-words", type=int, default=100_000)
    parser.add_argument("--interval", type=float, default=0.5, help="chaos checkpoint interval")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    only = args.only or ["cost", "inprocess", "recovery", "chaos", "windows", "split"]
    if "cost" in only:
        cost(args.words, args.pairs)
    if "inprocess" in only:
        in_process(min(args.words, 300_000), args.reps)
    if "recovery" in only:
        recovery(args.words * 2)
    if "chaos" in only:
        seed = args.seed if args.seed is not None else random.randrange(1 << 30)
        chaos(args.chaos_words, args.kills, seed, args.interval)
    if "windows" in only:
        for payload in args.payload or [0, 100]:
            window_snapshot(args.held, payload, args.reps)
    if "split" in only:
        for payload in args.payload or [0, 100]:
            window_split(args.held, payload, args.reps)


if __name__ == "__main__":
    main()
