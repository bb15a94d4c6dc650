"""The spout of a Kestrel-style queue on Redis Streams (the queue itself: ``_redis.py``).

Imported on first use, with redis-py (``runtime.sources.RedisQueueSpout``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from runtime.model.api import Spout

from ._offset_spout import (
    DEFAULT_MAX_RETRIES,
    DecodeError,
    check_options,
    decode_values,
    retry_backoff,
)
from ._queue import QueueItem
from ._redis import (
    CONNECTION_ERRORS,
    DEFAULT_GROUP,
    DEFAULT_URL,
    RedisQueue,
    check_name,
    check_queue_options,
)
from ._retry import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_DELAY_MAX, ReplaySchedule

log = logging.getLogger("runtime.sources")


@dataclass(frozen=True, slots=True)
class RedisSpoutStats:
    """One spout task's counts since it opened (the queue's own are `RedisQueueStats`).
    The names are `QueueSpout`'s."""

    consumer: str
    emitted: int = 0  # items opened and emitted
    redelivered: int = 0  # of those, items opened before (attempts > 0)
    acked: int = 0  # acks Redis confirmed: progress()
    failed: int = 0  # fails given back to the queue (aborted)
    dead_lettered: int = 0  # undecodable payloads, and entries that failed too often
    ignored_acks: int = 0  # double acks, and acks of items reclaimed and acked elsewhere
    ignored_fails: int = 0  # fails of items this task no longer holds
    held: int = 0  # emitted, not yet acked or failed
    retry_waiting: int = 0  # failed, held until their backoff is over, then aborted
    unsent_acks: int = 0  # acks waiting to be sent to Redis
    connection_errors: int = 0


