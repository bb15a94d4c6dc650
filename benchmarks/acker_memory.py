"""Memory the acker ledger holds per pending root, measured with ``tracemalloc``.

Workload
    ``--pending`` spout tuples are initialised in one ``AckLedger`` and none of them
    completes (each still waits for an ack), as in an acker whose topology has that
    many tuple trees in flight. Root ids and XOR values are fresh 64-bit ints drawn
    inside the measured window, because in a running acker the ids come off the wire
    and the ledger holds the only reference to them.

Reading the output
    One line::

        RESULT name=acker-ledger pending=100000 bytes_per_root=124.4

    ``bytes_per_root`` is the growth of traced memory divided by ``--pending``: the
    dict slot, the root id key and the one int that packs spout task, failed flag and
    XOR (see ``docs/internals/acker.md``). The target is at most 200 bytes.

Run from the repository root::

    python -m benchmarks.acker_memory --pending 100000
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

from runtime.acking._ids import new_id
from runtime.acking._ledger import AckLedger

SPOUT_TASKS = 16  # roots are spread over this many spout tasks


def fill(pending: int) -> AckLedger:
    """A ledger holding ``pending`` roots, none of them complete."""
    ledger = AckLedger(30.0)
    for i in range(pending):
        ledger.init(new_id(), i % SPOUT_TASKS, new_id(), now=0.0)
    if ledger.statistics().pending != pending:
        raise SystemExit(f"FAILED acker-ledger: {ledger.statistics()} after {pending} inits")
    return ledger


def bytes_per_root(pending: int) -> float:
    """Traced memory growth while filling a ledger, divided by ``pending``."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ledger = fill(pending)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del ledger
    return grown / pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pending", type=int, default=100_000, help="roots in flight")
    pending = parser.parse_args().pending
    print(
        f"RESULT name=acker-ledger pending={pending} bytes_per_root={bytes_per_root(pending):.1f}"
    )


if __name__ == "__main__":
    main()
