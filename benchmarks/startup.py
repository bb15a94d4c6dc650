"""How long a topology takes to start and to die.

    python benchmarks/startup.py [--runs R] [--containers C]

Each run submits a small topology (a spout, two bolts in a chain), measures the time from
``topo.submit()`` to the first tuple executed by a bolt (the bolt's own wall-clock record,
against the submit time), then the time ``kill()`` takes to return, and checks that no
process of the topology is left. Before that, it measures the CPU time (user + system,
from the child's rusage) a fresh interpreter spends importing each process's module, as
``python -m runtime.processes.<role>`` does before it reads its boot: what every instance,
stream manager and master pays at each start (docs/internals/performance.md, "What a
process start costs"). It prints one line per measurement:

    RESULT name=tupleflow workload=startup role=ROLE runs=N stat=import_cpu p50_s=X max_s=Y
    RESULT name=tupleflow workload=startup containers=C runs=R stat=first_tuple p50_s=X max_s=Y
    RESULT name=tupleflow workload=startup containers=C runs=R stat=kill p50_s=X max_s=Y
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import psutil

import runtime
from runtime import Bolt, Spout, Topology

ROLES = ("instance", "stmgr", "master")


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


def import_cpu(role: str) -> float:
    """CPU seconds (user + system) of a new interpreter importing the role's module, with
    the runtime imported from where this process imports it."""
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(runtime.__file__))}
    proc = subprocess.Popen([sys.executable, "-c", f"import runtime.processes.{role}"],
                            env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"FAILED: importing runtime.processes.{role} exited "
                         f"{proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def import_result(role: str, values: list[float]) -> str:
    return (f"RESULT name=tupleflow workload=startup role={role} runs={len(values)}"
            f" stat=import_cpu p50_s={statistics.median(values):.3f} max_s={max(values):.3f}")


def result(stat: str, values: list[float], containers: int) -> str:
    return (f"RESULT name=tupleflow workload=startup containers={containers} runs={len(values)}"
            f" stat={stat} p50_s={statistics.median(values):.3f} max_s={max(values):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="topologies started (0: none)")
    parser.add_argument("--containers", type=int, default=2)
    parser.add_argument("--import-runs", type=int, default=9,
                        help="imports measured per role (0: none)")
    args = parser.parse_args(argv)
    for role in ROLES if args.import_runs > 0 else ():
        print(import_result(role, [import_cpu(role) for _ in range(args.import_runs)]),
              flush=True)
    runs = [one_run(args.containers) for _ in range(args.runs)]
    if runs:
        print(result("first_tuple", [r[0] for r in runs], args.containers))
        print(result("kill", [r[1] for r in runs], args.containers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
