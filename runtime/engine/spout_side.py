"""The spout's side of one task: its turns of ``next_tuple`` calls, the roots of the
trees it emits one by one, and the outcomes that come back for them (ACKED frames from
the ackers, COMPLETED frames from bolts), which become ``ack``/``fail`` calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from itertools import repeat

from runtime import wire
from runtime.acking._ids import RootIds, new_id
from runtime.acking._tracking import SpoutTracker
from runtime.model.api import Spout
from runtime.model.topology import ComponentSpec

from .acks import AckOut
from .errors import UserCodeError, call_user
from .outbound import StreamOut
from .runs import Runs
from .stats import TaskCounts

STEP_CHUNK = 8  # next_tuple calls between two looks at whether output waits unsent
# (_untracked_steps writes out that many calls: change both together)
# the most calls between two looks at max_spout_pending: more than a turn makes, so a
# one-root-a-call spout settles at one look a turn
LONGEST_STRETCH = 1024

_INT = {int}
_OUTCOMES = {wire.ACKED_OK, wire.ACKED_FAILED, wire.ACKED_TIMEOUT, wire.ACKED_RENEWED}
_NO_OP = {"ack": Spout.ack, "fail": Spout.fail}  # a spout that keeps these is not called


class SpoutSide:
    """One spout task's turns and its in-flight roots: it owns the tracker (None with
    acking off), the root ids, and the msg_ids to ack at emit (acking off)."""

    def __init__(self, user: Spout, spec: ComponentSpec, counts: TaskCounts,
                 streams: Mapping[str, StreamOut], tracker: SpoutTracker | None,
                 roots: RootIds, acks: AckOut, runs: Runs | None,
                 monotonic: Callable[[], float], batch_size: int) -> None:
        self.user, self.counts, self.streams = user, counts, streams
        self.name, self.comp = spec.class_name, spec.id  # for error messages
        self.tracker, self.roots, self.acks, self.runs = tracker, roots, acks, runs
        self.monotonic, self.batch_size = monotonic, batch_size
        self.at_emit: list = []  # msg_ids to ack as soon as emitted (acking off)
        # a checkpointed spout that cannot rewind: its at-emit acks wait here instead, for
        # the checkpoint that holds their tuples to commit (runtime/state/_gate.py)
        self.held_acks: list | None = None
        # told the msg_ids the tracker timed out (the tracer's, for traced roots)
        self.expired_hook: Callable[[list], None] | None = None
        # the most next_tuple calls made between two looks at max_spout_pending: from 1,
        # doubled after each stretch whose calls emitted at most a root each (and one at
        # least); 0 once one emitted more (a batching spout), and from then on every call
        # is looked at
        self.stretch = 1

    # -- turns --------------------------------------------------------------------------
    def step(self, calls: int, waiting: Sized) -> int:
        """Call ``next_tuple`` up to ``calls`` times, and not while ``max_spout_pending``
        roots are in flight, nor once output waits in ``waiting`` (looked at every
        ``STEP_CHUNK`` calls: a held spout queues at most that many calls' output);
        return how many tuples were emitted."""
        before = self.queued_or_sent()
        try:
            self._calls(self.user.next_tuple, calls, waiting)
        except Exception as exc:
            raise UserCodeError(f"{self.name}.next_tuple", exc) from exc
        if self.at_emit:
            self._ack_at_emit()
        return self.queued_or_sent() - before

    def held(self, waiting: Sized) -> bool:
        """Whether a turn may not call ``next_tuple`` now: output waits in ``waiting``, or
        ``max_spout_pending`` roots are in flight. A turn that emitted nothing while not
        held found the spout idle."""
        tracker = self.tracker
        return bool(waiting) or (tracker is not None and tracker.limit is not None
                                 and tracker.room() <= 0)

    def _calls(self, next_tuple, calls: int, waiting: Sized) -> None:
        tracker, mark = self.tracker, self.runs.mark if self.runs is not None else None
        if tracker is not None and tracker.limit is not None:
            return self._limited(next_tuple, calls, waiting, tracker, mark)
        if mark is None:
            return _untracked_steps(next_tuple, calls, waiting)
        return _marked_steps(next_tuple, calls, waiting, mark)

    def _limited(self, next_tuple, calls: int, waiting: Sized, tracker: SpoutTracker,
                 mark: Callable[[], None] | None) -> None:
        """Calls under ``max_spout_pending``: in stretches while each call emitted at
        most one root, one by one once a call emitted more (``stretch`` 0)."""
        if self.stretch:
            self.stretch = _limited_steps(next_tuple, calls, waiting, tracker, mark,
                                          self.stretch)
        else:
            _checked_steps(next_tuple, calls, waiting, tracker, mark)

    def activate(self, active: bool) -> None:
        """Call the spout's ``activate`` or ``deactivate`` hook (a spout that is no
        :class:`Spout` may lack it: then nothing)."""
        where = "activate" if active else "deactivate"
        hook = getattr(self.user, where, None)
        if hook is not None:
            self.restamp()  # what the hook emits was emitted now
            call_user(f"{self.name}.{where}", hook)

    def restamp(self) -> None:
        """Read the clock for the emit time of the tracked tuples emitted from now on
        (call before handing control to the spout outside :meth:`step`)."""
        if self.runs is not None:
            self.runs.mark()

    def queued_or_sent(self) -> int:
        return sum(o.emitted + o.queued() for o in self.streams.values())

    def _ack_at_emit(self) -> None:
        """At most once: a tuple given a msg_id is acked as soon as it is emitted (unless
        its ack is held for a checkpoint: :meth:`take_held`)."""
        acks, ack = self.at_emit[:], self.user.ack
        self.at_emit.clear()
        if self.held_acks is not None:
            return self.held_acks.extend(acks)
        self.counts.acked += len(acks)
        for msg_id in acks:
            call_user(f"{self.name}.ack", ack, msg_id)

    def take_held(self) -> list:
        """The msg_ids emitted since the last call whose acks are held (with
        ``held_acks`` set): the checkpoint under way holds their tuples."""
        if self.at_emit:
            self._ack_at_emit()
        held, self.held_acks = self.held_acks or [], []
        return held

    def settle(self, acked: list, failed: list) -> None:
        """Ack and fail held msg_ids: their checkpoint committed, or a rollback undid
        their tuples' effects (``fail`` is the spout's way to emit them again)."""
        self.counts.acked += len(acked)
        self.counts.failed += len(failed)
        self._call_each("ack", self.user.ack, acked)
        self._call_each("fail", self.user.fail, failed)

    # -- tracked emits ------------------------------------------------------------------
    def emit_root(self, out: StreamOut, values, msg_id, direct: int | None = None) -> None:
        """A new spout tuple tree. Sent to one task (the usual case), it gets a
        self-initialising root, which is also its edge id: the acker needs no init. Sent
        to several tasks (or none), it gets a plain root, an edge id per copy, and an
        init with their XOR, as in Storm (docs/internals/acker.md)."""
        if out.runs is not None and out.runs.queued():  # what waits goes first, in emit
            out.flush_tracked()  # order: the tracked batches, then the runs (newer)
        copies = out.tracked_copies(values, direct)
        entry = out.entry(values, self.comp)
        if len(copies) == 1:  # it counts as it is sent (flush_tracked)
            root = self._one_copy(out, copies[0], entry)
        else:  # it counts now, its copies not as sent (counted first: they may be at once)
            out.emitted += 1
            out.counted += len(copies)
            root = self._copies(out, copies, entry)
        if out.recorder is not None:
            out.recorder.tracked(values, root)
        self.tracker.emitted(root, msg_id, self.monotonic())

    def _one_copy(self, out: StreamOut, batch: list, entry) -> int:
        root = self.roots.new()
        batch.append(entry)
        batch.append(root)  # an int stands for {root: root}
        if len(batch) >= 2 * self.batch_size:
            out.flush_tracked()
        return root

    def _copies(self, out: StreamOut, copies: list[list], entry) -> int:
        root, xor, size = new_id(), 0, 2 * self.batch_size
        for batch in copies:
            edge = new_id()
            xor ^= edge
            batch.append(entry)
            batch.append({root: edge})
            if len(batch) >= size:
                out.flush_tracked()
        self.acks.queue(wire.ACK_INIT, root, xor)
        return root

    # -- outcomes -----------------------------------------------------------------------
    def on_acked(self, batch: list, task: int) -> None:
        """The acker's outcomes (``root, outcome`` pairs, flat) for roots this spout task
        emitted: the spout's ``ack``/``fail`` are called with their msg_ids (not at all
        when the spout keeps Spout's own, which do nothing)."""
        if self.tracker is None:
            raise wire.WireError(f"ack outcomes for task {task}, which tracks nothing")
        if (len(batch) % 2 or not set(batch[1::2]) <= _OUTCOMES
                or not set(map(type, batch[0::2])) <= _INT):
            raise wire.WireError("an ACKED batch must hold root, outcome pairs")
        acked, failed = self.tracker.settle(batch, self.monotonic())
        self.counts.acked += len(acked)
        self.counts.failed += len(failed)
        self._call_each("ack", self.user.ack, acked)
        self._call_each("fail", self.user.fail, failed)

    def on_completed(self, body: list, task: int) -> None:
        """Roots of completed trees, ``[first, count, ..., [root, ...]]``: stretches of
        ``count`` consecutive roots from ``first`` (one from a bolt's leaves, any number
        from an acker), then others. ``ack`` their msg_ids."""
        if self.tracker is None:
            raise wire.WireError(f"completions for task {task}, which tracks nothing")
        n = len(body)
        if n == 3:  # one stretch: a bolt's leaves (the usual frame), or [0, 0, roots]
            first, count, others = body
            bad = type(first) is not int or type(count) is not int or count < 0
        elif type(body) is not list or n < 3 or not n % 2:
            bad = True
        else:  # an acker's stretches
            others = body[-1]
            bad = not set(map(type, body[:-1])) <= _INT or min(body[1:-1:2]) < 0
        if bad or type(others) is not list or not set(map(type, others)) <= _INT:
            raise wire.WireError(
                "a COMPLETED body must be [first root, count, ..., [roots]]")
        now, tracker = self.monotonic(), self.tracker
        if n == 3:
            acked = tracker.complete_range(first, count, now) if count else []
        else:
            it = iter(body[:-1])  # flat first, count pairs
            acked = tracker.complete_stretches(zip(it, it), now)
        if others:
            acked += tracker.complete(others, now)
        self.counts.acked += len(acked)
        self._call_each("ack", self.user.ack, acked)

    def _call_each(self, where: str, fn, msg_ids: list) -> None:
        """``fn(msg_id)`` for each, unless ``fn`` is Spout's own no-op."""
        if msg_ids and getattr(fn, "__func__", None) is not _NO_OP[where]:
            self.restamp()  # what ack and fail emit was emitted now
            try:
                for msg_id in msg_ids:
                    fn(msg_id)
            except Exception as exc:
                raise UserCodeError(f"{self.name}.{where}", exc) from exc

    # -- timers -------------------------------------------------------------------------
    def on_timer(self, now: float) -> None:
        """Fail the roots that timed out here, give the tuner its turn, and take the
        pending count the reports read (every turn of the instance's loop comes here)."""
        tracker, user = self.tracker, self.user
        if tracker is None:
            return
        expired = tracker.expire(now)
        if expired and self.expired_hook is not None:
            self.expired_hook(expired)
        self.counts.failed += len(expired)
        self._call_each("fail", user.fail, expired)
        if tracker.tuner is not None:
            progress = call_user(f"{self.name}.progress", user.progress)
            tracker.tune(tracker.acked if progress is None else progress, now)
        tracker.bound_turn(now)
        tracker.snapshot()

    def set_max_spout_pending(self, value) -> None:
        """Change the limit of a running spout: an int, None, or "auto"."""
        if self.tracker is not None:
            self.tracker.set_limit(value, self.monotonic())


