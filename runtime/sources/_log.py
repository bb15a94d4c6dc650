"""The embedded, Kafka-style log: topics of partitions of offset-addressed records on local disk.

Durability: `append` returns only after its records are written to the operating system with
write(2), so an acknowledged append survives the crash (even SIGKILL) of the appending process.
With ``fsync="always"`` each `append` / `append_many` call also fsyncs before returning, which
also survives an OS crash or power loss; batch with `append_many` to pay one fsync per batch.
The default ``fsync="never"`` fsyncs only on `sync()` and `close()`.

Concurrency: one writer per topic, any number of readers. The first append to a topic takes an
exclusive ``fcntl.flock`` on ``<topic>/.writer.lock`` and holds it until `close()`; readers
take no lock and only see whole, checksummed records.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._errors import LogBusyError, OffsetOutOfRange, TopicError
from ._records import encode
from ._segments import Partition, segment_name

ROOT_ENV = "TUPLEFLOW_LOG_ROOT"  # where `default_root()` puts the log
DEFAULT_ROOT = ".tupleflow/log"  # relative to the working directory when ROOT_ENV is unset
SEGMENT_BYTES = 16 * 1024 * 1024  # a segment rolls once it is at least this big
FSYNC_MODES = ("always", "never")
TOPIC_FILE = "topic.json"
LOCK_FILE = ".writer.lock"
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def default_root() -> Path:
    """``$TUPLEFLOW_LOG_ROOT``, or ``./.tupleflow/log``."""
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def partition_for(key: Any, partitions: int) -> int:
    """The partition of a key: zlib.crc32 of its UTF-8 (str), raw (bytes) or JSON form.

    >>> partition_for("user-7", 4) == partition_for("user-7", 4), partition_for(b"", 3)
    (True, 0)
    """
    if isinstance(key, str):
        data = key.encode()
    elif isinstance(key, bytes | bytearray):
        data = bytes(key)
    else:
        data = json.dumps(key, sort_keys=True, separators=(",", ":")).encode()
    return zlib.crc32(data) % partitions


def check_topic_name(name: str) -> None:
    """Raise TopicError unless `name` is 1-200 of ``A-Z a-z 0-9 . _ -`` and not ``.``/``..``."""
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise TopicError(f"bad topic name {name!r}: use 1-200 of the characters A-Z a-z 0-9 . _ -")


class _WriterLock:
    """An exclusive flock on a topic's lock file; the holder's pid is written into it."""

    def __init__(self, path: Path) -> None:
        self.path, self.fd = path, os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def try_acquire(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return True

    def holder(self) -> str:
        with contextlib.suppress(OSError):
            return self.path.read_text().strip() or "unknown"
        return "unknown"

    def close(self) -> None:
        os.close(self.fd)  # closing the descriptor releases the flock


class _Topic:
    def __init__(self, directory: Path, partitions: int, fsync: str) -> None:
        self.directory = directory
        self.partitions = [Partition(directory / f"partition-{i}", fsync)
                           for i in range(partitions)]
        self.lock: _WriterLock | None = None
        self.round_robin = itertools.cycle(range(partitions))

    def refresh(self, repair: bool) -> None:
        for p in self.partitions:
            p.refresh(repair)

    def close(self) -> None:
        for p in self.partitions:
            p.close()
        if self.lock is not None:
            self.lock.close()
            self.lock = None


class EmbeddedLog:
    """A directory of topics; each topic has N partitions of offset-addressed byte records.

    >>> import tempfile
    >>> with EmbeddedLog(tempfile.mkdtemp()) as log:
    ...     log.create_topic("clicks", partitions=2)
    ...     log.append("clicks", b"hello", partition=1)
    ...     log.append_json("clicks", {"user": 7}, key="user-7")
    ...     log.read("clicks", 1, 0)
    (1, 0)
    (1, 1)
    [(0, b'hello'), (1, b'{"user":7}')]
    """

    def __init__(self, root: str | os.PathLike, *, segment_bytes: int = SEGMENT_BYTES,
                 fsync: str = "never", lock_timeout: float = 10.0) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {FSYNC_MODES}, not {fsync!r}")
        self.root, self.segment_bytes = Path(root), segment_bytes
        self.fsync, self.lock_timeout = fsync, lock_timeout
        self.root.mkdir(parents=True, exist_ok=True)
        self._topics: dict[str, _Topic] = {}
        self._discover()

    # -- topics -----------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic; creating it again with the same partition count does nothing."""
        check_topic_name(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise TopicError(f"topic {name!r}: partitions must be a positive int, "
                             f"not {partitions!r}")
        directory = self.root / name
        if not (directory / TOPIC_FILE).exists():
            _create_on_disk(directory, partitions)
        self._discover()
        if self.partitions(name) != partitions:
            raise TopicError(f"topic {name!r} already exists with {self.partitions(name)} "
                             f"partitions, not {partitions}")

    def topics(self) -> list[str]:
        self._discover()
        return sorted(self._topics)

    def partitions(self, topic: str) -> int:
        return len(self._topic(topic).partitions)

    def end_offset(self, topic: str, partition: int) -> int:
        """The offset the next record appended to this partition will get."""
        p = self._partition(topic, partition)
        if self._topics[topic].lock is None:
            p.refresh()
        return p.end_offset

    # -- appending --------------------------------------------------------------------------

    def append(self, topic: str, payload: bytes, partition: int | None = None,
               key: Any = None) -> tuple[int, int]:
        """Append one record; return (partition, offset) once it is written to the OS."""
        return self.append_many(topic, [payload], partition, key)[0]

    def append_many(self, topic: str, payloads: Iterable[bytes], partition: int | None = None,
                    key: Any = None) -> list[tuple[int, int]]:
        """Append records with one write (and at most one fsync) per partition touched.

        They all go to `partition`, or to the key's partition, or round-robin one by one.
        """
        t = self._writable(topic)
        blobs = [encode(_check_bytes(b)) for b in payloads]
        if partition is None and key is not None:
            partition = partition_for(key, len(t.partitions))
        if partition is not None:
            self._partition(topic, partition)
            chosen = [partition] * len(blobs)
        else:
            chosen = [next(t.round_robin) for _ in blobs]
        return self._write(t, blobs, chosen)

    def append_json(self, topic: str, obj: Any, key: Any = None,
                    partition: int | None = None) -> tuple[int, int]:
        """Append `obj` as compact UTF-8 JSON; the partition comes from `key` as in `append`."""
        return self.append(topic, _dumps(obj), partition, key)

    def sync(self) -> None:
        """fsync every partition this log has appended to."""
        for t in self._topics.values():
            for p in t.partitions:
                p.sync()

    # -- reading ----------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int,
             max_records: int = 1000) -> list[tuple[int, bytes]]:
        """Up to `max_records` (offset, payload) pairs from `offset`; [] at the end offset."""
        end = self.end_offset(topic, partition)
        if not 0 <= offset <= end:
            raise OffsetOutOfRange(f"topic {topic!r} partition {partition}: offset {offset} is "
                                   f"outside 0..{end}")
        return self._partition(topic, partition).read(offset, max_records)

    def read_json(self, topic: str, partition: int, offset: int,
                  max_records: int = 1000) -> list[tuple[int, Any]]:
        """`read`, with each payload parsed as JSON."""
        return [(o, json.loads(b)) for o, b in self.read(topic, partition, offset, max_records)]

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Sync what this log wrote, close its files and release its writer locks."""
        self.sync()
        for t in self._topics.values():
            t.close()

    def __enter__(self) -> EmbeddedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedLog({str(self.root)!r})"

    # -- internals --------------------------------------------------------------------------

    def _discover(self) -> None:
        for name in sorted(os.listdir(self.root)):
            meta = self.root / name / TOPIC_FILE
            if name not in self._topics and meta.exists():
                count = json.loads(meta.read_text())["partitions"]
                self._topics[name] = t = _Topic(self.root / name, count, self.fsync)
                self._recover_if_free(t)

    def _recover_if_free(self, t: _Topic) -> None:
        """Repair a crashed writer's torn tails now, unless a live writer holds the topic."""
        lock = _WriterLock(t.directory / LOCK_FILE)
        try:
            t.refresh(repair=lock.try_acquire())
        finally:
            lock.close()

    def _writable(self, topic: str) -> _Topic:
        t = self._topic(topic)
        if t.lock is None:
            lock = _WriterLock(t.directory / LOCK_FILE)
            deadline = time.monotonic() + self.lock_timeout
            while not lock.try_acquire():
                if time.monotonic() >= deadline:
                    holder = lock.holder()
                    lock.close()
                    raise LogBusyError(f"topic {topic!r} is being written by another writer (pid "
                                       f"{holder}); a topic has one writer at a time")
                time.sleep(0.02)
            t.lock = lock
            t.refresh(repair=True)  # the last writer may have crashed since we looked
        return t

    def _write(self, t: _Topic, blobs: list[bytes], chosen: list[int]) -> list[tuple[int, int]]:
        out: list[tuple[int, int] | None] = [None] * len(blobs)
        for p in sorted(set(chosen)):
            mine = [i for i, c in enumerate(chosen) if c == p]
            first = t.partitions[p].write([blobs[i] for i in mine], self.segment_bytes)
            for n, i in enumerate(mine):
                out[i] = (p, first + n)
        return out  # type: ignore[return-value]

    def _topic(self, topic: str) -> _Topic:
        if topic not in self._topics:
            self._discover()
        if topic not in self._topics:
            raise TopicError(f"no topic {topic!r} in {self.root}; create it with create_topic")
        return self._topics[topic]

    def _partition(self, topic: str, partition: int) -> Partition:
        parts = self._topic(topic).partitions
        if not isinstance(partition, int) or not 0 <= partition < len(parts):
            raise OffsetOutOfRange(f"topic {topic!r} has partitions 0..{len(parts) - 1}, "
                                   f"not {partition!r}")
        return parts[partition]


def _create_on_disk(directory: Path, partitions: int) -> None:
    """Make the partition directories and first segments, then publish topic.json atomically."""
    for i in range(partitions):
        (directory / f"partition-{i}").mkdir(parents=True, exist_ok=True)
        (directory / f"partition-{i}" / segment_name(0)).touch()
    tmp = directory / f".{TOPIC_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"partitions": partitions, "format": 1}))
    with contextlib.suppress(FileExistsError):  # another process created it first: compare after
        os.link(tmp, directory / TOPIC_FILE)
    tmp.unlink()


def _check_bytes(payload: Any) -> bytes:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"a payload must be bytes, not {type(payload).__name__}; "
                        "use append_json for objects")
    return bytes(payload)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
