"""Multiprocess: SIGKILL a log spout instance mid-run. Its stream manager restarts it, the new
incarnation resumes from the checkpoint file, and at the sink no record is lost and each
partition has at most ``max_uncommitted`` duplicates (the records re-read from the committed
offset). A poison record is dead-lettered on the way and the run still finishes."""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter

import cloudpickle
import pytest

from runtime import Topology
from runtime.sources import EmbeddedLog, LogSpout
from runtime.sources._log_spout import read_checkpoints
from runtime.testing import ListSink, SlowBolt, read_sink, replaced, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PARTITIONS, PER_PARTITION, WINDOW = 3, 3000, 200
POISON = (1, 77)  # this offset holds a record that is not JSON


@pytest.fixture
def root(tmp_path):
    with EmbeddedLog(tmp_path / "log") as log:
        log.create_topic("events", PARTITIONS)
        for p in range(PARTITIONS):
            log.append_many("events", [
                b"{not json" if (p, o) == POISON else json.dumps({"p": p, "o": o}).encode()
                for o in range(PER_PARTITION)], partition=p)
    return tmp_path / "log"


def test_a_killed_log_spout_resumes_from_its_checkpoint(root, tmp_path, tupleflow_processes):
    ck = tmp_path / "ck"
    topo = Topology("log-kill")
    topo.spout("events", LogSpout("events", root, checkpoint_dir=ck, max_uncommitted=WINDOW,
                                  commit_interval=0.05, batch_size=50), parallelism=2)
    topo.bolt("work", SlowBolt(0.0003, fields=("value",)), parallelism=1).shuffle_grouping(
        "events")
    topo.bolt("sink", ListSink).shuffle_grouping("work")
    total = PARTITIONS * PER_PARTITION
    with topo.submit(ackers=1) as running:
        running.wait_until(lambda s: sum(r.executed for r in s if r.component == "sink")
                           >= total // 6, timeout=60)
        ours = {p.pid: p for p in tupleflow_processes()}
        victim = next(s for s in running.statistics()
                      if s.component == "events" and s.pid in ours)
        ours[victim.pid].send_signal(signal.SIGKILL)
        committed_at_kill = read_checkpoints(ck, "events")
        at_kill = len(read_sink(running.run_dir, "sink"))
        running.wait_until(replaced(victim), timeout=30)
        wait_for(lambda: read_checkpoints(ck, "events")
                 == dict.fromkeys(range(PARTITIONS), PER_PARTITION), 60,
                 "every partition committed to its end")
        records = read_sink(running.run_dir, "sink")
    assert at_kill < total, "the run ended before the kill: nothing was tested"
    seen = Counter((v["p"], v["o"]) for (v,) in records)
    expected = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)} - {POISON}
    assert set(seen) == expected  # 0 lost
    dups = Counter(p for (p, o), n in seen.items() for _ in range(n - 1))
    assert all(n <= WINDOW for n in dups.values()), dups
    assert all(o >= committed_at_kill.get(p, 0) for (p, o), n in seen.items() if n > 1)
    with EmbeddedLog(root) as log:
        (_, letter), = log.read_json("events.dlq", 0, 0)
    assert (letter["partition"], letter["offset"]) == POISON
    assert letter["error"].startswith("cannot decode: invalid JSON")
    print(f"\n[log kill] killed task {victim.task} with {at_kill} of {total} at the sink; "
          f"duplicates per partition {dict(dups)} (window {WINDOW})")
