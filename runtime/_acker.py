"""The acker: the ``__acker`` system component, one or more tasks (``ackers=N``).

It receives ``ACKS`` frames (Storm's ``__ack_init``, ``__ack_ack``, ``__ack_fail`` and
reset-timeout messages) from spouts and bolts, keeps the XOR ledger of
:class:`runtime._ledger.AckLedger`, and sends each outcome back to the spout task that
emitted the root, in ``ACKED`` frames. A root goes to acker task ``root % ackers``.

It is driven like an :class:`~runtime._executor.Executor` (``on_frame``, ``on_timer``,
``flush``, ``record``), by the same instance process or the in-memory twin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from . import wire
from ._constants import ACKER, FLUSH_INTERVAL, MESSAGE_TIMEOUT
from ._ledger import AckLedger, Completed, Failed, Renewed
from ._plan import PhysicalPlan
from ._stats import InstanceStats

log = logging.getLogger("tupleflow.acker")

Send = Callable[[bytes, bytes], None]
EXPIRE_EVERY = 0.5  # seconds between looks for timed-out roots


class AckerExecutor:
    """One acker task."""

    kind = "acker"

    def __init__(self, plan: PhysicalPlan, task: int, send: Send, *, run_dir: str = "",
                 monotonic=time.monotonic, wall=time.time) -> None:
        self.plan, self.task, self.send = plan, task, send
        self.info = plan.task(task)
        self.config = dict(plan.config)
        self.monotonic, self.wall = monotonic, wall
        self.ledger = AckLedger(float(self.config[MESSAGE_TIMEOUT]))
        self.outcomes: dict[int, list] = {}  # spout task -> [[root, outcome], ...]
        self.executed = self.dropped = self.errors = 0
        self._flush_every = float(self.config[FLUSH_INTERVAL])
        self._next_flush = self._next_expire = 0.0
        self.first_executed: float | None = None
        self.last_executed: float | None = None

    def on_error(self, where: str, err: BaseException) -> None:
        log.error("%s: %s", where, err)

    def start(self) -> None:
        now = self.monotonic()
        self._next_flush, self._next_expire = now + self._flush_every, now + EXPIRE_EVERY

    def stop(self) -> None:
        self.flush()

    # -- messages -----------------------------------------------------------------------
    def on_frame(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        if h.kind != wire.ACKS:
            raise wire.WireError(f"frame kind {h.kind} is not for an acker")
        batch = wire.decode_batch(body)
        if self.first_executed is None:
            self.first_executed = self.wall()
        rejected = self.ledger.rejected
        for decision in self.ledger.apply(batch, self.monotonic()):
            self._decided(decision)
        if self.ledger.rejected > rejected:
            self.dropped += self.ledger.rejected - rejected
            log.warning("dropped %d malformed ack messages from task %d",
                        self.ledger.rejected - rejected, h.src)
        self.executed += len(batch)
        self.last_executed = self.wall()

    def _decided(self, decision: Completed | Failed | Renewed) -> None:
        if isinstance(decision, Completed):
            outcome = wire.ACKED_OK
        elif isinstance(decision, Renewed):
            outcome = wire.ACKED_RENEWED
        else:
            outcome = wire.ACKED_TIMEOUT if decision.reason == "timeout" else wire.ACKED_FAILED
        self.outcomes.setdefault(decision.spout_task, []).append([decision.root_id, outcome])

    # -- timers -------------------------------------------------------------------------
    def on_timer(self, now: float) -> float:
        if now >= self._next_expire:
            for decision in self.ledger.expire(now):
                self._decided(decision)
            self._next_expire = now + EXPIRE_EVERY
        if now >= self._next_flush:
            self.flush()
            self._next_flush = now + self._flush_every
        return min(self._next_flush, self._next_expire)

    def flush(self) -> None:
        for spout, outcomes in self.outcomes.items():
            if outcomes:
                self.send(wire.data_header(wire.ACKED, 0, spout, self.task),
                          wire.encode_batch(outcomes))
                outcomes.clear()

    # -- statistics ---------------------------------------------------------------------
    def record(self) -> dict:
        ledger = self.ledger.statistics()
        return {"component": ACKER, "task": self.task, "kind": self.kind,
                "container": self.info.container, "emitted": 0, "transferred": 0,
                "executed": self.executed, "acked": ledger.completed,
                "failed": ledger.failed + ledger.timed_out, "pending": ledger.pending,
                "dropped": self.dropped, "errors": self.errors,
                "first_executed": self.first_executed, "last_executed": self.last_executed}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.record(), "state": "running"})
