"""A master that dies in the middle of a checkpointed rebalance (issue 23), with real
processes: a stateful word count from the embedded log, two containers.

- **In place**, 2 -> 3 counter tasks: the master has told every stream manager to switch
  (every instance routes on the new plan) and dies before it tells the checkpoint task to
  split the committed keyed state over the three tasks. The new master adopts the new plan
  and has the checkpoint task split the state then (``adoption.cut_short``).
- **A new number of containers**, 2 -> 3 containers and 2 -> 3 counter tasks: every
  container has stopped and the master has split the committed state over the new plan,
  then dies before it starts the containers on it. The new master finds nothing running,
  starts the plan from before again, and splits the state back over it first. Once a
  rebalance to three containers has completed, a master that dies adopts all three.

Either way the caller's ``rebalance`` raises MasterReplaced, and the counts committed at
the end are exactly a batch count of the whole log, each key held by one task. The
window is held open by the fault points of ``runtime/processes/faults.py`` (the first
master writes a file and waits to be killed). Waits poll with deadlines.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import cloudpickle
import pytest

from runtime.processes import faults
from runtime.processes.client import MasterReplaced
from runtime.testing import wait_for

from .test_mp_master_switch_death import kill_master, rebalanced_in_background, switched
from .test_mp_rebalance import counted, fill_log, per_task_keys, thirds, word_count

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORDS = [f"w{(i * 7) % 101}" for i in range(9_000)]


def submitted(root, hold: str, path) -> object:
    """The word count on two containers, its first master holding at ``hold``."""
    os.environ[hold] = str(path)  # the first master's environment only
    try:
        return word_count(root).submit(checkpoint_interval=0.3, containers=2)
    finally:
        del os.environ[hold]


def kill_the_held_master(running, root, words: list[str], asking, outcome: list) -> None:
    """With the first master held in the rebalance: append ``words`` to the log, kill the
    master, and wait until the rebalance asked has raised MasterReplaced and the new
    master runs the topology."""
    fill_log(root, "words", words, create=False)
    kill_master(running)
    asking.join(timeout=150)
    (raised,) = outcome
    assert isinstance(raised, MasterReplaced), raised
    running.wait_active(timeout=90)


def finish_and_check(running, root, rest: list[str], count_tasks: int) -> None:
    """Append the rest of the log, wait for the whole log to be committed, and check the
    counts are exact and each key is held by one of ``count_tasks`` tasks."""
    fill_log(root, "words", rest, create=False)
    try:
        wait_for(lambda: counted(running) >= len(WORDS), 240, "the whole log to be committed")
    finally:
        state = running.state("count")
        figures = {"committed": sum(state.values()), "expected": len(WORDS),
                   "keys": len(state), "events": [e["kind"] for e in running.events()]}
        print(f"\n[split death] {figures}")
    assert state == dict(Counter(WORDS)), figures
    keys = per_task_keys(running)
    assert len(keys) == count_tasks, figures
    assert sum(map(len, keys)) == len(set().union(*keys)) == 101, figures


def test_a_master_killed_before_the_checkpoint_task_splits_the_state(tmp_path):
    first, second, third = thirds(WORDS)
    fill_log(tmp_path, "words", first)
    running = submitted(tmp_path, faults.HOLD_SPLIT, tmp_path / "held")
    with running:
        running.wait_active(90)
        wait_for(lambda: counted(running) > 0, 90, "a first committed count")
        epoch = running.plan.epoch
        asking, outcome = rebalanced_in_background(running, {"count": 3})
        wait_for(lambda: (tmp_path / "held").exists(), 120, "the master to hold before the split")
        wait_for(lambda: all(switched(running.run_dir, c, epoch + 1) for c in (0, 1)), 60,
                 "both containers to switch")
        kill_the_held_master(running, tmp_path, second, asking, outcome)
        assert running.plan.epoch == epoch + 1  # both containers had switched: kept
        assert len(running.plan.component_tasks()["count"]) == 3
        finish_and_check(running, tmp_path, third, 3)
        (cut,) = [e for e in running.events() if e["kind"] == "rebalance_cut_short"]
        assert cut["split_again"] == {"count": 3}


def test_a_master_killed_between_stopping_the_containers_and_starting_them(tmp_path):
    first, second, third = thirds(WORDS)
    fill_log(tmp_path, "words", first)
    running = submitted(tmp_path, faults.HOLD_RESTART, tmp_path / "held")
    with running:
        running.wait_active(90)
        wait_for(lambda: counted(running) > 0, 90, "a first committed count")
        epoch = running.plan.epoch
        asking, outcome = rebalanced_in_background(running, {"count": 3}, containers=3)
        wait_for(lambda: (tmp_path / "held").exists(), 120,
                 "the master to hold before it starts the containers")
        kill_the_held_master(running, tmp_path, second, asking, outcome)
        # nothing ran the new plan: the plan from before is started again
        assert running.plan.epoch == epoch and running.plan.containers == 2
        assert len(running.plan.component_tasks()["count"]) == 2
        finish_and_check(running, tmp_path, third, 2)
        # and a rebalance asked again completes
        event = running.rebalance({"count": 3}, containers=3, timeout=150)
        assert event["containers"] == 3 and running.plan.containers == 3
        wait_for(lambda: len(per_task_keys(running)) == 3, 90, "a checkpoint on three tasks")
        assert running.state("count") == dict(Counter(WORDS))
        # a master that dies now adopts the three containers (the plan they were last
        # started on, not the submitted one)
        kill_master(running)
        running.wait_active(timeout=90)
        (restarted,) = [e for e in running.events() if e["kind"] == "master_restarted"
                        and e.get("restarts") == 2]
        assert restarted["adopted"] == [0, 1, 2] and restarted["started_again"] == []
        assert running.plan.containers == 3 and running.state("count") == dict(Counter(WORDS))
