"""A Kestrel-style reliable queue on a Redis stream and its consumer group (its spout is
in ``_redis_spout.py``).

Kestrel's verbs map onto Redis Streams as follows (docs/internals/redis-queue.md):

- **put**: ``XADD <stream> * payload <bytes>``.
- **open**: ``XREADGROUP GROUP <group> <consumer> ... >`` hands out new entries; the group's
  pending-entries list (PEL) then holds them for that consumer, and no one else reads them.
- **ack**: ``XACK`` then ``XDEL``: the entry leaves the PEL and the stream.
- **abort**: ``XCLAIM ... IDLE <ten years> JUSTID`` to the holder itself: the entry stays in
  the PEL but looks idle for ages, so the next reclaim of *any* consumer takes it.
- **open-timeout** (a dead or slow consumer): ``XAUTOCLAIM <min-idle = open_timeout>``, run by
  `open` every ``reclaim_interval`` seconds (and at once after this handle aborted or released
  something), moves entries idle that long to the caller and re-delivers them.
- **poison**: Redis counts the deliveries of each pending entry; an entry reclaimed after it
  failed ``max_retries`` times goes to ``<stream>.dlq`` with its last error instead, as does
  an entry with no ``payload`` field (and, from the spout, one that cannot be decoded).

Each verb is one Lua script, so it is atomic on the server: two consumers never open one entry,
and a dead-lettering is never half done. Idle times are the server's clock; only the cadence of
reclaims uses the injected ``clock``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import redis
except ImportError as exc:  # an optional dependency: the embedded sources do without it
    raise ImportError("RedisQueue and RedisQueueSpout need redis-py: pip install "
                      "'tupleflow[sources]' (or 'redis>=5')") from exc

from ._offset_spout import DEFAULT_MAX_RETRIES
from ._queue import QueueItem

log = logging.getLogger("runtime.sources")

DEFAULT_URL = "redis://127.0.0.1:6379/0"  # loopback only, unless the user says otherwise
DEFAULT_GROUP = "tupleflow"
DEAD_SUFFIX = ".dlq"  # the default dead-letter stream is <stream>.dlq
ABORTED_IDLE_MS = 10 * 365 * 86_400_000  # what an aborted entry's idle time is set to
ABORTED_MIN_IDLE_MS = ABORTED_IDLE_MS // 2  # idle beyond this: aborted or released
PUT_CHUNK = 1000  # XADDs per pipeline round trip
COUNTERS = ("acked", "aborted", "timed_out", "released", "redelivered", "ignored_acks",
            "ignored_aborts", "dead_lettered")
CONNECTION_ERRORS = (redis.ConnectionError, redis.TimeoutError)  # Redis is unreachable
_ID = re.compile(r"\d{1,20}-\d{1,20}")

# -- the server side -----------------------------------------------------------------------
# KEYS are always: stream, <stream>:why (why a returned entry came back), <stream>.dlq,
# <stream>:stats (counters). ARGV[1] is always the group.

_PRELUDE = (f"local ABORTED_IDLE, ABORTED_MIN_IDLE = {ABORTED_IDLE_MS}, "
            f"{ABORTED_MIN_IDLE_MS}\n") + """
local stream, why, dead, stats, group = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1]
local function count(name, n) if n > 0 then redis.call('HINCRBY', stats, name, n) end end
local function payload_of(fields)
  for i = 1, #fields, 2 do if fields[i] == 'payload' then return fields[i + 1] end end
  return nil
