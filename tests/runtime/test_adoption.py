"""A new master adopting the processes of one that died (runtime/processes/adoption.py),
driven message by message on a fake clock: no topology process is started, the stream
managers' answers are handed to the master's handler, and what it sends is recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime import Topology, wire
from runtime.model.constants import CHECKPOINTER
from runtime.model.plan import PhysicalPlan
from runtime.processes import adoption
from runtime.processes.master import TopologyMaster
from runtime.testing import FakeClock, ListSink, ListSpout

GENERATION = 3  # the stream managers' generation when the first master died


def topology() -> Topology:
    topo = Topology("adopted")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return topo


@pytest.fixture
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def adopting(tmp_path):
    """A factory: ``make(pids)`` is a master adopting the containers whose stream managers
    the first (now dead) master started with these pids, at ``GENERATION``."""
    made = []
    default = topology().physical_plan(2)
    boot = {"secret": b"s" * 32, "run_dir": str(tmp_path), "bundle": b""}

    def make(pids: dict[int, int], plan: PhysicalPlan | None = None, **told) -> TopologyMaster:
        # the first master writes where it listens, then "dies"
        first = TopologyMaster({**boot, "plan": (plan or default).to_data()})
        first.sock.close(linger=0)
        first.zctx.term()
        for c, pid in pids.items():
            adoption.write_container(str(tmp_path), c, pid, GENERATION)
        tm = TopologyMaster({**boot, "plan": (plan or default).to_data(), "adopt": True,
                             "master_restarts": 1, **told})
        made.append(tm)
        assert tm.endpoint == first.endpoint  # everyone reconnects to the same address
        tm.clock = FakeClock(1000.0)
        tm.adoption = adoption.Adoption(tm, 1, tm.clock())
        tm.sent = []
        tm.send = lambda ident, msg: tm.sent.append((ident, msg.KIND, msg.fields()))
        tm.started = []
        tm.supervision.start_container = tm.started.append
        return tm

    yield make
    for tm in made:
        tm.sock.close(linger=0)
        tm.zctx.term()


def running(tm, c: int, incarnations: dict[int, int], plan: dict | None = None) -> wire.Running:
    """Container ``c``'s answer: its tasks at these incarnations, each with a pid."""
    tasks = {t: {"incarnation": i, "pid": 5000 + t, "restarts": i} for t, i in incarnations.items()}
    return wire.Running(container=c, generation=GENERATION, pid=os.getpid(), inbound=f"in-{c}",
                        run_dir="run", plan=plan or tm.plan.to_data(), tasks=tasks)


def tasks_of(tm, c: int) -> list[int]:
    return [t.task for t in tm.plan.tasks_in(c)]


def asked(tm) -> list[bytes]:
    return [ident for ident, kind, _ in tm.sent if kind == "adopt"]


