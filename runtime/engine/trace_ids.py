"""What every part of a task's tracing shares (runtime/engine/tracing.py): trace and hop
ids, the sampling gap, and the limits on what one task watches and keeps."""

from __future__ import annotations

import random
from math import log as _ln

from runtime import wire
from runtime.observe.traces import HOP_OUTCOMES

HELD_FOR = 3.0  # message timeouts a watched tuple (spout root, held input) is kept for
MAX_WATCHED = 10_000  # traced roots or held inputs one task watches at most
MAX_RECORDS = 50_000  # records waiting for a report at most (the oldest are dropped)
RUN = 16  # spout tuples traced in a row once a gap is used up (docs/internals/tracing.md)
# seconds a run's entry processed alone (no untraced frame rode it) holds its finished
# trees' acks at most: they go at a tree's end once it has run this long (a slow bolt),
# else with the entry's end (tracing_bolt.py, _traced_process)
ACKS_HELD = 0.01
# an ACKED frame's outcome codes as a trace's status; a hop's outcome codes
STATUS = {wire.ACKED_OK: "acked", wire.ACKED_FAILED: "failed",
          wire.ACKED_TIMEOUT: "timed_out"}
ACKED, FAILED = HOP_OUTCOMES.index("acked"), HOP_OUTCOMES.index("failed")


def new_mark() -> int:
    """A trace or hop id: random, 63 bits, never 0 (0 is 'the spout' as a parent)."""
    return random.getrandbits(63) or 1


def new_first() -> int:
    """The first hop id of one frame's tuples, whose ids are consecutive from it: random,
    62 bits (a frame's ids stay below 2**63), never 0; one draw per frame rather than per
    tuple, and no count of its tuples needed."""
    return random.getrandbits(62) + 1


def gap(rate: float, run: int = 1) -> int:
    """Spout tuples to let pass before the next run of ``run`` traced ones: geometric,
    mean ``run * (1 - rate) / rate``, so that ``rate`` of the tuples are traced (a run
    and its gap hold ``run / rate`` tuples on average)."""
    if rate >= 1.0:
        return 0
    p = rate / (rate + run * (1.0 - rate))  # the geometric's parameter for that mean
    return int(_ln(1.0 - random.random()) / _ln(1.0 - p))

