"""Statistics records: what the runtime reports, as frozen data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class InstanceStats:
    """One instance (task) of a component, as last reported to the topology master.

    Counts are since the instance's current incarnation started, except ``restarts``.
    From a restart to the new incarnation's first report the record has its defaults
    (counts 0, ``reported`` None), never the dead incarnation's report.
    Times are wall-clock seconds (``time.time()``).
    """

    component: str
    task: int
    kind: str  # "spout" or "bolt"
    container: int
    pid: int | None = None
    incarnation: int = 0
    state: str = "starting"  # starting, running, restarting, failed, stopped
    emitted: int = 0  # tuples emitted (once per emit call)
    stream_emitted: dict | None = None  # the same per declared stream: {name: tuples}
    transferred: int = 0  # copies sent to tasks (an all-grouping of 3 tasks counts 3)
    executed: int = 0  # tuples given to process() (ticks excluded)
    # a bolt's acks of tracked tuples count as its task sends them (each flush of its
    # acks, docs/internals/performance-log.md "Issue 17, ninth pass"): never more than acked
    acked: int = 0
    failed: int = 0
    dropped: int = 0  # tuples that could not be encoded, or malformed frames received
    errors: int = 0  # exceptions raised by user code
    restarts: int = 0
    # times the topology master died and was replaced: counts and rates then restart
    # from what the instances report next (docs/reliability.md, "A master that may die")
    master_restarts: int = 0
    # spouts with acking on (at least once):
    pending: int = 0  # spout tuples in flight (an acker: roots in its ledger)
    max_spout_pending: int | None = None  # the current limit (set, tuned, or None)
    complete_latency_ms: dict | None = None  # count, mean, p50, p95, p99 of acked tuples
    timed_out: int = 0  # spout tuples failed by timeout (included in failed)
    stale_acks: int = 0  # outcomes for tuples no longer pending here
    tuner_action: str | None = None  # the auto-tuner's last action
    tuner_turns: int = 0
    # the tuner's last turn ("auto"): progress of the last period and the one before,
    # similar, band, action, move, before, after, total (acking/_tracking.py, _turn_record)
    tuner_turn: dict | None = None
    busy_seconds: float = 0.0  # inside process() (bolts) or next_tuple calls (spouts)
    cpu_seconds: float = 0.0  # CPU time (user + system) of the instance's process
    rss_bytes: int = 0  # resident memory of the instance's process
    first_executed: float | None = None
    last_executed: float | None = None
    tapped: list | None = None  # streams whose tuples are copied for running.sample now
    recording: list | None = None  # streams recorded to Parquet now (running.record)
    reported: float | None = None  # when this record was sent
    # queues (issue 5): where tuples wait on their way, now
    queued_tuples: int = 0  # tuples in this instance's batches, not yet sent
    pending_emits: int = 0  # frames its stream manager would not take yet (pendingEmitsQ)
    sm_queued_bytes: int = 0  # bytes its stream manager holds for it (the water marks' count)
    sm_queued_frames: int = 0  # frames its stream manager holds for it
    held_seconds: float = 0.0  # time with output waiting (a spout: held by backpressure)
    # latency since this incarnation started: {"execute", "process", "complete"}, each
    # {count, mean, p50, p95, p99} in ms or None (docs/internals/metrics.md); None with
    # metrics=False
    latency_ms: dict | None = None
    # context.register_metric: {"counters": {name: n}, "gauges": {name: v}, "histograms":
    # {name: {bounds, counts, sum, count}}} (runtime/observe/user_metrics.py); None: none
    user_metrics: dict | None = None
    # a windowed bolt (docs/windows.md): {watermark, oldest_window_start (ms or None),
    # open_windows (or None), open_tuples, late_tuples, evaluated, last_window_start,
    # last_window_end (ms, or None in processing time), last_window_tuples (None before the
    # first window)}; None for other tasks
    window: dict | None = None
    # checkpointed state (docs/internals/checkpoints.md): a task's {"epoch", "saved",
    # "rollbacks", "discarded_frames" (dropped as sent before a rollback), "stateful",
    # "windowed" (its open windows are saved too), "window_tuples" and "window_bytes" (a
    # windowed task's last saved snapshot: tuples held, msgpack bytes; None before one)};
    # the checkpoint spout's {"id", "seconds", "time" of the last committed checkpoint,
    # "committed", "rollbacks", "epoch"}; None without checkpoints
    checkpoint: dict | None = None
    # a fields-grouped bolt's sampled input keys: {"total", "top": [[key, tuples], ...]}
    # (observe/hotkeys.py; estimated tuples, since this incarnation started)
    hot_keys: dict | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> InstanceStats:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


def totals(stats, component: str, field: str) -> int:
    """Sum one counter over the instances of a component.

    >>> s = [InstanceStats("c", 1, "bolt", 0, executed=3),
    ...      InstanceStats("c", 2, "bolt", 0, executed=4)]
    >>> totals(s, "c", "executed")
    7
    """
    return sum(getattr(s, field) for s in stats if s.component == component)
