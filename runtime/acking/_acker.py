"""The acker: the ``__acker`` system component, one or more tasks (``ackers=N``).

It receives ``ACKS`` frames (Storm's ``__ack_init``, ``__ack_ack``, ``__ack_fail`` and
reset-timeout messages, as flat ``op, root, value`` triples) from spouts and bolts, keeps
the XOR ledger of :class:`runtime.acking._ledger.AckLedger`, and sends each outcome back to the
spout task that emitted the root, in ``ACKED`` frames (flat ``root, outcome`` pairs), or,
for the trees a batch of acks completed, in one ``COMPLETED`` frame: the stretches of
consecutive roots as ``first, count`` pairs, then a list of the other roots
(``[first, count, ..., first, count, [root, ...]]``; docs/internals/acker.md, "Frames").
A root goes to acker task ``root % ackers``.

It is driven like an :class:`~runtime.engine.executor.Executor`, through the same
interface (:class:`runtime.engine.driven.TaskExecutor`: ``on_frame``, ``on_timer``,
``flush``, ``report``...), by the same instance process or the in-memory twin; what only a
spout or a bolt does (``step``, taps, recordings) it does as nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sized

from runtime import wire
from runtime.model.constants import ACKER, MESSAGE_TIMEOUT
from runtime.model.plan import PhysicalPlan
from runtime.observe.stats import InstanceStats

from ._cuts import stretches
from ._ledger import OLDEST_REPORTED, AckLedger

log = logging.getLogger("tupleflow.acker")

Send = Callable[[bytes, bytes], None]
EXPIRE_EVERY = 0.5  # seconds between looks for timed-out roots


def _acks_body(batch) -> list:
    """An ACKS body: flat ``op, root, value`` triples (see :mod:`runtime.wire`)."""
    if type(batch) is not list or len(batch) % 3:
        raise wire.WireError("an ACKS body must be flat op, root, value triples")
    return batch


class SystemTask:
    """What only spouts and bolts do, done as nothing by a system task (the acker, and the
    checkpoint spout of runtime/state/): the drivers' one interface stays whole."""

    leftover: tuple = ()  # it never sets input aside
    output_waiting: Sized = ()  # read by nothing here: a system task's output never waits

    def step(self, calls: int) -> int:
        return 0

    def spout_held(self) -> bool:
        return False

    def run_leftover(self) -> None:
        pass

    def drained(self) -> None:
        pass  # it sends each message at once

    def activate(self, active: bool) -> None:
        pass

    def set_max_spout_pending(self, value) -> None:
        pass

    def tap(self, stream: str, n: int, seconds: float) -> None:
        pass  # it declares no stream

    def tap_samples(self) -> dict[str, list[dict]]:
        return {}

    def set_recording(self, stream: str, on: bool) -> bool:
        return False  # it declares no stream

    def close_recordings(self) -> None:
        pass

    def retarget(self, plan) -> None:
        """A rebalance switched the topology to ``plan``: the acker routes by root (its
        spout task never moves), so it only reads the new plan from now on."""
        self.flush()
        self.plan = plan

    def retire(self) -> None:
        self.flush()  # never removed today (a system component is not rebalanced)


