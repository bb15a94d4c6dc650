"""The embedded, Kestrel-style reliable queue: open / ack / abort over one sqlite file.

An item is *visible* until a consumer opens it; then it is *open* (invisible to everyone else)
until that consumer acks it (deleted) or aborts it, its open-timeout passes, or its consumer is
released (all three make it visible again, ``attempts + 1``). Visible items are opened in id order.

Durability: every call is one sqlite transaction in WAL mode, so whatever a call returned from is
on disk and survives the crash (even SIGKILL) of the calling process. With ``fsync="never"``
(``synchronous=NORMAL``) the last transactions may be lost on an OS crash or power loss; with
``fsync="always"`` (``synchronous=FULL``) they are not.

Concurrency: any number of processes and threads may share a file. Writers wait up to
``busy_timeout`` seconds for each other; `open` takes the write lock before it chooses items,
so no item is opened by two consumers at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ._log import check_topic_name

FSYNC_MODES = {"always": "FULL", "never": "NORMAL"}  # fsync= -> PRAGMA synchronous
COUNTERS = ("acked", "aborted", "timed_out", "released", "ignored_acks", "ignored_aborts")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    payload BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,  -- times opened and returned without an ack
    consumer TEXT,                        -- NULL: visible; else the consumer holding it
    deadline REAL                         -- when an open item returns by itself (NULL: never)
);
CREATE INDEX IF NOT EXISTS items_visible ON items (queue, id) WHERE consumer IS NULL;
CREATE INDEX IF NOT EXISTS items_open ON items (queue, consumer) WHERE consumer IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_deadline ON items (queue, deadline) WHERE deadline IS NOT NULL;
CREATE TABLE IF NOT EXISTS counters (
    queue TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
    PRIMARY KEY (queue, name)
);
"""
_RETURN = "UPDATE items SET consumer = NULL, deadline = NULL, attempts = attempts + 1 "


