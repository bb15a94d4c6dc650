"""How long a topology takes to start and to die.

    python benchmarks/startup.py [--runs R] [--containers C]

Each run submits a small topology (a spout, two bolts in a chain), measures the time from
``topo.submit()`` to the first tuple executed by a bolt (the bolt's own wall-clock record,
against the submit time), then the time ``kill()`` takes to return, and checks that no
process of the topology is left. It prints one line per measurement:

    RESULT name=tupleflow workload=startup containers=C runs=R stat=first_tuple p50_s=X max_s=Y
    RESULT name=tupleflow workload=startup containers=C runs=R stat=kill p50_s=X max_s=Y
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psutil

from runtime import Bolt, Spout, Topology


class Ticker(Spout):
    outputs = ["n"]

    def open(self, config, context):
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.emit([self.n])


class Pass(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit([tup.values[0]])


class Drop(Bolt):
    outputs = []

    def process(self, tup):
        pass


BOLTS = ("pass", "drop")


def topology() -> Topology:
    topo = Topology("startup-bench")
    topo.spout("ticker", Ticker)
    topo.bolt("pass", Pass).shuffle_grouping("ticker")
    topo.bolt("drop", Drop).shuffle_grouping("pass")
    return topo


def one_run(containers: int) -> tuple[float, float]:
    """(submit -> first tuple executed, kill duration), both in seconds."""
    running = topology().submit(scheduler="local", containers=containers)
    stats = running.wait_until(lambda s: all(r.first_executed for r in s if r.component in BOLTS),
                               timeout=30)
    first = min(r.first_executed for r in stats if r.component in BOLTS) - running.submitted
    tree = [psutil.Process(running.status()["pid"])]
    tree += tree[0].children(recursive=True)
    start = time.perf_counter()
    running.kill()
    killed = time.perf_counter() - start
    left = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if left:
        raise SystemExit(f"FAILED: processes left after kill: {left}")
    return first, killed


def result(stat: str, values: list[float], containers: int) -> str:
    return (f"RESULT name=tupleflow workload=startup containers={containers} runs={len(values)}"
            f" stat={stat} p50_s={statistics.median(values):.3f} max_s={max(values):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--containers", type=int, default=2)
    args = parser.parse_args(argv)
    runs = [one_run(args.containers) for _ in range(args.runs)]
    print(result("first_tuple", [r[0] for r in runs], args.containers))
    print(result("kill", [r[1] for r in runs], args.containers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