def test_it_asks_each_container_by_its_identity_until_it_answers(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    tm.tick(tm.clock())
    assert asked(tm) == [b"s0.3", b"s1.3"]
    tm.clock.advance(adoption.ASK_EVERY / 2)
    tm.tick(tm.clock())
    assert len(asked(tm)) == 2  # not again before ASK_EVERY
    tm.handle(b"s0.3", running(tm, 0, {t: 0 for t in tasks_of(tm, 0)}))
    tm.clock.advance(adoption.ASK_EVERY)
    tm.tick(tm.clock())
    assert asked(tm)[2:] == [b"s1.3"]  # only the silent one
    assert tm.supervision.status()["state"] == "adopting" and not tm.adoption.done


def test_it_rebuilds_supervision_from_what_the_containers_report(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 2 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    sup = tm.supervision
    assert tm.adoption.done and sup.state == "running"
    assert tm.adoption.target is None  # they agreed: nobody is asked again
    assert {c: sm["ident"] for c, sm in sup.sms.items()} == {0: b"s0.3", 1: b"s1.3"}
    assert sup.generations == {0: GENERATION, 1: GENERATION}
    assert tm.supervision.status()["containers"] == {0: me, 1: me}
    for t, record in tm.tasks.items():
        assert (record["incarnation"], record["pid"], record["restarts"]) == (2, 5000 + t, 2)
        assert record["ready"] and record["master_restarts"] == 1
        assert sup.idents[t] == b"i%d.2" % t
    (event,) = [e for e in tm.observation.events if e["kind"] == "master_restarted"]
    assert event["adopted"] == [0, 1] and event["started_again"] == [] and event["restarts"] == 1
    # the adopted incarnations' reports count; an older one's do not
    task = tasks_of(tm, 0)[0]
    for incarnation, executed in ((2, 7), (1, 99)):
        tm.handle(b"", wire.control("stats", task=task, incarnation=incarnation,
                                    record={"kind": "bolt", "state": "running",
                                            "executed": executed}))
    assert tm.tasks[task]["executed"] == 7
    assert tm.started == []
    # every adopted instance is told to activate (idempotent in an active one): a spout
    # the dead master had paused for a rebalance it never finished runs again
    assert {i for i, k, _ in tm.sent if k == "activate"} == set(sup.idents.values())


def test_metrics_count_from_the_adoption_on_and_nothing_before_it(adopting):
    """An adopted instance's counters run since it started; the new master's rates
    start from its first report after the adoption (a baseline), not with a spike."""
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    task = tasks_of(tm, 0)[0]

    def stats(executed):
        tm.handle(b"", wire.control("stats", task=task, incarnation=0, record={
            "kind": "bolt", "state": "running", "executed": executed}))

    stats(500)  # before the adoption: not counted (the container has not answered)
    assert tm.tasks[task].get("executed") is None
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    stats(1000)  # the baseline
    tm.clock.advance(1.0)
    stats(1040)
    assert tm.tasks[task]["executed"] == 1040  # statistics: since the incarnation started
    metrics = tm.observation.answer_metrics(wire.AskMetrics(id=1, window="all"))
    assert metrics["instances"][task]["executed"] == 40  # metrics: since the adoption


def test_a_report_that_makes_no_sense_or_comes_late_is_dropped_and_counted(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    good = running(tm, 0, {t: 0 for t in tasks_of(tm, 0)})
    for bad in (wire.Running(**{**good.fields(), "container": 7}),
                wire.Running(**{**good.fields(), "tasks": {"x": {"incarnation": 0}}}),
                wire.Running(**{**good.fields(), "tasks": {1: {"incarnation": "0"}}})):
        tm.handle(b"s0.3", bad)
    assert tm.dropped == 3 and tm.adoption.reports == {}
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    tm.handle(b"s0.3", good)  # after the adoption
    assert tm.dropped == 4 and tm.adoption.done


def test_a_container_whose_stream_manager_died_is_started_again(adopting, dead_pid):
    tm = adopting({0: os.getpid(), 1: dead_pid})
    tm.tick(tm.clock())
    assert asked(tm) == [b"s0.3"]  # the dead one is not asked
    tm.handle(b"s0.3", running(tm, 0, {t: 0 for t in tasks_of(tm, 0)}))
    tm.tick(tm.clock())
    assert tm.started == [1]
    assert tm.supervision.generations[1] == GENERATION  # the new one is the next generation
    (event,) = [e for e in tm.observation.events if e["kind"] == "master_restarted"]
    assert event["adopted"] == [0] and event["started_again"] == [1]


def test_a_stream_manager_silent_for_too_long_is_killed_and_started_again(adopting):
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        tm = adopting({0: os.getpid(), 1: silent.pid})
        tm.handle(b"s0.3", running(tm, 0, {t: 0 for t in tasks_of(tm, 0)}))
        tm.tick(tm.clock())
        assert tm.started == [] and silent.poll() is None
        tm.clock.advance(adoption.ADOPT_WAIT + 1)
        tm.tick(tm.clock())
        assert silent.wait(10) == -9
        assert tm.started == [1]
    finally:
        silent.kill()
        silent.wait()


def test_the_plan_the_containers_run_replaces_the_submitted_one(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    reported = topology().physical_plan(2, max_spout_pending=7).to_data()
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}, reported))
    tm.tick(tm.clock())
    assert tm.plan.config["max_spout_pending"] == 7
    assert tm.supervision.plan is tm.plan and tm.adoption.done
    assert all(r["ready"] for r in tm.tasks.values())


def test_a_spout_restarted_during_the_adoption_is_welcomed_at_its_end_then_activated(
        adopting):
    """Its hello is kept until the plan the containers run is known (the boot's is the
    one they were last started on, older after a rebalance in place)."""
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    spout = tm.plan.component_tasks()["numbers"][0]
    c = tm.tasks[spout]["container"]
    tm.handle(b"i%d.1" % spout, wire.Hello(role="instance", id=spout, incarnation=1, pid=9))
    assert [k for _, k, _ in tm.sent if k == "welcome"] == []  # not yet adopted
    for k in (0, 1):
        incarnations = {t: int(t == spout) for t in tasks_of(tm, k)}
        tm.handle(b"s%d.3" % k, running(tm, k, incarnations))
    tm.tick(tm.clock())
    assert [i for i, k, _ in tm.sent if k == "welcome"] == [b"i%d.1" % spout]
    tm.handle(b"i%d.1" % spout, wire.Ready(task=spout, incarnation=1))
    activated = [i for i, k, _ in tm.sent if k == "activate"]
    assert b"i%d.1" % spout in activated and len(activated) == len(set(activated))
    assert tm.tasks[spout]["container"] == c


def test_a_pause_the_handle_made_holds_for_the_new_master(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me}, paused=True)
    spout = tm.plan.component_tasks()["numbers"][0]
    tm.handle(b"i%d.1" % spout, wire.Hello(role="instance", id=spout, incarnation=1, pid=9))
    for k in (0, 1):
        incarnations = {t: int(t == spout) for t in tasks_of(tm, k)}
        tm.handle(b"s%d.3" % k, running(tm, k, incarnations))
    tm.tick(tm.clock())
    tm.handle(b"i%d.1" % spout, wire.Ready(task=spout, incarnation=1))
    assert tm.supervision.status()["paused"] is True
    assert [k for _, k, _ in tm.sent if k == "activate"] == []  # it stays paused
    assert tm.supervision.resume() is True
    assert {i for i, k, _ in tm.sent if k == "activate"} == {
        tm.supervision.idents[t] for t in tm.tasks}


