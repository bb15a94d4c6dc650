"""A spout task's side of at least once: its in-flight roots, their timeouts, the
max-spout-pending limit and its auto-tuner. Pure: time comes in as ``now``.

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

from itertools import repeat
from operator import itemgetter, sub
from typing import Any

from ._constants import AUTO, AUTO_START
from ._ledger import RotatingMap
from ._metrics import LatencyHistogram
from .tuning import MaxSpoutPendingTuner
from .wire import ACKED_OK, ACKED_RENEWED, ACKED_TIMEOUT

BUCKETS = 3  # a root times out between timeout and 1.5 x timeout after it was emitted


class SpoutTracker:
    """Roots this spout task emitted and has not yet heard the end of."""

    def __init__(self, timeout: float, max_pending: int | str | None = None,
                 tune_interval: float = 120.0, now: float = 0.0) -> None:
        self.pending: RotatingMap[int, tuple[Any, float]] = RotatingMap(BUCKETS)
        self.fresh = self.pending.newest  # where emits go (the executor's too)
        self.in_flight = 0
        self.rotate_every = timeout / (BUCKETS - 1)
        self.next_rotation = now + self.rotate_every
        self.latency = LatencyHistogram()
        self.acked = self.failed = self.timed_out = self.stale = 0
        self.tune_interval = tune_interval
        self.tuner: MaxSpoutPendingTuner | None = None
        self.tuner_action: str | None = None
        self.tuner_turns = 0
        self.limit: int | None = None
        self._last_progress: int | None = None
        self._next_tune = now + tune_interval
        self.set_limit(max_pending, now)

    # -- the limit ------------------------------------------------------------------------
    def set_limit(self, value: int | str | None, now: float) -> None:
        """An int, None (no limit) or "auto" (the tuner decides, from ``AUTO_START``)."""
        if value == AUTO:
            self.tuner = MaxSpoutPendingTuner(AUTO_START)
            self.limit, self._next_tune = self.tuner.get(), now + self.tune_interval
        else:
            self.tuner, self.limit = None, value

    def full(self) -> bool:
        """Whether ``next_tuple`` must wait: the limit of in-flight roots is reached."""
        return self.limit is not None and self.in_flight >= self.limit

    def tune(self, progress: int, now: float) -> str | None:
        """Every ``tune_interval``: feed the tuner the progress made since its last turn."""
        if self.tuner is None or now < self._next_tune:
            return None
        self._next_tune = now + self.tune_interval
        last, self._last_progress = self._last_progress, progress
        if last is None:
            return None  # the first reading only sets the baseline
        self.tuner_action = self.tuner.auto_tune(progress - last)
        self.limit, self.tuner_turns = self.tuner.get(), self.tuner_turns + 1
        return self.tuner_action

    # -- roots ----------------------------------------------------------------------------
    def emitted(self, root: int, msg_id: Any, now: float) -> None:
        """A new root (the executor's spout ``emit`` does the same two lines itself)."""
        self.fresh[root] = (msg_id, now)
        self.in_flight += 1

    def settle(self, outcomes: list, now: float) -> tuple[list, list]:
        """The acker's word, flat ``root, outcome`` pairs: the msg_ids to ack and to
        fail, in order. Roots not pending here are counted as stale and skipped; a
        renewed root becomes the youngest again. A frame of acks only (the usual one)
        is settled in C."""
        roots = outcomes[0::2]
        if outcomes[1::2].count(ACKED_OK) != len(roots):
            it = iter(outcomes)
            return self._settle_each(zip(it, it), now)
        entries = list(map(self.fresh.pop, roots, repeat(None)))
        if None in entries:  # older than the newest bucket, or not here at all
            remove = self.pending.remove
            entries = [e for e in (e if e is not None else remove(r)
                                   for r, e in zip(roots, entries)) if e is not None]
            self.stale += len(roots) - len(entries)
        acked = list(map(itemgetter(0), entries))
        self.latency.record_each(list(map(sub, repeat(now), map(itemgetter(1), entries))))
        self.in_flight -= len(acked)
        self.acked += len(acked)
        return acked, []

    def _settle_each(self, outcomes, now: float) -> tuple[list, list]:
        acked, failed, waited = [], [], []
        remove, fresh = self.pending.remove, self.fresh
        timed_out = 0
        for root, outcome in outcomes:
            entry = remove(root)
            if entry is None:
                self.stale += outcome != ACKED_RENEWED
                continue
            if outcome == ACKED_OK:
                acked.append(entry[0])
                waited.append(now - entry[1])
            elif outcome == ACKED_RENEWED:
                fresh[root] = entry
            else:
                failed.append(entry[0])
                timed_out += outcome == ACKED_TIMEOUT
        self.in_flight -= len(acked) + len(failed)
        self.acked += len(acked)
        self.failed += len(failed)
        self.timed_out += timed_out
        self.latency.record_each(waited)
        return acked, failed

    def expire(self, now: float) -> list[Any]:
        """The msg_ids of roots that have waited too long (checked every rotation)."""
        expired: list[Any] = []
        while now >= self.next_rotation:
            self.next_rotation += self.rotate_every
            expired += [msg_id for msg_id, _ in self.pending.rotate().values()]
            self.fresh = self.pending.newest
        self.in_flight -= len(expired)
        self.failed += len(expired)
        self.timed_out += len(expired)
        return expired

    def record(self) -> dict:
        return {"pending": self.in_flight, "max_spout_pending": self.limit,
                "complete_latency_ms": self.latency.summary(), "timed_out": self.timed_out,
                "stale_acks": self.stale, "tuner_action": self.tuner_action,
                "tuner_turns": self.tuner_turns}
