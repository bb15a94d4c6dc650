"""A transactional batch spout over a real Kafka topic (confluent-kafka).

Batch N is ``[partition, start, end)`` for every partition, planned from the broker's
watermarks and recorded in the ledger before it is first emitted; a replay (by this
process or a restarted one) assigns the same ranges and reads the same records again.
Kafka's offsets have gaps (transaction markers, compaction), so a range holds the records
whose offsets fall in it, not ``end - start`` of them: a partition's read is finished at
the first record at or past ``end - 1`` or at the partition's end (``enable.partition.eof``)
at or past ``end``.

The ledger, not the consumer group, is the truth. The group (``tupleflow.<topology>.
<component>`` unless given) also gets each completed batch's end offsets, committed without
waiting, so Kafka's own tools show the aggregation's lag.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from runtime.sources._kafka import TIMEOUT, partition_count

from ._spout import PartitionedBatchSpout

log = logging.getLogger("tupleflow.trident")

POLL = 0.2  # seconds one consume() call waits while a batch's ranges are read
# How long the broker may hold a fetch at a partition's end (librdkafka's default, 500 ms,
# made each batch read that reached an end wait that long: 0.17 of the log's rate at 100
# sentences a batch; see docs/internals/trident.md).
FETCH_WAIT_MS = 10


class KafkaBatchSpout(PartitionedBatchSpout):
    """Batches of a Kafka topic, for ``Topology.persistent_aggregate`` (see the module
    docstring). ``brokers`` is ``bootstrap.servers``; ``config`` adds librdkafka settings.

    ``read_timeout`` (s): how long reading a recorded range may take before the spout gives
    up (it raises, restarts and replays the batch). ``poll_interval`` (s): after finding
    nothing new, how long before the watermarks are asked for again.

    The ledger defaults to ``<log root>/.transactional/<topology>.<component>.kafka.<topic>.
    <brokers digest>.sqlite`` (the log root is ``runtime.sources.default_root()``): it
    outlives the run, as the state does; pass ``ledger=`` to put it elsewhere.
    """

    read_in_driver = True  # workbench.reconcile: no Spark Kafka connector here (a Maven jar)

    def __init__(self, topic: str, brokers: str, *, fields=("value",), batch_size: int = 1000,
                 decode: str = "json", group_id: str | None = None,
                 config: Mapping[str, Any] | None = None, read_timeout: float = 30.0,
                 poll_interval: float = 0.1, **options: Any) -> None:
        super().__init__(topic, fields=fields, batch_size=batch_size, decode=decode, **options)
        if not isinstance(brokers, str) or not brokers:
            raise ValueError(f"KafkaBatchSpout({topic!r}): brokers must be 'host:port[,...]', "
                             f"not {brokers!r}")
        for name, value in (("read_timeout", read_timeout), ("poll_interval", poll_interval)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"KafkaBatchSpout({topic!r}): {name} must be a number of "
                                 f"seconds > 0, not {value!r}")
        self.brokers, self.group_id, self.config = brokers, group_id, dict(config or {})
        self.read_timeout, self.poll_interval = float(read_timeout), float(poll_interval)

    def default_ledger(self, context) -> str:
        from runtime.sources import default_root

        digest = hashlib.sha1(self.brokers.encode()).hexdigest()[:8]  # noqa: S324 (a name)
        name = f"{context.topology_name}.{context.component_id}.kafka.{self.topic}.{digest}"
        return os.fspath(default_root() / ".transactional" / f"{name}.sqlite")

    # -- lifetime -----------------------------------------------------------------------
    def open(self, config, context) -> None:
        self.group = self.group_id or f"tupleflow.{context.topology_name}.{context.component_id}"
        self._consumer, self._quiet_until = None, 0.0
        self._open_reader()
        self._partition_count()  # a missing topic is a clear error now, not a silent wait
        super().open(config, context)

    def close(self) -> None:
        super().close()
        self.close_reader()

    def _open_reader(self) -> None:
        """The consumer, made once (by the spout, or for reading outside a topology). It
        is only ever assigned ranges: no subscription, so no rebalance."""
        if getattr(self, "_consumer", None) is None:
            from confluent_kafka import Consumer  # here: defining a spout starts nothing

            self._consumer = Consumer({
                "bootstrap.servers": self.brokers,
                "group.id": getattr(self, "group", None) or self.group_id or "tupleflow.batch",
                "enable.auto.commit": False, "enable.partition.eof": True,
                "auto.offset.reset": "earliest", "fetch.wait.max.ms": FETCH_WAIT_MS,
                **self.config})

    def close_reader(self) -> None:
        if getattr(self, "_consumer", None) is not None:
            self._consumer.close()
            self._consumer = None

    # -- planning -----------------------------------------------------------------------
    def plan_batch(self, after):
        """The next batch, or None; after a None the broker is not asked again for
        ``poll_interval`` seconds (``next_tuple`` is called in a tight loop)."""
        now = time.monotonic()
        if now < self._quiet_until:
            return None
        meta = super().plan_batch(after)
        if meta is None:
            self._quiet_until = now + self.poll_interval
        return meta

    def _bounds(self):
        """``{partition: (low, high)}`` watermarks, asked of the broker (not cached)."""
        return {p: self._consumer.get_watermark_offsets(self._tp(p), timeout=TIMEOUT,
                                                        cached=False)
                for p in range(self._partition_count())}

    def _partition_count(self) -> int:
        return partition_count(self._consumer, self.topic, self.brokers, "KafkaBatchSpout")

    def _tp(self, partition: int, offset: int | None = None):
        from confluent_kafka import TopicPartition

        if offset is None:
            return TopicPartition(self.topic, partition)
        return TopicPartition(self.topic, partition, offset)

    # -- reading ------------------------------------------------------------------------
    def _records(self, ranges):
        """Every record of ``ranges`` (``(p, start, end)``, end > start), partition by
        partition in offset order; RuntimeError if the broker does not give them all
        within ``read_timeout``."""
        if not ranges:
            return []
        reading = _RangeRead({p: (start, end) for p, start, end in ranges})
        self._consumer.assign([self._tp(p, start) for p, start, _ in ranges])
        try:
            deadline = time.monotonic() + self.read_timeout
            while reading.open and time.monotonic() < deadline:
                for msg in self._consumer.consume(num_messages=1000, timeout=POLL):
                    reading.take(msg, self.topic)
        finally:
            self._consumer.unassign()
        if reading.open:
            short = ", ".join(f"partition {p} [{reading.ranges[p][0]}, {reading.ranges[p][1]})"
                              for p in sorted(reading.open))
            raise RuntimeError(f"KafkaBatchSpout({self.topic!r}): {short}, recorded for a "
                               f"batch, not read in full within {self.read_timeout} s")
        return reading.records()

    # -- completion ---------------------------------------------------------------------
    def _completed(self, batch) -> None:
        super()._completed(batch)
        from confluent_kafka import KafkaException

        try:  # only for Kafka's lag tools: not waited for, and a failure changes nothing
            self._consumer.commit(offsets=[self._tp(p, end) for p, _s, end in batch.meta],
                                  asynchronous=True)
        except KafkaException as exc:
            log.info("KafkaBatchSpout(%r): could not commit the group's offsets: %s",
                     self.topic, exc)


class _RangeRead:
    """The records of a batch's ranges as the consumer hands them over: which partitions
    are not finished yet, and what each has given (by offset, so a re-fetch is harmless)."""

    def __init__(self, ranges: dict[int, tuple[int, int]]) -> None:
        self.ranges = ranges
        self.open = set(ranges)
        self.got: dict[int, dict[int, bytes]] = {p: {} for p in ranges}

    def take(self, msg, topic: str) -> None:
        p, offset, error = msg.partition(), msg.offset(), msg.error()
        if p not in self.open:
            return
        start, end = self.ranges[p]
        if error is not None:
            self._error(p, offset, end, error, topic)
        elif start <= offset < end:
            self.got[p][offset] = msg.value() or b""
        if error is None and offset >= end - 1:
            self.open.discard(p)

    def _error(self, p: int, offset: int, end: int, error, topic: str) -> None:
        from confluent_kafka import KafkaError

        if error.code() == KafkaError._PARTITION_EOF:
            if offset >= end:  # the partition's end is past the range: nothing more in it
                self.open.discard(p)
            return
        log.warning("KafkaBatchSpout(%r): partition %d: %s", topic, p, error)

    def records(self) -> list[tuple[int, int, bytes]]:
        return [(p, o, self.got[p][o]) for p in sorted(self.got) for o in sorted(self.got[p])]
