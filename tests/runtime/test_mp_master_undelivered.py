"""What a master that dies leaves undelivered, and what the next one carries over (issue
23), with real processes:

- a live setting the client got its reply for, but which never reached the instances
  (the dead master held it), reaches the surviving instances once a new master has
  adopted them: they report the settings they run, and it tells each what differs;
- a spout whose tuner runs (``max_spout_pending="auto"``) is not told again, so its
  tuner goes on counting turns, and the turns the dead master recorded are not recorded
  twice;
- the finished traces the dead master kept (``run_dir/master/traces.msgpack``) are still
  answered by ``running.traces()`` and ``running.lineage()``.

The lost delivery is made deterministic by a fault point for tests
(``runtime/processes/faults.py``, ``WITHHOLD``): the first master never sends a
``max_spout_pending`` setting or a ``record`` message, and answers the client as usual.
Waits poll the handle with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pytest

from runtime import Topology, wire
from runtime.observe.traces import Trace
from runtime.observe.tracestore import TraceStore
from runtime.processes import faults
from runtime.testing import ListSink, ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

OPTIONS = {"ackers": 1, "max_spout_pending": 200, "stats_interval": 0.2, "spout_wait": 0.005}


def topology() -> Topology:
    topo = Topology("undelivered", **OPTIONS)
    topo.spout("numbers", ListSpout([[i] for i in range(200_000)], ["n"], replay=True,
                                    rate=200), max_spout_pending="auto", tune_interval=0.5)
    topo.spout("letters", ListSpout([[i] for i in range(200_000)], ["n"], replay=True,
                                    rate=100))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers").shuffle_grouping("letters")
    return topo


def of(stats, component: str):
    return [s for s in stats if s.component == component]


def tuner_events(running) -> list[tuple[int, int]]:
    return [(e["task"], e["turns"]) for e in running.events() if e["kind"] == "tuner"]


def saved_traces(run_dir: str) -> list[Trace]:
    """The traces the master kept, read as a new master reads them (the trees as its
    store filed them, filed again)."""
    with open(os.path.join(run_dir, "master", "traces.msgpack"), "rb") as f:
        kept = wire.unpack(f.read())
    store = TraceStore({})
    store.refile(kept)
    return store.traces(limit=len(kept) or 1, now=time.time())


def test_what_the_dead_master_never_delivered_reaches_the_survivors(
        tupleflow_processes, monkeypatch):
    monkeypatch.setenv(faults.WITHHOLD, "max_spout_pending,record")
    running = topology().submit(containers=2)
    monkeypatch.delenv(faults.WITHHOLD)
    running.wait_until(lambda s: all(x.tuner_turns >= 3 for x in of(s, "numbers")),
                       timeout=90, interval=0.1)
    running.set_trace(1.0)  # delivered: every spout tuple is traced
    running.set_max_spout_pending(37, "letters")  # answered, never delivered
    running.record("letters")  # the same
    wait_for(lambda: os.path.exists(os.path.join(running.run_dir, "master", "traces.msgpack"))
             and len(saved_traces(running.run_dir)) >= 50, 60, "finished traces saved")
    before = running.statistics()
    assert all(s.max_spout_pending != 37 and not s.recording for s in of(before, "letters"))
    turns = dict(tuner_events(running))

    old = running.master_pid
    # stopped, it saves no more: the traces read now are the ones a new master finds (read
    # once the new one ran, they were its own file once: 200 read, 197 carried)
    os.kill(old, signal.SIGSTOP)
    saved = saved_traces(running.run_dir)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: running.master_pid != old, 90, "a new master")
    running.wait_active(timeout=90)

    # the survivors (same processes) now run what the client was answered
    stats = running.wait_until(lambda s: all(
        x.max_spout_pending == 37 and x.recording == ["default"] for x in of(s, "letters")),
        timeout=60, interval=0.1)
    assert {(s.task, s.pid, s.incarnation) for s in stats} == {
        (s.task, s.pid, s.incarnation) for s in before}
    again = {e["task"]: e["settings"] for e in running.events()
             if e["kind"] == "settings_told_again"}
    assert again == {s.task: ["recording default", "max_spout_pending"]
                     for s in of(stats, "letters")}
    assert running.status()["settings"]["max_spout_pending"] == {"letters": 37}

    # the tuner was not told "auto" again: it goes on from where it was, and no turn the
    # dead master recorded is recorded twice
    running.wait_until(lambda s: all(x.tuner_turns > turns[x.task] + 2
                                     for x in of(s, "numbers")), timeout=60, interval=0.1)
    recorded = tuner_events(running)
    assert len(recorded) == len(set(recorded))
    for task, last in turns.items():
        after = [t for k, t in recorded if k == task]
        assert after == sorted(after) and after[-1] > last

    # the finished traces the dead master kept are answered after the new master's own
    assert running.status()["traces_carried"] == len(saved) >= 50
    for kept in (saved[0], saved[len(saved) // 2], saved[-1]):
        trace = running.lineage(kept.msg_id)
        assert trace is not None and trace.status == kept.status != "pending"
        assert [h.task for h in trace.hops] == [h.task for h in kept.hops]
    running.kill()
    assert tupleflow_processes() == []
