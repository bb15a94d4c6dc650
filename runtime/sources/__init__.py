"""Sources for spouts. So far: the embedded Kafka-style log and Kestrel-style queue.

`EmbeddedLog` keeps topics of N partitions on local disk; each record gets a 0-based offset
that is contiguous within its partition. Load JSON lines from a shell with
``python -m runtime.sources produce TOPIC FILE.jsonl`` and look with
``python -m runtime.sources tail TOPIC``. See docs/internals/log.md.

`EmbeddedQueue` is a reliable queue in one sqlite file that several processes share: `open`
hides items from other consumers until `ack`; `abort`, the open-timeout and `release` return
them. See docs/internals/queue.md.
"""

from ._errors import CorruptLogError, LogBusyError, LogError, OffsetOutOfRange, TopicError
from ._log import EmbeddedLog, default_root, partition_for
from ._log_spout import LogSpout
from ._offsets import OffsetStatistics, OffsetTracker
from ._queue import EmbeddedQueue, QueueItem, QueueStats

__all__ = [
    "CorruptLogError",
    "EmbeddedLog",
    "EmbeddedQueue",
    "LogBusyError",
    "LogError",
    "LogSpout",
    "OffsetOutOfRange",
    "OffsetStatistics",
    "OffsetTracker",
    "QueueItem",
    "QueueStats",
    "TopicError",
    "default_root",
    "partition_for",
]