def _untracked_steps(next_tuple, calls: int, waiting: Sized) -> None:
    """``calls`` calls of ``next_tuple``, looking at ``waiting`` before every
    ``STEP_CHUNK`` (8) of them. The chunk is written out as eight calls: a loop of a loop
    cost more per call (~50 ns) than a spout's whole ``emit``."""
    chunks, rest = divmod(calls, STEP_CHUNK)
    for _ in repeat(None, chunks):
        if waiting:
            return
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
    if rest and not waiting:
        for _ in repeat(None, rest):
            next_tuple()


def _marked_steps(next_tuple, calls: int, waiting: Sized, mark: Callable[[], None]) -> None:
    """:func:`_untracked_steps` that also calls ``mark`` before each chunk: the tuples
    a chunk emits take the time it started as their emit time (it lasts 8 calls)."""
    chunks, rest = divmod(calls, STEP_CHUNK)
    for _ in repeat(None, chunks):
        if waiting:
            return
        mark()
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
        next_tuple(); next_tuple(); next_tuple(); next_tuple()  # noqa: E702
    if rest and not waiting:
        mark()
        for _ in repeat(None, rest):
            next_tuple()


def _limited_steps(next_tuple, calls: int, waiting: Sized, tracker: SpoutTracker,
                   mark: Callable[[], None] | None, stretch: int) -> int:
    """At most the room left under ``max_spout_pending``, counted once per stretch of at
    most ``stretch`` calls, not once a call: a spout that emits one root a call never
    passes the limit. A stretch of whole chunks runs as the unlimited steps do (the
    latency bound puts every tracking spout here by default, full-speed ones included),
    the rest one call at a time. Returns the next turn's ``stretch``: doubled after a
    stretch that emitted a root a call at most, kept after one that emitted nothing, or 0
    once a stretch emitted more roots than it made calls (a batching spout: LogSpout emits
    ``batch_size`` a call), whose calls are then each looked at (:func:`_checked_steps`),
    this turn's rest included. Kept while nothing is emitted, since doubling then let a
    batching spout that starts on an empty source reach 1,024 calls a stretch and keep
    4,800 roots in flight under a limit of 200 at its first busy turn."""
    while calls > 0 and not waiting:
        room = tracker.room()
        if room <= 0:
            return stretch
        n = min(calls, room, stretch)
        if n >= STEP_CHUNK:
            n -= n % STEP_CHUNK
            if mark is None:
                _untracked_steps(next_tuple, n, waiting)
            else:
                _marked_steps(next_tuple, n, waiting, mark)
        else:
            if mark is not None:
                mark()
            for _ in repeat(None, n):
                next_tuple()
        calls -= n
        emitted = room - tracker.room()  # (nothing settles roots during a turn)
        if emitted > n:
            _checked_steps(next_tuple, calls, waiting, tracker, mark)
            return 0
        if emitted:  # a stretch that emitted nothing says nothing of a call's roots: an
            stretch = min(2 * stretch, LONGEST_STRETCH)  # idle LogSpout stays looked at
    return stretch


def _checked_steps(next_tuple, calls: int, waiting: Sized, tracker: SpoutTracker,
                   mark: Callable[[], None] | None) -> None:
    """Storm's rule for a spout whose calls emit several roots: each call only while
    fewer than ``max_spout_pending`` roots are in flight (nor output waits), so a call
    passes the limit by its own emits only, at most its batch less one. Counting calls
    instead let a LogSpout of ``batch_size`` 50 keep 1,000 roots in flight under a limit
    of 200 (docs/reliability.md, "slow-consumer")."""
    room = tracker.room
    for _ in repeat(None, calls):
        if waiting or room() <= 0:
            return
        if mark is not None:
            mark()
        next_tuple()
