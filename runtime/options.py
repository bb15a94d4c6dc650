"""The engine's options, public: their keys, defaults and checker, for whoever builds a
topology from text (``workbench``'s ``%%topology`` cells) rather than from Python; and the
one parser of each live setting (``check_max_spout_pending``, a tap's ``check_n`` and
``check_keep``), which the magics, the dashboard, the client and the master all call.

The keys and defaults live in ``runtime/model/constants.py`` (with a line on each), the
checks in ``runtime/model/options.py`` and ``runtime/model/controls.py``; this module is
their public import path.

>>> option_problem(BATCH_SIZE, 0), DEFAULTS[ACKERS], TICK_FREQ_SECS in COMPONENT_KEYS
('an integer >= 1', 0, True)
"""

from .model.constants import (
    ACKERS,
    AUTO,
    BACKPRESSURE_HIGH,
    BACKPRESSURE_LOW,
    BATCH_SIZE,
    COMPONENT_KEYS,
    DEFAULT_STREAM,
    DEFAULTS,
    FLUSH_INTERVAL,
    HEARTBEAT_TIMEOUT,
    MAX_PARALLELISM,
    MAX_SPOUT_PENDING,
    MESSAGE_TIMEOUT,
    METRICS_ENABLED,
    METRICS_PORT,
    RECORD,
    RECORD_DIR,
    RECORD_ROWS,
    RECORD_SECONDS,
    RESTART_BACKOFF_MAX,
    SPOUT_WAIT,
    STATS_INTERVAL,
    TARGET_LATENCY,
    TICK_FREQ_SECS,
    TRACE,
    TRACE_STORE,
    TUNE_INTERVAL,
)
from .model.controls import check_keep, check_max_spout_pending, check_n, check_trace
from .model.options import max_parallelism_problem, option_problem

__all__ = [
    "ACKERS",
    "AUTO",
    "BACKPRESSURE_HIGH",
    "BACKPRESSURE_LOW",
    "BATCH_SIZE",
    "COMPONENT_KEYS",
    "DEFAULTS",
    "DEFAULT_STREAM",
    "FLUSH_INTERVAL",
    "HEARTBEAT_TIMEOUT",
    "MAX_PARALLELISM",
    "MAX_SPOUT_PENDING",
    "MESSAGE_TIMEOUT",
    "METRICS_ENABLED",
    "METRICS_PORT",
    "RECORD",
    "RECORD_DIR",
    "RECORD_ROWS",
    "RECORD_SECONDS",
    "RESTART_BACKOFF_MAX",
    "SPOUT_WAIT",
    "STATS_INTERVAL",
    "TARGET_LATENCY",
    "TICK_FREQ_SECS",
    "TRACE",
    "TRACE_STORE",
    "TUNE_INTERVAL",
    "check_keep",
    "check_max_spout_pending",
    "check_n",
    "check_trace",
    "max_parallelism_problem",
    "option_problem",
]
