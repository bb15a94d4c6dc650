"""How soon a slow bolt's rate shows (issue 19: "a 10 ms/tuple bolt shows a non-zero rate in
the dashboard within 2 s of its first tuple").

    python benchmarks/first_rate.py [--runs R] [--ms MS]

Each run submits a spout that emits a burst of 2,000 tuples and one bolt that sleeps
``--ms`` (10) milliseconds a tuple, started paused so that the burst leaves at the resume.
The whole burst fits one frame, so the bolt works through it for ~20 s: the case where counts
kept per frame would show nothing until the frame is done. The run measures the time from
the resume (the spout's first emit follows it within a millisecond or two) to the first
``running.metrics("1m")`` (what the dashboard reads) whose ``executed_per_s`` for the bolt is
above zero, polling every 50 ms. The dashboard refreshes once a second, so what a person sees
can lag this by up to that. One line per run, then the median::

    RESULT name=first-rate run=0 ms=10 seconds=0.27 executed=22
    RESULT name=first-rate runs=3 ms=10 median_s=0.26 max_s=0.27 target_s=2.0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from runtime import Bolt, Spout, Topology

BURST = 2000  # tuples: one frame at the default batch size
POLL_S = 0.05
TARGET_S = 2.0
TIMEOUT_S = 60.0


class Burst(Spout):
    outputs = ["n"]

    def open(self, config, context):
        self.left = BURST

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([self.left])


class Sleepy(Bolt):
    """Sleeps ``ms`` a tuple: time, not CPU, as a bolt waiting on a service would."""

    outputs = ["n"]

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def process(self, tup):
        time.sleep(self.ms / 1000)


def one_run(run: int, ms: float) -> tuple[float, int]:
    topo = Topology(f"first-rate-{run}")
    topo.spout("burst", Burst())
    topo.bolt("slow", Sleepy(ms)).shuffle_grouping("burst")
    with topo.submit() as running:
        running.pause()
        running.wait_active(timeout=TIMEOUT_S)
        started = time.monotonic()
        running.resume()
        while time.monotonic() - started < TIMEOUT_S:
            slow = running.metrics("1m")["components"]["slow"]
            if slow["executed_per_s"] > 0:
                return time.monotonic() - started, slow["executed"]
            time.sleep(POLL_S)  # a poll interval, the measurement's resolution
    raise TimeoutError(f"no rate for the slow bolt in {TIMEOUT_S} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ms", type=float, default=10.0, help="the bolt's sleep per tuple")
    args = parser.parse_args(argv)
    seconds = []
    for run in range(args.runs):
        took, executed = one_run(run, args.ms)
        seconds.append(took)
        print(f"RESULT name=first-rate run={run} ms={args.ms:g} seconds={took:.2f} "
              f"executed={executed}", flush=True)
    print(f"RESULT name=first-rate runs={args.runs} ms={args.ms:g} "
          f"median_s={statistics.median(seconds):.2f} max_s={max(seconds):.2f} "
          f"target_s={TARGET_S}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
