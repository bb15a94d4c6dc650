"""Reserved names and configuration keys: every one lives here, with a line on what it is.

Component and stream ids that start with ``__`` belong to the runtime; user code may not
declare them (see :func:`runtime.model.topology.check_user_id`).
"""

from __future__ import annotations

RESERVED_PREFIX = "__"  # ids with this prefix are the runtime's own

# --- system components and streams -----------------------------------------------------
ACKER = "__acker"  # the acker bolt's component id (at-least-once)
CHECKPOINTER = "__checkpoint"  # the checkpoint spout's component id (checkpointed state)
SYSTEM = "__system"  # the component that tick tuples come from
TICK = "__tick"  # the stream of tick tuples
METRICS = "__metrics"  # the metrics stream (instances -> topology master)
DEFAULT_STREAM = "default"  # the stream an emit goes to when none is named

# --- configuration keys (topology-wide unless noted) ---------------------------------------
ACKERS = "ackers"  # number of acker tasks; 0 means at most once
MESSAGE_TIMEOUT = "message_timeout"  # seconds before a pending spout tuple fails
MAX_SPOUT_PENDING = "max_spout_pending"  # in-flight spout tuples per spout task, or "auto"
TUNE_INTERVAL = "tune_interval"  # seconds between two turns of the max-spout-pending tuner
TARGET_LATENCY = "target_latency"  # seconds of complete latency the default in-flight limit
#                                    aims at, with acking on (None: no limit, as Storm)
BATCH_SIZE = "batch_size"  # tuples per outgoing frame before it is sent
FLUSH_INTERVAL = "flush_interval"  # seconds a partly filled batch may wait before it is sent
TICK_FREQ_SECS = "tick_freq_secs"  # per component: seconds between tick tuples (None: none)
STATS_INTERVAL = "stats_interval"  # seconds between an instance's statistics reports
HEARTBEAT_TIMEOUT = "heartbeat_timeout"  # seconds of silence before an instance is presumed hung
SPOUT_WAIT = "spout_wait"  # the least a spout sleeps (s) after a run whose calls emitted nothing
#                           or ran dry; it sleeps on to its next flush (instance.sleep_ms)
RESTART_BACKOFF_MAX = "restart_backoff_max"  # cap, in seconds, on the delay before a restart
BACKPRESSURE_HIGH = "backpressure_high"  # bytes queued for one destination that stop the spouts
BACKPRESSURE_LOW = "backpressure_low"  # bytes it must drain below for the spouts to resume
RECORD = "record"  # per component: the stream ids to record to Parquet from the start
RECORD_ROWS = "record_segment_rows"  # rows per recorded Parquet segment, at most
RECORD_SECONDS = "record_segment_seconds"  # seconds after which an open segment is written
RECORD_DIR = "record_dir"  # a folder every container and the submitter share: recordings
#                            go there, a folder per run (default: the run directory)
WINDOW = "window"  # per component: a windowed bolt's Window (runtime/model/windowing.py)
CHECKPOINT_INTERVAL = "checkpoint_interval"  # seconds between two checkpoints of the
#                                             StatefulBolts' state (None: no checkpoints)
STATE_STORE = "state_store"  # where checkpoints go: "sqlite" (run dir), "memory" (the
#                              in-memory cluster only) or a redis:// URL
STATE_DIR = "state_dir"  # set by the scheduler, not the user: the run directory that holds
#                          the "sqlite" store and names the Redis one, the same for every
#                          container (on Spark each container has a run directory of its own)
METRICS_ENABLED = "metrics"  # False: no latency histograms, CPU or RSS (bare counters)
TRACE = "trace"  # fraction of spout tuples traced, 0.0..1.0 (0.0: off; docs/internals/tracing.md)
TRACE_STORE = "trace_store"  # traces the master keeps, newest; older ones are dropped, counted
MAX_PARALLELISM = "max_parallelism"  # per component (a keyword of topo.spout/topo.bolt, not
#   an option): the most tasks a rebalance may give it, and for keyed state its number of
#   key groups; fixed at definition (default: KEY_GROUPS, 128, or the parallelism if higher)
MAX_PARALLELISM_LIMIT = 1 << 15  # the highest max_parallelism one may set (Flink's too): a
#   keyed sender holds a list of that many key groups per subscriber
MAX_PARALLELISMS = "max_parallelisms"  # set by the plan, not the user: component -> its
#   max_parallelism, so that the master's rebalance guard knows it (it has no topology)
METRICS_PORT = "metrics_port"  # serve the metrics in Prometheus's text format on this
#                                loopback port (0: a free one; None: not served)

DEFAULTS: dict[str, object] = {
    ACKERS: 0,
    MESSAGE_TIMEOUT: 30.0,
    MAX_SPOUT_PENDING: None,
    TUNE_INTERVAL: 120.0,
    TARGET_LATENCY: 0.05,  # docs/internals/tuner.md, "The default: a latency bound"
    BATCH_SIZE: 2000,  # docs/internals/performance-log.md, "The frame path": fewer frames
    FLUSH_INTERVAL: 0.002,
    TICK_FREQ_SECS: None,
    STATS_INTERVAL: 0.25,
    HEARTBEAT_TIMEOUT: 10.0,
    SPOUT_WAIT: 0.001,
    RESTART_BACKOFF_MAX: 5.0,
    BACKPRESSURE_HIGH: 4 * 1024 * 1024,
    BACKPRESSURE_LOW: 2 * 1024 * 1024,
    RECORD_ROWS: 200_000,
    RECORD_SECONDS: 1.0,
    METRICS_ENABLED: True,
    TRACE: 0.0,
    TRACE_STORE: 10_000,
    CHECKPOINT_INTERVAL: None,
    STATE_STORE: "sqlite",
}

# Submit options the schedulers take (not engine options; they never reach the plan).
SCHEDULER_KEYS = frozenset({"detached",  # local: the topology outlives the submitter
                            "master",  # spark: the Spark master URL or a SparkSession
                            "bind_host", "advertise_host"})  # spark: where the master listens

# Keys that may also be set per component (they override the topology-wide value there).
COMPONENT_KEYS = frozenset({TICK_FREQ_SECS, MAX_SPOUT_PENDING, TUNE_INTERVAL, BATCH_SIZE,
                            FLUSH_INTERVAL, RECORD, RECORD_ROWS, RECORD_SECONDS,
                            TARGET_LATENCY, WINDOW})
AUTO = "auto"  # max_spout_pending="auto": the tuner sets it, starting from AUTO_START
AUTO_START = 1000

# --- taps (running.sample) -----------------------------------------------------------------
MAX_SAMPLES = 10_000  # the most tuples one sample() may ask for
TAP_SECONDS = 10.0  # a tap stays on this long after the last sample() that asked for it

# --- instance logs sent by their container (a remote one's stay on its executor's host) ---
LOG_TAIL = 1 << 20  # bytes of an instance's log one answer carries, at most (its end)
LOG_WAIT = 10.0  # seconds the master waits for a container to send a log
