"""What the live acker view (``running.acker_state()``) costs an acker and a spout task per
report, against how many roots they hold.

Workload
    For each ``--pending`` figure, one ``AckLedger`` holding that many roots (each still
    waiting for an ack) and one ``SpoutTracker`` holding that many roots in flight; then
    the three reads a report makes, each timed over ``--repeat`` calls in this process:
    the ledger's ``ages`` (pending roots per rotation slot), its ``oldest(10)``, and the
    spout's ``roots_report`` (its 10 oldest roots with msg_id and age).

Reading the output
    One line per figure::

        RESULT name=acker-view pending=100000 ages_us=1.4 oldest10_us=13.0 spout_report_us=99.7

    Microseconds per call. The design's claim is that none grows with ``pending``
    (docs/internals/dashboard.md, "The lineage tab and the acker panel"): compare the
    lines of one run, not figures across machines.

Run from the repository root::

    python -m benchmarks.acker_view --pending 1000 100000
"""

from __future__ import annotations

import argparse
import timeit

from runtime.acking._ids import RootIds
from runtime.acking._ledger import AckLedger
from runtime.acking._tracking import SpoutTracker


def ledger_holding(pending: int) -> AckLedger:
    """A ledger whose ``pending`` self-initialising roots each wait for one more ack."""
    ledger, ids, messages = AckLedger(30.0), RootIds(task=1, bits=4), []
    for _ in range(pending):
        messages += [1, ids.new(), 12345]  # ACK with a value that leaves the XOR nonzero
    ledger.apply(messages, now=1.0)
    return ledger


def tracker_holding(pending: int) -> SpoutTracker:
    tracker = SpoutTracker(timeout=30.0, now=0.0)
    for i in range(pending):
        tracker.emitted(root=i, msg_id=i, now=0.5)
    return tracker


def per_call(call, repeat: int) -> float:
    """Microseconds per call, the best of three rounds (the machine is shared)."""
    return min(timeit.repeat(call, number=repeat, repeat=3)) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--repeat", type=int, default=2_000)
    args = parser.parse_args()
    for pending in args.pending:
        print(line(pending, args.repeat), flush=True)


def line(pending: int, repeat: int) -> str:
    """The RESULT line of one ``pending`` figure."""
    ledger, tracker = ledger_holding(pending), tracker_holding(pending)
    return (f"RESULT name=acker-view pending={pending} "
            f"ages_us={per_call(lambda: ledger.ages(2.0), repeat):.1f} "
            f"oldest10_us={per_call(lambda: ledger.oldest(10), repeat):.1f} "
            f"spout_report_us={per_call(lambda: tracker.roots_report(2.0), repeat):.1f}")

if __name__ == "__main__":
    main()