@dataclass(frozen=True, slots=True)
class QueueItem:
    """An opened item: ack or abort it by `id`. `attempts` counts earlier unacked openings."""

    id: int
    payload: bytes
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's counts. `visible` and `open` are now; the rest are since the file was made,
    summed over every process that used it."""

    visible: int = 0
    open: int = 0
    acked: int = 0
    aborted: int = 0
    timed_out: int = 0  # open items that returned because their open-timeout passed
    released: int = 0  # open items returned by `release` (or `close`)
    ignored_acks: int = 0  # acks of an id that was already acked or never existed
    ignored_aborts: int = 0  # aborts of an id that was not open


class EmbeddedQueue:
    """A reliable queue named `name` in the sqlite file `path`, shared by any processes.

    >>> import tempfile, os
    >>> q = EmbeddedQueue(os.path.join(tempfile.mkdtemp(), "q.db"), "jobs", clock=lambda: 0.0)
    >>> q.put_many([b"a", b"b"])
    [1, 2]
    >>> [item] = q.open("spout-0"); item
    QueueItem(id=1, payload=b'a', attempts=0)
    >>> q.abort(1), q.open("spout-1", max_items=5)
    (True, [QueueItem(id=1, payload=b'a', attempts=1), QueueItem(id=2, payload=b'b', attempts=0)])
    >>> q.ack(1), q.ack(1), q.statistics().ignored_acks
    (True, False, 1)
    >>> q.close()
    """

    def __init__(self, path: str | Path, name: str, *, open_timeout: float | None = 30.0,
                 busy_timeout: float = 10.0, fsync: str = "never",
                 clock: Callable[[], float] = time.time) -> None:
        check_topic_name(name)
        if open_timeout is not None and not open_timeout > 0:
            raise ValueError(f"open_timeout must be > 0 seconds or None, not {open_timeout!r}")
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {sorted(FSYNC_MODES)}, not {fsync!r}")
        self.path, self.name, self.open_timeout, self._clock = Path(path), name, open_timeout, clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._consumers: set[str] = set()  # released by close()
        self._db = _connect(self.path, busy_timeout, FSYNC_MODES[fsync])

    # -- producing -------------------------------------------------------------------------
    def put(self, payload: bytes) -> int:
        """Append one item; returns its id."""
        return self.put_many([payload])[0]

    def put_many(self, payloads: Iterable[bytes]) -> list[int]:
        """Append items in one transaction; returns their ids, in order."""
        rows = [(self.name, _bytes(p)) for p in payloads]
        with self._write() as db:
            return [db.execute("INSERT INTO items (queue, payload) VALUES (?, ?)", row).lastrowid
                    for row in rows]

    # -- consuming -------------------------------------------------------------------------
    def open(self, consumer_id: str, max_items: int = 1, *,
             now: float | None = None) -> list[QueueItem]:
        """Open up to `max_items` visible items, oldest first, for `consumer_id`.

        First returns every open item whose open-timeout passed at `now` (default: the clock).
        """
        _check_consumer(consumer_id)
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, not {max_items!r}")
        now = self._clock() if now is None else now
        deadline = None if self.open_timeout is None else now + self.open_timeout
        with self._write() as db:
            self._expire(db, now)
            rows = db.execute("SELECT id, payload, attempts FROM items WHERE queue = ? "
                              "AND consumer IS NULL ORDER BY id LIMIT ?",
                              (self.name, max_items)).fetchall()
            db.executemany("UPDATE items SET consumer = ?, deadline = ? WHERE id = ?",
                           [(consumer_id, deadline, row[0]) for row in rows])
        self._consumers.add(consumer_id)
        return [QueueItem(*row) for row in rows]

    def ack(self, item_id: int) -> bool:
        """Remove an item for good. False (and counted) if it was already acked or unknown.

        An item that timed out and is visible or reopened is still removed: it was processed.
        """
        with self._write() as db:
            done = db.execute("DELETE FROM items WHERE queue = ? AND id = ?",
                              (self.name, item_id)).rowcount == 1
            _count(db, self.name, "acked" if done else "ignored_acks", 1)
        return done

    def ack_many(self, item_ids: Iterable[int]) -> int:
        """`ack` several items in one transaction; returns how many were removed (the others,
        already acked or unknown, are counted as ignored)."""
        ids = [(self.name, i) for i in item_ids]
        with self._write() as db:
            done = sum(db.execute("DELETE FROM items WHERE queue = ? AND id = ?", row).rowcount
                       for row in ids)
            _count(db, self.name, "acked", done)
            _count(db, self.name, "ignored_acks", len(ids) - done)
        return done

    def abort(self, item_id: int) -> bool:
        """Make an open item visible again (attempts + 1). False (and counted) if it is not open."""
        with self._write() as db:
            done = db.execute(_RETURN + "WHERE queue = ? AND id = ? AND consumer IS NOT NULL",
                              (self.name, item_id)).rowcount == 1
            _count(db, self.name, "aborted" if done else "ignored_aborts", 1)
        return done

    def release(self, consumer_id: str) -> int:
        """Make every item `consumer_id` holds visible again (attempts + 1); returns how many."""
        with self._write() as db:
            n = db.execute(_RETURN + "WHERE queue = ? AND consumer = ?",
                           (self.name, consumer_id)).rowcount
            _count(db, self.name, "released", n)
        self._consumers.discard(consumer_id)
        return n

    def expire(self, now: float | None = None) -> int:
        """Return the open items whose open-timeout passed at `now`; `open` does this too."""
        with self._write() as db:
            return self._expire(db, self._clock() if now is None else now)

    # -- observing -------------------------------------------------------------------------
    def statistics(self) -> QueueStats:
        with self._read() as db:
            visible, open_ = db.execute(
                "SELECT count(*) - count(consumer), count(consumer) FROM items WHERE queue = ?",
                (self.name,)).fetchone()
            counts = dict(db.execute("SELECT name, value FROM counters WHERE queue = ?",
                                     (self.name,)))
        return QueueStats(visible, open_, **{k: counts.get(k, 0) for k in COUNTERS})

    def close(self) -> None:
        """Release what this handle's consumers still hold, then close the file. Idempotent."""
        with self._lock:
            if self._db is None:
                return
            for consumer_id in sorted(self._consumers):
                self.release(consumer_id)
            self._db.close()
            self._db = None

    def __enter__(self) -> EmbeddedQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _expire(self, db: sqlite3.Connection, now: float) -> int:
        n = db.execute(_RETURN + "WHERE queue = ? AND deadline <= ?", (self.name, now)).rowcount
        _count(db, self.name, "timed_out", n)
        return n

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken before anything is read."""
        with self._lock:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so several SELECTs see one snapshot."""
        with self._lock:
            db = self._connection()
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError(f"queue {self.name!r} in {self.path} is closed")
        return self._db


def _connect(path: Path, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; every call above runs its own BEGIN.
    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                         check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {synchronous}")
        db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
    except BaseException:
        db.close()
        raise
    return db


def _count(db: sqlite3.Connection, queue: str, name: str, n: int) -> None:
    if n:
        db.execute("INSERT INTO counters (queue, name, value) VALUES (?, ?, ?) ON CONFLICT "
                   "DO UPDATE SET value = value + excluded.value", (queue, name, n))


def _bytes(payload: bytes) -> bytes:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"a queue item is bytes, not {type(payload).__name__}; "
                        f"encode it first (e.g. json.dumps(x).encode())")
    return bytes(payload)


def _check_consumer(consumer_id: str) -> None:
    if not isinstance(consumer_id, str) or not consumer_id:
        raise ValueError(f"consumer_id must be a non-empty str, not {consumer_id!r}")