def test_an_orphan_is_watched_by_its_pid(dead_pid):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        orphan = adoption.Orphan(proc.pid)
        assert orphan.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            orphan.wait(0.05)
        orphan.kill()
        proc.wait(10)  # reaped by its parent (here, this test), as init would
        assert orphan.wait(10) == -1
    finally:
        proc.kill()
        proc.wait()
    assert adoption.Orphan(dead_pid).poll() == -1


def test_the_newest_reported_plan_wins():
    assert adoption.newest([{"epoch": 1, "x": 1}, {"epoch": 2, "x": 2}])["x"] == 2
    assert adoption.newest([{"x": 1}, {"x": 2}])["x"] == 1


# -- a rebalance in place cut short at its switch (issue 23) ---------------------------------

def rebalanced(tm) -> dict:
    """The plan a rebalance in place of ``sink`` from 2 to 3 tasks would run."""
    return tm.plan.rebalanced({"sink": 3}).to_data()


def adopts(tm) -> list[tuple[bytes, int | None]]:
    return [(ident, fields["epoch"]) for ident, kind, fields in tm.sent if kind == "adopt"]


def test_a_switch_cut_short_makes_every_container_finish_it(adopting):
    """Container 0 switched to the new plan, container 1 started it and was never told to
    switch: the new plan wins (every instance routes on it), container 1 is asked to
    finish the switch, and the master adopts only once it says it did."""
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    old, new = tm.plan.to_data(), rebalanced(tm)
    tasks = {c: {t.task: 0 for t in PhysicalPlan.from_data(new).tasks_in(c)} for c in (0, 1)}
    tm.handle(b"s0.3", running(tm, 0, tasks[0], new))
    tm.handle(b"s1.3", wire.Running(**{**running(tm, 1, tasks[1], old).fields(),
                                       "pending": new}))
    tm.tick(tm.clock())
    assert not tm.adoption.done and tm.adoption.target == new["epoch"]
    tm.tick(tm.clock())
    assert adopts(tm)[-1] == (b"s1.3", new["epoch"])  # only the one that disagrees
    tm.handle(b"s1.3", wire.Running(**{**running(tm, 1, tasks[1], old).fields(),
                                       "pending": new}))  # a late answer to the first ask
    tm.tick(tm.clock())
    assert not tm.adoption.done
    tm.handle(b"s1.3", running(tm, 1, tasks[1], new))
    tm.tick(tm.clock())
    assert tm.adoption.done and tm.plan.epoch == new["epoch"]
    assert sorted(tm.plan.component_tasks()["sink"]) == sorted(
        t for c in (0, 1) for t in tasks[c] if tm.tasks[t]["component"] == "sink")
    assert all(r["ready"] for r in tm.tasks.values())