class RedisQueueSpout(Spout):
    """Emits the items of a `RedisQueue`, decoded, with ``msg_id`` = the stream id: the
    `QueueSpout` of a real broker, with the same options plus the server's address.

    Each task is one consumer, ``<topology>.<component>.<task index>``, of one group. An ack
    acks the item (batched: at most ``ack_batch`` acks or ``ack_interval`` seconds wait); a
    fail aborts it after a backoff (``retry_delay * 2**(n-1)`` seconds after its n-th
    failure, at most ``retry_delay_max``; keep that under ``open_timeout``), so some task
    opens it again, and once it has failed ``max_retries``
    times it goes to the dead-letter stream. On open a task first releases what its previous
    incarnation held, so a crashed spout's items come back at once; the items of a task that
    stays dead are reclaimed by the others after ``open_timeout``, which should be longer than
    the topology's ``message_timeout`` (a warning says so).

    With one field the tuple is ``[decoded payload]``; with several, a JSON object gives the
    values of those keys, and a JSON array of that length its items.
    """

    resizable = True  # a rebalance just adds or removes consumers (one per task)

    def __init__(self, stream: str, redis_url: str = DEFAULT_URL, *, group: str = DEFAULT_GROUP,
                 fields: Sequence[str] = ("value",), decode: str = "json",
                 batch_size: int = 100, max_retries: int | None = DEFAULT_MAX_RETRIES,
                 open_timeout: float | None = 60.0, reclaim_interval: float = 1.0,
                 dead_letter_stream: str | None = None, ack_batch: int = 100,
                 ack_interval: float = 0.05, retry_delay: float = DEFAULT_RETRY_DELAY,
                 retry_delay_max: float = DEFAULT_RETRY_DELAY_MAX) -> None:
        check_options("RedisQueueSpout", stream, fields, decode, max_retries, batch_size)
        self.backoff = retry_backoff("RedisQueueSpout", stream, retry_delay, retry_delay_max)
        check_name("stream", stream)
        check_queue_options(open_timeout, max_retries, reclaim_interval)
        if not isinstance(ack_batch, int) or ack_batch < 1 or not ack_interval >= 0:
            raise ValueError(f"RedisQueueSpout({stream!r}): ack_batch must be a positive int "
                             f"and ack_interval >= 0 seconds")
        self.stream, self.redis_url, self.group, self.decode = stream, redis_url, group, decode
        self.outputs = list(fields)
        self.batch_size, self.max_retries, self.open_timeout = batch_size, max_retries, open_timeout
        self.reclaim_interval, self.dead_letter_stream = reclaim_interval, dead_letter_stream
        self.ack_batch, self.ack_interval = ack_batch, ack_interval
        self.clock: Callable[[], float] = time.monotonic

    # -- lifetime -------------------------------------------------------------------------
    def open(self, config, context) -> None:
        self.consumer_id = f"{context.topology_name}.{context.component_id}.{context.task_index}"
        self.queue = RedisQueue(self.stream, self.redis_url, group=self.group,
                                open_timeout=self.open_timeout, max_retries=self.max_retries,
                                reclaim_interval=self.reclaim_interval,
                                dead_letter_stream=self.dead_letter_stream, clock=self.clock)
        self.counts = dict.fromkeys(("emitted", "redelivered", "acked", "failed", "dead_lettered",
                                     "ignored_acks", "ignored_fails", "connection_errors"), 0)
        self._held: dict[str, int] = {}  # emitted item id -> its attempts before
        self._retries = ReplaySchedule(self.backoff)  # failed ids, aborted when due
        self._unsent: list[str] = []
        self._last_flush, self._active = self.clock(), True
        self._check_timeouts(config)
        returned = self.queue.release(self.consumer_id, f"{self.consumer_id} restarted")
        if returned:
            log.info("RedisQueueSpout %r: released %d items a previous incarnation held",
                     self.stream, returned)

    def close(self) -> None:
        if getattr(self, "queue", None) is None:
            return  # open failed before it connected
        self._flush_acks()
        self.queue.close()  # releases what this task still holds

    def activate(self) -> None:
        self._active = True

    def deactivate(self) -> None:
        """Stop opening; acks and fails of emitted items still arrive (and are sent now)."""
        self._active = False
        self._flush_acks()

    def _check_timeouts(self, config: Mapping) -> None:
        message_timeout = config.get("message_timeout")
        if self.open_timeout is not None and message_timeout is not None \
                and self.open_timeout <= float(message_timeout):
            log.warning("RedisQueueSpout %r: open_timeout=%s s is not longer than "
                        "message_timeout=%s s, so items still in flight will be reclaimed and "
                        "delivered twice", self.stream, self.open_timeout, message_timeout)

    # -- reading --------------------------------------------------------------------------
    def next_tuple(self) -> None:
        self._flush_acks()
        for item_id in self._retries.due(self.clock()):
            self._abort(item_id)
        if not self._active:
            return
        try:
            items = self.queue.open(self.consumer_id, self.batch_size)
        except CONNECTION_ERRORS as exc:
            self._connection_error("open", exc)
            return
        self.counts["dead_lettered"] += self.queue.buried_by_last_open
        for item in items:
            self._emit_item(item)

    def _emit_item(self, item: QueueItem) -> None:
        try:
            values = decode_values(item.payload, self.decode, self.outputs)
        except DecodeError as exc:
            error = f"cannot decode: {exc}"
            log.warning("RedisQueueSpout %r: item %s dead-lettered to %r: %s", self.stream,
                        item.id, self.queue.dead_letter_stream, error)
            self.counts["dead_lettered"] += self.queue.dead_letter(
                item.id, error, consumer_id=self.consumer_id)
            return
        self._held[item.id] = item.attempts
        self.counts["emitted"] += 1
        self.counts["redelivered"] += item.attempts > 0
        self.emit(values, msg_id=item.id)

    # -- callbacks ------------------------------------------------------------------------
    def ack(self, msg_id) -> None:
        if msg_id not in self._held:
            self.counts["ignored_acks"] += 1
            return
        del self._held[msg_id]
        self._unsent.append(msg_id)
        if (len(self._unsent) >= self.ack_batch or not self._active
                or self.clock() - self._last_flush >= self.ack_interval):
            self._flush_acks()

    def fail(self, msg_id) -> None:
        """Abort the item once its backoff is over: any task opens it again (or
        dead-letters it, at `max_retries`)."""
        if msg_id not in self._held:
            self.counts["ignored_fails"] += 1
            return
        failures = self._held.pop(msg_id) + 1
        if self.backoff.delay(failures) > 0:
            self._retries.add(msg_id, failures, self.clock())
        else:
            self._abort(msg_id)

    def _abort(self, msg_id: str) -> None:
        error = f"a bolt failed it or it timed out (consumer {self.consumer_id})"
        try:
            done = self.queue.abort(msg_id, error, consumer_id=self.consumer_id)
        except CONNECTION_ERRORS as exc:
            self._connection_error("abort", exc)  # it comes back after open_timeout instead
            return
        self.counts["failed" if done else "ignored_fails"] += 1

    def _flush_acks(self) -> None:
        self._last_flush = self.clock()
        if not self._unsent:
            return
        try:
            acked = self.queue.ack_many(self._unsent)
        except CONNECTION_ERRORS as exc:
            self._connection_error("ack", exc)  # kept, and sent with the next flush
            return
        self.counts["acked"] += acked
        self.counts["ignored_acks"] += len(self._unsent) - acked
        self._unsent = []

    def _connection_error(self, what: str, exc: Exception) -> None:
        n = self.counts["connection_errors"] = self.counts["connection_errors"] + 1
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th ... time: a log that does not flood
            log.warning("RedisQueueSpout %r: %s failed (%d times so far): %s", self.stream,
                        what, n, exc)

    # -- observing ------------------------------------------------------------------------
    def progress(self) -> int:
        """Items this task acked in Redis: Kestrel's measure of progress, for the tuner."""
        return self.counts["acked"]

    def statistics(self) -> RedisSpoutStats:
        return RedisSpoutStats(self.consumer_id, held=len(self._held),
                               retry_waiting=len(self._retries),
                               unsent_acks=len(self._unsent), **self.counts)
