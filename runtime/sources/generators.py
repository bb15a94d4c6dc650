"""Event generators for the tutorials: deterministic for a seed, loadable with one call.

Two streams:

- **presence** (seed 004, "room occupancy"): a sensor at each room's door emits ENTER and
  LEAVE events; the two events of one stay share a correlation id (``corrId``; the event
  ``id`` is ``corrId + "A"`` or ``+ "B"``). Events arrive shuffled out of order, so a LEAVE
  may come before its ENTER, as the seed's Trident topology has to cope with.
- **client events** (seed 002, the RTAC topology): what clients report about users, the
  input of a real-time active-user count: ``userId``, ``eventType``, ``client`` and
  ``time``. A few users are much more active than the rest (a Pareto draw).

``load_presence(target, n=..., seed=...)`` and ``load_client_events(...)`` put the events
into an `EmbeddedLog` (a topic, keyed by user so one user's events stay in order in one
partition), an `EmbeddedQueue`, or a confluent-kafka ``Producer`` (anything with
``produce`` and ``flush``), as compact JSON, and return them.

>>> events = presence_events(2, seed=1)
>>> sorted(e["eventType"] for e in events), len({e["corrId"] for e in events})
(['ENTER', 'ENTER', 'LEAVE', 'LEAVE'], 2)
>>> presence_events(50, seed=3) == presence_events(50, seed=3)
True
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from ._log import EmbeddedLog
from ._queue import EmbeddedQueue

NAMES = ("John", "Zoe", "Jenny", "Marie", "Robert", "Ada", "Linus", "Grace")
ROOMS = ("Cafetaria", "Conf1", "Conf2", "Hall", "Annex1", "Lab")
EPOCH_MS = 1374910000000  # July 2013, as in seed 004's events
EVENT_TYPES = ("impression", "click", "favorite", "retweet", "reply", "follow", "login")
EVENT_WEIGHTS = (60, 15, 8, 6, 5, 3, 3)
CLIENTS = ("web", "iphone", "android", "api")


def presence_events(n: int, *, seed: int = 0, people: int = 40,
                    rooms: Sequence[str] = ROOMS, window: int | None = None) -> list[dict]:
    """`n` stays (2n events) of `people` users in `rooms`, shuffled.

    A user's stays do not overlap. With ``window=None`` the whole list is shuffled; with
    ``window=w`` the events are in time order but each is displaced by less than w places.
    """
    rng = random.Random(seed)
    users = [f"{NAMES[i % len(NAMES)]}_{i}" for i in range(people)]
    free = dict.fromkeys(users, EPOCH_MS)
    events = []
    for _ in range(n):
        user, room = rng.choice(users), rng.choice(rooms)
        enter = free[user] + rng.randint(1_000, 600_000)
        leave = enter + rng.randint(60_000, 3_600_000)
        free[user] = leave
        corr = f"{rng.getrandbits(128):032x}"
        for kind, at, suffix in (("ENTER", enter, "A"), ("LEAVE", leave, "B")):
            events.append({"eventType": kind, "userId": user, "time": at, "roomId": room,
                           "id": corr + suffix, "corrId": corr})
    return _shuffled(events, rng, window)


def client_events(n: int, *, seed: int = 0, users: int = 1000,
                  start_ms: int = EPOCH_MS, rate_per_s: float = 1000.0) -> list[dict]:
    """`n` client events of up to `users` users, about `rate_per_s` a second, in time order."""
    rng = random.Random(seed)
    t, out = float(start_ms), []
    for _ in range(n):
        t += rng.expovariate(rate_per_s / 1000.0)
        user = min(users, int(rng.paretovariate(1.2))) - 1
        out.append({"userId": user, "eventType": rng.choices(EVENT_TYPES, EVENT_WEIGHTS)[0],
                    "client": rng.choice(CLIENTS), "time": int(t)})
    return out


def _shuffled(events: list[dict], rng: random.Random, window: int | None) -> list[dict]:
    if window is None:
        rng.shuffle(events)
        return events
    events.sort(key=lambda e: (e["time"], e["id"]))
    keyed = [(i + rng.random() * window, e) for i, e in enumerate(events)]
    return [e for _, e in sorted(keyed, key=lambda pair: pair[0])]


# -- loading ---------------------------------------------------------------------------------

def load(target: Any, events: list[dict], topic: str, *, key: str | None = None,
         partitions: int = 4) -> list[dict]:
    """Put `events` into `target` as compact JSON; returns them.

    `target`: an `EmbeddedLog` (`topic` is created with `partitions` if missing; records go
    to the partition of their `key` field), an `EmbeddedQueue` (`topic` is ignored: the
    queue has its name), or a Kafka producer (records keyed by their `key` field).
    """
    payloads = [json.dumps(e, separators=(",", ":")).encode() for e in events]
    keys = [None if key is None else e[key] for e in events]
    if isinstance(target, EmbeddedLog):
        _to_log(target, topic, payloads, keys, partitions)
    elif isinstance(target, EmbeddedQueue):
        target.put_many(payloads)
    elif hasattr(target, "produce") and hasattr(target, "flush"):
        _to_kafka(target, topic, payloads, keys)
    else:
        raise TypeError(f"load: cannot load events into a {type(target).__name__}; give an "
                        f"EmbeddedLog, an EmbeddedQueue or a confluent_kafka.Producer")
    return events


def load_presence(target: Any, n: int = 1000, *, seed: int = 0, topic: str = "presence",
                  partitions: int = 4, **options: Any) -> list[dict]:
    """`presence_events(n, seed=seed, **options)` loaded into `target`, keyed by userId."""
    return load(target, presence_events(n, seed=seed, **options), topic, key="userId",
                partitions=partitions)


def load_client_events(target: Any, n: int = 10_000, *, seed: int = 0,
                       topic: str = "client_events", partitions: int = 4,
                       **options: Any) -> list[dict]:
    """`client_events(n, seed=seed, **options)` loaded into `target`, keyed by userId."""
    return load(target, client_events(n, seed=seed, **options), topic, key="userId",
                partitions=partitions)


def _to_log(log: EmbeddedLog, topic: str, payloads: list[bytes], keys: list,
            partitions: int) -> None:
    if topic not in log.topics():
        log.create_topic(topic, partitions)
    if all(k is None for k in keys):
        log.append_many(topic, payloads)
        return
    from ._log import partition_for

    count = log.partitions(topic)
    by_partition: dict[int, list[bytes]] = {}
    for payload, k in zip(payloads, keys, strict=True):
        by_partition.setdefault(partition_for(k, count), []).append(payload)
    for p, batch in sorted(by_partition.items()):
        log.append_many(topic, batch, partition=p)


def _to_kafka(producer: Any, topic: str, payloads: list[bytes], keys: list) -> None:
    errors: list = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    for payload, k in zip(payloads, keys, strict=True):
        producer.produce(topic, payload, key=None if k is None else str(k),
                         on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(30)
    if left or errors:
        raise RuntimeError(f"load: Kafka did not take {left} events into {topic!r}: "
                           f"{errors[:3]}")