end
local function bury(id, fields, deliveries, err, consumer)
  local args = {'XADD', dead, '*', 'source_id', id, 'error', err,
                'deliveries', deliveries, 'consumer', consumer}
  for i = 1, #fields, 2 do
    local k = fields[i]
    if k ~= 'payload' then k = 'field:' .. k end
    args[#args + 1] = k
    args[#args + 1] = fields[i + 1]
  end
  redis.call(unpack(args))
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
  redis.call('HDEL', why, id)
  count('dead_lettered', 1)
end
local function pending_entry(id)
  local p = redis.pcall('XPENDING', stream, group, id, id, 1)
  if type(p) ~= 'table' or p.err or #p == 0 then return nil end
  return p[1]
end
"""

# ARGV: group, consumer, want, min_idle (-1: no reclaim), cursor, max_retries (0: none),
# the error of an entry that timed out. Returns {cursor, {{id, payload, attempts}...}, buried}.
_OPEN = _PRELUDE + """
local consumer, want = ARGV[2], tonumber(ARGV[3])
local min_idle, cursor, max_retries = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local out, buried = {}, 0
local function deliver(id, fields, attempts, err)
  local payload = payload_of(fields)
  if not payload then
    bury(id, fields, attempts + 1, 'malformed entry: it has no "payload" field', consumer)
    buried = buried + 1
  elseif max_retries > 0 and attempts >= max_retries then
    bury(id, fields, attempts, 'failed ' .. attempts .. ' times; last: ' .. err, consumer)
    buried = buried + 1
  else
    out[#out + 1] = {id, payload, attempts}
  end
end
if min_idle >= 0 then
  local r = redis.call('XAUTOCLAIM', stream, group, consumer, min_idle, cursor, 'COUNT', want)
  cursor = r[1]
  local claimed = r[2]
  for i = 1, #claimed do
    local e = claimed[i]
    if e then
      local id = e[1]
      local err = redis.call('HGET', why, id)
      if err then redis.call('HDEL', why, id); count('redelivered', 1)
      else err = ARGV[7]; count('timed_out', 1) end
      deliver(id, e[2], pending_entry(id)[4] - 1, err)
    end
  end
end
if #out < want then
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want - #out,
                      'STREAMS', stream, '>')
  if r then
    for _, e in ipairs(r[1][2]) do deliver(e[1], e[2], 0, '') end
  end
end
return {cursor, out, buried}
"""

# ARGV: group, id... Returns how many were pending and are now acked (and deleted).
_ACK = _PRELUDE + """
local acked = 0
for i = 2, #ARGV do
  if redis.pcall('XACK', stream, group, ARGV[i]) == 1 then
    redis.call('XDEL', stream, ARGV[i])
    redis.call('HDEL', why, ARGV[i])
    acked = acked + 1
  end
end
count('acked', acked)
count('ignored_acks', #ARGV - 1 - acked)
return acked
"""

# ARGV: group, id, holder ('' = whoever), error. Returns 1, or 0 if it was not open (held).
_ABORT = _PRELUDE + """
local p = pending_entry(ARGV[2])
if not p or (ARGV[3] ~= '' and p[2] ~= ARGV[3]) or p[3] >= ABORTED_MIN_IDLE then
  count('ignored_aborts', 1)
  return 0
end
redis.call('XCLAIM', stream, group, p[2], 0, ARGV[2], 'IDLE', ABORTED_IDLE, 'JUSTID')
redis.call('HSET', why, ARGV[2], ARGV[4])
count('aborted', 1)
return 1
"""

# ARGV: group, consumer, error. Returns how many open entries of `consumer` were returned.
_RELEASE = _PRELUDE + """
local held = redis.call('XPENDING', stream, group, '-', '+', 1000000000, ARGV[2])
local n = 0
for _, p in ipairs(held) do
  if p[3] < ABORTED_MIN_IDLE then
    redis.call('XCLAIM', stream, group, ARGV[2], 0, p[1], 'IDLE', ABORTED_IDLE, 'JUSTID')
    redis.call('HSET', why, p[1], ARGV[3])
    n = n + 1
  end
end
count('released', n)
return n
"""

# ARGV: group, id, error, consumer. Returns 1, or 0 if the entry was not open.
_DEAD_LETTER = _PRELUDE + """
local p = pending_entry(ARGV[2])
if not p then return 0 end
local e = redis.call('XRANGE', stream, ARGV[2], ARGV[2])
bury(ARGV[2], e[1] and e[1][2] or {}, p[4], ARGV[3], ARGV[4])
return 1
"""

# ARGV: group, min_idle. Returns {length, pending, pending idle >= min_idle, dead length}.
_SIZES = _PRELUDE + """
local summary = redis.call('XPENDING', stream, group)
local waiting = redis.call('XPENDING', stream, group, 'IDLE', ARGV[2], '-', '+', 1000000000)
return {redis.call('XLEN', stream), summary[1], #waiting, redis.call('XLEN', dead)}
"""


# -- records -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RedisQueueStats:
    """One Redis queue's counts. `visible`, `open` and `dead` are now; the rest are since
    the stream was made, summed over every process that used it (a hash in Redis)."""

    visible: int = 0  # never opened, or back (aborted, released, timed out) and not reopened
    open: int = 0  # held by a consumer, within its open-timeout
    acked: int = 0
    aborted: int = 0
    timed_out: int = 0  # reclaimed from a consumer that held it longer than open_timeout
    released: int = 0  # returned by `release` (a spout closing or restarting)
    redelivered: int = 0  # aborted or released entries opened again
    ignored_acks: int = 0  # acks of an id already acked, never opened, or unknown
    ignored_aborts: int = 0  # aborts of an id not open (or held by another consumer)
    dead_lettered: int = 0  # moved to <stream>.dlq (too many failures, or malformed)
    dead: int = 0  # entries in <stream>.dlq now


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of the dead-letter stream: the original entry and why it was given up."""

    id: str  # the id in the dead-letter stream
    source_id: str  # its id in the queue's stream
    error: str
    deliveries: int
    consumer: str  # the consumer that buried it
    payload: bytes | None  # None: the entry had no "payload" field (see `fields`)
    fields: Mapping[bytes, bytes]  # every other field of the original entry


# -- the queue -----------------------------------------------------------------------------

class RedisQueue:
    """A reliable queue on the Redis stream `name`, consumed through one consumer group.

    The same surface as `EmbeddedQueue` (put / open / ack / abort / release / statistics),
    with the stream id (a str) as an item's id. The open-timeout runs on the server's clock,
    and it is the *reclaiming* handle's `open_timeout` that counts. For example (it needs a
    server; tests/runtime/sources/test_redis_queue.py runs the like)::

        q = RedisQueue("jobs", "redis://127.0.0.1:6379/0", open_timeout=30.0)
        q.put(b"a")                   # -> '1732255000000-0'
        [item] = q.open("spout-0")    # QueueItem(id='1732255000000-0', payload=b'a', ...)
        q.abort(item.id, "it broke")  # back at once, for whoever opens next
        q.ack(q.open("spout-1")[0].id)
    """

    def __init__(self, name: str, redis_url: str = DEFAULT_URL, *, group: str = DEFAULT_GROUP,
                 open_timeout: float | None = 30.0, max_retries: int | None = DEFAULT_MAX_RETRIES,
                 reclaim_interval: float = 1.0, dead_letter_stream: str | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 client: redis.Redis | None = None) -> None:
        check_name("name", name)
        check_name("group", group)
        check_queue_options(open_timeout, max_retries, reclaim_interval)
        self.name, self.group, self.open_timeout = name, group, open_timeout
        self.max_retries, self.reclaim_interval, self._clock = max_retries, reclaim_interval, clock
        self.dead_letter_stream = dead_letter_stream or name + DEAD_SUFFIX
        check_name("dead_letter_stream", self.dead_letter_stream)
        self.keys = [name, f"{name}:why", self.dead_letter_stream, f"{name}:stats"]
        self._owned = client is None
        self._redis = client if client is not None else _connect(redis_url)
        self._scripts = {key: self._redis.register_script(body) for key, body in _SCRIPTS.items()}
        self._cursor, self._next_reclaim, self._consumers = "0-0", float("-inf"), set()
        self.buried_by_last_open = 0  # entries the last `open` dead-lettered
        self._ensure_group()

    @property
    def min_idle_ms(self) -> int:
        """How long an entry must sit unacked before a reclaim takes it."""
        if self.open_timeout is None:
            return ABORTED_MIN_IDLE_MS
        return max(1, round(self.open_timeout * 1000))

    # -- producing -------------------------------------------------------------------------
    def put(self, payload: bytes) -> str:
        """Append one item; returns its id."""
        return self.put_many([payload])[0]

    def put_many(self, payloads: Iterable[bytes]) -> list[str]:
        """Append items, pipelined; returns their ids, in order."""
        payloads, ids = [_bytes(p) for p in payloads], []
        for start in range(0, len(payloads), PUT_CHUNK):
            pipe = self._redis.pipeline(transaction=False)
            for payload in payloads[start:start + PUT_CHUNK]:
                pipe.xadd(self.name, {"payload": payload})
            ids += [i.decode() for i in pipe.execute()]
        return ids

    # -- consuming -------------------------------------------------------------------------
    def open(self, consumer_id: str, max_items: int = 1, *,
             now: float | None = None) -> list[QueueItem]:
        """Open up to `max_items` items for `consumer_id`: first what a reclaim takes back
        (if one is due at `now`), then new entries, oldest first.

        Entries that failed too often or have no payload go to the dead-letter stream here.
        """
        check_name("consumer_id", consumer_id)
        if not isinstance(max_items, int) or max_items < 1:
            raise ValueError(f"max_items must be an int >= 1, not {max_items!r}")
        now = self._clock() if now is None else now
        min_idle = self._reclaim_due(now)
        retries = 0 if self.max_retries is None else self.max_retries
        cursor, rows, buried = self._call("open", consumer_id, max_items, min_idle,
                                          self._cursor, retries, self._timeout_error())
        if min_idle >= 0:
            self._cursor = cursor.decode()
            if self._cursor != "0-0":  # the scan of the pending list is not done: go on
                self._next_reclaim = now
        self._consumers.add(consumer_id)
        self.buried_by_last_open = buried
        return [QueueItem(i.decode(), payload, attempts) for i, payload, attempts in rows]

    def ack(self, item_id: str) -> bool:
        """Remove an open item for good. False (and counted) if it was not open: already
        acked, never opened, or unknown. A late ack of an item reclaimed by someone else
        still removes it (it was processed)."""
        return self.ack_many([item_id]) == 1

    def ack_many(self, item_ids: Sequence[str]) -> int:
        """Ack several items in one round trip; returns how many were open."""
        if not item_ids:
            return 0
        return self._call("ack", *[str(i) for i in item_ids])

    def abort(self, item_id: str, error: str | None = None, *,
              consumer_id: str | None = None) -> bool:
        """Give an open item back, to be opened again by anyone, promptly. False (and
        counted) if it is not open, or `consumer_id` is given and does not hold it.
        `error` is kept as the item's last error (the dead-letter stream shows it)."""
        if not _ID.fullmatch(str(item_id)):
            return self._ignored_abort()
        why = error or f"aborted by {consumer_id or 'a consumer'}"
        done = self._call("abort", str(item_id), consumer_id or "", why) == 1
        self._next_reclaim = float("-inf")  # this handle's next open takes it back
        return done

    def release(self, consumer_id: str, error: str | None = None) -> int:
        """Give back everything `consumer_id` holds (Kestrel: its connection closed);
        returns how many. A spout calls it on close, and on open for its predecessor."""
        check_name("consumer_id", consumer_id)
        why = error or f"released by {consumer_id}"
        n = self._call("release", consumer_id, why)
        self._next_reclaim = float("-inf")
        self._consumers.discard(consumer_id)
        return n

    def dead_letter(self, item_id: str, error: str, *, consumer_id: str = "") -> bool:
        """Move an open item to ``<name>.dlq`` with `error`, and ack it. False if not open."""
        if not _ID.fullmatch(str(item_id)):
            return False
        return self._call("dead_letter", str(item_id), error, consumer_id) == 1

    # -- observing -------------------------------------------------------------------------
    def statistics(self) -> RedisQueueStats:
        length, pending, waiting, dead = self._call("sizes", self.min_idle_ms)
        counts = {k.decode(): int(v) for k, v in self._redis.hgetall(self.keys[3]).items()}
        return RedisQueueStats(visible=length - pending + waiting, open=pending - waiting,
                               dead=dead, **{k: counts.get(k, 0) for k in COUNTERS})

    def held(self, consumer_id: str | None = None) -> list[str]:
        """The ids in the group's pending list (of `consumer_id`, or of everyone)."""
        rows = self._redis.xpending_range(self.name, self.group, "-", "+", 10**9,
                                          consumername=consumer_id)
        return [row["message_id"].decode() for row in rows]

    def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        """The oldest `count` entries of the dead-letter stream."""
        return [_dead_letter(i, f) for i, f in self._redis.xrange(self.keys[2], count=count)]

    def close(self) -> None:
        """Release what this handle's consumers still hold, then drop the connection."""
        for consumer_id in sorted(self._consumers):
            self.release(consumer_id)
        if self._owned:
            self._redis.close()

    def __enter__(self) -> RedisQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _reclaim_due(self, now: float) -> int:
        """The min-idle of a reclaim to run with this open, or -1 when none is due."""
        if now < self._next_reclaim:
            return -1
        if self._next_reclaim == float("-inf"):
            self._cursor = "0-0"  # something was just given back: scan from the start
        self._next_reclaim = now + self.reclaim_interval
        return self.min_idle_ms

    def _timeout_error(self) -> str:
        return f"not acked within open_timeout={self.open_timeout} s (its consumer died or " \
               f"was too slow)"

    def _ignored_abort(self) -> bool:
        self._redis.hincrby(self.keys[3], "ignored_aborts", 1)
        return False

    def _call(self, script: str, *args: Any) -> Any:
        """Run a script; if the stream or group vanished (a DEL, a FLUSHALL), make it anew
        and run it once more."""
        try:
            return self._scripts[script](keys=self.keys, args=[self.group, *args])
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc) and "no such key" not in str(exc):
                raise
        self._ensure_group()
        return self._scripts[script](keys=self.keys, args=[self.group, *args])

    def _ensure_group(self) -> None:
        """Create the stream and group if missing; from id 0, so items put before any
        consumer existed are delivered too."""
        try:
            self._redis.xgroup_create(self.name, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


_SCRIPTS = {"open": _OPEN, "ack": _ACK, "abort": _ABORT, "release": _RELEASE,
            "dead_letter": _DEAD_LETTER, "sizes": _SIZES}


def _connect(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=30)


def _dead_letter(dead_id: bytes, fields: Mapping[bytes, bytes]) -> DeadLetter:
    meta = {b"source_id", b"error", b"deliveries", b"consumer", b"payload"}
    rest = {k[len(b"field:"):]: v for k, v in fields.items() if k not in meta}
    return DeadLetter(dead_id.decode(), fields[b"source_id"].decode(),
                      fields[b"error"].decode(errors="replace"), int(fields[b"deliveries"]),
                      fields[b"consumer"].decode(), fields.get(b"payload"), rest)


def check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 200 or value != value.strip():
        raise ValueError(f"RedisQueue: {what} must be a non-empty str of at most 200 "
                         f"characters, without surrounding spaces, not {value!r}")


def check_queue_options(open_timeout: float | None, max_retries: int | None,
                   reclaim_interval: float) -> None:
    if open_timeout is not None and not open_timeout > 0:
        raise ValueError(f"RedisQueue: open_timeout must be > 0 seconds or None, "
                         f"not {open_timeout!r}")
    if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 1):
        raise ValueError(f"RedisQueue: max_retries must be a positive int or None (retry for "
                         f"ever), not {max_retries!r}")
    if not reclaim_interval >= 0:
        raise ValueError(f"RedisQueue: reclaim_interval must be >= 0 seconds, "
                         f"not {reclaim_interval!r}")


def _bytes(payload: bytes) -> bytes:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"a queue item is bytes, not {type(payload).__name__}; "
                        f"encode it first (e.g. json.dumps(x).encode())")
    return bytes(payload)
