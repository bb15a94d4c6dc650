"""A spout reading a topic of the embedded log, at least once, with checkpointed offsets.

Spout tasks split the topic's partitions (partition p goes to task index p % parallelism;
a rebalance moves them, see `OffsetSpout.rebalanced`).
Each tuple's ``msg_id`` is ``(partition, offset)``; acks and fails feed an `OffsetTracker`;
every ``commit_interval`` seconds, and on ``close()``, the committed offsets (the lowest
offset not yet acked, per partition) are written to ``task-<index>.json`` in the checkpoint
directory, atomically (a temporary file, then ``os.replace``). ``open()`` resumes from the
checkpoint files there, so a restarted spout re-reads at most ``max_uncommitted`` offsets
per partition and loses none.

Checkpoints are not fsync'd: a process crash keeps the last one, an OS crash may lose it,
which means more duplicates, never lost records (an unreadable checkpoint is ignored with a
warning). A record that cannot be decoded, or that failed ``max_retries`` times, is
dead-lettered (see `_offset_spout`); ``statistics().dead_lettered`` counts them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runtime.model.constants import ACKERS

from ._kafka import KafkaSpout
from ._log import EmbeddedLog, default_root
from ._offset_spout import DEFAULT_MAX_RETRIES, OffsetSpout
from ._retry import DEFAULT_RETRY_DELAY, DEFAULT_RETRY_DELAY_MAX

log = logging.getLogger("runtime.sources")

CONSUMERS_DIR = ".consumers"  # under the log root: <topology>.<component>/<topic>/task-N.json
CHECKPOINT_FORMAT = 1


class LogSpout(OffsetSpout):
    """Emits the records of an embedded-log topic, decoded, with ``msg_id=(partition, offset)``.

    With one field the tuple is ``[record]``; with several, a JSON object gives the values of
    those keys and a JSON array of the same length gives its items. ``next_tuple`` emits at
    most ``batch_size`` records (replays first) and nothing when there is nothing new.
    A record that failed ``max_retries`` times, or cannot be decoded, is appended to the
    topic ``dead_letter_topic`` (default ``<topic>.dlq``, one partition) of the same log.
    """

    kind = "LogSpout"

    def __init__(self, topic: str, root: str | os.PathLike | None = None, *,
                 fields: Sequence[str] = ("value",), decode: str = "json",
                 commit_interval: float = 1.0, max_uncommitted: int = 10_000,
                 checkpoint_dir: str | os.PathLike | None = None,
                 batch_size: int = 1000, max_retries: int | None = DEFAULT_MAX_RETRIES,
                 dead_letter_topic: str | None = None,
                 retry_delay: float = DEFAULT_RETRY_DELAY,
                 retry_delay_max: float = DEFAULT_RETRY_DELAY_MAX) -> None:
        super().__init__(topic, fields=fields, decode=decode, commit_interval=commit_interval,
                         max_uncommitted=max_uncommitted, batch_size=batch_size,
                         max_retries=max_retries, dead_letter_topic=dead_letter_topic,
                         retry_delay=retry_delay, retry_delay_max=retry_delay_max)
        self.root, self.checkpoint_dir = root, checkpoint_dir

    # -- lifetime -------------------------------------------------------------------------

    def open(self, config, context) -> None:
        self._at_most_once = config.get(ACKERS) == 0  # absent (a spout driven by hand): tracked
        self._root = Path(self.root) if self.root is not None else default_root()
        self._log = EmbeddedLog(self._root)
        self._assign(self._log.partitions(self.topic), context)
        folder = self.checkpoint_dir or self._root / CONSUMERS_DIR / (
            f"{context.topology_name}.{context.component_id}") / self.topic
        self._folder = Path(folder)
        self._file = self._folder / f"task-{context.task_index}.json"
        # partitions a rebalance gave away -> their committed offset then, kept in every
        # write of this task's file (each replaces the last): another index's file may
        # hold an older commit of such a partition (by a task removed earlier), and the
        # next owner resumes at the highest offset over all files
        self._given: dict[int, int] = {}
        self._start_offsets(self._resume_offsets(self.assigned))

    def close(self) -> None:
        self.commit()
        self._log.close()

    def _resume_offsets(self, partitions: list[int]) -> dict[int, int]:
        """The committed offset of each of ``partitions``, over every task's file (a
        partition's earlier owners' included: the highest wins)."""
        saved = read_checkpoints(self._folder, self.topic)
        return {p: self._resume_at(p, saved.get(p, 0)) for p in partitions}

    def _resume_at(self, partition: int, offset: int) -> int:
        end = self._log.end_offset(self.topic, partition)
        if offset > end:
            log.warning("topic %r partition %d: checkpoint offset %d is past the end %d of the "
                        "log; resuming at the end", self.topic, partition, offset, end)
            return end
        return offset

    # -- the I/O --------------------------------------------------------------------------

    def _fetch(self, partition: int, n: int) -> list[tuple[int, bytes]]:
        return self._log.read(self.topic, partition, self.tracker.next_offset(partition), n)

    def _payload(self, partition: int, offset: int) -> bytes:
        (_, payload), = self._log.read(self.topic, partition, offset, 1)
        return payload

    def _commit(self, offsets: Mapping[int, int]) -> None:
        write_checkpoint(self._file, self.topic, {**self._given, **offsets})

    def _release(self, partitions: list[int]) -> None:
        self._given.update((p, self.tracker.committed(p)) for p in partitions)

    def _send_dead_letter(self, record: bytes) -> None:
        """Append to the dead-letter topic with a short-lived writer: a topic has one writer
        at a time, and the spout's sibling tasks may dead-letter too."""
        with EmbeddedLog(self._root) as dlq:
            dlq.create_topic(self.dead_letter_topic, 1)
            dlq.append(self.dead_letter_topic, record)


