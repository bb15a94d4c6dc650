"""What a master keeps for the next one about a rebalance (runtime/processes/carry.py):
the components a rebalance changes, and the plan the containers were last started on,
which an adopting master takes instead of its boot's. In one process; the same with real
processes: test_mp_master_split_death.py."""

from __future__ import annotations

import json
import os

from runtime import wire
from runtime.model.plan import PhysicalPlan
from runtime.processes import carry
from runtime.processes.master import TopologyMaster

from .test_carry import boot, closed


def test_a_rebalance_mark_names_the_components_it_changes(tmp_path):
    first, later = carry.Carry(str(tmp_path)), carry.Carry(str(tmp_path))
    first.rebalancing(4, {"count": 3})
    assert (later.cut_short(), later.cut_short_counts()) == (4, {"count": 3})
    with open(os.path.join(first.folder, carry.REBALANCE), "w") as f:
        json.dump({"from_epoch": 4}, f)  # a mark without counts: nothing to split
    assert (later.cut_short(), later.cut_short_counts()) == (4, {})
    first.rebalancing(None)
    assert (later.cut_short(), later.cut_short_counts()) == (None, {})


def test_the_plan_kept_is_read_back_whole_and_a_torn_one_as_none(tmp_path):
    kept = carry.Carry(str(tmp_path))
    assert kept.plan() is None  # never saved: the boot's plan runs
    plan = {"epoch": 2, "containers": 3, "config": {"key": b"\x00bytes"}}
    kept.save_plan(plan)
    assert carry.Carry(str(tmp_path)).plan() == plan
    with open(os.path.join(kept.folder, carry.PLAN), "wb") as f:
        f.write(wire.pack(plan)[:-3])  # killed in the middle of the write
    assert kept.plan() is None


def test_an_adopting_master_takes_the_plan_the_containers_were_started_on(tmp_path):
    first = closed(TopologyMaster(boot(tmp_path)))
    grown = first.plan.rebalanced({"sink": 3}, 3)
    first.replan(grown)
    assert carry.Carry(str(tmp_path)).plan() == grown.to_data()
    adopting = closed(TopologyMaster({**boot(tmp_path), "adopt": True}))
    assert adopting.plan == grown and adopting.adoption is not None
    assert adopting.plan.containers == 3 != PhysicalPlan.from_data(boot(tmp_path)["plan"]
                                                                   ).containers
