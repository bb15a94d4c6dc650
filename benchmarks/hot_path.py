"""The engine's per-tuple CPU cost, in one process: the word count's spout and bolt executors.

Why
    Whole runs (``wordcount.py``) on this shared 2-core machine vary by tens of percent
    with the other work on it. This measures where the cost is paid, in CPU time
    (``time.process_time``), with the executors the instance processes run and no
    sockets: the spout executor's ``step`` (``next_tuple``, ``emit``, batching, grouping,
    msgpack encoding) and the counting bolt's ``on_frame`` (decoding, a Tuple per value,
    ``process``) over the frames the spout produced. Rounds alternate and the medians are
    reported; ``floor_ns`` is the spout's own ``next_tuple`` with ``emit`` replaced by a bare
    ``list.append`` (what no engine could go below), ``engine_ns`` the spout's cost above it.

With ``--acking on`` the spout tracks every tuple, with a real acker executor beside it:
spout, bolt and acker exchange their frames in cycles of ``CYCLE`` tuples (so that about
as many roots are in flight as in a real run), and the line reports each one's CPU: the
spout's emitting (``spout_ns``) and its handling of completions (``spout_acked_ns``:
the bolt's, for the word count's one-tuple trees, and any acker outcomes), the bolt
(``bolt_ns``, acking included) and the acker (``acker_ns``: next to nothing here, as
one-tuple trees never reach it; docs/internals/acker.md, "Leaves").

Reading the output (one line each, wrapped here)::

    RESULT name=hot-path workload=wordcount tuples=200000 rounds=5 spout_ns=647
           floor_ns=606 engine_ns=41 bolt_ns=588
    RESULT name=hot-path-acking workload=wordcount tuples=200000 rounds=5 spout_ns=890
           spout_acked_ns=24 bolt_ns=947 acker_ns=0 total_ns=1862

    python benchmarks/hot_path.py --tuples 200000 --rounds 9 [--acking on]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

from wordcount import build_topology

from runtime import wire
from runtime.acking._acker import AckerExecutor
from runtime.engine.executor import Executor

CYCLE = 5000  # tuples per spout -> bolt -> acker -> spout cycle of the acking rounds


def executors(tuples: int) -> tuple[Executor, Executor, list]:
    """The word count's spout and bolt executors; the spout's frames land in the list."""
    topology = build_topology(1, 1, acking=False)
    plan = topology.physical_plan(1, tuples=10**15, ackers=0)
    tasks, frames = plan.component_tasks(), []
    spout = Executor(plan, topology.components, tasks["words"][0],
                     lambda header, body: frames.append((header, body)))
    bolt = Executor(plan, topology.components, tasks["count"][0], lambda header, body: None)
    spout.start()
    bolt.start()
    return spout, bolt, frames


def per_tuple(fn, tuples: int) -> float:
    """CPU nanoseconds per tuple of ``fn()``."""
    started = time.process_time()
    fn()
    return (time.process_time() - started) / tuples * 1e9


def one_round(spout: Executor, bolt: Executor, frames: list, tuples: int) -> tuple:
    frames.clear()
    calls = 500  # as many as an instance makes per step at full speed

    def run_spout():
        for _ in range(tuples // calls):
            spout.step(calls)
        spout.flush()

    def run_bolt():
        for header, body in frames:
            bolt.on_frame(header, body)

    spout_ns = per_tuple(run_spout, tuples)
    bolt_ns = per_tuple(run_bolt, tuples)
    return spout_ns, floor(spout.user, tuples), bolt_ns


def floor(user, tuples: int) -> float:
    """``next_tuple`` alone: ``emit`` is a bare ``list.append`` for the time of it."""
    emit, kept = user.emit, []
    user.emit = kept.append
    try:
        return per_tuple(lambda: [user.next_tuple() for _ in range(tuples)], tuples)
    finally:
        user.emit = emit


def acking_executors() -> tuple[dict, dict]:
    """The acking word count's spout, bolt and acker executors by role, and the frames
    sent to each task (routed by the header, as a stream manager does)."""
    topology = build_topology(1, 1, acking=True)
    # the cap a cycle needs (the default latency bound starts at 8 roots a task and holds
    # the spout there, since nothing here reports a latency)
    plan = topology.physical_plan(1, tuples=10**15, ackers=1, max_spout_pending=CYCLE)
    tasks = plan.component_tasks()
    inbox = {t: [] for ts in tasks.values() for t in ts}

    def send(header, body):
        inbox[wire.dest_of(header)].append((header, body))

    spout = Executor(plan, topology.components, tasks["words"][0], send)
    bolt = Executor(plan, topology.components, tasks["count"][0], send)
    acker = AckerExecutor(plan, tasks["__acker"][0], send)
    for ex in (spout, bolt, acker):
        ex.start()
    return {"spout": spout, "bolt": bolt, "acker": acker}, inbox


def acking_round(roles: dict, inbox: dict, tuples: int) -> tuple:
    spout = roles["spout"]
    cpu = dict.fromkeys(("spout", "spout_acked", "bolt", "acker"), 0.0)

    def emit():
        for _ in range(CYCLE // 500):
            spout.step(500)
        spout.flush()

    def deliver(ex):
        def run():
            frames, inbox[ex.task] = inbox[ex.task], []
            for header, body in frames:
                ex.on_frame(header, body)
            ex.flush()
        return run

    acked = spout.acked
    for _ in range(tuples // CYCLE):
        cpu["spout"] += per_tuple(emit, tuples)
        cpu["bolt"] += per_tuple(deliver(roles["bolt"]), tuples)
        cpu["acker"] += per_tuple(deliver(roles["acker"]), tuples)
        cpu["spout_acked"] += per_tuple(deliver(spout), tuples)
    if spout.acked - acked != tuples // CYCLE * CYCLE:
        raise SystemExit(f"FAILED hot-path-acking: {spout.acked - acked} of {tuples} acked")
    return tuple(cpu.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=200_000, help="tuples per round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (medians are reported)")
    parser.add_argument("--acking", choices=["off", "on"], default="off")
    args = parser.parse_args(argv)
    gc.freeze()  # as an instance does (runtime.processes.instance.tune_interpreter)
    gc.set_threshold(50_000, 20, 100)
    if args.acking == "on":
        tuples = max(CYCLE, args.tuples // CYCLE * CYCLE)
        roles, inbox = acking_executors()
        rounds = [acking_round(roles, inbox, tuples) for _ in range(args.rounds)]
        spout_ns, acked_ns, bolt_ns, acker_ns = (statistics.median(c) for c in zip(*rounds))
        print(f"RESULT name=hot-path-acking workload=wordcount tuples={tuples} "
              f"rounds={args.rounds} spout_ns={spout_ns:.0f} spout_acked_ns={acked_ns:.0f} "
              f"bolt_ns={bolt_ns:.0f} acker_ns={acker_ns:.0f} "
              f"total_ns={spout_ns + acked_ns + bolt_ns + acker_ns:.0f}", flush=True)
        return 0
    tuples = max(500, args.tuples // 500 * 500)
    spout, bolt, frames = executors(tuples)
    rounds = [one_round(spout, bolt, frames, tuples) for _ in range(args.rounds)]
    spout_ns, floor_ns, bolt_ns = (statistics.median(column) for column in zip(*rounds))
    print(f"RESULT name=hot-path workload=wordcount tuples={tuples} rounds={args.rounds} "
          f"spout_ns={spout_ns:.0f} floor_ns={floor_ns:.0f} engine_ns={spout_ns - floor_ns:.0f} "
          f"bolt_ns={bolt_ns:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