class AckerExecutor(SystemTask):
    """One acker task: it owns the XOR ledger of the roots kept here, the outcomes waiting
    to go to each spout task, and its counters."""

    kind = "acker"

    def __init__(self, plan: PhysicalPlan, task: int, send: Send, *, run_dir: str = "",
                 monotonic=time.monotonic, wall=time.time, drains: bool = False) -> None:
        """``drains``: the driver calls :meth:`drained` after each drain of its input
        (the instance process does), so the outcomes wait for it: one COMPLETED (and
        ACKED) frame per spout task a drain, not one per ACKS frame."""
        self.plan, self.task, self.send = plan, task, send
        self.drains = drains
        self.info = plan.task(task)
        self.config = dict(plan.config)
        self.monotonic, self.wall = monotonic, wall
        self.ledger = AckLedger(float(self.config[MESSAGE_TIMEOUT]),
                                task_bits=plan.root_bits())
        self.outcomes: dict[int, list] = {}  # spout task -> [root, outcome, root, ...]
        self._decisions: list[int] = []  # the ledger's outcome, root, task triples
        # the trees the ledger's batches of acks completed, by spout task: stretches of
        # consecutive roots, (first, count) each, and the roots found in no stretch
        self.stretched: dict[int, list[tuple[int, int]]] = {}
        self.completed: dict[int, list] = {}
        self._done: dict[int, list] = {}  # one frame's completions: spout task -> roots
        self.executed = self.dropped = self.errors = 0
        self.busy_seconds = 0.0  # settling ACKS frames: what makes an acker the bottleneck
        self._next_expire = 0.0
        self.first_executed: float | None = None
        self.last_executed: float | None = None

    def on_error(self, where: str, err: BaseException) -> None:
        log.error("%s: %s", where, err)

    def start(self) -> None:
        self._next_expire = self.monotonic() + EXPIRE_EVERY

    def stop(self) -> None:
        self.flush()

    # -- messages -----------------------------------------------------------------------
    def on_frame(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        if h.kind != wire.ACKS:
            raise wire.WireError(f"frame kind {h.kind} is not for an acker")
        started = self.monotonic()  # one clock pair per frame (the diagnosis's "acker")
        messages = _acks_body(wire.decode_batch(body))
        if self.first_executed is None:
            self.first_executed = self.wall()
        rejected, ledger = self.ledger.rejected, self.ledger
        if messages:
            ledger.settle(messages, self.monotonic(), h.src, self._decisions, self._done)
            self._route()
            if self._done:
                self._stretch()
        if ledger.rejected > rejected:
            self.dropped += ledger.rejected - rejected
            log.warning("dropped %d malformed ack messages from task %d",
                        ledger.rejected - rejected, h.src)
        self.executed += len(messages) // 3
        self.last_executed = self.wall()
        if not self.drains:  # else they go once the driver's drain ends (drained)
            self.flush()  # one ACKED (and COMPLETED) frame per ACKS frame
        self.busy_seconds += self.monotonic() - started

    def drained(self) -> None:
        """The driver's drain of its input ended: the outcomes of the ACKS frames it
        handled go now, one frame of each kind per spout task for the whole drain
        (``drains``; docs/internals/performance-log.md, "Issue 17, seventh pass"). Timed
        with the settling: sending them was in ``busy_seconds`` when each frame sent
        its own."""
        started = self.monotonic()
        self.flush()
        self.busy_seconds += self.monotonic() - started

    def _route(self) -> None:
        """File the ledger's decisions under the spout task each goes to."""
        decisions, outcomes = self._decisions, self.outcomes
        it = iter(decisions)
        for outcome, root, task in zip(it, it, it):
            out = outcomes.get(task)
            if out is None:
                out = outcomes[task] = []
            out += (root, outcome)
        decisions.clear()

    def _stretch(self) -> None:
        """File one frame's completed roots as stretches of consecutive roots, where they
        are mostly that (at two count tasks and more, a split task's frame of a run of
        roots acked by the counts), else as roots. The ledger's batch names a root once,
        which :func:`~runtime.acking._cuts.stretches` needs, and the spout then settles
        each stretch as a range, with none of the sort, the set and the search a list of
        roots costs it (docs/internals/performance-log.md, "Issue 17, tenth pass")."""
        for task, roots in self._done.items():
            roots.sort()
            found = stretches(roots)
            if found is None:
                self.completed.setdefault(task, []).extend(roots)
            else:
                self.stretched.setdefault(task, []).extend(found)
        self._done.clear()

    # -- timers -------------------------------------------------------------------------
    def on_timer(self, now: float) -> float:
        """Look for timed-out roots every ``EXPIRE_EVERY`` and send their outcomes at once.
        Nothing else waits for a timer (each ACKS frame's outcomes go as it is settled,
        or once the driver's drain ends),
        so the acker asks to be woken only for the next look: woken every flush interval,
        an idle one was put on a CPU ~340 times a second for nothing, beside the
        processes that had work (docs/internals/performance-log.md, "The half-rate tail")."""
        if now >= self._next_expire:
            self.ledger.settle((), now, 0, self._decisions)
            self._route()
            self.flush()
            self._next_expire = now + EXPIRE_EVERY
        return self._next_expire

    def flush(self) -> None:
        """The outcomes to each spout task: ``ACKED`` pairs, and the trees batches of acks
        completed as one ``COMPLETED`` frame: their stretches (those of several frames
        joined where one ends as the next begins), then the other roots, which the spout
        settles as a bolt's leaves."""
        for spout, outcomes in self.outcomes.items():
            if outcomes:
                self.send(wire.data_header(wire.ACKED, 0, spout, self.task),
                          wire.encode_batch(outcomes))
                outcomes.clear()
        for spout, found in self.stretched.items():
            if found:
                roots = self.completed.get(spout, [])
                self.send(wire.data_header(wire.COMPLETED, 0, spout, self.task),
                          wire.encode_batch([*_joined(found), roots]))
                found.clear()
                roots.clear()
        for spout, roots in self.completed.items():
            if roots:
                self.send(wire.data_header(wire.COMPLETED, 0, spout, self.task),
                          wire.encode_batch([0, 0, roots]))
                roots.clear()

    # -- statistics ---------------------------------------------------------------------
    def report(self) -> dict:
        """The acker's counters, as the plain dict an instance reports."""
        ledger = self.ledger.statistics()
        return {"component": ACKER, "task": self.task, "kind": self.kind,
                "container": self.info.container, "emitted": 0, "transferred": 0,
                "executed": self.executed, "acked": ledger.completed,
                "failed": ledger.failed + ledger.timed_out, "pending": ledger.pending,
                "dropped": self.dropped, "errors": self.errors,
                "busy_seconds": self.busy_seconds,
                "first_executed": self.first_executed, "last_executed": self.last_executed,
                **self.ages_report()}

    def ages_report(self) -> dict:
        """The live view of the ledger (``running.acker_state``): pending roots per rotation
        slot, ``[youngest_s, oldest_s, count]``, newest first, and the oldest roots,
        ``[root, spout task, slot]``. O(slots + OLDEST_REPORTED): the XOR loop is untouched."""
        ledger = self.ledger
        return {"acker_ages": [[round(lo, 3), round(hi, 3), n]
                               for lo, hi, n in ledger.ages(self.monotonic())],
                "acker_oldest": [list(r) for r in ledger.oldest(OLDEST_REPORTED)]}

    def statistics(self) -> InstanceStats:
        return InstanceStats.from_record({**self.report(), "state": "running"})


def _joined(found: list[tuple[int, int]]) -> list[int]:
    """Stretches of consecutive roots as flat ``first, count`` pairs in root order, two
    joined where one ends as the next begins (a run whose trees two frames completed).
    Stretches that overlap (a root completed twice) are left apart: each holds only
    roots that completed, so the spout counts the second time stale, as it would a
    repeated root.

    >>> _joined([(20, 5), (10, 4), (14, 2), (30, 1)])
    [10, 6, 20, 5, 30, 1]
    """
    found.sort()
    flat: list[int] = []
    end = None
    for first, count in found:
        if first == end:
            flat[-1] += count
        else:
            flat += (first, count)
        end = first + count
    return flat
