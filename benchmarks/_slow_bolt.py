"""The slow-bolt scenario of issue 17, run by ``sentences.py --count-sleep-ms``: a
topology whose bolt is far slower than its spout, with acking on and the defaults, for
``--seconds``. It prints one RESULT line: the spout's acked, failed and timed-out
sentences, their complete latency (p50, p99, in ms) and how long after activation the
spout was first throttled, by its limit (its pending at its ``max_spout_pending``) or by
backpressure (held); ``never`` if it was not."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from _common import complete_latencies, total

POLL_SECONDS = 0.25  # as often as instances report (stats_interval)


def run(args, topology, config: dict, spout: str) -> SlowBoltResult:
    """Submit ``topology`` with ``config``, watch ``spout`` for ``args.seconds``."""
    with topology.submit(scheduler="local", containers=args.containers, config=config) as running:
        running.wait_active(timeout=60)
        start, wall, throttled = time.monotonic(), time.time(), []

        def over(stats) -> bool:
            if any(held(r) for r in stats if r.component == spout):
                throttled.append(time.monotonic() - start)
            return time.monotonic() - start >= args.seconds

        stats = running.wait_until(over, timeout=args.seconds + 60, interval=POLL_SECONDS)
        throttled += [e["time"] - wall for e in running.events()
                      if e["kind"] == "backpressure_on"]
    return SlowBoltResult(args, stats, spout, min(throttled, default=None))


def held(record) -> bool:
    """Whether a spout task's report shows it throttled: at its limit, or held."""
    limit = record.max_spout_pending
    return (limit is not None and record.pending >= limit) or record.held_seconds > 0


@dataclass(frozen=True)
class SlowBoltResult:
    """The figures of one run; ``line()`` is what the benchmark prints."""

    args: argparse.Namespace
    stats: list
    spout: str
    throttled: float | None  # seconds from activation; None: never

    def line(self) -> str:
        stats, spout = self.stats, self.spout
        reported = all(r.complete_latency_ms for r in stats if r.component == spout)
        latency = dict(complete_latencies(stats, spout)) if reported else {}
        limits = [r.max_spout_pending for r in stats if r.component == spout]
        throttled = "never" if self.throttled is None else f"{self.throttled:.2f}"
        return (f"RESULT name=tupleflow workload=sentences-slow-bolt acking=on"
                f" count_sleep_ms={self.args.count_sleep_ms:g} seconds={self.args.seconds:g}"
                f" acked={total(stats, spout, 'acked')} failed={total(stats, spout, 'failed')}"
                f" timed_out={total(stats, spout, 'timed_out')}"
                f" p50_ms={latency.get('p50_ms')} p99_ms={latency.get('p99_ms')}"
                f" throttled_after_s={throttled}"
                f" max_spout_pending={','.join(map(str, limits))}")
