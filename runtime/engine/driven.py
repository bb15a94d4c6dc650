"""The one interface between an executor and whoever drives it: the instance process
(runtime/processes/instance.py) and the in-memory twin (runtime/testing.py). Both the
task executor (:class:`runtime.engine.executor.Executor`) and the acker's
(:class:`runtime.acking._acker.AckerExecutor`) provide all of it, so a driver never asks
an executor what it can do."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from typing import Any, Protocol, runtime_checkable

from runtime.observe.stats import InstanceStats


@runtime_checkable
class TaskExecutor(Protocol):
    """What a driver reads, sets and calls on the executor of one task. It owns no socket
    and no clock: the driver passes ``send`` and the clocks when it builds one."""

    kind: str  # "spout", "bolt" or "acker"
    task: int
    config: Mapping[str, Any]
    errors: int  # the driver counts the errors it reports
    dropped: int  # ...and the frames it could not hand over
    busy_seconds: float  # ...and a spout's time in step
    # the driver's unsent frames: a spout stops at any, a bolt sets its input aside
    output_waiting: Sized
    on_error: Callable[[str, BaseException], None]  # a recoverable error; set by the driver

    @property
    def leftover(self) -> tuple:
        """Input set aside while output waited (empty: none)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def step(self, calls: int) -> int:
        """A spout's turn of ``calls`` next_tuple calls; tuples emitted (0 for others)."""
        ...

    def spout_held(self) -> bool:
        """Whether a spout's turn may not call next_tuple now (output waits, or
        max_spout_pending roots are in flight); False for others."""
        ...

    def on_frame(self, header: bytes, body: bytes) -> None: ...

    def drained(self) -> None:
        """The driver handled every frame it could read without blocking (or stopped
        early): what those frames owe and waited for it goes now. A driver that calls
        it builds its executors with ``drains=True``."""
        ...

    def on_timer(self, now: float) -> float:
        """Due work done; when it next wants to be called."""
        ...

    def run_leftover(self) -> None: ...

    def flush(self) -> None: ...

    def retarget(self, plan) -> None:
        """A rebalance switched the topology to ``plan``: send on the new routing."""
        ...

    def retire(self) -> None:
        """A rebalance removed this task: flush; a spout gives back what it holds."""
        ...

    def activate(self, active: bool) -> None:
        """Activated or deactivated: a spout calls its ``activate``/``deactivate``."""
        ...

    def set_max_spout_pending(self, value) -> None: ...

    def tap(self, stream: str, n: int, seconds: float) -> None: ...

    def tap_samples(self) -> dict[str, list[dict]]: ...

    def set_recording(self, stream: str, on: bool) -> bool: ...

    def close_recordings(self) -> None: ...

    def report(self) -> dict:
        """The counters, as the plain dict an instance reports."""
        ...

    def statistics(self) -> InstanceStats: ...
