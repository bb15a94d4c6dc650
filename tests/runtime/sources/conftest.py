"""What the source tests share."""

from __future__ import annotations

import json

import pytest

from runtime.sources import EmbeddedLog


@pytest.fixture
def events_log(tmp_path):
    """Makes an embedded log under ``tmp_path/log`` with topic "events" of ``partitions``:
    record {"p": p, "o": o} at offset o of partition p, ``per_partition`` of each; returns
    the log's root."""
    def make(partitions: int, per_partition: int):
        with EmbeddedLog(tmp_path / "log") as log:
            log.create_topic("events", partitions)
            for p in range(partitions):
                log.append_many("events", [json.dumps({"p": p, "o": o}).encode()
                                           for o in range(per_partition)], partition=p)
        return tmp_path / "log"
    return make
