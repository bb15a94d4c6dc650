"""A master that dies in the middle of a rebalance (issue 23): SIGKILLed after the
rebalance's start step (the added task is starting) and before its switch, with real
processes. The outcome is defined: the caller's ``rebalance`` raises MasterReplaced; the
new master runs the topology on the plan from before (each stream manager rolls back the
task it added before it answers the new master); the spouts run again; under at least
once nothing is lost; and a rebalance asked again completes.

The window is held open by the added task itself: its ``prepare`` waits for a file the
test writes only once the master is dead (a slow step the test can see start, not a
sleep). Waits poll with deadlines.
"""

from __future__ import annotations

import os
import sys
import threading

import cloudpickle
import pytest

from runtime import Bolt, Topology
from runtime.processes.client import MasterReplaced
from runtime.testing import ListSink, ListSpout, read_sink, wait_for

from .test_mp_master_switch_death import kill_master, rebalanced_in_background

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MESSAGES = 4000
OPTIONS = {"ackers": 1, "max_spout_pending": 100, "message_timeout": 5.0, "spout_wait": 0.005}


class HeldPassOn(Bolt):
    """Passes each tuple on, anchored, and acks it. An instance added by a rebalance
    (task index 1 or more) that finds ``hold`` in the run directory says so
    (``preparing-<task>``) and waits in ``prepare`` until ``go`` exists."""

    outputs = ["n"]

    def prepare(self, config, context):
        run_dir = context.run_dir
        if context.task_index >= 1 and os.path.exists(os.path.join(run_dir, "hold")):
            open(os.path.join(run_dir, f"preparing-{context.task_id}"), "w").close()
            while not os.path.exists(os.path.join(run_dir, "go")):
                threading.Event().wait(0.05)  # polling a file the test writes

    def process(self, tup):
        self.emit(tup.values, anchors=[tup])
        self.ack(tup)


def topology() -> Topology:
    topo = Topology("halfway", **OPTIONS)
    # paced at 100/s until the test writes "go" (the master is dead by then), then as fast
    # as max_spout_pending lets it: what is in flight across the fault is a paced run's
    topo.spout("numbers", ListSpout([[i] for i in range(MESSAGES)], ["n"], replay=True,
                                    rate=100, rate_until="go"))
    topo.bolt("mid", HeldPassOn).shuffle_grouping("numbers")
    topo.bolt("sink", ListSink).shuffle_grouping("mid")
    return topo


def acked(stats) -> int:
    return sum(s.acked for s in stats if s.component == "numbers")


def preparing(run_dir: str) -> list[str]:
    return [f for f in os.listdir(run_dir) if f.startswith("preparing-")]


def test_a_master_killed_between_a_rebalance_s_start_and_switch(tupleflow_processes):
    running = topology().submit(containers=2)
    running.wait_until(lambda s: acked(s) > 100, timeout=90, interval=0.1)
    epoch, mid = running.plan.epoch, list(running.plan.component_tasks()["mid"])
    open(os.path.join(running.run_dir, "hold"), "w").close()
    asking, outcome = rebalanced_in_background(running, {"mid": 2})
    # the start step ran: the added instance is in its prepare, the switch has not come
    wait_for(lambda: preparing(running.run_dir), 90, "the added task to start preparing")
    kill_master(running)
    open(os.path.join(running.run_dir, "go"), "w").close()
    asking.join(timeout=120)

    (raised,) = outcome
    assert isinstance(raised, MasterReplaced), raised
    assert "rebalance" in str(raised)
    running.wait_active(timeout=90)
    # one plan: the one from before, in the new master, the handle and every report
    assert running.plan.epoch == epoch
    # every message acked, and every task reported to the new master: it refuses a
    # rebalance until its tasks' reports told it each component's kind, and after "go" the
    # rest can be acked before the bolts' first report to it (seen under load: "component
    # 'mid': its tasks have not reported yet", 0.2 s after the adoption)
    stats = running.wait_until(lambda s: acked(s) == MESSAGES and all(x.kind for x in s),
                               timeout=150, interval=0.2)
    assert sorted(s.task for s in stats if s.component == "mid") == mid
    assert all(s.master_restarts == 1 for s in stats)
    (cut,) = [e for e in running.events() if e["kind"] == "rebalance_cut_short"]
    assert cut["from_epoch"] == cut["epoch"] == epoch and sorted(cut["tasks"]) == sorted(
        s.task for s in stats)  # every instance told to switch back to the plan it runs
    seen = {values[0] for values in read_sink(running.run_dir, "sink")}
    assert seen == set(range(MESSAGES))  # nothing lost
    # and a rebalance asked again (the added task no longer waits) completes
    event = running.rebalance({"mid": 2}, timeout=120)
    assert event["epoch"] == epoch + 1 and len(running.plan.component_tasks()["mid"]) == 2
    running.kill()
    assert tupleflow_processes() == []
