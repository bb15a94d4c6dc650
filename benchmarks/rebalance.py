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
    RESULT name=fields-split words=200000 tasks=4 rounds=7 modulo_ns=... key_group_ns=...
           ratio=...

    python benchmarks/rebalance.py --words 60000 --steps 8,3,4
    python benchmarks/rebalance.py --split    # only what key groups cost a fields split

The last line compares, in one process (CPU time, interleaved rounds, medians), a fields
split of 200,000 words over 4 tasks by ``hash % n`` (before key groups) with the engine's
split (``runtime/engine/outbound.py``, through the key group).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter

from _common import BenchmarkError
from checkpoints import fill_log, topology, words

from runtime.engine.outbound import _by_field
from runtime.groupings import field_hash
from runtime.testing import PacedLogSpout, wait_for


def run(n: int, steps: list[int], rate: float) -> None:
    root = tempfile.mkdtemp(prefix="rebalance-")
    logged = fill_log(root, n)
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
        exact = running.state("count") == dict(Counter(logged))
    print(f"RESULT name=rebalance-exact steps={len(steps)} words={n} exact={int(exact)}")
    if not exact:
        raise BenchmarkError("the committed counts differ from a batch count of the log")


class _Out:
    """What a split hands its parts to (here: nothing is sent)."""

    def ship(self, header, items) -> None:
        pass


def split_cost(n_words: int = 200_000, tasks: int = 4, rounds: int = 7) -> None:
    items, out = words(n_words), _Out()
    engine = _by_field([b"h"] * tasks, None)

    def modulo(items, out):  # the split before key groups
        parts = [[] for _ in range(tasks)]
        for v in items:
            parts[field_hash(v) % tasks].append(v)

    took: dict[str, list[float]] = {"modulo": [], "key_group": []}
    for _ in range(rounds):
        for name, split in (("modulo", modulo), ("key_group", engine)):
            t = time.process_time()
            split(items, out)
            took[name].append((time.process_time() - t) / n_words * 1e9)
    old, new = statistics.median(took["modulo"]), statistics.median(took["key_group"])
    print(f"RESULT name=fields-split words={n_words} tasks={tasks} rounds={rounds} "
          f"modulo_ns={old:.0f} key_group_ns={new:.0f} ratio={new / old:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=60_000)
    parser.add_argument("--steps", default="8,3,4", help="counter parallelism after each step")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="records a second per spout task (the log must outlast the steps)")
    parser.add_argument("--split", action="store_true", help="only the fields split's cost")
    args = parser.parse_args()
    if args.split:
        return split_cost()
    run(args.words, [int(s) for s in args.steps.split(",")], args.rate)


if __name__ == "__main__":
    main()