def test_an_instance_restarted_during_the_adoption_is_welcomed_on_the_plan_adopted(
        adopting):
    """Both containers switched to a rebalanced plan the boot's is older than; an added
    task restarted meanwhile says hello before they answer: it is welcomed once they
    did, on their plan (before, on the boot's, which does not even hold the task: its
    hello was dropped; a kept task's was answered with the old plan)."""
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    new = rebalanced(tm)
    added = max(PhysicalPlan.from_data(new).task_containers())
    assert added not in tm.tasks  # not in the boot's plan
    tasks = {c: {t.task: int(t.task == added) for t in PhysicalPlan.from_data(new).tasks_in(c)}
             for c in (0, 1)}
    tm.handle(b"i%d.1" % added, wire.Hello(role="instance", id=added, incarnation=1, pid=9))
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, tasks[c], new))
    tm.tick(tm.clock())
    assert tm.adoption.done and tm.plan.epoch == new["epoch"]
    (welcome,) = [f for i, k, f in tm.sent if k == "welcome" and i == b"i%d.1" % added]
    assert welcome["plan"]["epoch"] == new["epoch"]


def test_a_rebalance_no_container_switched_to_is_rolled_back_everywhere(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    old, new = tm.plan.to_data(), rebalanced(tm)
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, wire.Running(**{
            **running(tm, c, {t: 0 for t in tasks_of(tm, c)}, old).fields(), "pending": new}))
    tm.tick(tm.clock())
    assert tm.adoption.target == old["epoch"]
    tm.tick(tm.clock())
    assert sorted(adopts(tm)[-2:]) == [(b"s0.3", 0), (b"s1.3", 0)]
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}, old))
    tm.tick(tm.clock())
    assert tm.adoption.done and tm.plan.epoch == old["epoch"]


@pytest.mark.parametrize("changed", [{"sink": 2}, {}])
def test_under_checkpoints_the_split_is_told_once_every_other_instance_switched(adopting,
                                                                                 changed):
    """A rebalance cut short under checkpoints: the checkpoint task splits the state and
    rolls everyone back only once every other instance took its ``Switch``, as in a
    rebalance (told in the same turn, a spout took its ``Switch`` after the rollback and
    took its partitions again past the checkpoint's offsets: 50 words lost). Told even
    when no parallelism changed: the rollback ends every switched task's ``unsplit``."""
    me = os.getpid()
    plan = topology().physical_plan(2, checkpoint_interval=0.3)
    tm = adopting({0: me, 1: me}, plan=plan)
    tm.carry.rebalancing(plan.epoch, changed)  # the dead master's, never finished
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    (checkpointer,) = tm.plan.component_tasks()[CHECKPOINTER]
    others = sorted(t for t in tm.tasks if t != checkpointer)

    def told_to_switch() -> list[tuple[bytes, dict | None]]:
        return [(ident, fields["counts"]) for ident, kind, fields in tm.sent if kind == "switch"]

    assert sorted(told_to_switch()) == [(b"i%d.0" % t, None) for t in others]
    for t in others[:-1]:
        tm.handle(b"i%d.0" % t, wire.Switched(task=t, incarnation=0, epoch=0, moved=None))
    tm.handle(b"i%d.0" % others[-1], wire.Switched(task=others[-1], incarnation=0, epoch=1,
                                                   moved=None))  # the dead master's Switch
    tm.tick(tm.clock())
    assert len(told_to_switch()) == len(others)  # one has not switched yet
    tm.handle(b"i%d.0" % others[-1], wire.Switched(task=others[-1], incarnation=0, epoch=0,
                                                   moved=None))
    tm.tick(tm.clock())
    assert told_to_switch()[len(others):] == [(b"i%d.0" % checkpointer, changed)]
    (cut,) = [e for e in tm.observation.events if e["kind"] == "rebalance_cut_short"]
    assert sorted(cut["tasks"]) == sorted(tm.tasks) and cut["split_again"] == (changed or None)


