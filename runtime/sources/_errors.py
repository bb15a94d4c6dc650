"""The errors of the embedded log."""

from __future__ import annotations

from pathlib import Path


class LogError(Exception):
    """Something is wrong with an embedded log or with how it was called."""


class TopicError(LogError, ValueError):
    """A bad topic name, an unknown topic, or a partition count that disagrees with the disk."""


class OffsetOutOfRange(LogError, IndexError):
    """A read below 0 or past a partition's end offset, or a partition that does not exist."""


class LogBusyError(LogError):
    """Another process (or another EmbeddedLog) holds the topic's writer lock."""


class CorruptLogError(LogError):
    """Damage that a crash cannot explain: in the middle of a segment, or in a sealed one."""

    def __init__(self, path: Path, offset: int, position: int, what: str) -> None:
        self.path, self.offset, self.position = path, offset, position
        super().__init__(f"corrupt log segment {path}: {what} at offset {offset} "
                         f"(byte position {position}); records from there on cannot be read")
