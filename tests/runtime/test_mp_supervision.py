"""Heartbeat supervision across processes: an instance that stops reporting is killed and
replaced; one that is merely slow, or held back by backpressure, is left alone.

The decisions themselves are unit-tested in test_health.py and test_tmaster_logic.py.
No test sleeps to synchronise or asserts on a duration: each waits on the master's
statistics or events with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import cloudpickle
import psutil
import pytest

from runtime import Topology
from runtime.testing import ListSink, ListSpout, PacedSpout, SlowBolt, gone, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

HEARTBEAT = {"heartbeat_timeout": 1.5, "spout_wait": 0.005}


# -- helpers ------------------------------------------------------------------------------

def one(stats, component: str):
    (s,) = [s for s in stats if s.component == component]
    return s


def of_kind(events, kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


# -- a stopped instance ----------------------------------------------------------------------

def test_a_stopped_bolt_is_presumed_hung_killed_and_replaced():
    topo = Topology("sigstop", **HEARTBEAT)
    topo.spout("numbers", PacedSpout(rate=200))
    topo.bolt("stopped", ListSink).shuffle_grouping("numbers")
    topo.bolt("steady", ListSink).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        first = running.wait_until(lambda s: one(s, "stopped").executed > 0
                                   and one(s, "steady").executed > 0, timeout=20)
        old = one(first, "stopped")
        victim = psutil.Process(old.pid)
        victim.suspend()  # SIGSTOP: it reports nothing more
        stats = running.wait_until(
            lambda s: one(s, "stopped").incarnation == old.incarnation + 1
            and one(s, "stopped").state == "running"
            and one(s, "stopped").executed > 0, timeout=30)
        new = one(stats, "stopped")
        assert new.pid != old.pid and new.restarts == 1
        wait_for(lambda: gone(victim), timeout=10, what="the stopped process to be killed")
        with contextlib.suppress(ProcessLookupError):
            os.kill(old.pid, signal.SIGCONT)  # too late: it was SIGKILLed while stopped
        assert gone(victim)
        before = {c: one(stats, c).executed for c in ("stopped", "steady")}
        after = running.wait_until(lambda s: all(one(s, c).executed > before[c] + 20
                                                 for c in before), timeout=20)
        events = running.events()
    hung = of_kind(events, "hung")
    assert [(e["task"], e["component"], e["incarnation"]) for e in hung] == [
        (old.task, "stopped", old.incarnation)]
    assert hung[0]["seconds"] >= 1.5  # rounded to 0.01 s
    restarted = of_kind(events, "restarted")
    assert [e["task"] for e in restarted] == [old.task]
    assert restarted[0]["reason"].startswith("hung: no heartbeat for ")
    assert restarted[0]["restarts"] == 1
    assert events.index(hung[0]) < events.index(restarted[0])
    assert (one(after, "stopped").pid, one(after, "stopped").restarts) == (new.pid, 1)
    for comp in ("numbers", "steady"):  # nobody else was touched
        assert (one(after, comp).restarts, one(after, comp).incarnation) == (0, 0)


# -- a healthy topology under backpressure ----------------------------------------------------

TUPLES = 6000
PAYLOAD = "x" * 1000  # so that bytes, not just tuples, pile up behind the slow bolt


def pressure_topology(name: str) -> Topology:
    topo = Topology(name, **HEARTBEAT)
    topo.spout("numbers", ListSpout([[i, PAYLOAD] for i in range(TUPLES)],
                                    fields=["n", "payload"]))
    topo.bolt("slow", SlowBolt(0.0005, fields=["n", "payload"])).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("slow")
    return topo


def run_under_pressure(name: str, batch_size: int):
    """Run until the sink has everything, or until someone is presumed hung (a restart
    loses tuples at most once, so the sink would never get everything)."""
    options = {"backpressure_high": 16 * 1024, "backpressure_low": 8 * 1024,
               "batch_size": batch_size}
    with pressure_topology(name).submit(containers=2, **options) as running:
        def settled():
            events = running.events()
            done = one(running.statistics(), "sink").executed == TUPLES
            return events if done or of_kind(events, "hung") else None

        events = wait_for(settled, timeout=60, what="the sink to get every tuple")
        stats = running.statistics()
    return stats, events


@pytest.mark.parametrize("batch_size", [10, 100])
def test_backpressure_is_not_taken_for_a_hang(batch_size):
    """The spout is held back, again and again, for seconds, and the slow bolt works
    through frames of up to 100 tuples at 0.5 ms each: every instance reports on."""
    stats, events = run_under_pressure(f"pressure-{batch_size}", batch_size)
    assert of_kind(events, "backpressure_on"), "the test must exercise backpressure"
    assert of_kind(events, "hung") == []
    assert of_kind(events, "restarted") == []
    assert [s.restarts for s in stats] == [0, 0, 0]
    assert one(stats, "sink").executed == TUPLES


# -- warm spares --------------------------------------------------------------------------

def spares_of(running, container: int) -> list[psutil.Process]:
    """The stream manager's children that run no task: its warm spare, if it has one."""
    stats = running.statistics()
    if not all(s.state == "running" and s.pid for s in stats):
        return []  # an instance's pid not known yet: it could be taken for a spare
    pids = {s.pid for s in stats}
    sm = psutil.Process(running.status()["containers"][container])
    return [p for p in sm.children() if p.pid not in pids and not gone(p)]


def test_a_killed_instance_is_replaced_by_the_warm_spare_and_logs_to_its_own_file():
    topo = Topology("spare", spout_wait=0.005)
    topo.spout("numbers", PacedSpout(rate=200))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit(containers=1) as running:
        old = one(running.wait_until(lambda s: one(s, "sink").executed > 0, timeout=30), "sink")
        (spare,) = wait_for(lambda: spares_of(running, 0), 30, "a warm spare")
        os.kill(old.pid, signal.SIGKILL)
        stats = running.wait_until(lambda s: one(s, "sink").incarnation > old.incarnation
                                   and one(s, "sink").state == "running"
                                   and one(s, "sink").pid != old.pid, timeout=30)
        new = one(stats, "sink")
        # the next spare is a new process, once the replacement has started
        (after,) = wait_for(lambda: spares_of(running, 0), 30, "the next warm spare")
        logs = os.path.join(running.run_dir, "logs")
        sink_log = read(os.path.join(logs, f"sink-{new.task}.log"))
        spare_log = read(os.path.join(logs, "spare-0.log"))
        container_log = read(os.path.join(logs, "container-0.log"))
    assert new.pid == spare.pid  # the spare became the sink: no interpreter started for it
    assert after.pid not in (spare.pid, old.pid)
    assert f"task {new.task}: handed to the warm spare (pid {spare.pid})" in container_log
    started = f"task {new.task}, incarnation {new.incarnation}: started (pid {spare.pid})"
    assert started in sink_log and started not in spare_log


def read(path: str) -> str:
    with open(path) as f:
        return f.read()
