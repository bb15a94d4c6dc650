"""The tutorials' event generators: deterministic for a seed, shaped like seeds 004 and 002,
and loadable into the embedded log, the embedded queue and (the mock cluster of) Kafka."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer

from runtime.sources import (
    EmbeddedLog,
    EmbeddedQueue,
    client_events,
    load_client_events,
    load_presence,
    presence_events,
)
from runtime.sources.generators import EVENT_TYPES
from runtime.testing import wait_for


def test_presence_events_pair_enter_and_leave_by_correlation_id():
    events = presence_events(300, seed=4)
    by_corr: dict[str, list] = {}
    for e in events:
        by_corr.setdefault(e["corrId"], []).append(e)
    assert len(by_corr) == 300
    for corr, (a, b) in ((c, sorted(v, key=lambda e: e["id"])) for c, v in by_corr.items()):
        assert (a["eventType"], b["eventType"]) == ("ENTER", "LEAVE")
        assert (a["id"], b["id"]) == (corr + "A", corr + "B")
        assert a["userId"] == b["userId"] and a["roomId"] == b["roomId"]
        assert a["time"] < b["time"]
    position = {e["id"]: i for i, e in enumerate(events)}
    assert any(position[c + "B"] < position[c + "A"] for c in by_corr)  # out of order


def test_a_users_stays_do_not_overlap():
    events = sorted((e for e in presence_events(500, seed=9, people=5)),
                    key=lambda e: (e["userId"], e["time"], e["eventType"] == "ENTER"))
    for user in {e["userId"] for e in events}:
        kinds = [e["eventType"] for e in events if e["userId"] == user]
        assert kinds == ["ENTER", "LEAVE"] * (len(kinds) // 2)


def test_generators_are_deterministic_for_a_seed():
    assert presence_events(100, seed=1) == presence_events(100, seed=1)
    assert presence_events(100, seed=1) != presence_events(100, seed=2)
    assert client_events(100, seed=1) == client_events(100, seed=1)
    assert client_events(100, seed=1) != client_events(100, seed=2)


def test_a_window_bounds_how_far_an_event_moves():
    events = presence_events(200, seed=3, window=5)
    ordered = sorted(events, key=lambda e: (e["time"], e["id"]))
    rank = {e["id"]: i for i, e in enumerate(ordered)}
    assert all(abs(rank[e["id"]] - i) < 5 for i, e in enumerate(events))
    assert [e["id"] for e in events] != [e["id"] for e in ordered]


def test_client_events_look_like_rtac_input():
    events = client_events(5000, seed=2, users=100)
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    assert {e["eventType"] for e in events} <= set(EVENT_TYPES)
    assert all(0 <= e["userId"] < 100 for e in events)
    top = Counter(e["userId"] for e in events).most_common(1)[0][1]
    assert top > 5000 / 100 * 5  # a few users are much more active than the average


def test_loading_into_the_embedded_log_keys_by_user(tmp_path):
    with EmbeddedLog(tmp_path / "log") as log:
        events = load_presence(log, n=50, seed=1, partitions=3)
        got = [json.loads(b) for p in range(3) for _, b in log.read("presence", p, 0)]
        users = {p: {json.loads(b)["userId"] for _, b in log.read("presence", p, 0)}
                 for p in range(3)}
    assert sorted(got, key=lambda e: e["id"]) == sorted(events, key=lambda e: e["id"])
    assert all(users[a].isdisjoint(users[b]) for a in users for b in users if a != b)


def test_loading_into_the_embedded_queue(tmp_path):
    with EmbeddedQueue(tmp_path / "q.db", "clicks") as q:
        events = load_client_events(q, n=20, seed=5)
        items = q.open("reader", 100)
    assert [json.loads(i.payload) for i in items] == events


def test_loading_into_kafka():
    producer = Producer({"test.mock.num.brokers": 1})
    brokers = ",".join(f"{b.host}:{b.port}"
                       for b in producer.list_topics(timeout=10).brokers.values())
    events = load_client_events(producer, n=30, seed=6, topic="clicks")
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "r",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["clicks"])
    got: list = []

    def all_read() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), json.loads(msg.value())))
        return len(got) == 30
    try:
        wait_for(all_read, 20, "30 events in Kafka")
    finally:
        consumer.close()
    key = json.dumps
    assert sorted(map(key, (e for _, e in got))) == sorted(map(key, events))
    assert all(k == str(e["userId"]).encode() for k, e in got)


def test_loading_into_something_else_is_a_clear_error():
    with pytest.raises(TypeError, match="cannot load events into a list"):
        load_presence([], n=1)
