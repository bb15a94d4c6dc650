"""Backing maps for Trident-style persistent state: ``multi_get(keys)`` and
``multi_put(keys, values)``, each called once per batch by a persistent aggregation.

A key is a tuple of the group-by values; a stored value is a :class:`TxValue`, the
aggregate together with the transaction id of the batch that last wrote it (Trident's
transactional state): a replayed batch finds its own txid stored and is not applied again.
Keys and values are stored as JSON, so they must be JSON values (what a tuple carries,
less bytes).

Three maps: :class:`MemoryMap` (one process; the in-memory test tier), :class:`SQLiteMap`
(the embedded default: one transaction per ``multi_put``, safe for several processes) and
:class:`RedisMap` (one hash; ``HMGET`` / ``HSET`` are single atomic commands). Each opens
its connection lazily, in the process that uses it, and leaves it out when pickled, so a
map can be given to a topology and queried from the notebook with ``query``/``snapshot``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class TxValue(NamedTuple):
    """A stored aggregate and the txid of the batch that wrote it."""

    txid: int
    value: Any


@dataclass(frozen=True)
class MapStatistics:
    """What one map object (in one process) was asked: calls and keys, and how many
    ``multi_put`` calls each txid got (1 each, unless a batch was applied twice)."""

    multi_gets: int
    multi_puts: int
    keys_read: int
    keys_written: int
    puts_by_txid: dict = field(default_factory=dict)


class BackingMap:
    """The interface a persistent aggregation needs, with call counting shared by all maps.

    Subclasses implement ``_get(encoded keys) -> list[str | None]``, ``_put(encoded keys,
    encoded values)`` and ``_items() -> iterable of (encoded key, encoded value)``.
    """

    def __init__(self) -> None:
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._gets = self._puts = self._keys_read = self._keys_written = 0
        self._by_txid: Counter = Counter()

    def multi_get(self, keys: Sequence[tuple]) -> list[TxValue | None]:
        """The stored value of each key, None where there is none (same order, same length)."""
        self._gets += 1
        self._keys_read += len(keys)
        return [None if raw is None else _decode_value(raw)
                for raw in self._get([encode_key(k) for k in keys])]

    def multi_put(self, keys: Sequence[tuple], values: Sequence[TxValue]) -> None:
        """Store every pair at once: all of them or none (a crash leaves the old values)."""
        if len(keys) != len(values):
            raise ValueError(f"{type(self).__name__}.multi_put: {len(keys)} keys but "
                             f"{len(values)} values")
        self._puts += 1
        self._keys_written += len(keys)
        for txid in {v.txid for v in values}:
            self._by_txid[txid] += 1
        self._put([encode_key(k) for k in keys], [_encode_value(v) for v in values])

    def statistics(self) -> MapStatistics:
        return MapStatistics(self._gets, self._puts, self._keys_read, self._keys_written,
                             dict(self._by_txid))

    # -- reading, for notebooks ----------------------------------------------------------
    def query(self, keys: Sequence[Any]) -> list[Any]:
        """The current aggregates of ``keys`` (None where absent). A key is the group-by
        value, or a tuple of them for several group-by fields."""
        keys = [freeze(_as_key(k)) for k in keys]
        return [None if raw is None else _decode_value(raw).value
                for raw in self._get([encode_key(k) for k in keys])]

    def snapshot(self) -> dict:
        """Every key and its aggregate; a one-field key is given as its value alone."""
        out = {}
        for raw_key, raw_value in self._items():
            key = decode_key(raw_key)
            out[key[0] if len(key) == 1 else key] = _decode_value(raw_value).value
        return out

    def transactions(self) -> dict:
        """Every key and the txid that last wrote it (to see replays being skipped)."""
        return {decode_key(k): _decode_value(v).txid for k, v in self._items()}

    # -- pickling: the connection stays behind ------------------------------------------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in self._transient:
            state[name] = None
        return state

    _transient: tuple[str, ...] = ()


def encode_key(key: tuple) -> str:
    return json.dumps(list(key), separators=(",", ":"))


def decode_key(raw: str) -> tuple:
    return tuple(freeze(v) for v in json.loads(raw))


def freeze(value: Any) -> Any:
    """A hashable form of a key value: lists become tuples and dicts tuples of sorted
    items, at any depth (a list travels in a tuple, and comes out of JSON, as a list).

    >>> freeze(["room", [1, 2], {"b": 1, "a": [3]}])
    ('room', (1, 2), (('a', (3,)), ('b', 1)))
    """
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def _as_key(key: Any) -> tuple:
    return tuple(key) if isinstance(key, tuple | list) else (key,)


def _encode_value(value: TxValue) -> str:
    return json.dumps([value.txid, value.value], separators=(",", ":"))


def _decode_value(raw: str | bytes) -> TxValue:
    txid, value = json.loads(raw)
    return TxValue(txid, value)


# -- one process --------------------------------------------------------------------------

_MEMORY: dict[str, dict[str, str]] = {}  # MemoryMap name -> its contents, in this process
_MEMORY_LOCK = threading.Lock()


class MemoryMap(BackingMap):
    """A map in this process's memory, shared by every copy of the object in the process
    (the in-memory cluster copies components). Not shared between processes: use it for
    fast tests, and :class:`SQLiteMap` or :class:`RedisMap` for real runs."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        self.name = name or uuid.uuid4().hex
        with _MEMORY_LOCK:
            _MEMORY.setdefault(self.name, {})

    @property
    def _data(self) -> dict[str, str]:
        with _MEMORY_LOCK:
            return _MEMORY.setdefault(self.name, {})

    def _get(self, keys):
        data = self._data
        return [data.get(k) for k in keys]

    def _put(self, keys, values):
        self._data.update(zip(keys, values))

    def _items(self):
        return list(self._data.items())

    def __repr__(self) -> str:
        return f"MemoryMap({self.name!r})"


