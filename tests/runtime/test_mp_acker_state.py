"""The acker, live (``running.acker_state()``), across real processes: a bolt that never
acks some tuples leaves their roots pending at the acker; they age through the ledger's
slots and come out as the oldest, named by their spout task and msg_id.

The test waits on conditions with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from runtime import BasicBolt, Bolt, Topology
from runtime.testing import ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N, STUCK_EVERY, STUCK_AT = 200, 50, 7  # msg_ids 7, 57, 107, 157 are never completed
STUCK = [i for i in range(N) if i % STUCK_EVERY == STUCK_AT]


class Fan(BasicBolt):
    """Two anchored children per number: the acker hears of every root (a tree of one
    tuple, acked at once, would never reach it: docs/internals/acker.md, "Leaves")."""

    outputs = ["n", "half"]

    def process(self, tup):
        self.emit([tup["n"], 0])
        self.emit([tup["n"], 1])


class Stall(Bolt):
    """Acks every tuple except the first child of a stuck number: that one it keeps."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.kept: list = []

    def process(self, tup):
        if tup["n"] % STUCK_EVERY == STUCK_AT and tup["half"] == 0:
            self.kept.append(tup)
        else:
            self.ack(tup)


def test_stuck_roots_age_and_are_named_by_spout_task_and_msg_id():
    topo = Topology("acker-state", spout_wait=0.005)
    topo.spout("numbers", ListSpout([[i] for i in range(N)], fields=["n"]), parallelism=2)
    topo.bolt("fan", Fan, parallelism=2).shuffle_grouping("numbers")
    topo.bolt("stall", Stall, parallelism=2).shuffle_grouping("fan")
    with topo.submit(ackers=2, message_timeout=8.0) as running:
        spouts = running.plan.component_tasks()["numbers"]
        ackers = running.plan.component_tasks()["__acker"]
        running.wait_until(lambda s: sum(x.acked for x in s if x.component == "numbers")
                           == N - len(STUCK), timeout=60)

        def aged():  # every stuck root named, all of them past the newest slot
            state = running.acker_state()
            roots = [r for a in state for r in a["oldest"]]
            # a root not (yet) among its spout task's oldest has msg_id None: no sorting
            named = {r["msg_id"]: r for r in roots}
            if set(named) == set(STUCK) and all(r["slot"] >= 1 for r in roots):
                return state
            return None

        state = wait_for(aged, 60, "every stuck root named at its acker")
    assert [a["task"] for a in state] == sorted(ackers)
    for acker in state:
        assert sum(bar["count"] for bar in acker["ages"]) == len(acker["oldest"])
        assert len(acker["ages"]) == 3  # the ledger's slots, newest first
        assert acker["ages"][0]["youngest_s"] == 0.0
        for root in acker["oldest"]:
            assert root["root"] % len(ackers) == ackers.index(acker["task"])  # root mod ackers
            assert root["spout"] == "numbers"
            # ListSpout: msg_id i is emitted by spout task index i % parallelism
            assert root["spout_task"] == spouts[root["msg_id"] % 2]
            assert root["age_s"] >= acker["ages"][1]["youngest_s"] - 1.0  # reports lag < 1 s
    assert sum(len(a["oldest"]) for a in state) == len(STUCK)


def test_no_ackers_no_state():
    topo = Topology("acker-state-off", spout_wait=0.005)
    topo.spout("numbers", ListSpout([[i] for i in range(10)], fields=["n"]))
    topo.bolt("fan", Fan).shuffle_grouping("numbers")
    with topo.submit(ackers=0) as running:
        running.wait_until(lambda s: all(x.reported is not None for x in s), timeout=60)
        assert running.acker_state() == []
