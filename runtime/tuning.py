"""The max-spout-pending auto-tuner of Storm @Twitter (seed 000 §3.3.3), public.

The state machine lives with the rest of at least once, in ``runtime/acking/_tuner.py``
(read ``docs/internals/tuner.md``); this module is its public import path.
"""

from .acking._tuner import (
    MIN_STEP_DOWN,
    NO_CHANGE_LIMIT,
    STEP_UP,
    MaxSpoutPendingTuner,
    TunerStatistics,
    TunerTurn,
    replay,
)

__all__ = ["MIN_STEP_DOWN", "MaxSpoutPendingTuner", "NO_CHANGE_LIMIT", "STEP_UP", "TunerStatistics",
           "TunerTurn", "replay"]
