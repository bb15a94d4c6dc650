"""A spout task's side of at least once: its in-flight roots, their timeouts, the
max-spout-pending limit, its auto-tuner and its latency bound. Pure: time comes in as
``now``. Cutting runs of roots apart, where completions cover part of one, is
runtime/acking/_cuts.py's.

>>> t = SpoutTracker(timeout=30.0, max_pending=2, now=0.0)
>>> t.emitted(root=11, msg_id="a", now=0.0); t.emitted(root=12, msg_id="b", now=0.0)
>>> t.full()
True
>>> t.settle([11, ACKED_OK], now=0.004)      # the acker's word: root 11 completed
(['a'], [])
>>> t.full(), t.in_flight
(False, 1)
"""

from __future__ import annotations

from collections.abc import Sized
from itertools import islice, repeat
from operator import itemgetter
from typing import Any

from runtime.model.constants import AUTO, AUTO_START
from runtime.observe.metrics import LatencyHistogram
from runtime.wire import ACKED_OK, ACKED_RENEWED, ACKED_TIMEOUT

from . import _cuts
from ._bound import BIG_CHANGE, LatencyBound
from ._ledger import OLDEST_REPORTED
from ._rotating import RotatingMap
from ._tuner import MaxSpoutPendingTuner

BUCKETS = 3  # a root times out between timeout and 1.5 x timeout after it was emitted
# a list of completed roots this long or longer is looked at for stretches of consecutive
# roots (complete); shorter ones go root by root, as a bolt's few leaves do
STRETCHED = 16


