"""The physical plan: task numbering, round-robin packing, and the plan as plain data."""

from __future__ import annotations

from collections import Counter

import pytest

from runtime import Bolt, Topology, TopologyError, wire
from runtime.model.api import Spout, fixed_parallelism
from runtime.model.constants import DEFAULTS, SYSTEM, TICK
from runtime.model.plan import PhysicalPlan
from runtime.testing import ListSink, ListSpout


class Split(Bolt):
    outputs = {"default": ["word"], "errors": ["line"]}


def topology() -> Topology:
    topo = Topology("wc", batch_size=10)
    topo.spout("lines", ListSpout([], fields=["line"]), parallelism=2)
    topo.bolt("split", Split, parallelism=3).shuffle_grouping("lines")
    topo.bolt("sink", ListSink).shuffle_grouping("split")
    return topo


def test_tasks_are_numbered_from_one_in_declaration_order():
    plan = topology().physical_plan(containers=2)
    assert [(t.task, t.component, t.index) for t in plan.tasks] == [
        (1, "lines", 0), (2, "lines", 1), (3, "split", 0), (4, "split", 1), (5, "split", 2),
        (6, "sink", 0)]
    assert plan.component_tasks() == {"lines": (1, 2), "split": (3, 4, 5), "sink": (6,)}


def test_containers_are_filled_round_robin():
    plan = topology().physical_plan(containers=2)
    assert plan.task_containers() == {1: 0, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1}
    assert [t.task for t in plan.tasks_in(1)] == [2, 4, 6]


def test_more_containers_than_tasks():
    plan = topology().physical_plan(containers=8)
    assert [len(plan.tasks_in(c)) for c in range(8)] == [1, 1, 1, 1, 1, 1, 0, 0]


def test_the_plan_prints():
    assert str(topology().physical_plan(containers=2)) == (
        "physical plan of 'wc': 6 tasks in 2 containers\n"
        "  container 0: lines[1] split[3] split[5]\n"
        "  container 1: lines[2] split[4] sink[6]")


def test_task_lookup():
    plan = topology().physical_plan()
    assert plan.task(4).component == "split" and plan.task(4).index == 1
    for missing in (0, -1, 7):
        with pytest.raises(IndexError, match=f"no task {missing}"):
            plan.task(missing)


def test_stream_ids_start_with_the_tick_stream():
    plan = topology().physical_plan()
    assert plan.stream_ids() == {(SYSTEM, TICK): 0, ("lines", "default"): 1,
                                 ("split", "default"): 2, ("split", "errors"): 3,
                                 ("sink", "default"): 4}


def test_config_is_defaults_then_topology_then_call():
    config = topology().physical_plan(flush_interval=0.5).config
    assert config == {**DEFAULTS, "batch_size": 10, "flush_interval": 0.5,
                      "max_parallelisms": {"lines": 128, "split": 128, "sink": 128}}


def test_round_trip_through_plain_data_and_the_wire():
    plan = topology().physical_plan(containers=3)
    assert PhysicalPlan.from_data(plan.to_data()) == plan
    assert PhysicalPlan.from_data(wire.unpack(wire.pack(plan.to_data()))) == plan


@pytest.mark.parametrize("containers", [0, -1, 1.5, "2", True])
def test_containers_must_be_a_positive_int(containers):
    with pytest.raises(TopologyError, match="topology 'wc': containers must be >= 1"):
        topology().physical_plan(containers=containers)


# -- rebalance (issue 22) ----------------------------------------------------------------------
def test_a_rebalanced_plan_numbers_tasks_again_and_keeps_the_rest():
    plan = topology().physical_plan(containers=2)
    new = plan.rebalanced({"split": 5}, containers=3)
    assert new.parallelism() == {**plan.parallelism(), "split": 5}
    assert [t.task for t in new.tasks] == list(range(1, len(new.tasks) + 1))
    assert new.containers == 3 and {t.container for t in new.tasks} == {0, 1, 2}
    assert new.streams == plan.streams and new.config == plan.config
    assert plan() is plan  # running.plan() and running.plan are the same plan
    assert new.epoch == plan.epoch + 1


def test_a_rebalance_in_place_keeps_every_kept_task_where_it_was():
    plan = topology().physical_plan(containers=2)
    grown = plan.rebalanced({"split": 5})
    kept = {t.task: t for t in plan.tasks}
    assert all(kept[t.task] == t for t in grown.tasks if t.task in kept)  # id, index, container
    added = [t for t in grown.tasks if t.task not in kept]
    top = max(kept)
    assert [(t.task, t.component, t.index) for t in added] == [
        (top + i + 1, "split", plan.parallelism()["split"] + i)
        for i in range(5 - plan.parallelism()["split"])]
    per_container = Counter(t.container for t in grown.tasks)
    assert max(per_container.values()) - min(per_container.values()) <= 1
    shrunk = grown.rebalanced({"split": 1})
    assert [t for t in shrunk.tasks if t.component == "split"] == [
        t for t in plan.tasks if t.component == "split" and t.index == 0]
    assert (grown.epoch, shrunk.epoch) == (1, 2)
    assert shrunk.root_bits() == grown.root_bits() == plan.root_bits()  # roots keep meaning
    again = PhysicalPlan.from_data(shrunk.to_data())
    assert again == shrunk
    with pytest.raises(IndexError):
        shrunk.task(top + 1)  # removed: the ids have a gap now
    regrown = shrunk.rebalanced({"split": 2})  # never an id given out before
    assert [t.task for t in regrown.tasks if t.task not in kept] == [grown.last_id + 1]