def test_under_checkpoints_a_restarting_checkpoint_task_is_told_to_split_once_ready(
        adopting):
    """A checkpoint task restarting when the others have switched is not ready to be told:
    the new master waits for it (it starts on the adopted plan and waits for the split
    rather than roll back to the old one; before, nobody told it), then for its answer,
    and tells it again if it restarted before answering."""
    me = os.getpid()
    plan = topology().physical_plan(2, checkpoint_interval=0.3)
    tm = adopting({0: me, 1: me}, plan=plan)
    tm.carry.rebalancing(plan.epoch, {"sink": 2})
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    (checkpointer,) = tm.plan.component_tasks()[CHECKPOINTER]
    tm.tasks.restarted(checkpointer, 1)  # it dies now
    for t in (t for t in tm.tasks if t != checkpointer):
        tm.handle(b"i%d.0" % t, wire.Switched(task=t, incarnation=0, epoch=0, moved=None))

    def splits() -> list[bytes]:
        return [i for i, kind, fields in tm.sent if kind == "switch" and fields["counts"]]

    for _ in range(5):
        tm.clock.advance(1.0)
        tm.tick(tm.clock())
    assert splits() == [] and tm.splitting is not None
    tm.tasks.welcomed(checkpointer, 1, 4321)
    tm.tasks.made_ready(checkpointer)
    tm.supervision.idents[checkpointer] = b"i%d.1" % checkpointer
    tm.tick(tm.clock())
    assert splits() == [b"i%d.1" % checkpointer]
    # the Switch reached it before its welcome (dropped): it restarts, and is told again
    tm.tasks.restarted(checkpointer, 2)
    tm.tick(tm.clock())
    tm.tasks.welcomed(checkpointer, 2, 4322)
    tm.tasks.made_ready(checkpointer)
    tm.supervision.idents[checkpointer] = b"i%d.2" % checkpointer
    tm.tick(tm.clock())
    assert splits() == [b"i%d.1" % checkpointer, b"i%d.2" % checkpointer]
    assert tm.splitting is not None and tm.carry.cut_short() is not None
    # a Ready after the tell (it was welcomed only now): told again
    tm.handle(b"i%d.2" % checkpointer, wire.Ready(task=checkpointer, incarnation=2))
    assert splits()[-1] == b"i%d.2" % checkpointer and len(splits()) == 3
    tm.handle(b"i%d.2" % checkpointer, wire.Switched(task=checkpointer, incarnation=2,
                                                     epoch=tm.plan.epoch, moved={}))
    tm.tick(tm.clock())
    assert tm.splitting is None and tm.carry.cut_short() is None


# -- live settings the dead master never delivered (issue 23) ---------------------------------

def test_an_adopted_instance_is_told_only_the_saved_settings_it_does_not_run(adopting):
    me = os.getpid()
    tm = adopting({0: me, 1: me})
    spout, other = tm.plan.component_tasks()["numbers"]
    sink = tm.plan.component_tasks()["sink"][0]
    tm.settings.spout_pending = {"numbers": "auto"}
    tm.settings.trace = 0.5
    tm.settings.recordings = {("sink", "default"): True}
    for c in (0, 1):
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))
    tm.tick(tm.clock())
    tm.sent.clear()

    def stats(task, **record):
        tm.handle(b"", wire.control("stats", task=task, incarnation=0, record={
            "state": "running", **record}))

    # its tuner runs ("auto" told before): not told again; the trace rate it never got is
    stats(spout, kind="spout", live={"max_spout_pending": "auto"}, recording=[])
    stats(other, kind="spout", live={"max_spout_pending": "auto", "trace": 0.5})
    stats(sink, kind="bolt", live={}, recording=[])
    told = [(ident, kind, fields) for ident, kind, fields in tm.sent]
    assert told == [(b"i%d.0" % spout, "set", {"key": "trace", "value": 0.5}),
                    (b"i%d.0" % sink, "record", {"stream": "default", "on": True})]
    stats(spout, kind="spout", live={}, recording=[])  # once per adoption
    assert len(tm.sent) == 2
    again = {e["task"]: e["settings"] for e in tm.observation.events
             if e["kind"] == "settings_told_again"}
    assert again == {spout: ["trace"], sink: ["recording default"]}
