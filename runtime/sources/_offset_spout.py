"""What the Kafka-style spouts share: decoding, ack/fail bookkeeping, retries, dead letters.

`LogSpout` (the embedded log) and `KafkaSpout` (a real Kafka) subclass `OffsetSpout` and
supply only the I/O: how to read a partition, how to get a record back for a replay, where
to commit, and where a dead letter goes. The offset arithmetic is the pure `OffsetTracker`.

Poison messages: Storm's ``fail(msg_id)`` carries no reason (an explicit fail by a bolt
and a message timeout look the same), so the "last error" of a message that failed
``max_retries`` times is ``"failed N times (a bolt failed it or it timed out)"``. A record
that cannot be decoded is dead-lettered at once with the decoder's error. Either way the
offset counts as done, so the committed offset moves past it. Before that, the n-th failure
of a record waits ``retry_delay * 2**(n-1)`` seconds (at most ``retry_delay_max``) before
its replay (``_retry.py``).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.model.api import Spout

from ._offsets import OffsetStatistics, OffsetTracker, task_partitions
from ._retry import Backoff, backoff_problem

log = logging.getLogger("runtime.sources")

DECODES = ("json", "bytes")
DEFAULT_MAX_RETRIES = 5  # no source retries forever unless asked (max_retries=None)
DLQ_SUFFIX = ".dlq"  # the default dead-letter topic/queue is <topic>.dlq
_JSON = json.JSONDecoder()


def _loads(text: str, scan=_JSON.scan_once, decode=_JSON.decode) -> Any:
    """`json.loads` for one record, about 3x faster: the C scanner alone when the text is
    exactly one JSON value (a log's compact records), else the full decoder, which allows
    surrounding whitespace and raises ValueError saying what is wrong.

    >>> _loads('"word"'), _loads(' [1, 2] ')
    ('word', [1, 2])
    """
    try:
        value, end = scan(text, 0)
    except StopIteration:
        return decode(text)
    return value if end == len(text) else decode(text)


class DecodeError(ValueError):
    """A record that cannot become a tuple: bad JSON, or the wrong shape for the fields."""


def check_options(kind: str, name: str, fields: Sequence[str], decode: str,
                  max_retries: int | None, batch_size: int = 1) -> None:
    """Reject bad spout options when the spout is defined, naming the spout and the option."""
    if decode not in DECODES:
        raise ValueError(f"{kind}({name!r}): decode must be one of {DECODES}, not {decode!r}")
    if not fields:
        raise ValueError(f"{kind}({name!r}): fields must name at least one field")
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 1):
        raise ValueError(f"{kind}({name!r}): max_retries must be a positive int or None "
                         f"(retry for ever), not {max_retries!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{kind}({name!r}): batch_size must be a positive int, "
                         f"not {batch_size!r}")


def retry_backoff(kind: str, name: str, retry_delay: float, retry_delay_max: float) -> Backoff:
    """The spout's `Backoff`, or a ValueError naming the spout (at definition)."""
    problem = backoff_problem(retry_delay, retry_delay_max)
    if problem:
        raise ValueError(f"{kind}({name!r}): {problem}")
    return Backoff(retry_delay, retry_delay_max)


def decode_values(payload: bytes, decode: str, fields: Sequence[str]) -> list:
    """The tuple values of one record; DecodeError saying why when it has none.

    With one field the tuple is ``[record]``; with several, a JSON object gives the values of
    those keys and a JSON array of the same length gives its items.
    """
    try:
        record: Any = json.loads(payload) if decode == "json" else payload
    except ValueError as exc:
        raise DecodeError(f"invalid JSON: {exc}") from None
    if len(fields) == 1:
        return [record]
    if isinstance(record, Mapping):
        missing = [f for f in fields if f not in record]
        if missing:
            raise DecodeError(f"the JSON object has no key {missing[0]!r} for fields "
                              f"{list(fields)}")
        return [record[f] for f in fields]
    if isinstance(record, list) and len(record) == len(fields):
        return record
    raise DecodeError(f"a record for fields {list(fields)} must be a JSON object or an array "
                      f"of {len(fields)} items, not {type(record).__name__}")


def dead_letter(source: str, where: Mapping[str, Any], payload: bytes, error: str,
                failures: int) -> bytes:
    """The dead-letter record: compact JSON naming the source, the position, the error and
    the original payload (as text when it is UTF-8, else base64 in ``payload_b64``).

    >>> json.loads(dead_letter("events", {"partition": 0, "offset": 7}, b"x{", "bad", 0))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'source': 'events', 'partition': 0, 'offset': 7, 'error': 'bad', 'failures': 0,
     'payload': 'x{'}
    """
    body: dict[str, Any] = {"source": source, **where, "error": error, "failures": failures}
    try:
        body["payload"] = bytes(payload).decode()
    except UnicodeDecodeError:
        body["payload_b64"] = base64.b64encode(payload).decode()
    return json.dumps(body, separators=(",", ":")).encode()


def failed_error(failures: int) -> str:
    return f"failed {failures} times (a bolt failed it or it timed out)"


class OffsetSpout(Spout):
    """The shared half of a Kafka-style spout; subclasses do the I/O.

    Subclasses call ``_assign(count, context)`` and ``_start_offsets`` in ``open``, and
    implement ``_fetch(partition, n)`` -> [(offset, payload)], ``_payload(partition,
    offset)``, ``_commit(offsets)``, ``_send_dead_letter(record)`` and, for a rebalance,
    ``_resume_offsets(partitions)`` (the committed offsets now), ``_release(partitions)``
    and ``_acquire(offsets)``.

    A rebalance (``rebalanced``, while the spouts are paused) gives each task the
    partitions of its new (index, parallelism): a task commits what it acked and forgets
    the partitions it loses (their tuples in flight are replayed by the new owner, which
    resumes at the committed offset); the partitions it gains it takes at its next
    ``next_tuple``, after the resume, when every previous owner has committed.
    """

    kind = "OffsetSpout"
    _at_most_once = False  # ackers=0: subclasses that read in `_read` set it in open()
    resizable = True  # a rebalance moves partitions between the tasks (``rebalanced``)
    _taking: Sequence[int] = ()  # gained in a rebalance, taken at the next next_tuple

    def __init__(self, topic: str, *, fields: Sequence[str], decode: str,
                 commit_interval: float, max_uncommitted: int, batch_size: int,
                 max_retries: int | None, dead_letter_topic: str | None,
                 retry_delay: float, retry_delay_max: float) -> None:
        check_options(self.kind, topic, fields, decode, max_retries, batch_size)
        self.backoff = retry_backoff(self.kind, topic, retry_delay, retry_delay_max)
        self.clock = time.monotonic  # seconds; the retry times are on it (a test sets it)
        if commit_interval < 0:
            raise ValueError(f"{self.kind}({topic!r}): commit_interval must be >= 0")
        OffsetTracker(max_uncommitted)  # validates it now, in the notebook cell
        self.topic, self.decode, self.outputs = topic, decode, list(fields)
        self.commit_interval, self.max_uncommitted = commit_interval, max_uncommitted
        self.batch_size, self.max_retries = batch_size, max_retries
        self.dead_letter_topic = dead_letter_topic or topic + DLQ_SUFFIX

    def _assign(self, count: int, context) -> None:
        """The partitions of this task, of a topic of ``count``: ``task_partitions``."""
        self._count = count
        self.assigned = task_partitions(count, context.task_index, context.parallelism)
        self._taking = ()

    def _start_offsets(self, committed: Mapping[int, int]) -> None:
        self.tracker = OffsetTracker(self.max_uncommitted)
        for p in self.assigned:
            self.tracker.assign(p, committed[p])
        self._saved = self.tracker.committed_offsets()
        self._last_commit = time.monotonic()
        self._turn = 0

    # -- reading --------------------------------------------------------------------------

    def next_tuple(self) -> None:
        """Replays first, then new records, at most ``batch_size``, partitions in turn."""
        if self._taking:
            self._take()
        budget, parts = self.batch_size, self.assigned
        if not parts:
            return
        self._turn += 1
        order = [parts[(self._turn + i) % len(parts)] for i in range(len(parts))]
        now = self.clock()
        for p in order:
            for offset in self.tracker.replays(p, budget, now):
                self._emit_record(p, offset, self._payload(p, offset))
                budget -= 1
        for p in order:
            n = min(budget, self._room(p))
            if n > 0:
                budget -= self._read(p, n)
        self._maybe_commit()

    def _room(self, partition: int) -> int:
        """New offsets `partition` may read: the window counts from the last *stored* commit,
        so a crash re-reads at most ``max_uncommitted`` offsets. A full window whose acks
        have moved on by a quarter of it is committed now rather than at the next interval."""
        def room() -> int:
            stored = self._saved.get(partition, 0)
            return min(self.tracker.room(partition), self.max_uncommitted
                       - (self.tracker.next_offset(partition) - stored))
        moved = self.tracker.committed(partition) - self._saved.get(partition, 0)
        if room() <= 0 and moved >= max(1, self.max_uncommitted // 4):  # not a write per ack
            self.commit()
        return room()

    def _read(self, partition: int, n: int) -> int:
        """Read up to `n` new records; `_fetch` returns contiguous offsets from the next one."""
        records = self._fetch(partition, n)
        if records:
            first, count = records[0][0], len(records)
            self.tracker.emitted_many(partition, first, count)
            if self._at_most_once:
                self._emit_records(partition, records, tracked=False)
                self.tracker.ack_many(partition, first, count)
            else:
                self._emit_records(partition, records)
        return len(records)

    def _emit_records(self, partition: int, records: list[tuple[int, bytes]],
                      tracked: bool = True) -> None:
        """The hot loop. One JSON field, the common case, skips `decode_values`' checks.
        At most once (``tracked=False``) every tuple would be acked the moment it is
        emitted: they go out with no msg_id and the caller counts the batch acked at once,
        which saves a callback per tuple."""
        if self.decode != "json" or len(self.outputs) != 1:
            for offset, payload in records:
                self._emit_record(partition, offset, payload, tracked)
            return
        emit, parse = self.emit, _loads
        for offset, payload in records:
            try:
                record = parse(payload.decode())
            except ValueError:  # UnicodeDecodeError and JSONDecodeError included
                self._emit_record(partition, offset, payload, tracked)  # dead-letters it
                continue
            emit([record], msg_id=(partition, offset) if tracked else None)

    def _emit_record(self, partition: int, offset: int, payload: bytes,
                     tracked: bool = True) -> None:
        try:
            values = decode_values(payload, self.decode, self.outputs)
        except DecodeError as exc:
            self._give_up(partition, offset, payload, f"cannot decode: {exc}")
            return
        self.emit(values, msg_id=(partition, offset) if tracked else None)

    # -- callbacks ------------------------------------------------------------------------

    def ack(self, msg_id) -> None:
        partition, offset = msg_id
        self.tracker.ack(partition, offset)
        self._maybe_commit()

    def fail(self, msg_id) -> None:
        """Replay the offset, or dead-letter it once it has failed ``max_retries`` times."""
        partition, offset = msg_id
        if not self.tracker.in_flight(partition, offset):
            self.tracker.fail(partition, offset)  # counted as an ignored fail
            return
        failures = self.tracker.failures(partition, offset) + 1
        if self.max_retries is None or failures < self.max_retries:
            delay = self.backoff.delay(failures)  # none: due now, and lowest first
            retry_at = self.clock() + delay if delay > 0 else 0.0
            self.tracker.fail(partition, offset, retry_at)
        else:
            self._give_up(partition, offset, self._payload(partition, offset),
                          failed_error(failures), failures)

    # -- dead letters ---------------------------------------------------------------------

    def _give_up(self, partition: int, offset: int, payload: bytes, error: str,
                 failures: int = 0) -> None:
        """Dead-letter one in-flight offset, then count it done (never the other way round:
        a crash in between re-reads it, it is not lost)."""
        log.warning("%s %r partition %d offset %d dead-lettered to %r: %s", self.kind,
                    self.topic, partition, offset, self.dead_letter_topic, error)
        record = dead_letter(self.topic, {"partition": partition, "offset": offset}, payload,
                             error, failures)
        self._send_dead_letter(record)
        self.tracker.drop(partition, offset)

    # -- progress and commits -------------------------------------------------------------

    def progress(self) -> int:
        """Offsets committed since open: what the max-spout-pending tuner follows."""
        return self.tracker.progress()

    def statistics(self) -> OffsetStatistics:
        return self.tracker.statistics()

    def _maybe_commit(self) -> None:
        if time.monotonic() - self._last_commit >= self.commit_interval:
            self.commit()

    def commit(self) -> None:
        """Commit the committed offsets now, if they moved since the last commit."""
        self._last_commit = time.monotonic()
        offsets = self.tracker.committed_offsets()
        if offsets != self._saved:
            self._commit(offsets)
            self._saved = offsets

    # -- rebalance (docs/internals/rebalance.md) -------------------------------------------

    def rebalanced(self, context, fresh: bool) -> None:
        """The spouts are paused and the topology switched to a new plan: keep the
        partitions this task still owns, commit what was acked and give up the others
        (every one when ``context`` is None: this task was removed), and take the gained
        ones at the next ``next_tuple``. A ``fresh`` instance opened on the new plan
        while the previous owners still read: it takes all of its partitions again."""
        owned = [] if context is None else task_partitions(
            self._count, context.task_index, context.parallelism)
        lost = [p for p in self.assigned if fresh or p not in owned]
        self.commit()  # the new owners resume at what this task acked
        self._release(lost)
        for p in lost:
            self.tracker.unassign(p)
        self.assigned = [p for p in self.assigned if p not in lost]
        self._saved = {p: o for p, o in self._saved.items() if p in self.assigned}
        self._taking = [p for p in owned if p not in self.assigned]
        if lost or self._taking:
            log.info("%s %r: rebalanced: gives up partitions %s, takes %s", self.kind,
                     self.topic, lost, self._taking)

    def _take(self) -> None:
        """Take the partitions gained in a rebalance at their committed offsets (read
        now: their previous owners committed before the spouts resumed), and commit them
        at once, so that this task's commit names them from now on."""
        offsets = self._resume_offsets(self._taking)
        for p in self._taking:
            self.tracker.assign(p, offsets[p])
        self.assigned = sorted([*self.assigned, *self._taking])
        self._taking = ()
        self._acquire(offsets)
        self._saved = self.tracker.committed_offsets()
        self._commit(self._saved)

    # -- checkpoints (submit(checkpoint_interval=...): runtime/state/) ---------------------

    def checkpoint_position(self) -> dict[int, int]:
        """The next offset to read, per assigned partition: everything before it has been
        emitted (the checkpoint's barrier follows it)."""
        return {p: self.tracker.next_offset(p) for p in self.assigned}

    def restore_position(self, position) -> None:
        """Rewind to a checkpoint's position: reading starts again there, nothing is in
        flight any more."""
        saved = {int(p): int(o) for p, o in (position or {}).items()}
        self.assigned, self._taking = sorted([*self.assigned, *self._taking]), ()
        self._start_offsets({p: saved.get(p, 0) for p in self.assigned})
        self._rewound()

    def _rewound(self) -> None:
        """A subclass that reads ahead drops what it read (the log reads by offset)."""

    # -- the I/O a subclass supplies ------------------------------------------------------

    def _fetch(self, partition: int, n: int) -> list[tuple[int, bytes]]:
        raise NotImplementedError

    def _payload(self, partition: int, offset: int) -> bytes:
        raise NotImplementedError

    def _commit(self, offsets: Mapping[int, int]) -> None:
        raise NotImplementedError

    def _send_dead_letter(self, record: bytes) -> None:
        raise NotImplementedError

    def _resume_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Where each of ``partitions`` resumes: its committed offset now."""
        raise NotImplementedError

    def _release(self, partitions: list[int]) -> None:
        """Stop reading ``partitions`` (another task owns them now)."""

    def _acquire(self, offsets: Mapping[int, int]) -> None:
        """Start reading new partitions at these offsets (already tracked)."""
