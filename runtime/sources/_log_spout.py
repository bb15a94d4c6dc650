"""A spout reading a topic of the embedded log, at least once, with checkpointed offsets.

Spout tasks split the topic's partitions (partition p goes to task index p % parallelism).
Each tuple's ``msg_id`` is ``(partition, offset)``; acks and fails feed an `OffsetTracker`;
every ``commit_interval`` seconds, and on ``close()``, the committed offsets (the lowest
offset not yet acked, per partition) are written to ``task-<index>.json`` in the checkpoint
directory, atomically (a temporary file, then ``os.replace``). ``open()`` resumes from the
checkpoint files there, so a restarted spout re-reads at most ``max_uncommitted`` offsets
per partition and loses none.

Checkpoints are not fsync'd: a process crash keeps the last one, an OS crash may lose it,
which means more duplicates, never lost records (an unreadable checkpoint is ignored with a
warning). A record that cannot be decoded is logged and skipped (acked) until dead-lettering
exists; `skipped` counts them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._api import Spout
from ._log import EmbeddedLog, default_root
from ._offsets import OffsetStatistics, OffsetTracker

log = logging.getLogger("runtime.sources")

DECODES = ("json", "bytes")
CONSUMERS_DIR = ".consumers"  # under the log root: <topology>.<component>/<topic>/task-N.json
CHECKPOINT_FORMAT = 1


class LogSpout(Spout):
    """Emits the records of an embedded-log topic, decoded, with ``msg_id=(partition, offset)``.

    With one field the tuple is ``[record]``; with several, a JSON object gives the values of
    those keys and a JSON array of the same length gives its items. ``next_tuple`` emits at
    most ``batch_size`` records (replays first) and nothing when there is nothing new.
    """

    def __init__(self, topic: str, root: str | os.PathLike | None = None, *,
                 fields: Sequence[str] = ("value",), decode: str = "json",
                 commit_interval: float = 1.0, max_uncommitted: int = 10_000,
                 checkpoint_dir: str | os.PathLike | None = None,
                 batch_size: int = 100) -> None:
        if decode not in DECODES:
            raise ValueError(f"LogSpout({topic!r}): decode must be one of {DECODES}, "
                             f"not {decode!r}")
        if not fields:
            raise ValueError(f"LogSpout({topic!r}): fields must name at least one field")
        if commit_interval < 0 or batch_size < 1:
            raise ValueError(f"LogSpout({topic!r}): commit_interval must be >= 0 and "
                             f"batch_size >= 1")
        OffsetTracker(max_uncommitted)  # validates it now, in the notebook cell
        self.topic, self.root, self.decode = topic, root, decode
        self.outputs = list(fields)
        self.commit_interval, self.max_uncommitted = commit_interval, max_uncommitted
        self.checkpoint_dir, self.batch_size = checkpoint_dir, batch_size

    # -- lifetime -------------------------------------------------------------------------

    def open(self, config, context) -> None:
        root = Path(self.root) if self.root is not None else default_root()
        self._log = EmbeddedLog(root)
        count = self._log.partitions(self.topic)
        self.assigned = [p for p in range(count) if p % context.parallelism == context.task_index]
        folder = self.checkpoint_dir or root / CONSUMERS_DIR / (
            f"{context.topology_name}.{context.component_id}") / self.topic
        self._folder = Path(folder)
        self._file = self._folder / f"task-{context.task_index}.json"
        self.tracker = OffsetTracker(self.max_uncommitted)
        saved = read_checkpoints(self._folder, self.topic)
        for p in self.assigned:
            self.tracker.assign(p, self._resume_at(p, saved.get(p, 0)))
        self._saved = self.tracker.committed_offsets()
        self._last_commit = time.monotonic()
        self._turn = 0
        self.skipped = 0

    def close(self) -> None:
        self.commit()
        self._log.close()

    def _resume_at(self, partition: int, offset: int) -> int:
        end = self._log.end_offset(self.topic, partition)
        if offset > end:
            log.warning("topic %r partition %d: checkpoint offset %d is past the end %d of the "
                        "log; resuming at the end", self.topic, partition, offset, end)
            return end
        return offset

    # -- reading --------------------------------------------------------------------------

    def next_tuple(self) -> None:
        budget, parts = self.batch_size, self.assigned
        self._turn += 1
        order = [parts[(self._turn + i) % len(parts)] for i in range(len(parts))]
        for p in order:
            budget -= self._replay(p, budget)
        for p in order:
            budget -= self._read(p, budget)
        self._maybe_commit()

    def _replay(self, partition: int, budget: int) -> int:
        offsets = self.tracker.replays(partition, budget)
        for offset in offsets:
            (_, payload), = self._log.read(self.topic, partition, offset, 1)
            self._emit_record(partition, offset, payload)
        return len(offsets)

    def _read(self, partition: int, budget: int) -> int:
        n = min(budget, self.tracker.room(partition))
        if n <= 0:
            return 0
        records = self._log.read(self.topic, partition, self.tracker.next_offset(partition), n)
        for offset, payload in records:
            self.tracker.emitted(partition, offset)
            self._emit_record(partition, offset, payload)
        return len(records)

    def _emit_record(self, partition: int, offset: int, payload: bytes) -> None:
        try:
            values = self._values(payload)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("topic %r partition %d offset %d: skipped a record that cannot be "
                        "decoded: %s", self.topic, partition, offset, exc)
            self.skipped += 1
            self.tracker.ack(partition, offset)
            return
        self.emit(values, msg_id=(partition, offset))

    def _values(self, payload: bytes) -> list:
        record: Any = json.loads(payload) if self.decode == "json" else payload
        fields = self.outputs
        if len(fields) == 1:
            return [record]
        if isinstance(record, Mapping):
            return [record[f] for f in fields]
        if isinstance(record, list) and len(record) == len(fields):
            return record
        raise TypeError(f"a record for fields {fields} must be a JSON object or an array of "
                        f"{len(fields)} items, not {type(record).__name__}")

    # -- callbacks ------------------------------------------------------------------------

    def ack(self, msg_id) -> None:
        partition, offset = msg_id
        self.tracker.ack(partition, offset)
        self._maybe_commit()

    def fail(self, msg_id) -> None:
        partition, offset = msg_id
        self.tracker.fail(partition, offset)

    def progress(self) -> int:
        """Offsets committed since open: what the max-spout-pending tuner follows."""
        return self.tracker.progress()

    def statistics(self) -> OffsetStatistics:
        return self.tracker.statistics()

    # -- checkpoints ----------------------------------------------------------------------

    def _maybe_commit(self) -> None:
        if time.monotonic() - self._last_commit >= self.commit_interval:
            self.commit()

    def commit(self) -> None:
        """Write the committed offsets now, if they moved since the last write."""
        self._last_commit = time.monotonic()
        offsets = self.tracker.committed_offsets()
        if offsets != self._saved:
            write_checkpoint(self._file, self.topic, offsets)
            self._saved = offsets


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