# -- SQLite ---------------------------------------------------------------------------------

class SQLiteMap(BackingMap):
    """A table ``(key TEXT PRIMARY KEY, value TEXT)`` in a SQLite file (WAL mode), created
    if missing. ``multi_put`` is one transaction, so a process killed in the middle of it
    leaves every key as it was; several processes may share the file (each writes its own
    keys; SQLite serialises the writes, waiting up to ``timeout`` seconds for the lock)."""

    _transient = ("_conn", "_pid")

    def __init__(self, path: str | os.PathLike, table: str = "state", *,
                 timeout: float = 30.0) -> None:
        if not _NAME.match(table):
            raise ValueError(f"SQLiteMap: table {table!r} must be an identifier "
                             "(letters, digits, _; at most 63)")
        super().__init__()
        self.path, self.table, self.timeout = os.fspath(path), table, timeout
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():  # never share one over a fork
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
            _set_up(conn, ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
                           f"CREATE TABLE IF NOT EXISTS {self.table} "
                           "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"), self.timeout)
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def _get(self, keys):
        found: dict[str, str] = {}
        db = self._db()
        for i in range(0, len(keys), 500):  # SQLite's limit on bound parameters
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(db.execute(f"SELECT key, value FROM {self.table} WHERE key IN "
                                    f"({marks})", chunk).fetchall())
        return [found.get(k) for k in keys]

    def _put(self, keys, values):
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(f"INSERT OR REPLACE INTO {self.table} (key, value) VALUES (?, ?)",
                           list(zip(keys, values)))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _items(self):
        return self._db().execute(f"SELECT key, value FROM {self.table}").fetchall()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __repr__(self) -> str:
        return f"SQLiteMap({self.path!r}, {self.table!r})"


def _set_up(conn: sqlite3.Connection, statements, timeout: float) -> None:
    """Run a new connection's set-up statements, retrying while the database is locked.

    Turning a fresh database to WAL needs its exclusive lock. When several processes (the
    tasks of one aggregation) open it at once, each holds a shared lock while asking for
    the exclusive one, and SQLite fails all but one at once with "database is locked"
    rather than waiting (the busy timeout cannot break that deadlock). Retrying after
    the winner is done succeeds; after ``timeout`` seconds the error is raised."""
    deadline = time.monotonic() + timeout
    for statement in statements:
        while True:
            try:
                conn.execute(statement)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)  # back off: another process holds the lock for a moment


# -- Redis ----------------------------------------------------------------------------------

class RedisMap(BackingMap):
    """One Redis hash, ``<prefix>``, field = encoded key, value = ``[txid, aggregate]``.
    ``multi_get`` is one ``HMGET`` and ``multi_put`` one ``HSET`` of every pair: a single
    command, which Redis applies atomically (all fields or none)."""

    _transient = ("_client", "_pid")

    def __init__(self, url: str, prefix: str = "tupleflow:state") -> None:
        if not prefix or not isinstance(prefix, str):
            raise ValueError(f"RedisMap: prefix must be a non-empty string, not {prefix!r}")
        super().__init__()
        self.url, self.prefix = url, prefix
        self._client = None
        self._pid: int | None = None

    def _redis(self):
        if self._client is None or self._pid != os.getpid():
            import redis

            self._client = redis.Redis.from_url(self.url, decode_responses=True)
            self._pid = os.getpid()
        return self._client

    def _get(self, keys):
        return self._redis().hmget(self.prefix, keys) if keys else []

    def _put(self, keys, values):
        if keys:
            self._redis().hset(self.prefix, mapping=dict(zip(keys, values)))

    def _items(self):
        return list(self._redis().hgetall(self.prefix).items())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __repr__(self) -> str:
        return f"RedisMap({self.url!r}, {self.prefix!r})"
