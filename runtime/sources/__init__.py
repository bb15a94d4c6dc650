"""Sources for spouts. So far: the embedded Kafka-style log.

`EmbeddedLog` keeps topics of N partitions on local disk; each record gets a 0-based offset
that is contiguous within its partition. Load JSON lines from a shell with
``python -m runtime.sources produce TOPIC FILE.jsonl`` and look with
``python -m runtime.sources tail TOPIC``. See docs/internals/log.md.
"""

from ._errors import CorruptLogError, LogBusyError, LogError, OffsetOutOfRange, TopicError
from ._log import EmbeddedLog, default_root, partition_for

__all__ = [
    "CorruptLogError",
    "EmbeddedLog",
    "LogBusyError",
    "LogError",
    "OffsetOutOfRange",
    "TopicError",
    "default_root",
    "partition_for",
]
