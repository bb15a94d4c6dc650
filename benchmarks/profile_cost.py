"""What ``running.profile`` costs the task it samples, and how long a call takes.

Workload
    A spout emitting numbers as fast as it may, into one ``work`` bolt task that spends
    a fixed pure-Python loop on each tuple, so that it is the bottleneck (busy all the
    time, held back only by its own work). Rounds alternate a plain window and a
    profiled one (``running.profile("work", seconds)``), and alternate their order, so
    that a machine that gets busier does not favour one side.

    A window's rate is the bolt's ``executed`` count over its reports' own timestamps
    (``reported``), read from ``margin`` seconds after the window starts to ``margin``
    seconds before it ends: in a profiled window that is while py-spy samples (it
    attaches within a few hundred milliseconds of the call).

Reading the output
    One line per window, then one summary line (wrapped here)::

        RESULT name=profile-cost-window round=0 profiled=off executed_per_s=5120
               executed_per_cpu_s=5400
        RESULT name=profile-cost rounds=5 rate_hz=100 off_per_s=5120 on_per_s=5050
               cost_pct=1.4 target_pct=5.0 call_s_median=2.15 call_s_max=2.31
               call_target_s=3.0 samples_median=190 off_per_cpu_s=5400 on_per_cpu_s=5390
               sampler_cpu_pct=4.1 paired_cost_pct=1.2

    ``off_per_s`` and ``on_per_s`` are the medians over the rounds, ``cost_pct`` is
    ``(1 - on / off) * 100`` (negative when noise is larger than the cost), and
    ``call_s_*`` is how long ``profile(seconds=2)`` took to return a picture. On a shared
    2-core machine py-spy's own CPU competes with the task for a core: that is part of
    what is measured. ``*_per_cpu_s`` (tuples per CPU second of the bolt's process) is
    the same comparison with the machine's other load taken out: it shows whether
    sampling slows the task's own execution, but not time it loses waiting for a core.
    ``paired_cost_pct`` is the cost read from each round's own pair of windows (the median
    of their ratios): the figure to read when the rate drifts over the run (a quiet run
    on 2026-11-26 went from 4,193 to 2,894 a second over five rounds: the medians of each
    side said 6.9 %, the pairs 0.5 %). ``sampler_cpu_pct`` is the CPU the samplers (two
    py-spy processes per task) used, in percent of one core over the profile: what
    profiling takes from the machine.

    python benchmarks/profile_cost.py --rounds 5 --seconds 2
"""

from __future__ import annotations

import argparse
import resource
import statistics
import threading
import time

from _common import paired_cost_pct

from runtime import Bolt, Spout, Topology

TARGET_PCT = 5.0  # the target: profiling costs the profiled task at most 5 %
CALL_TARGET_S = 3.0  # the target: profile(seconds=2) returns within 3 s


class Numbers(Spout):
    outputs = ["n"]

    def open(self, config, context):
        self.n = 0

    def next_tuple(self):
        for _ in range(100):
            self.n += 1
            self.emit([self.n])


class Work(Bolt):
    """A fixed amount of pure-Python work per tuple (about 0.2 ms on an idle core)."""

    def process(self, tup):
        total = 0
        for i in range(4000):
            total += i * i
        return total


def executed_at(running) -> tuple[float, int, float]:
    (work,) = [s for s in running.statistics() if s.component == "work"]
    return work.reported, work.executed, work.cpu_seconds


def _children_cpu() -> float:
    """CPU seconds of this process's finished children: here, the py-spy samplers."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def window(running, seconds: float, margin: float, profile: bool,
           target: str = "work") -> tuple[float, float, dict]:
    """The bolt's executed rate inside one window, tuples per CPU second of its process
    (what the machine's other load does not change), and (profiled) the call's facts."""
    call: dict = {}

    def sample() -> None:
        started, cpu = time.monotonic(), _children_cpu()
        p = running.profile(target, seconds=seconds)
        call.update(seconds=time.monotonic() - started, samples=p.samples,
                    sampler_cpu=_children_cpu() - cpu)

    worker = threading.Thread(target=sample) if profile else None
    if worker is not None:
        worker.start()
    time.sleep(margin)  # the window itself: measured, not waited on for a condition
    t0, n0, c0 = executed_at(running)
    time.sleep(seconds - 2 * margin)
    t1, n1, c1 = executed_at(running)
    if worker is not None:
        worker.join()
    else:
        time.sleep(margin)
    return (n1 - n0) / (t1 - t0), (n1 - n0) / max(c1 - c0, 1e-9), call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--margin", type=float, default=0.5)
    parser.add_argument("--target", default="work", choices=("work", "numbers"),
                        help="the component profiled; 'numbers' (the spout) is a control: "
                             "what sampling costs the work bolt when it is not sampled")
    args = parser.parse_args()
    # small batches: a bolt counts executed tuples per batch, and a 2000-tuple batch of
    # this work would take longer than a window
    topo = Topology("profile-cost", stats_interval=0.1, batch_size=20)
    topo.spout("numbers", Numbers())
    topo.bolt("work", Work()).shuffle_grouping("numbers")
    on, off, calls, per_cpu = [], [], [], {True: [], False: []}
    with topo.submit() as running:
        running.wait_active()
        window(running, args.seconds, args.margin, False)  # warm up: queues fill, JIT-free
        for r in range(args.rounds):
            for profiled in ((False, True) if r % 2 == 0 else (True, False)):
                rate, cpu_rate, call = window(running, args.seconds, args.margin, profiled,
                                              args.target)
                (on if profiled else off).append(rate)
                per_cpu[profiled].append(cpu_rate)
                if call:
                    calls.append(call)
                print(f"RESULT name=profile-cost-window round={r} "
                      f"profiled={'on' if profiled else 'off'} executed_per_s={rate:.0f} "
                      f"executed_per_cpu_s={cpu_rate:.0f}",
                      flush=True)
    on_rate, off_rate = statistics.median(on), statistics.median(off)
    if not off_rate:
        raise SystemExit("the bolt executed nothing in the plain windows: no comparison")
    took = [c["seconds"] for c in calls]
    sampler = statistics.median(c["sampler_cpu"] for c in calls)
    print(f"RESULT name=profile-cost target={args.target} rounds={args.rounds} rate_hz=100 "
          f"off_per_s={off_rate:.0f} "
          f"on_per_s={on_rate:.0f} cost_pct={(1 - on_rate / off_rate) * 100:.1f} "
          f"target_pct={TARGET_PCT} call_s_median={statistics.median(took):.2f} "
          f"call_s_max={max(took):.2f} call_target_s={CALL_TARGET_S} "
          f"samples_median={statistics.median(c['samples'] for c in calls):.0f} "
          f"off_per_cpu_s={statistics.median(per_cpu[False]):.0f} "
          f"on_per_cpu_s={statistics.median(per_cpu[True]):.0f} "
          f"sampler_cpu_pct={sampler / args.seconds * 100:.1f} "
          f"paired_cost_pct={paired_cost_pct(on, off):.1f}")


if __name__ == "__main__":
    main()
