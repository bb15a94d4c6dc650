"""A master that dies at the instant of a rebalance's switch (issue 23), with real
processes: every instance has switched to the new plan, the master has told container 0's
stream manager to switch, and not container 1's. The outcome is defined: the caller's
``rebalance`` raises MasterReplaced; the new master decides the new plan (a container
switched to it, so every instance routes on it) and container 1 finishes the switch
before it is adopted; every task of the new plan runs and reports, the removed one has
exited; under at least once nothing is lost; a rebalance asked again completes.

The window is held open by a fault point for tests (``runtime/processes/faults.py``,
``HOLD_SWITCH``): the first master, right after telling container 0 to switch, writes a
file and waits to be killed. The test waits for that file and for container 0's log line
saying it switched. Waits poll with deadlines.
"""

from __future__ import annotations

import os
import sys
import threading

import cloudpickle
import psutil
import pytest

from runtime import Bolt, Topology
from runtime.processes import faults
from runtime.processes.client import MasterReplaced
from runtime.testing import ListSink, ListSpout, gone, read_sink, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MESSAGES = 3000
OPTIONS = {"ackers": 1, "max_spout_pending": 100, "message_timeout": 5.0, "spout_wait": 0.005}


class PassOn(Bolt):
    outputs = ["n"]

    def process(self, tup):
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


def topology() -> Topology:
    topo = Topology("switching", **OPTIONS)
    # paced until the test writes "go" (the master is dead by then): what is in flight
    # across the fault is a paced run's, and the rest need not take 20 s
    topo.spout("numbers", ListSpout([[i] for i in range(MESSAGES)], ["n"], replay=True,
                                    rate=150, rate_until="go"))
    # fields: a number always goes to the same task, so a route to an added task that a
    # container dropped would lose its numbers for good (replayed into the same hole)
    topo.bolt("mid", PassOn, parallelism=2).fields_grouping("numbers", ["n"])
    topo.bolt("sink", ListSink, parallelism=3).shuffle_grouping("mid")
    return topo


def acked(stats) -> int:
    return sum(s.acked for s in stats if s.component == "numbers")


def ran(stats) -> set[int]:
    """The mid tasks that reported executing a tuple."""
    return {s.task for s in stats if s.component == "mid" and s.executed}


def switched(run_dir: str, container: int, epoch: int) -> bool:
    path = os.path.join(run_dir, "logs", f"container-{container}.log")
    with open(path, errors="replace") as f:
        return f"switched to the plan of epoch {epoch}" in f.read()


def rebalanced_in_background(running, parallelism, **options) -> tuple[threading.Thread, list]:
    """``running.rebalance`` asked from a thread (the master will die under it); the list
    gets what it returned or raised."""
    outcome: list = []

    def rebalance():
        try:
            outcome.append(running.rebalance(parallelism, timeout=120, **options))
        except Exception as exc:  # what the caller sees is the point of the test
            outcome.append(exc)

    asking = threading.Thread(target=rebalance)
    asking.start()
    return asking, outcome


def kill_master(running) -> psutil.Process:
    """SIGKILL the running master and wait until it is gone; returns it."""
    old = psutil.Process(running.master_pid)
    old.kill()
    wait_for(lambda: gone(old), 30, "the master to die")
    return old


def test_a_master_killed_when_one_container_switched_and_the_other_not(
        tupleflow_processes, monkeypatch, tmp_path):
    held = tmp_path / "held"
    monkeypatch.setenv(faults.HOLD_SWITCH, str(held))  # the first master's environment
    running = topology().submit(containers=2)
    monkeypatch.delenv(faults.HOLD_SWITCH)
    stats = running.wait_until(lambda s: acked(s) > 100, timeout=90, interval=0.1)
    first, run_dir = running.plan, running.run_dir
    epoch = first.epoch
    sink = {s.task: s.pid for s in stats if s.component == "sink"}
    asking, outcome = rebalanced_in_background(running, {"mid": 5, "sink": 2})
    wait_for(held.exists, 120, "the master to tell container 0 to switch")
    wait_for(lambda: switched(run_dir, 0, epoch + 1), 60, "container 0 to switch")
    assert not switched(run_dir, 1, epoch + 1)  # the instant: one switched, one not
    old = kill_master(running)
    open(os.path.join(run_dir, "go"), "w").close()
    asking.join(timeout=120)

    (raised,) = outcome
    assert isinstance(raised, MasterReplaced), raised
    running.wait_active(timeout=90)
    # one plan everywhere: the new one, in the new master, the handle, both containers
    new = running.plan
    assert new.epoch == epoch + 1 and running.master_pid != old.pid
    assert len(new.component_tasks()["mid"]) == 5 and len(new.component_tasks()["sink"]) == 2
    added = set(new.component_tasks()["mid"]) - {s.task for s in stats if s.component == "mid"}
    assert {new.task(t).container for t in added} == {0, 1}  # an added task in each
    wait_for(lambda: switched(run_dir, 1, epoch + 1), 60, "container 1 to finish the switch")
    (removed,) = set(sink) - set(new.component_tasks()["sink"])
    assert first.task(removed).container == 1  # stopped by finishing the switch there
    wait_for(lambda: not psutil.pid_exists(sink[removed]), 30, "the removed sink to exit")
    # every message acked, and each added task's report since it executed: the
    # spout's last report may come before theirs (each task reports every 0.25 s, and
    # the last numbers, replayed to container 1's added tasks, run in the last moments)
    stats = running.wait_until(lambda s: acked(s) == MESSAGES and ran(s) >= added,
                               timeout=150, interval=0.2)
    assert sorted(s.task for s in stats) == sorted(t.task for t in new.tasks)
    assert all(s.state == "running" and s.master_restarts == 1 for s in stats)
    (cut,) = [e for e in running.events() if e["kind"] == "rebalance_cut_short"]
    assert (cut["from_epoch"], cut["epoch"]) == (epoch, epoch + 1)
    seen = {values[0] for values in read_sink(run_dir, "sink")}
    assert seen == set(range(MESSAGES))  # nothing lost
    event = running.rebalance({"mid": 2}, timeout=120)  # and it can be asked again
    assert event["epoch"] == epoch + 2 and len(running.plan.component_tasks()["mid"]) == 2
    running.kill()
    assert tupleflow_processes() == []
