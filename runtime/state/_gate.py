"""One task's side of the checkpoint protocol: a wrapper round its executor.

``Checkpointed`` stands between the driver (instance process or in-memory cluster) and a
spout's or bolt's executor, and is driven through the same interface. It

- holds the task until the checkpoint spout's first ``ROLLBACK`` names the epoch (a spout
  emits nothing, a bolt drops its input);
- on ``ROLLBACK`` (or a ``MARKER`` of a newer epoch, which may overtake it), drops what
  the task had buffered, restores the committed state, open windows or source position,
  sends a ``MARKER`` to each downstream task, and drops each input task's frames until
  that task's ``MARKER`` comes: what arrives before it was sent before the rollback;
- on ``PREPARE`` (a spout) or once ``BARRIER`` came from every input task (a bolt;
  frames from a task that already sent it are held meanwhile: alignment), saves its part
  of the checkpoint (a StatefulBolt's state, a WindowedBolt's open windows, a
  replayable spout's position), flushes, sends ``BARRIER`` downstream and ``PREPARED``
  to the checkpoint spout;
- for a spout that cannot rewind, holds the acks of its tuples until ``COMMITTED`` says
  the checkpoint holding them is committed, and fails them at a rollback (at least once).
"""

from __future__ import annotations

import gc
import logging
from collections import deque
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any

from runtime import wire
from runtime.model.api import rewindable
from runtime.model.constants import CHECKPOINTER
from runtime.observe.stats import InstanceStats
from runtime.windows import WindowedBolt, deal_rules

from . import _protocol as p
from ._bolt import State, StatefulBolt

log = logging.getLogger("tupleflow.state")

# what a driver sets on its executor: passed through to the one inside
_FORWARDED = frozenset({"on_error", "output_waiting", "errors", "dropped", "busy_seconds"})