class SpoutTracker:
    """Roots this spout task emitted and has not yet heard the end of."""

    def __init__(self, timeout: float, max_pending: int | str | None = None,
                 tune_interval: float = 120.0, now: float = 0.0,
                 target_latency: float | None = None) -> None:
        # root -> (msg_id, emit time), for roots emitted one by one
        self.pending: RotatingMap[int, tuple[Any, float]] = RotatingMap(BUCKETS)
        # runs of consecutive roots (the executor's fast path), rotated with ``pending``:
        # first root -> (msg_ids, emit times), one of each per root
        self.runs: RotatingMap[int, tuple[list, list]] = RotatingMap(BUCKETS)
        self.in_flight = 0  # roots sent and not settled
        # tuples emitted whose roots are not counted yet: the runs, one list per target
        # (count_unsent)
        self.unsent: list[Sized] = []
        self.pending_seen = 0  # in flight and unsent, as of the owner's last snapshot()
        self.rotate_every = timeout / (BUCKETS - 1)
        self.next_rotation = now + self.rotate_every
        self.latency = LatencyHistogram()
        self.acked = self.failed = self.timed_out = self.stale = 0
        self._limits(tune_interval, target_latency, now)
        self.set_limit(max_pending, now)

    def _limits(self, tune_interval: float, target_latency: float | None, now: float) -> None:
        """The limit's deciders: the tuner ("auto"), and the latency bound
        (acking/_bound.py; None with target_latency None), which sets the limit when
        max_pending is None."""
        self.limit: int | None = None
        self.tune_interval, self._next_tune = tune_interval, now + tune_interval
        self.tuner: MaxSpoutPendingTuner | None = None
        self.tuner_action: str | None = None
        self.tuner_turns = 0
        self.tuner_turn: dict | None = None  # the tuner's last turn, as data (report())
        self._last_progress: int | None = None
        self.bound = LatencyBound(target_latency, 1, now) if target_latency else None
        self.bounded = False  # whether the bound applies to the limit now
        self.held = False  # the limit was reached since the bound's last turn
        self._reported_bound = 0  # the bound's value when last reported as a tuner event

    # -- the limit ------------------------------------------------------------------------
    def set_limit(self, value: int | str | None, now: float) -> None:
        """An int, "auto" (the tuner decides, from ``AUTO_START``) or None: the latency
        bound decides, or with ``target_latency`` None, no limit."""
        self.bounded = self.bound is not None and value is None
        if value == AUTO:
            self.tuner = MaxSpoutPendingTuner(AUTO_START)
            self._next_tune = now + self.tune_interval
        else:
            self.tuner = None
        self._set(value)

    def _set(self, value: int | str | None) -> None:
        """The limit: the tuner's value, the bound's, or the one set."""
        if self.tuner is not None:
            value = self.tuner.get()
        elif self.bounded:
            value = self.bound.limit
        self.limit = value

    def set_floor(self, floor: int) -> None:
        """The bound's floor: roots in flight it never goes below."""
        if self.bound is not None:
            self.bound.set_floor(floor)
        if self.bounded:
            self._set(None)

    def full(self) -> bool:
        """Whether ``next_tuple`` must wait: the limit of in-flight roots is reached."""
        return self.room() <= 0 if self.limit is not None else False

    def room(self) -> int:
        """Roots that may still be emitted before the limit (which must not be None)."""
        room = self.limit - self.in_flight - sum(map(len, self.unsent))
        if room <= 0:
            self.held = True
        return room

    def bound_turn(self, now: float) -> int | None:
        """The latency bound's turn, when one is due: the new limit, else None."""
        if not self.bounded:
            return None
        latency = self.latency
        bound = self.bound.turn(latency.count, latency.total, self.failed, self.held, now,
                                latency.counts)
        if bound is None:
            return None
        self.held = False
        self._set(None)
        if not self._reported_bound or not (
                self._reported_bound / BIG_CHANGE < bound < self._reported_bound * BIG_CHANGE):
            self._reported_bound = bound  # a big change: a tuner event at the master
            self.tuner_action, self.tuner_turns = "latency_bound", self.tuner_turns + 1
        return self.limit

    def tune(self, progress: int, now: float) -> str | None:
        """Every ``tune_interval``: feed the tuner the progress made since its last turn."""
        if self.tuner is None or now < self._next_tune:
            return None
        self._next_tune = now + self.tune_interval
        last, self._last_progress = self._last_progress, progress
        if last is None:
            return None  # the first reading only sets the baseline
        self.tuner_action = self.tuner.auto_tune(progress - last)
        self.tuner_turns += 1
        self.tuner_turn = _turn_record(self.tuner.last_turn, progress, self.in_flight)
        self._set(None)
        return self.tuner_action

    # -- roots ----------------------------------------------------------------------------
    def count_unsent(self, lists: list[Sized]) -> None:
        """Count the entries of ``lists`` as in flight already: a spout's runs, whose
        tuples are emitted but get their roots counted only as the run ends
        (runtime/engine/runs.py)."""
        self.unsent = lists

    def emitted(self, root: int, msg_id: Any, now: float) -> None:
        """A new root, emitted on its own (a run's go through :meth:`add_run`)."""
        self.pending.newest[root] = (msg_id, now)
        self.in_flight += 1

    def add_run(self, first: int, msg_ids: list, stamps: list) -> None:
        """Roots ``first``, ``first + 1``, ... emitted with these msg_ids at these times.
        The tracker keeps the two lists as they are, and may hand them out (changed) as
        the msg_ids it settles: the caller gives them up (:meth:`complete_range`)."""
        self.runs.newest[first] = (msg_ids, stamps)
        self.in_flight += len(msg_ids)

    def complete_range(self, first: int, count: int, now: float) -> list:
        """Roots ``first`` to ``first + count - 1`` completed: their msg_ids, in order.
        Whole runs, the usual case, are settled as they are, in one step each; the
        part of a run a range covers is cut out of it (:meth:`_complete_cut`)."""
        end, runs = first + count, self.runs
        acked: list = []
        starts: list = []
        while first < end:
            run = runs.get(first)
            if run is None or first + len(run[0]) > end:
                break
            runs.remove(first)
            first += len(run[0])
            if acked:
                acked += run[0]
                starts += run[1]
            else:  # the first run's own lists, not copies: no one else holds them (add_run)
                acked, starts = run
        self.latency.record_since(starts, now)  # (_settled, written out: a call a frame)
        self.in_flight -= len(acked)
        self.acked += len(acked)
        if first < end:  # part of a run, or no run at all
            acked += self._complete_cut(first, end, now)
        return acked

    def complete_stretches(self, stretches, now: float) -> list:
        """Roots completed as ``(first, count)`` stretches (an acker's ``COMPLETED``
        frame, or a long list's own): their msg_ids, each stretch settled as
        :meth:`complete_range` settles a range."""
        acked: list = []
        for first, count in stretches:
            if count:
                acked += self.complete_range(first, count, now)
        return acked

    def _settled(self, acked: list, starts: list, now: float) -> None:
        """Count ``acked`` msg_ids as settled, emitted at ``starts``."""
        self.latency.record_since(starts, now)
        self.in_flight -= len(acked)
        self.acked += len(acked)

    def _complete_cut(self, first: int, end: int, now: float) -> list:
        """Roots ``first`` to ``end - 1``, not whole runs: what of each run they cover is
        cut out of it (the rest stays a run, in its bucket), the single roots among them
        are looked up one by one; their msg_ids in root order. Before, every run touched
        was taken apart root by root, the whole of it: at 1/2/2, where a count task now and
        then finds a sentence's tree whole and completes its root alone, that was most
        of the spout's cost of completions (docs/internals/performance-log.md, "Issue 17,
        ninth pass"). The work is bounded by what is in flight, never by the range's
        length (a stale or broken frame may claim any count)."""
        parts = _cuts.cut_runs(self.runs, first, end)
        if sum(len(p[1]) for p in parts) < end - first and len(self.pending):
            parts += _cuts.singles_within(self.pending, first, end, parts)
            parts.sort(key=itemgetter(0))
        acked: list = []
        starts: list = []
        for _, msg_ids, stamps in parts:
            acked += msg_ids
            starts += stamps
        self.stale += end - first - len(acked)
        self._settled(acked, starts, now)
        return acked

    def settle(self, outcomes: list, now: float) -> tuple[list, list]:
        """The acker's word, flat ``root, outcome`` pairs: the msg_ids to ack and to
        fail, in order. Roots not pending here are counted as stale and skipped; a
        renewed root becomes the youngest again. A frame of acks only (the usual one)
        is settled in C."""
        roots = outcomes[0::2]
        if outcomes[1::2].count(ACKED_OK) != len(roots):
            _cuts.detach(self.runs, self.pending, roots)
            it = iter(outcomes)
            return self._settle_each(zip(it, it), now)
        return self.complete(roots, now), []

    def complete(self, roots, now: float) -> list:
        """Roots whose trees completed: their msg_ids. A long list that is mostly
        stretches of consecutive roots (an acker's completions of runs, at two count tasks
        and more) is settled stretch by stretch as :meth:`complete_range` settles a range,
        whole runs in one step each, its msg_ids then in the order of the roots; any
        other list root by root, in its own order (:meth:`_complete_each`). Whole runs
        taken apart root by root cost the spout's ``on_frame`` 5,720 instructions a
        sentence at 1/2/2, by stretches 4,042 (docs/internals/performance-log.md, "Issue 17,
        eighth pass")."""
        if len(roots) >= STRETCHED and len(self.runs):
            ordered = sorted(roots)  # a repeated root: root by root, as it always was
            stretches = _cuts.stretches(ordered) if len(set(ordered)) == len(ordered) else None
            if stretches is not None:
                return self.complete_stretches(stretches, now)
        return self._complete_each(roots, now)

    def _complete_each(self, roots, now: float) -> list:
        """Roots whose trees completed, one by one: their msg_ids, in order, settled in C
        (the roots that runs hold are cut out of them first)."""
        _cuts.detach(self.runs, self.pending, roots)
        fresh = self.pending.newest
        entries = list(map(fresh.pop, roots, repeat(None)))
        if None in entries:  # older than the newest bucket, or not here at all
            remove = self.pending.remove
            entries = [e for e in (e if e is not None else remove(r)
                                   for r, e in zip(roots, entries)) if e is not None]
            self.stale += len(roots) - len(entries)
        acked = list(map(itemgetter(0), entries))
        self.latency.record_since(list(map(itemgetter(1), entries)), now)
        self.in_flight -= len(acked)
        self.acked += len(acked)
        return acked

    def _settle_each(self, outcomes, now: float) -> tuple[list, list]:
        acked, failed, started = [], [], []
        remove, fresh = self.pending.remove, self.pending.newest
        timed_out = 0
        for root, outcome in outcomes:
            entry = remove(root)
            if entry is None:
                self.stale += outcome != ACKED_RENEWED
                continue
            if outcome == ACKED_OK:
                acked.append(entry[0])
                started.append(entry[1])
            elif outcome == ACKED_RENEWED:
                fresh[root] = entry
            else:
                failed.append(entry[0])
                timed_out += outcome == ACKED_TIMEOUT
        self.in_flight -= len(acked) + len(failed)
        self.acked += len(acked)
        self.failed += len(failed)
        self.timed_out += timed_out
        self.latency.record_since(started, now)
        return acked, failed

    def expire(self, now: float) -> list[Any]:
        """The msg_ids of roots that have waited too long (checked every rotation)."""
        expired: list[Any] = []
        while now >= self.next_rotation:
            self.next_rotation += self.rotate_every
            expired += [msg_id for msg_id, _ in self.pending.rotate().values()]
            for msg_ids, _ in self.runs.rotate().values():
                expired += msg_ids
        self.in_flight -= len(expired)
        self.failed += len(expired)
        self.timed_out += len(expired)
        return expired

    def oldest(self, n: int, now: float) -> list[tuple[int, Any, float]]:
        """Up to ``n`` of the oldest roots in flight: ``(root, msg_id, age in seconds)``,
        oldest first, for the live acker view (``running.acker_state``), which names the
        acker's oldest roots by their msg_id. Reads ``n`` entries per bucket at most;
        safe from another thread (an entry changed meanwhile is left out).

        >>> t = SpoutTracker(timeout=30.0, now=0.0)
        >>> t.emitted(root=11, msg_id="a", now=1.0); t.add_run(20, ["b", "c"], [2.0, 2.0])
        >>> t.oldest(2, now=5.0)
        [(11, 'a', 4.0), (20, 'b', 3.0)]
        """
        found: list[tuple[int, Any, float]] = []
        for age in range(BUCKETS - 1, -1, -1):
            found += _first_roots(self.pending.buckets[age], self.runs.buckets[age], n)
            if len(found) >= n:
                break
        found.sort(key=itemgetter(2))
        return [(root, msg_id, now - stamp) for root, msg_id, stamp in found[:n]]

    def roots_report(self, now: float) -> dict:
        """The oldest roots in flight, for the reports: ``[root, msg_id, age_s]`` each (a
        msg_id msgpack cannot carry is sent as its repr)."""
        return {"oldest_roots": [[root, _plain(msg_id), round(age, 3)]
                                 for root, msg_id, age in self.oldest(OLDEST_REPORTED, now)]}

    def snapshot(self) -> None:
        """Take ``pending_seen`` for the reports: another thread reads them, and the sum
        of ``in_flight`` and ``unsent`` is only whole between two steps of the spout's."""
        self.pending_seen = self.in_flight + sum(map(len, self.unsent))

    def report(self) -> dict:
        """The tracker's part of its spout task's report."""
        return {"pending": self.pending_seen, "max_spout_pending": self.limit,
                "complete_latency_ms": self.latency.summary(), "timed_out": self.timed_out,
                "stale_acks": self.stale, "tuner_action": self.tuner_action,
                "tuner_turns": self.tuner_turns, "tuner_turn": self.tuner_turn,
                "latency_bounded": self.bounded}


