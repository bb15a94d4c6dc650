"""A Kestrel-style spout over the embedded queue: open in batches, ack, abort, dead-letter.

Each ``next_tuple`` opens up to ``batch_size`` items and emits each with ``msg_id`` = the
item's id. ``ack`` acks the item in the queue (batched: one transaction per ``next_tuple`` or
``batch_size`` acks); ``fail`` aborts it after a backoff (``retry_delay * 2**(n-1)`` seconds
after its n-th failure, at most ``retry_delay_max``; it stays opened by this task meanwhile,
then becomes visible again for any spout task), or, once it has failed ``max_retries`` times,
puts it in the dead-letter queue ``<name>.dlq`` of the same file with its last error and acks
it. An item that cannot be decoded is dead-lettered at once with the decoder's error.

The consumer id is ``<topology>.<component>.<task index>``, the same for every incarnation
of a task: ``open`` first releases what a killed predecessor still held, so its items come
back at once instead of after the queue's open-timeout. ``close`` releases what the spout
holds. ``deactivate`` only stops opening: every opened item has been emitted, and its ack
or fail still arrives. `progress` is the number of acks (the paper's measure for Kestrel).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime.model.api import Spout

from ._log import default_root
from ._offset_spout import (
    DEFAULT_MAX_RETRIES,
    DLQ_SUFFIX,
    DecodeError,
    check_options,
    dead_letter,
    decode_values,
    failed_error,
    retry_backoff,
)
from ._queue import EmbeddedQueue, QueueItem
from ._retry import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_DELAY_MAX, ReplaySchedule

log = logging.getLogger("runtime.sources")

QUEUE_FILE = "queues.db"  # the default file, next to the embedded log's topics


def default_queue_path() -> Path:
    """``queues.db`` under the embedded log's root (``$TUPLEFLOW_LOG_ROOT``)."""
    return default_root() / QUEUE_FILE


