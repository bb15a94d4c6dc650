"""The client's questions to the topology master (``RunningTopology._ask``): each a control
record, registered in :data:`runtime.wire.messages.MESSAGES`, and answered by one
:class:`~runtime.wire.messages.Reply`."""

from __future__ import annotations

from typing import Any

from runtime.wire.messages import Control, _message

__all__ = [
    "AskAckerState", "AskEvents", "AskExceptions", "AskKill", "AskLogs", "AskMetrics",
    "AskPause", "AskRebalance", "AskRecord", "AskResume", "AskSample", "AskSetMaxSpoutPending",
    "AskSetTrace", "AskStatistics", "AskStatus", "AskTraces", "Question",
]


class Question(Control):
    """The base of the client's questions to the master; ``id`` pairs it with its Reply."""

    id: int


@_message("ask_statistics")
class AskStatistics(Question):
    """Every task's latest statistics."""


@_message("ask_status")
class AskStatus(Question):
    """The master's state, pids and counters."""


@_message("ask_metrics")
class AskMetrics(Question):
    """Metrics over a window ("1m", "10m", "1h", "3h", "all")."""

    window: str = "1m"


@_message("ask_exceptions")
class AskExceptions(Question):
    """The grouped exceptions of user code."""


@_message("ask_events")
class AskEvents(Question):
    """Restarts, activation and other events."""


@_message("ask_acker_state")
class AskAckerState(Question):
    """Each acker task's pending roots by age, and its oldest roots named by the spouts."""


@_message("ask_pause")
class AskPause(Question):
    """Deactivate every spout."""


@_message("ask_resume")
class AskResume(Question):
    """Activate the spouts again."""


@_message("ask_set_max_spout_pending")
class AskSetMaxSpoutPending(Question):
    """Change max_spout_pending of a spout component (of every one if None)."""

    value: Any  # checked by runtime.model.controls.check_max_spout_pending
    component: str | None = None


@_message("ask_traces")
class AskTraces(Question):
    """The newest traces (of one status, at most ``limit``), or the one of ``msg_id``."""

    status: str | None = None
    limit: int = 100
    msg_id: Any = None
    by_msg: bool = False  # True: the trace of msg_id (which may be None)


@_message("ask_set_trace")
class AskSetTrace(Question):
    """Change the fraction of spout tuples traced, live (every spout)."""

    value: Any  # checked by runtime.model.controls.check_trace


@_message("ask_record")
class AskRecord(Question):
    """Start (on) or stop recording a component's stream."""

    component: str
    stream: str
    on: bool


@_message("ask_sample")
class AskSample(Question):
    """The newest n tuples a component sent on a stream; keeps the tap on keep seconds."""

    component: str
    stream: str
    n: Any  # checked by runtime.model.controls.check_tap
    keep: Any = None  # checked by runtime.model.controls.check_keep; None: the default


@_message("ask_logs")
class AskLogs(Question):
    """The end of an instance's log, from its container."""

    component: str
    task: int


@_message("ask_rebalance")
class AskRebalance(Question):
    """Change components' parallelism (and the number of containers); answered with the
    new plan once the topology runs on it (docs/internals/rebalance.md)."""

    parallelism: dict  # component -> new parallelism, checked by the master
    containers: int | None = None


@_message("ask_kill")
class AskKill(Question):
    """Kill the topology; answered once it is down."""
