"""A spout reading a real Kafka topic (confluent-kafka), at least once, on the shared core.

The same `OffsetTracker` as `LogSpout`; only the I/O differs. Spout tasks split the topic's
partitions by task index (partition p to task ``p % parallelism``) and ``assign`` them
explicitly: no consumer-group rebalancing, so a partition moves only in a topology's
rebalance (`OffsetSpout.rebalanced`: the old owner commits what was acked, the new one
resumes at the group's committed offset). The group is used only to store offsets: every
``commit_interval`` seconds (and on ``close``) the committed offset of each partition (the
lowest offset not yet acked) is committed to ``group_id``, which a restarted spout resumes
from.

Replays come from a local buffer, not from ``seek``: the payload of every offset in flight
is kept until it is acked or dead-lettered. ``max_uncommitted`` bounds that buffer per
partition, and a seek would throw away the records the consumer has already fetched for
every later offset. A partition whose window is full is ``pause``d (the records fetched
meanwhile wait in a small per-partition queue) and resumed once it has room.

Kafka offsets have gaps (compaction, transaction markers); a jump forward is counted done
(``skipped``), and a record below the next expected offset (a re-fetch) is dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ._offset_spout import DEFAULT_MAX_RETRIES, OffsetSpout
from ._retry import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_DELAY_MAX

log = logging.getLogger("runtime.sources")

STARTS = ("earliest", "latest")  # where a partition with no committed offset starts
TIMEOUT = 10.0  # seconds for metadata, committed-offset and dead-letter requests


def partition_count(client, topic: str, brokers: str, kind: str) -> int:
    """How many partitions ``topic`` has now (a metadata request of ``client``, a consumer
    or producer); ValueError naming the ``kind`` of spout when there is no such topic."""
    meta = client.list_topics(topic, timeout=TIMEOUT).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        why = meta.error if meta is not None else "not in the metadata"
        raise ValueError(f"{kind}({topic!r}): no such topic at {brokers}: {why}")
    return len(meta.partitions)


class KafkaSpout(OffsetSpout):
    """Emits the records of a Kafka topic with ``msg_id=(partition, offset)``.

    `brokers` is Kafka's ``bootstrap.servers`` ("host:port,..."); ``config`` adds or
    overrides librdkafka settings of the consumer and of the dead-letter producer. The
    options shared with `LogSpout` mean the same; see `runtime.sources.log_spout`.
    """

    kind = "KafkaSpout"

    def __init__(self, topic: str, brokers: str, *, fields: Sequence[str] = ("value",),
                 decode: str = "json", commit_interval: float = 1.0,
                 max_uncommitted: int = 10_000, batch_size: int = 100,
                 max_retries: int | None = DEFAULT_MAX_RETRIES,
                 dead_letter_topic: str | None = None, group_id: str | None = None,
                 start: str = "earliest", config: Mapping[str, Any] | None = None,
                 retry_delay: float = DEFAULT_RETRY_DELAY,
                 retry_delay_max: float = DEFAULT_RETRY_DELAY_MAX) -> None:
        super().__init__(topic, fields=fields, decode=decode, commit_interval=commit_interval,
                         max_uncommitted=max_uncommitted, batch_size=batch_size,
                         max_retries=max_retries, dead_letter_topic=dead_letter_topic,
                         retry_delay=retry_delay, retry_delay_max=retry_delay_max)
        if not isinstance(brokers, str) or not brokers:
            raise ValueError(f"KafkaSpout({topic!r}): brokers must be 'host:port[,...]', "
                             f"not {brokers!r}")
        if start not in STARTS:
            raise ValueError(f"KafkaSpout({topic!r}): start must be one of {STARTS}, "
                             f"not {start!r}")
        self.brokers, self.group_id, self.start = brokers, group_id, start
        self.config = dict(config or {})

    # -- lifetime -------------------------------------------------------------------------

    def open(self, config, context) -> None:
        from confluent_kafka import Consumer  # imported here: defining a spout starts nothing

        self._group = self.group_id or f"tupleflow.{context.topology_name}.{context.component_id}"
        self._consumer = Consumer({
            "bootstrap.servers": self.brokers, "group.id": self._group,
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": self.start, **self.config})
        self._assign(self._partition_count(), context)
        self._start_offsets(self._resume_offsets(self.assigned))
        self._consumer.assign([self._tp(p, o) for p, o in self.tracker.committed_offsets().items()])
        self._buffer: dict[int, dict[int, bytes]] = {p: {} for p in self.assigned}
        self._held: dict[int, deque] = {p: deque() for p in self.assigned}
        self._paused: set[int] = set()
        self._producer = None
        self.stale = self.errors = 0

    def close(self) -> None:
        self.commit()
        self._consumer.close()
        if self._producer is not None:
            self._producer.flush(TIMEOUT)

    def _tp(self, partition: int, offset: int | None = None):
        from confluent_kafka import TopicPartition

        if offset is None:
            return TopicPartition(self.topic, partition)
        return TopicPartition(self.topic, partition, offset)

    def _partition_count(self) -> int:
        return partition_count(self._consumer, self.topic, self.brokers, "KafkaSpout")

    def _resume_offsets(self, partitions: list[int]) -> dict[int, int]:
        """The group's committed offset of each of ``partitions``, else `start`."""
        found = self._consumer.committed([self._tp(p) for p in partitions], timeout=TIMEOUT)
        out = {}
        for tp in found:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                low, high = self._consumer.get_watermark_offsets(
                    self._tp(tp.partition), timeout=TIMEOUT)
                out[tp.partition] = low if self.start == "earliest" else high
        return out

    # -- reading --------------------------------------------------------------------------

    def next_tuple(self) -> None:
        if self._taking:
            self._take()  # before the poll: the queues of the gained partitions exist
        if self._wants_records():
            self._poll()  # else the queues are full enough: librdkafka keeps the rest
        super().next_tuple()
        self._flow_control()

    def _wants_records(self) -> bool:
        """Whether a partition that is not paused has fewer than ``batch_size`` records
        waiting. Only those count: a paused partition's queue (its window full, its
        records waiting for acks) must not keep the others from being read, or one
        partition could stop at its first batch until acks came (a CI failure)."""
        batch, held, paused = self.batch_size, self._held, self._paused
        return any(len(held[p]) < batch for p in self.assigned if p not in paused)

    def _rewound(self) -> None:
        """Back to a checkpoint: what was fetched ahead goes, the consumer seeks there."""
        self._consumer.assign([self._tp(p, o)
                               for p, o in self.tracker.committed_offsets().items()])
        self._buffer = {p: {} for p in self.assigned}  # a rebalance may have added some
        self._held = {p: deque() for p in self.assigned}  # (paused ones resume: none held)

    def _release(self, partitions: list[int]) -> None:
        """A rebalance gave ``partitions`` to other tasks: stop fetching them, and drop
        what was fetched and what waits for a replay (the new owner reads it again)."""
        if partitions:
            self._consumer.incremental_unassign([self._tp(p) for p in partitions])
        for p in partitions:
            self._buffer.pop(p, None)
            self._held.pop(p, None)
            self._paused.discard(p)

    def _acquire(self, offsets: Mapping[int, int]) -> None:
        self._consumer.incremental_assign([self._tp(p, o) for p, o in offsets.items()])
        for p in offsets:
            self._buffer[p], self._held[p] = {}, deque()

    def _poll(self) -> None:
        """Move what the consumer has fetched (no waiting) to the per-partition queues."""
        for msg in self._consumer.consume(num_messages=self.batch_size, timeout=0):
            if msg.error() is not None:
                self.errors += 1
                log.warning("KafkaSpout %r: consumer error: %s", self.topic, msg.error())
                continue
            held = self._held.get(msg.partition())
            if held is None:  # fetched before a rebalance gave the partition away
                self.stale += 1
                continue
            held.append((msg.offset(), msg.value() or b""))

    def _read(self, partition: int, n: int) -> int:
        held, buffer, count = self._held[partition], self._buffer[partition], 0
        while held and count < n:
            offset, payload = held.popleft()
            expected = self.tracker.next_offset(partition)
            if offset < expected:
                self.stale += 1  # fetched twice (after a pause): already handed out
                continue
            if offset > expected:
                self.tracker.skip_to(partition, offset)
            self.tracker.emitted(partition, offset)
            buffer[offset] = payload
            self._emit_record(partition, offset, payload)
            count += 1
        return count

    def _flow_control(self) -> None:
        """Pause a partition that has records waiting for room; resume it once it has none."""
        full = {p for p in self.assigned if len(self._held[p]) >= self.batch_size}
        if full - self._paused:
            self._consumer.pause([self._tp(p) for p in full - self._paused])
        drained = {p for p in self._paused if not self._held[p]}
        if drained:
            self._consumer.resume([self._tp(p) for p in drained])
        self._paused = (self._paused | full) - drained

    # -- callbacks ------------------------------------------------------------------------

    def ack(self, msg_id) -> None:
        super().ack(msg_id)
        partition, offset = msg_id
        if partition in self._buffer and not self.tracker.in_flight(partition, offset):
            self._buffer[partition].pop(offset, None)

    def _give_up(self, partition: int, offset: int, payload: bytes, error: str,
                 failures: int = 0) -> None:
        super()._give_up(partition, offset, payload, error, failures)
        self._buffer[partition].pop(offset, None)

    # -- the I/O --------------------------------------------------------------------------

    def _payload(self, partition: int, offset: int) -> bytes:
        return self._buffer[partition][offset]

    def _commit(self, offsets: Mapping[int, int]) -> None:
        self._consumer.commit(offsets=[self._tp(p, o) for p, o in offsets.items()],
                              asynchronous=False)

    def _send_dead_letter(self, record: bytes) -> None:
        """Produce to the dead-letter topic and wait for the broker's ack before the offset
        moves past the record."""
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer({"bootstrap.servers": self.brokers, **self.config})
        errors: list = []
        self._producer.produce(self.dead_letter_topic, record,
                               on_delivery=lambda err, _msg: errors.append(err))
        if self._producer.flush(TIMEOUT) or errors != [None]:
            raise RuntimeError(f"KafkaSpout({self.topic!r}): the dead-letter topic "
                               f"{self.dead_letter_topic!r} did not take a record within "
                               f"{TIMEOUT} s: {errors}")