@pytest.mark.parametrize(("request_", "problem"), [
    ({"nope": 2}, "component 'nope': no such component"),
    ({"lines": 3}, "component 'lines': a ListSpout cannot change its parallelism"),
    ({"split": 0}, "component 'split': parallelism must be an int >= 1, not 0"),
    ({"split": 2.0}, "component 'split': parallelism must be an int >= 1, not 2.0"),
    ({"split": 129}, "component 'split': parallelism 129 is above its maximum parallelism 128"),
    ({}, "give {component: parallelism}"),
])
def test_a_rebalance_that_cannot_be_done_is_refused_naming_the_component(request_, problem):
    from runtime.model.plan import check_rebalance

    with pytest.raises(ValueError, match=problem.replace("{", r"\{").replace("}", r"\}")):
        check_rebalance(topology().physical_plan(), request_, None,
                        {"lines": fixed_parallelism(ListSpout([], fields=["line"]))})


def test_a_rebalance_to_no_containers_is_refused():
    from runtime.model.plan import check_rebalance

    with pytest.raises(ValueError, match="containers must be an int >= 1, not 0"):
        check_rebalance(topology().physical_plan(), {"split": 2}, 0, {})


def test_a_rebalance_above_a_components_own_maximum_is_refused_naming_it():
    """``max_parallelism=`` reaches the master's guard through the plan (issue 22)."""
    from runtime.model.plan import check_rebalance

    topo = Topology("wc")
    topo.spout("lines", ListSpout([], fields=["line"]))
    topo.bolt("split", Split, parallelism=2, max_parallelism=6).shuffle_grouping("lines")
    plan = topo.physical_plan()
    check_rebalance(plan, {"split": 6}, None, {"lines": "fixed"})  # up to it: fine
    with pytest.raises(ValueError, match="component 'split': parallelism 7 is above its "
                                         "maximum parallelism 6 .max_parallelism="):
        check_rebalance(plan, {"split": 7}, None, {"lines": "fixed"})
    again = PhysicalPlan.from_data(wire.unpack(wire.pack(plan.rebalanced({"split": 3},
                                                                         containers=2).to_data())))
    with pytest.raises(ValueError, match="above its maximum parallelism 6"):
        check_rebalance(again, {"split": 7}, None, {"lines": "fixed"})  # kept on replans


# -- a spout's parallelism (issue 22, part 3) -------------------------------------------------
def test_a_resizable_spout_passes_the_guard_and_a_fixed_one_is_refused_saying_why():
    from runtime.model.plan import check_rebalance

    class Shared(Spout):
        resizable = True

    plan = topology().physical_plan()
    check_rebalance(plan, {"lines": 4}, None, {"lines": fixed_parallelism(Shared())})
    check_rebalance(plan, {"lines": 4}, None, {})  # not fixed: passes
    with pytest.raises(ValueError, match=r"'lines': a ListSpout cannot change its parallelism "
                                         r"\(its class does not set resizable = True\)"):
        check_rebalance(plan, {"lines": 4}, None,
                        {"lines": fixed_parallelism(ListSpout([], fields=["line"]))})
    with pytest.raises(ValueError, match="'lines': parallelism 129 is above its maximum"):
        check_rebalance(plan, {"lines": 129}, None, {})


def test_spout_tasks_added_in_place_get_new_ids_that_their_root_ids_can_hold():
    from runtime.model.plan import ROOT_BITS_MIN, check_root_ids

    plan = topology().physical_plan(containers=2)
    assert plan.root_bits() == ROOT_BITS_MIN  # wider than 6 tasks need: room to add spouts
    grown = plan.rebalanced({"lines": 4})
    added = [t for t in grown.tasks if t.task not in plan.task_containers()]
    assert [(t.task, t.component, t.index) for t in added] == [(7, "lines", 2), (8, "lines", 3)]
    assert grown.root_bits() == plan.root_bits()
    check_root_ids(grown, frozenset({"lines"}))
    shrunk = grown.rebalanced({"lines": 1})
    assert [t.task for t in shrunk.tasks if t.component == "lines"] == [1]
    regrown = shrunk.rebalanced({"lines": 2})  # ids are never reused: a root names one task
    assert [t.task for t in regrown.tasks if t.component == "lines"] == [1, 9]


def test_a_spout_task_id_beyond_the_root_ids_task_field_is_refused():
    from runtime.model.plan import check_root_ids

    plan = topology().physical_plan()
    near = PhysicalPlan.from_data({**plan.to_data(), "last_id": plan.root_task_limit() - 2})
    fits = near.rebalanced({"lines": 3})
    check_root_ids(fits, frozenset({"lines"}))
    over = near.rebalanced({"lines": 4})
    with pytest.raises(ValueError, match=r"'lines': a new spout task would get id 1024, and "
                                         r"root ids hold spout task ids below 1024"):
        check_root_ids(over, frozenset({"lines"}))
    check_root_ids(near.rebalanced({"split": 5}), frozenset({"lines"}))  # bolts: any id
