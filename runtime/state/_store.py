"""Where checkpoints live: one store per run, shared by every task of the topology.

A store keeps, per checkpoint id, one value per key (``state/<component>/<index>`` for a
StatefulBolt task's key-value map, ``source/<component>/<index>`` for a replayable spout
task's position, ``window/<component>/<index>`` for a WindowedBolt task's open windows),
the id of the last *committed* checkpoint, the counters the checkpoint
spout draws epochs and ids from, and each spout task's origin (where it stood before
the first checkpoint). Values are msgpack (``runtime.wire.pack``), never pickle;
``save`` returns the bytes it wrote (a windowed task reports its snapshot's size).

Three kinds: ``MemoryStore`` (one process: the in-memory cluster), ``SqliteStore`` (the
default, a file in the run directory, safe for many processes) and ``RedisStore``.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from runtime import wire

if TYPE_CHECKING:
    import sqlite3

ORIGIN = -1  # the checkpoint id under which spout origins are kept (never deleted)
SQLITE_NAME = "state.sqlite"
_MEMORY: dict[str, MemoryStore] = {}  # run dir -> its memory store (one per run)
_MEMORY_LOCK = threading.Lock()


class MemoryStore:
    """Checkpoints in a dict: for the in-memory cluster, where every task shares a process."""

    def __init__(self) -> None:
        self.snaps: dict[int, dict[str, Any]] = {}
        self.meta: dict[str, Any] = {}
        self.lock = threading.Lock()

    def save(self, cid: int, key: str, value: Any) -> int:
        packed = wire.pack(value)
        with self.lock:
            self.snaps.setdefault(cid, {})[key] = wire.unpack(packed)  # a copy
        return len(packed)

    def load(self, cid: int | None, key: str) -> Any:
        return None if cid is None else self.snaps.get(cid, {}).get(key)

    def load_prefix(self, cid: int, prefix: str) -> dict[str, Any]:
        return {k: v for k, v in self.snaps.get(cid, {}).items() if k.startswith(prefix)}

    def origin(self, key: str, value: Any) -> Any:
        with self.lock:
            return self.snaps.setdefault(ORIGIN, {}).setdefault(key, value)

    def commit(self, cid: int, info: dict) -> None:
        with self.lock:
            self.meta["committed"] = [cid, info]
            for old in [c for c in self.snaps if ORIGIN < c < cid]:
                del self.snaps[old]

    def committed(self) -> tuple[int, dict] | None:
        got = self.meta.get("committed")
        return (got[0], got[1]) if got else None

    def next(self, counter: str) -> int:
        with self.lock:
            self.meta[counter] = n = self.meta.get(counter, 0) + 1
            return n

    def close(self) -> None:
        pass


class SqliteStore:
    """Checkpoints in one SQLite file (WAL mode: many tasks write, readers never block)."""

    def __init__(self, path: str) -> None:
        import sqlite3  # here, not at the top: only a topology that keeps state opens a
        # store, and every instance imports this module (~6 ms of CPU at each start)

        self.path = path
        self.db = sqlite3.connect(path, timeout=60.0, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a process crash loses nothing
        self.db.execute("CREATE TABLE IF NOT EXISTS snap (cid INTEGER, key TEXT, value BLOB,"
                        " PRIMARY KEY (cid, key))")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB)")

    def save(self, cid: int, key: str, value: Any) -> int:
        packed = wire.pack(value)
        self.db.execute("INSERT OR REPLACE INTO snap VALUES (?, ?, ?)", (cid, key, packed))
        return len(packed)

    def load(self, cid: int | None, key: str) -> Any:
        if cid is None:
            return None
        row = self.db.execute("SELECT value FROM snap WHERE cid = ? AND key = ?",
                              (cid, key)).fetchone()
        return wire.unpack(row[0]) if row else None

    def load_prefix(self, cid: int, prefix: str) -> dict[str, Any]:
        rows = self.db.execute("SELECT key, value FROM snap WHERE cid = ? AND "
                               "substr(key, 1, ?) = ?", (cid, len(prefix), prefix))
        return {k: wire.unpack(v) for k, v in rows}

    def origin(self, key: str, value: Any) -> Any:
        self.db.execute("INSERT OR IGNORE INTO snap VALUES (?, ?, ?)",
                        (ORIGIN, key, wire.pack(value)))
        return self.load(ORIGIN, key)

    def commit(self, cid: int, info: dict) -> None:
        """One transaction: the new committed id, and the older snapshots gone."""
        with self._transaction():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('committed', ?)",
                            (wire.pack([cid, info]),))
            self.db.execute("DELETE FROM snap WHERE cid > ? AND cid < ?", (ORIGIN, cid))

    def committed(self) -> tuple[int, dict] | None:
        row = self.db.execute("SELECT value FROM meta WHERE name = 'committed'").fetchone()
        if not row:
            return None
        cid, info = wire.unpack(row[0])
        return cid, info

    def next(self, counter: str) -> int:
        with self._transaction():
            row = self.db.execute("SELECT value FROM meta WHERE name = ?", (counter,)).fetchone()
            n = (wire.unpack(row[0]) if row else 0) + 1
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (counter, wire.pack(n)))
        return n

    def _transaction(self):
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock now: counters never race

    def __exit__(self, kind, *_) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


class RedisStore:
    """Checkpoints in Redis: a hash per checkpoint id, under a prefix of the run's own."""

    def __init__(self, url: str, namespace: str) -> None:
        import redis  # the sources extra; only a redis:// store needs it

        self.r = redis.Redis.from_url(url)
        self.ns = f"tupleflow:{namespace}:"

    def _snap(self, cid: int) -> str:
        return f"{self.ns}snap:{cid}"

    def save(self, cid: int, key: str, value: Any) -> int:
        packed = wire.pack(value)
        pipe = self.r.pipeline()
        pipe.hset(self._snap(cid), key, packed)
        pipe.sadd(self.ns + "cids", cid)
        pipe.execute()
        return len(packed)

    def load(self, cid: int | None, key: str) -> Any:
        raw = None if cid is None else self.r.hget(self._snap(cid), key)
        return None if raw is None else wire.unpack(raw)

    def load_prefix(self, cid: int, prefix: str) -> dict[str, Any]:
        return {k.decode(): wire.unpack(v) for k, v in self.r.hgetall(self._snap(cid)).items()
                if k.decode().startswith(prefix)}

    def origin(self, key: str, value: Any) -> Any:
        self.r.hsetnx(self._snap(ORIGIN), key, wire.pack(value))
        return self.load(ORIGIN, key)

    def commit(self, cid: int, info: dict) -> None:
        old = [int(c) for c in self.r.smembers(self.ns + "cids") if ORIGIN < int(c) < cid]
        pipe = self.r.pipeline()  # MULTI/EXEC: the new id and the clean-up at once
        pipe.set(self.ns + "committed", wire.pack([cid, info]))
        for c in old:
            pipe.delete(self._snap(c))
            pipe.srem(self.ns + "cids", c)
        pipe.execute()

    def committed(self) -> tuple[int, dict] | None:
        raw = self.r.get(self.ns + "committed")
        if raw is None:
            return None
        cid, info = wire.unpack(raw)
        return cid, info

    def next(self, counter: str) -> int:
        return int(self.r.incr(self.ns + counter))

    def close(self) -> None:
        self.r.close()


def open_store(kind: str, run_dir: str) -> MemoryStore | SqliteStore | RedisStore:
    """The run's store: ``kind`` is the ``state_store`` option."""
    if kind == "memory":
        with _MEMORY_LOCK:
            return _MEMORY.setdefault(run_dir, MemoryStore())
    if kind == "sqlite":
        return SqliteStore(os.path.join(run_dir, SQLITE_NAME))
    if kind.startswith("redis://"):
        return RedisStore(kind, os.path.basename(os.path.normpath(run_dir)))
    raise ValueError(f"state_store must be 'sqlite', 'memory' or a redis:// URL, not {kind!r}")


def forget_memory(run_dir: str) -> None:
    """Drop a finished in-memory run's store."""
    with _MEMORY_LOCK:
        _MEMORY.pop(run_dir, None)