@contextmanager
def paused_gc():
    """The garbage collector off while a snapshot is built and saved, or loaded and
    restored: that makes about three containers per held tuple or key, and each burst of
    them sets off collections that walk everything the task holds, for no cycle (1.5 to 7
    times slower on 100,000 held tuples; benchmarks/checkpoints.py --only windows)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def neighbours(plan, specs: Mapping, component: str) -> tuple[tuple[int, ...], frozenset]:
    """The tasks ``component`` sends to, and the tasks it reads from."""
    tasks = plan.component_tasks()
    down = sorted({t for s in specs.values() for i in s.inputs if i.source == component
                   for t in tasks.get(s.id, ())})
    up = frozenset(t for i in specs[component].inputs if i.source in specs
                   for t in tasks.get(i.source, ()))
    return tuple(down), up


class Checkpointed:
    """A spout's or bolt's executor, taking part in checkpoints (see the module's doc)."""

    def __init__(self, inner, specs: Mapping, send, store, incarnation: int) -> None:
        object.__setattr__(self, "inner", inner)
        self.send = send
        plan, self.task, self.kind = inner.plan, inner.task, inner.kind
        self.store, self.incarnation, self.specs = store, incarnation, specs
        self.component, self.index = inner.spec.id, inner.info.index
        self.coordinator = plan.component_tasks()[CHECKPOINTER][0]
        self.downstream, self.upstream = neighbours(plan, specs, self.component)
        self.epoch = 0  # none yet: hold everything
        self.waiting: set[int] = set(self.upstream)  # input tasks whose MARKER is awaited
        self.arrived: set[int] = set()  # input tasks whose BARRIER came (aligning)
        self.held: deque = deque()  # their frames since, in order
        self.backlog: deque = deque()  # held frames let go, not yet processed
        self.saved = self.rollbacks = self.discarded = 0  # discarded: frames, not tuples
        self.origin = None
        self.user_state: State | None = None  # a StatefulBolt's, as last given to it
        self.holding = False  # a spout that cannot rewind: its acks wait for commits
        self.buckets: list[tuple[int, list]] = []  # (checkpoint id, msg_ids before it)
        self.window_saved: tuple[int, int] | None = None  # held tuples, bytes: last saved
        # switched to a new plan and not rolled back since: takes part in no checkpoint
        self.unsplit = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FORWARDED:
            setattr(self.inner, name, value)
        else:
            object.__setattr__(self, name, value)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self.inner.start()
        user = self.inner.user
        if isinstance(user, StatefulBolt):
            self._give_state(State())
        if self.kind == "spout" and rewindable(user):
            key = p.source_key(self.component, self.index)
            self.origin = self.store.origin(key, user.checkpoint_position())
        elif self.kind == "spout" and self.inner.spout is not None:
            self.holding, self.inner.spout.held_acks = True, []
        if self.incarnation > 0:  # what this task held is lost: everyone rolls back
            self._send(p.NEW, 0, self.inner.plan.epoch, self.coordinator)

    def step(self, calls: int) -> int:
        return self.inner.step(calls) if self.epoch else 0

    def retarget(self, plan) -> None:
        """A rebalance switched the topology to ``plan``: the inner executor's routing and
        this task's neighbours. An alignment under way is abandoned with its checkpoint:
        the checkpoint spout splits the keyed state and rolls every task back once all
        have switched (docs/internals/rebalance.md). Until that rollback the task takes
        part in no checkpoint (``unsplit``): on the new routing a kept task gets keys
        whose old owner still holds them, so a checkpoint committed meanwhile would hold
        a moved key under two tasks, of which the split keeps one (words were lost so
        when a master died before the split: docs/internals/adoption.md). A ``Switch``
        to the plan it runs on changes nothing here."""
        if plan.epoch != self.inner.plan.epoch:
            self.unsplit = True
        self.inner.retarget(plan)
        self.downstream, self.upstream = neighbours(plan, self.specs, self.component)
        self.waiting &= self.upstream
        self.arrived.clear()
        self.backlog.extend(self.held)
        self.held.clear()

    # -- frames ---------------------------------------------------------------------------
    def on_frame(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        if h.kind == wire.CHECKPOINT:
            return self._on_message(h.src, *p.parse(body))
        if h.src in self.upstream:
            if not self.epoch or h.src in self.waiting:
                self.discarded += 1  # sent before the rollback: its effects are undone
                return
            if h.src in self.arrived:
                return self.held.append((header, body))
        self.inner.on_frame(header, body)

    def _on_message(self, src: int, op: int, epoch: int, cid: int | None) -> None:
        if op in (p.ROLLBACK, p.MARKER) and epoch > self.epoch:
            self._rollback(epoch, cid)
        if epoch != self.epoch:
            return  # of an older epoch
        if op == p.MARKER:
            self.waiting.discard(src)
        elif op == p.COMMITTED and self.holding:
            self._settle(cid, rollback=False)
        elif self.unsplit:
            return  # switched, the split's rollback still to come: no checkpoint
        elif op == p.PREPARE and self.kind == "spout":
            self._checkpoint(cid)
        elif op == p.BARRIER and src in self.upstream and src not in self.waiting:
            self.arrived.add(src)
            if self.arrived >= self.upstream:
                self._checkpoint(cid)
                self.arrived.clear()
                self.backlog.extend(self.held)
                self.held.clear()
                self.run_leftover()

    @property
    def leftover(self) -> tuple:
        return self.inner.leftover or tuple(self.backlog)

    def run_leftover(self) -> None:
        self.inner.run_leftover()
        while self.backlog and not self.inner.leftover and not self.inner.output_waiting:
            self.on_frame(*self.backlog.popleft())

    # -- the protocol ---------------------------------------------------------------------
    def _rollback(self, epoch: int, cid: int | None) -> None:
        self.epoch, self.rollbacks = epoch, self.rollbacks + 1
        self.unsplit = False
        self._discard_buffered()
        self.waiting, self.arrived = set(self.upstream), set()
        self.held.clear()
        self.backlog.clear()
        self._restore(cid)
        for task in self.downstream:
            self._send(p.MARKER, epoch, cid, task)
        if self.holding:  # after the markers: what fail() emits is of the new epoch
            self._settle(cid, rollback=True)

    def _discard_buffered(self) -> None:
        """Tuples emitted but not sent, and input set aside: all from before the rollback."""
        for out in self.inner.streams.values():
            out.items.clear()
            for _, pending in out.direct.values():
                pending.clear()
        self.inner.tracer.riders.discard()  # traced tuples waiting for a frame to ride
        if self.inner.bolt is not None:
            self.inner.bolt.leftover = ()

    def _restore(self, cid: int | None) -> None:
        with paused_gc():
            self._load(cid, self.inner.user)

    def _load(self, cid: int | None, user) -> None:
        if isinstance(user, WindowedBolt):  # its open windows (a bolt may be both)
            user.restore_windows(self.store.load(cid, p.window_key(self.component, self.index)))
        if isinstance(user, StatefulBolt):
            pairs = self.store.load(cid, p.state_key(self.component, self.index))
            self._give_state(State.from_snapshot(pairs))
        elif self.kind == "spout" and rewindable(user):
            saved = self.store.load(cid, p.source_key(self.component, self.index))
            user.restore_position(saved if saved is not None else self.origin)

    def _settle(self, committed: int | None, *, rollback: bool) -> None:
        """A spout that cannot rewind: ack the msg_ids of the checkpoints up to
        ``committed`` (their tuples' effects are in the committed state); at a rollback,
        fail every other (their effects were undone: the spout emits them again, if its
        ``fail`` replays). At least once for its tuples (docs/internals/checkpoints.md)."""
        done: list = []
        keep: list[tuple[int, list]] = []
        for cid, ids in self.buckets:
            if committed is not None and cid <= committed:
                done += ids
            else:
                keep.append((cid, ids))
        failed: list = []
        if rollback:
            failed = [m for _, ids in keep for m in ids] + self.inner.spout.take_held()
            keep = []
        self.buckets = keep
        self.inner.spout.settle(done, failed)

    def _give_state(self, state: State) -> None:
        """Hand the bolt its state, and keep it: what is saved is the object given, whatever
        attribute the bolt keeps it under."""
        self.user_state = state
        self.inner.user.init_state(state)

    def _checkpoint(self, cid: int) -> None:
        with paused_gc():
            self._save(cid, self.inner.user)
        self.saved += 1
        self.inner.flush()  # what came before the barrier goes before it
        for task in self.downstream:
            self._send(p.BARRIER, self.epoch, cid, task)
        self._send(p.PREPARED, self.epoch, cid, self.coordinator)

    def _save(self, cid: int, user) -> None:
        if isinstance(user, WindowedBolt):  # with how to deal it at a rebalance (_split.py)
            saved = {**user.snapshot_windows(), "deal": deal_rules(self.inner.spec.inputs)}
            size = self.store.save(cid, p.window_key(self.component, self.index), saved)
            self.window_saved = (len(saved["windows"]["queue"]), size)
        if isinstance(user, StatefulBolt):
            pairs = self.user_state.snapshot()
            self.store.save(cid, p.state_key(self.component, self.index), pairs)
        elif self.kind == "spout" and rewindable(user):
            self.store.save(cid, p.source_key(self.component, self.index),
                            user.checkpoint_position())
        elif self.holding:
            self.buckets.append((cid, self.inner.spout.take_held()))

    def _send(self, op: int, epoch: int, cid: int | None, dest: int) -> None:
        self.send(*p.frame(op, epoch, cid, dest, self.task))

    def report(self) -> dict:
        """The inner executor's report, with this task's side of the checkpoints: for a
        windowed task the tuples held and the bytes of its last saved snapshot."""
        held, size = self.window_saved or (None, None)
        return {**self.inner.report(), "checkpoint": {
            "epoch": self.epoch, "saved": self.saved, "rollbacks": self.rollbacks,
            "discarded_frames": self.discarded,
            "stateful": isinstance(self.inner.user, StatefulBolt),
            "windowed": isinstance(self.inner.user, WindowedBolt),
            "window_tuples": held, "window_bytes": size}}

    def statistics(self):
        return InstanceStats.from_record({**self.report(), "state": "running"})
