"""How long a live rebalance pauses the spouts, and whether keyed state stays exact (issue
22), on the stateful word count of ``checkpoints.py`` (embedded log, 2 log spouts -> 2
pass-on bolts -> counters, fields grouping, checkpointed).

Why
    A rebalance with the same containers switches in place (docs/internals/rebalance.md):
    the added instances start while the spouts still run, and the spouts are paused only
    for the drain and the switch. Each step rebalances the counters while the log is being
    read, and reports the event's figures; ``paused_s`` is the target (<= 1 s).
    ``--stateless`` runs the same steps on a stateless pipeline under at least once
    (acking; the pass-on bolts and the fields-grouped sink are rebalanced), and reports
    the duplicates and the ids lost; ``--spouts`` rebalances the log spout of that
    pipeline instead (its partitions move between the spout tasks at the committed
    offsets: duplicates at most what was in flight at the pauses); the stateful run says
    whether the final committed counts equal a batch count of the log.

Reading the output (one line each)::

    RESULT name=rebalance kind=stateful step=1 tasks=2->8 seconds=... paused_s=...
           start_s=... drain_s=... switch_s=... in_place=1 drained=1 keys_moved=...
    RESULT name=rebalance-exact steps=3 words=... exact=1
    RESULT name=rebalance-stateless steps=3 ids=... lost=0 duplicates=...
    RESULT name=rebalance kind=spouts step=1 tasks=2->4 ... paused_s=...
    RESULT name=rebalance-spouts steps=3 ids=... lost=0 duplicates=... max_in_flight=...
    RESULT name=fields-split words=200000 tasks=4 rounds=7 modulo_ns=... key_group_ns=...
           ratio=... key_group_6_ns=...

    python benchmarks/rebalance.py --words 60000 --steps 8,3,4
    python benchmarks/rebalance.py --stateless --words 60000 --steps 4,1,2
    python benchmarks/rebalance.py --spouts --words 60000 --steps 4,1,3
    python benchmarks/rebalance.py --split    # only what key groups cost a fields split

The last line compares, in one process (CPU time, interleaved rounds, medians), the
engine's two fields splits (``runtime/engine/outbound.py``) of 200,000 words over 4
tasks: ``hash % n`` (every stateless subscriber) and through key groups (a
``StatefulBolt`` subscriber only), 128 (the default maximum parallelism) and 6 (a bolt
declared with ``max_parallelism=6``: the same arithmetic, another table).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter

from _common import BenchmarkError
from checkpoints import fill_log, topology, words

from runtime import Topology
from runtime.engine.outbound import _by_field, _by_key_group
from runtime.groupings import KEY_GROUPS
from runtime.testing import ListSink, PacedLogSpout, PassOn, read_sink, wait_for


def run(n: int, steps: list[int], rate: float) -> None:
    root = tempfile.mkdtemp(prefix="rebalance-")
    logged = fill_log(root, n)
    with topology(root, "bench-rebalance", spout=PacedLogSpout,
                  rate=rate).submit(checkpoint_interval=0.5) as running:
        wait_for(lambda: sum(running.state("count").values()) > 0, 120, "a first commit")
        rebalance_steps(running, "stateful", ["count"], steps)
        wait_for(lambda: sum(running.state("count").values()) >= n, 600, "the whole log")
        exact = running.state("count") == dict(Counter(logged))
    print(f"RESULT name=rebalance-exact steps={len(steps)} words={n} exact={int(exact)}")
    if not exact:
        raise BenchmarkError("the committed counts differ from a batch count of the log")


def rebalance_steps(running, kind: str, components: list[str], steps: list[int]) -> None:
    before = 2
    for step, after in enumerate(steps, 1):
        e = running.rebalance({c: after for c in components})
        print(f"RESULT name=rebalance kind={kind} step={step} tasks={before}->{after} "
              f"seconds={e['seconds']} paused_s={e['paused_seconds']} "
              f"start_s={e.get('start_seconds')} drain_s={e['drain_seconds']} "
              f"switch_s={e.get('switch_seconds')} in_place={int(bool(e['in_place']))} "
              f"drained={int(bool(e['drained']))} "
              f"keys_moved={(e['keys_moved'] or {}).get('count')}", flush=True)
        before = after


def run_stateless(n: int, steps: list[int], rate: float, pending: int = 500,
                  spouts: bool = False) -> None:
    """The log's ids -> ``mid`` (pass-on, shuffled) -> ``sink`` (fields grouped), under at
    least once; both bolts rebalanced at each step, or the spout (``spouts``)."""
    root = tempfile.mkdtemp(prefix="rebalance-")
    ids = fill_log(root, n)
    topo = Topology("bench-rebalance-stateless")
    topo.spout("words", PacedLogSpout("words", root=root, fields=["word"], batch_size=500,
                                      rate=rate), parallelism=2)
    topo.bolt("mid", PassOn, parallelism=2).shuffle_grouping("words")
    topo.bolt("sink", ListSink, parallelism=2).fields_grouping("mid", ["word"])
    with topo.submit(ackers=1, max_spout_pending=pending) as running:
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) > 0, 120, "a first tuple")
        rebalance_steps(running, "spouts" if spouts else "stateless",
                        ["words"] if spouts else ["mid", "sink"], steps)
        wait_for(lambda: len(read_sink(running.run_dir, "sink")) >= n, 600, "every id")
        got = Counter(v[0] for v in read_sink(running.run_dir, "sink"))
    lost = sum((Counter(ids) - got).values())
    duplicates = sum((got - Counter(ids)).values())
    # at most max_spout_pending per spout task in flight at each pause
    spout_tasks = [2, *steps][:-1] if spouts else [2] * len(steps)
    print(f"RESULT name=rebalance-{'spouts' if spouts else 'stateless'} steps={len(steps)} "
          f"ids={n} lost={lost} duplicates={duplicates} "
          f"max_in_flight={pending * sum(spout_tasks)}")
    if lost:
        raise BenchmarkError(f"{lost} ids never reached the sink")


class _Out:
    """What a split hands its parts to (here: nothing is sent)."""

    def ship(self, header, items) -> None:
        pass


def split_cost(n_words: int = 200_000, tasks: int = 4, rounds: int = 7) -> None:
    items, out = words(n_words), _Out()
    headers = [b"h"] * tasks
    splits = {"modulo": _by_field(headers, None),
              "key_group": _by_key_group(headers, None, KEY_GROUPS),
              "key_group_6": _by_key_group(headers, None, 6)}  # a max_parallelism=6 bolt
    took: dict[str, list[float]] = {name: [] for name in splits}
    for _ in range(rounds):
        for name, split in splits.items():
            t = time.process_time()
            split(items, out)
            took[name].append((time.process_time() - t) / n_words * 1e9)
    ns = {name: statistics.median(times) for name, times in took.items()}
    old, new = ns["modulo"], ns["key_group"]
    print(f"RESULT name=fields-split words={n_words} tasks={tasks} rounds={rounds} "
          f"modulo_ns={old:.0f} key_group_ns={new:.0f} ratio={new / old:.2f} "
          f"key_group_6_ns={ns['key_group_6']:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=60_000)
    parser.add_argument("--steps", default="8,3,4", help="counter parallelism after each step")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="records a second per spout task (the log must outlast the steps)")
    parser.add_argument("--split", action="store_true", help="only the fields split's cost")
    parser.add_argument("--stateless", action="store_true",
                        help="a stateless pipeline under at least once instead")
    parser.add_argument("--spouts", action="store_true",
                        help="that pipeline's log spout rebalanced instead of its bolts")
    args = parser.parse_args()
    if args.split:
        return split_cost()
    if args.stateless or args.spouts:
        return run_stateless(args.words, [int(s) for s in args.steps.split(",")], args.rate,
                             spouts=args.spouts)
    run(args.words, [int(s) for s in args.steps.split(",")], args.rate)


if __name__ == "__main__":
    main()