def _plain(msg_id: Any) -> Any:
    """``msg_id`` as the reports can carry it: itself if plain data, else its repr."""
    return msg_id if isinstance(msg_id, (str, int, float, bool, type(None))) else repr(msg_id)


def _first_roots(pending: dict, runs: dict, n: int) -> list[tuple[int, Any, float]]:
    """Up to ``n`` roots of one bucket of singles and one of runs, as ``(root, msg_id,
    emit time)``; what another thread changes during the read is left out."""
    found: list[tuple[int, Any, float]] = []
    try:
        for root, (msg_id, stamp) in list(islice(pending.items(), n)):
            found.append((root, msg_id, stamp))
        for first, (msg_ids, stamps) in list(islice(runs.items(), n)):
            found += zip(range(first, first + n), msg_ids[:n], stamps[:n])
    except RuntimeError:
        pass
    return found


def _turn_record(turn, total: int, in_flight: int) -> dict:
    """A tuner turn as plain data for the reports: the progress of the period just ended
    and of the one before, the similarity test (``similar``, its ``band``), the action,
    the ``move`` (a restore is a no_change that lowers the value), the value before and
    after, the spout's ``total`` progress so far (what a what-if replay reads) and the
    roots ``in_flight`` at the turn."""
    return {"progress": turn.progress, "previous": turn.previous, "similar": turn.similar,
            "band": turn.band, "action": turn.action, "move": turn.move,
            "before": turn.before, "after": turn.after, "total": total,
            "in_flight": in_flight}
