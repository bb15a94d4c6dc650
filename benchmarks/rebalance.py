"""How long a live rebalance pauses the spouts, and whether keyed state stays exact (issue
22), on the stateful word count of ``checkpoints.py`` (embedded log, 2 log spouts -> 2
pass-on bolts -> counters, fields grouping, checkpointed).

Why
    This slice restarts every container on the new plan (docs/internals/rebalance.md), so
    the pause is mostly process start-up. Each step rebalances the counters while the log
    is being read, and reports the event's figures; the last line says whether the final
    committed counts equal a batch count of the log.

Reading the output (one line each)::

    RESULT name=rebalance step=1 count=2->8 seconds=... paused_s=... drain_s=...
           restart_s=... drained=1 keys_moved=...
    RESULT name=rebalance-exact steps=3 words=... exact=1

    python benchmarks/rebalance.py --words 60000 --steps 8,3,4
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter

from _common import BenchmarkError
from checkpoints import fill_log, topology

from runtime.testing import PacedLogSpout, wait_for


def run(n: int, steps: list[int], rate: float) -> None:
    root = tempfile.mkdtemp(prefix="rebalance-")
    words = fill_log(root, n)
    with topology(root, "bench-rebalance", spout=PacedLogSpout,
                  rate=rate).submit(checkpoint_interval=0.5) as running:
        wait_for(lambda: sum(running.state("count").values()) > 0, 120, "a first commit")
        before = 2
        for step, after in enumerate(steps, 1):
            e = running.rebalance({"count": after})
            print(f"RESULT name=rebalance step={step} count={before}->{after} "
                  f"seconds={e['seconds']} paused_s={e['paused_seconds']} "
                  f"drain_s={e['drain_seconds']} restart_s={e['restart_seconds']} "
                  f"drained={int(bool(e['drained']))} "
                  f"keys_moved={(e['keys_moved'] or {}).get('count')}", flush=True)
            before = after
        wait_for(lambda: sum(running.state("count").values()) >= n, 600, "the whole log")
        exact = running.state("count") == dict(Counter(words))
    print(f"RESULT name=rebalance-exact steps={len(steps)} words={n} exact={int(exact)}")
    if not exact:
        raise BenchmarkError("the committed counts differ from a batch count of the log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=60_000)
    parser.add_argument("--steps", default="8,3,4", help="counter parallelism after each step")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="records a second per spout task (the log must outlast the steps)")
    args = parser.parse_args()
    run(args.words, [int(s) for s in args.steps.split(",")], args.rate)


if __name__ == "__main__":
    main()
