"""How often ``running.explain()`` names the right culprit (issue 19, part 6).

Six seeded scenarios, each a small topology with one known fault, each run ``--runs``
times with a random seed (the seed picks which bolt is slow, how slow, the hot key's
share, the parallelism, the limits...). A run submits the topology, lets it work for
``--seconds`` after the spouts are activated, asks ``explain()``, and checks whether the
top finding names the expected component and kind. One line per scenario::

    RESULT name=diagnose scenario=slow_bolt runs=10 top1=10 top1_rate=1.000 ...

and a last ``scenario=all`` line. The target is a top-1 rate of at least 95 %.
Run: ``python benchmarks/diagnose.py [--runs 10] [--seconds 4] [--scenario NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runtime import Bolt, Spout, Topology  # noqa: E402

FAST = {"stats_interval": 0.1}  # reports 10 times a second: short runs see enough


# -- the components ------------------------------------------------------------------------
class Numbers(Spout):
    """Emits ``[n, key]`` as fast as it is let: the key is ``hot`` with probability
    ``hot``, else one of 1000 others; with ``tracked``, each tuple has a message id and a
    failed one is replayed."""

    outputs = ["n", "key"]

    def __init__(self, hot: float = 0.0, tracked: bool = False, seed: int = 0) -> None:
        self.hot, self.tracked, self.seed = hot, tracked, seed

    def open(self, config, context):
        self.rng = random.Random(self.seed * 100 + context.task_index)
        self.n, self.replay = 0, []

    def next_tuple(self):
        n = self.replay.pop() if self.replay else self.n
        self.n += n == self.n
        key = "hot" if self.rng.random() < self.hot else f"k{self.rng.randrange(1000)}"
        self.emit([n, key], msg_id=n if self.tracked else None)

    def fail(self, msg_id):
        self.replay.append(msg_id)


class Work(Bolt):
    """Sleeps ``ms`` per tuple (I/O-like work: it costs time, not CPU), passes it on
    anchored, acks it."""

    outputs = ["n", "key"]

    def __init__(self, ms: float = 0.0) -> None:
        self.seconds = ms / 1000

    def process(self, tup):
        if self.seconds:
            time.sleep(self.seconds)
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


class Sink(Work):
    outputs: list[str] = []

    def process(self, tup):
        if self.seconds:
            time.sleep(self.seconds)
        self.ack(tup)


class Gather(Bolt):
    """Emits one tuple anchored to every ``k`` inputs (a batch join's shape): each input
    ack and each root of the output is a message the acker settles."""

    outputs = ["n", "key"]

    def __init__(self, k: int) -> None:
        self.k = k

    def prepare(self, config, context):
        self.held: list = []

    def process(self, tup):
        self.held.append(tup)
        if len(self.held) >= self.k:
            self.emit(tup.values, anchors=self.held)
            for t in self.held:
                self.ack(t)
            self.held = []


# -- the scenarios: (topology, expected component, expected kind) ----------------------------
@dataclass
class Case:
    topology: Topology
    component: str
    kind: str
    what: str  # the seed's choices, for the log


def slow_bolt(rng: random.Random) -> Case:
    """A chain of three bolts, one of them (the seed picks which) 2-5 ms a tuple."""
    slow, ms, ackers = rng.randrange(3), rng.uniform(2, 5), rng.choice([0, 1])
    topo = Topology("slow-bolt", ackers=ackers, **FAST)
    topo.spout("numbers", Numbers(tracked=bool(ackers), seed=rng.randrange(1 << 30)))
    source = "numbers"
    for i in range(3):
        topo.bolt(f"b{i}", Work(ms if i == slow else 0)).shuffle_grouping(source)
        source = f"b{i}"
    topo.bolt("sink", Sink()).shuffle_grouping(source)
    return Case(topo, f"b{slow}", "slow_bolt", f"b{slow} {ms:.1f} ms, ackers={ackers}")


def hot_key(rng: random.Random) -> Case:
    """A fields-grouped bolt of 3-4 tasks, 2 ms a tuple, one key carrying 50-70 %."""
    share, tasks, ackers = rng.uniform(0.5, 0.7), rng.choice([3, 4]), rng.choice([0, 1])
    topo = Topology("hot-key", ackers=ackers, **FAST)
    topo.spout("numbers", Numbers(share, tracked=bool(ackers), seed=rng.randrange(1 << 30)))
    topo.bolt("count", Work(2.0), parallelism=tasks).fields_grouping("numbers", ["key"])
    topo.bolt("sink", Sink()).shuffle_grouping("count")
    return Case(topo, "count", "skew", f"hot {share:.0%} over {tasks} tasks, ackers={ackers}")


def slow_sink(rng: random.Random) -> Case:
    """One or two fast bolts, then a sink of 2-5 ms a tuple."""
    fast, ms, ackers = rng.choice([1, 2]), rng.uniform(2, 5), rng.choice([0, 1])
    topo = Topology("slow-sink", ackers=ackers, **FAST)
    topo.spout("numbers", Numbers(tracked=bool(ackers), seed=rng.randrange(1 << 30)))
    source = "numbers"
    for i in range(fast):
        topo.bolt(f"b{i}", Work()).shuffle_grouping(source)
        source = f"b{i}"
    topo.bolt("sink", Sink(ms)).shuffle_grouping(source)
    return Case(topo, "sink", "slow_bolt", f"{fast} fast bolts, sink {ms:.1f} ms, ackers={ackers}")


def small_pending(rng: random.Random) -> Case:
    """Fast bolts, acking on, and a max_spout_pending of 1-4."""
    limit = rng.choice([1, 2, 4])
    topo = Topology("small-pending", ackers=1, max_spout_pending=limit, **FAST)
    topo.spout("numbers", Numbers(tracked=True, seed=rng.randrange(1 << 30)))
    topo.bolt("b0", Work()).shuffle_grouping("numbers")
    topo.bolt("sink", Sink()).shuffle_grouping("b0")
    return Case(topo, "numbers", "max_spout_pending", f"max_spout_pending={limit}")


def acker_bound(rng: random.Random) -> Case:
    """Cheap bolts that anchor each output to 20-40 inputs, and one acker for them."""
    k, spouts = rng.randrange(20, 41), rng.choice([1, 2])
    topo = Topology("acker-bound", ackers=1, max_spout_pending=5000, **FAST)
    topo.spout("numbers", Numbers(tracked=True, seed=rng.randrange(1 << 30)),
               parallelism=spouts)
    topo.bolt("gather", Gather(k), parallelism=2).shuffle_grouping("numbers")
    topo.bolt("sink", Sink()).shuffle_grouping("gather")
    return Case(topo, "__acker", "acker", f"outputs anchored to {k} inputs, {spouts} spouts")


def timeouts(rng: random.Random) -> Case:
    """message_timeout of 0.5-1 s, 300-600 tuples in flight, a bolt of 3-5 ms a tuple:
    a tuple waits longer in the queue than the timeout allows."""
    timeout, limit, ms = rng.uniform(0.5, 1.0), rng.randrange(300, 601), rng.uniform(3, 5)
    topo = Topology("timeouts", ackers=1, message_timeout=timeout, max_spout_pending=limit,
                    **FAST)
    topo.spout("numbers", Numbers(tracked=True, seed=rng.randrange(1 << 30)))
    topo.bolt("work", Work(ms)).shuffle_grouping("numbers")
    topo.bolt("sink", Sink()).shuffle_grouping("work")
    return Case(topo, "numbers", "timeouts",
                f"timeout {timeout:.2f} s, {limit} pending, {ms:.1f} ms a tuple")


SCENARIOS: dict[str, Callable[[random.Random], Case]] = {
    "slow_bolt": slow_bolt, "hot_key": hot_key, "slow_sink": slow_sink,
    "max_spout_pending": small_pending, "acker": acker_bound, "timeouts": timeouts}


# -- running -------------------------------------------------------------------------------
def run_once(case: Case, seconds: float) -> list:
    """Submit, let it work ``seconds`` after activation, and ask for the findings."""
    with case.topology.submit() as running:
        running.wait_active(timeout=120)
        until = time.monotonic() + seconds
        running.wait_until(lambda stats: time.monotonic() >= until, timeout=seconds + 60,
                           interval=0.25)
        return running.explain()


def scenario(name: str, runs: int, seconds: float, seed: int, verbose: bool) -> tuple[int, int]:
    hits, tops = 0, Counter()
    started = time.monotonic()
    for i in range(runs):
        run_seed = random.Random(f"{seed}-{name}-{i}").randrange(1 << 30)
        case = SCENARIOS[name](random.Random(run_seed))
        found = run_once(case, seconds)
        top = (found[0].kind, found[0].component) if found else ("none", "-")
        hit = top == (case.kind, case.component)
        hits += hit
        tops[f"{top[0]}@{top[1]}"] += 1
        if verbose:
            print(f"# {name} run {i} seed {run_seed}: {case.what}: top {top[0]}@{top[1]} "
                  f"{'ok' if hit else 'MISSED'}; " + " | ".join(str(f) for f in found[:3]),
                  file=sys.stderr, flush=True)
    took = time.monotonic() - started
    seen = ",".join(f"{k}:{n}" for k, n in tops.most_common())
    print(f"RESULT name=diagnose scenario={name} runs={runs} top1={hits} "
          f"top1_rate={hits / runs:.3f} expected={case.kind}@{case.component} "
          f"seconds={took:.1f} tops={seen}", flush=True)
    return hits, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per scenario")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="seconds each run works after activation")
    parser.add_argument("--seed", type=int, default=int(time.time()),
                        help="base seed (each run derives its own; printed)")
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run only these (repeatable); default: all six")
    parser.add_argument("--quiet", action="store_true", help="no per-run lines on stderr")
    args = parser.parse_args(argv)
    names = args.scenario or list(SCENARIOS)
    print(f"# diagnose: base seed {args.seed}, {args.runs} runs of {args.seconds:g} s each",
          file=sys.stderr, flush=True)
    results = [scenario(n, args.runs, args.seconds, args.seed, not args.quiet) for n in names]
    hits, runs = sum(h for h, _ in results), sum(r for _, r in results)
    print(f"RESULT name=diagnose scenario=all runs={runs} top1={hits} "
          f"top1_rate={hits / runs:.3f} target=0.950", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