class QueueSpout(Spout):
    """Emits the items of an `EmbeddedQueue`, decoded like `LogSpout`'s records.

    ``statistics()`` is a dict: ``acked``, ``failed``, ``dead_lettered``, ``ignored_acks``
    (double acks and acks of ids this task does not hold), ``ignored_fails``,
    ``acks_pending`` (acked, not yet written to the queue), ``held`` and ``retry_waiting``
    (failed items waiting out their backoff).
    """

    resizable = True  # a rebalance just adds or removes consumers (one per task)

    def __init__(self, name: str, path: str | os.PathLike | None = None, *,
                 fields: Sequence[str] = ("value",), decode: str = "json",
                 batch_size: int = 100, max_retries: int | None = DEFAULT_MAX_RETRIES,
                 open_timeout: float | None = 30.0,
                 dead_letter_queue: str | None = None,
                 retry_delay: float = DEFAULT_RETRY_DELAY,
                 retry_delay_max: float = DEFAULT_RETRY_DELAY_MAX) -> None:
        check_options("QueueSpout", name, fields, decode, max_retries, batch_size)
        self.backoff = retry_backoff("QueueSpout", name, retry_delay, retry_delay_max)
        self.clock = time.monotonic  # seconds; the retry times are on it (a test sets it)
        self.name, self.path, self.decode = name, path, decode
        self.outputs = list(fields)
        self.batch_size, self.max_retries, self.open_timeout = batch_size, max_retries, open_timeout
        self.dead_letter_queue = dead_letter_queue or name + DLQ_SUFFIX

    def open(self, config, context) -> None:
        path = Path(self.path) if self.path is not None else default_queue_path()
        self._queue = EmbeddedQueue(path, self.name, open_timeout=self.open_timeout)
        self._dlq = EmbeddedQueue(path, self.dead_letter_queue, open_timeout=None)
        self.consumer_id = f"{context.topology_name}.{context.component_id}.{context.task_index}"
        released = self._queue.release(self.consumer_id)
        if released:
            log.info("QueueSpout %r: released %d items a previous incarnation held",
                     self.name, released)
        self._held: dict[int, QueueItem] = {}
        self._acks: list[int] = []  # acked by the topology, not yet in the queue
        self._retries = ReplaySchedule(self.backoff)  # failed, still held, aborted when due
        self._active = True
        self.counts = dict.fromkeys(("acked", "failed", "dead_lettered", "ignored_acks",
                                     "ignored_fails"), 0)

    def close(self) -> None:
        self._flush_acks()
        self._queue.close()  # releases what this consumer holds
        self._dlq.close()

    def activate(self) -> None:
        self._active = True

    def deactivate(self) -> None:
        self._active = False

    # -- reading --------------------------------------------------------------------------

    def next_tuple(self) -> None:
        self._flush_acks()
        for item_id in self._retries.due(self.clock()):
            self._queue.abort(item_id)  # visible again, for any spout task
        if not self._active:
            return
        for item in self._queue.open(self.consumer_id, self.batch_size):
            self._held[item.id] = item
            try:
                values = decode_values(item.payload, self.decode, self.outputs)
            except DecodeError as exc:
                self._give_up(item, f"cannot decode: {exc}", item.attempts)
                continue
            self.emit(values, msg_id=item.id)

    # -- callbacks ------------------------------------------------------------------------

    def ack(self, msg_id) -> None:
        if self._held.pop(msg_id, None) is None:
            self.counts["ignored_acks"] += 1
            return
        self._acks.append(msg_id)
        if len(self._acks) >= self.batch_size:
            self._flush_acks()

    def _flush_acks(self) -> None:
        """Ack in the queue in one transaction per batch: a crash before it re-delivers
        those items (duplicates), it never loses one."""
        if self._acks:
            self._queue.ack_many(self._acks)
            self.counts["acked"] += len(self._acks)
            self._acks = []

    def fail(self, msg_id) -> None:
        """Abort the item, or dead-letter it once it has failed ``max_retries`` times."""
        item = self._held.get(msg_id)
        if item is None:
            self.counts["ignored_fails"] += 1
            return
        failures = item.attempts + 1
        if self.max_retries is not None and failures >= self.max_retries:
            self._give_up(item, failed_error(failures), failures)
            return
        del self._held[msg_id]
        if self.backoff.delay(failures) > 0:
            self._retries.add(msg_id, failures, self.clock())
        else:
            self._queue.abort(msg_id)
        self.counts["failed"] += 1

    def _give_up(self, item: QueueItem, error: str, failures: int) -> None:
        """Put the item in the dead-letter queue, then ack it (a crash between re-delivers
        it; nothing is lost)."""
        log.warning("QueueSpout %r item %d dead-lettered to %r: %s", self.name, item.id,
                    self.dead_letter_queue, error)
        self._dlq.put(dead_letter(self.name, {"id": item.id}, item.payload, error, failures))
        self._queue.ack(item.id)
        del self._held[item.id]
        self.counts["dead_lettered"] += 1

    def progress(self) -> int:
        """Items acked by this task: Kestrel's measure of progress for the tuner."""
        return self.counts["acked"]

    def statistics(self) -> dict:
        return {**self.counts, "acks_pending": len(self._acks), "held": len(self._held),
                "retry_waiting": len(self._retries)}


def queue_spout(name: str, redis_url: str | None = None, **options: Any) -> Spout:
    """A Kestrel-style spout: the embedded queue's `QueueSpout` when `redis_url` is None (the
    default: no server), a `RedisQueueSpout` on that server's stream `name` otherwise.
    Switching is one argument.

    Shared options: ``fields``, ``decode``, ``batch_size``, ``max_retries``,
    ``open_timeout``, ``retry_delay`` and ``retry_delay_max`` (the n-th failure of an item
    waits ``retry_delay * 2**(n-1)`` seconds, at most ``retry_delay_max``, before it is given
    back). Only for the embedded queue: ``path``, ``dead_letter_queue``. Only for
    Redis: ``group``, ``reclaim_interval``, ``dead_letter_stream``, ``ack_batch``,
    ``ack_interval``.

    >>> type(queue_spout("jobs")).__name__
    'QueueSpout'
    >>> type(queue_spout("jobs", "redis://127.0.0.1:6379/0")).__name__
    'RedisQueueSpout'
    """
    if redis_url is None:
        return QueueSpout(name, **options)
    from ._redis_spout import RedisQueueSpout

    return RedisQueueSpout(name, redis_url, **options)
