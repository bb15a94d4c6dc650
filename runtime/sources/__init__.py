"""Sources for spouts: the embedded Kafka-style log and Kestrel-style queue, their spouts
(`LogSpout`, `QueueSpout`), a real Kafka's `KafkaSpout` and Redis's `RedisQueueSpout`;
`log_spout(topic, brokers=None)` and `queue_spout(name, redis_url=None)` pick the embedded
source or the real broker by one argument. Event generators for the
tutorials are in `runtime.sources.generators`.

`EmbeddedLog` keeps topics of N partitions on local disk; each record gets a 0-based offset
that is contiguous within its partition. Load JSON lines from a shell with
``python -m runtime.sources produce TOPIC FILE.jsonl`` and look with
``python -m runtime.sources tail TOPIC``. See docs/internals/log.md.

`EmbeddedQueue` is a reliable queue in one sqlite file that several processes share: `open`
hides items from other consumers until `ack`; `abort`, the open-timeout and `release` return
them. See docs/internals/queue.md.
"""

from ._errors import CorruptLogError, LogBusyError, LogError, OffsetOutOfRange, TopicError
from ._kafka import KafkaSpout
from ._log import EmbeddedLog, default_root, partition_for
from ._log_spout import LogSpout, log_spout
from ._offsets import OffsetStatistics, OffsetTracker
from ._queue import EmbeddedQueue, QueueItem, QueueStats
from ._queue_spout import QueueSpout, queue_spout
from ._retry import Backoff, ReplaySchedule
from .generators import client_events, load_client_events, load_presence, presence_events

__all__ = [
    "Backoff",
    "CorruptLogError",
    "EmbeddedLog",
    "EmbeddedQueue",
    "KafkaSpout",
    "LogBusyError",
    "LogError",
    "LogSpout",
    "OffsetOutOfRange",
    "OffsetStatistics",
    "OffsetTracker",
    "QueueItem",
    "QueueSpout",
    "QueueStats",
    "RedisQueue",
    "RedisQueueSpout",
    "ReplaySchedule",
    "TopicError",
    "client_events",
    "default_root",
    "load_client_events",
    "load_presence",
    "log_spout",
    "partition_for",
    "presence_events",
    "queue_spout",
]

# name -> its module, imported (with redis-py) on first use
_LAZY = {"RedisQueue": "_redis", "RedisQueueSpout": "_redis_spout"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