def write_checkpoint(path: Path, topic: str, offsets: Mapping[int, int]) -> None:
    """Replace `path` atomically with the committed offsets of `topic`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    body = {"format": CHECKPOINT_FORMAT, "topic": topic,
            "committed": {str(p): o for p, o in offsets.items()}}
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def read_checkpoints(folder: Path, topic: str) -> dict[int, int]:
    """The committed offset of each partition over every ``task-*.json`` in `folder`.

    Committed offsets only move forward, so the highest one seen wins; that also carries
    them over when the spout's parallelism changes. An unreadable file is ignored (with a
    warning): resuming earlier means duplicates, never losses.
    """
    out: dict[int, int] = {}
    for path in sorted(folder.glob("task-*.json")):
        try:
            body = json.loads(path.read_text())
            if body["topic"] != topic:
                raise ValueError(f"it is for topic {body['topic']!r}")
            committed = {int(p): int(o) for p, o in body["committed"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignored the unreadable checkpoint %s: %s", path, exc)
            continue
        for p, o in committed.items():
            out[p] = max(o, out.get(p, 0))
    return out


def log_spout(topic: str, brokers: str | None = None, **options: Any) -> OffsetSpout:
    """A Kafka-style spout: the embedded log's `LogSpout` when `brokers` is None (the
    default: no server), a real Kafka's `KafkaSpout` otherwise. Switching is one argument.

    Shared options: ``fields``, ``decode``, ``commit_interval``, ``max_uncommitted``,
    ``batch_size``, ``max_retries``, ``dead_letter_topic``, ``retry_delay`` and
    ``retry_delay_max`` (a failed record's n-th replay waits ``retry_delay * 2**(n-1)``
    seconds, at most ``retry_delay_max``). Only for the embedded log:
    ``root``, ``checkpoint_dir``. Only for Kafka: ``group_id``, ``start``, ``config``.

    >>> type(log_spout("events")).__name__, type(log_spout("events", "127.0.0.1:9092")).__name__
    ('LogSpout', 'KafkaSpout')
    """
    if brokers is None:
        return LogSpout(topic, **options)
    return KafkaSpout(topic, brokers, **options)
