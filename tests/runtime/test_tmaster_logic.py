"""The topology master's bookkeeping, driven message by message on a fake clock.

No process is started: the master's handlers are called directly with the messages an
instance or a stream manager would send, and what it would send back is recorded.
"""

from __future__ import annotations

import pytest

from runtime import Topology, TopologyError, wire
from runtime.testing import ListSink, ListSpout

TIMEOUT = 1.5


@pytest.fixture
def make_master(offline_master):
    """A master for a two-spout, two-bolt topology in two containers, whose stream
    managers have said hello; what it sends is kept in ``sent``."""

    def make(**config):
        topo = Topology("logic")
        topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
        topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
        config = {"heartbeat_timeout": TIMEOUT, "message_timeout": 30.0, **config}
        tm = offline_master(topo, 2, **config)
        for c in range(tm.plan.containers):
            tm.supervision.sms[c] = {"ident": b"s%d.0" % c, "inbound": "", "pid": 0}
        return tm

    return make


@pytest.fixture
def master(make_master):
    return make_master()


def start(tm, task, incarnation=0):
    tm.handle(b"i%d.%d" % (task, incarnation),
              wire.control("hello", role="instance", id=task, incarnation=incarnation,
                           pid=100 + task))
    tm.handle(b"", wire.control("ready", task=task, incarnation=incarnation))


def report(tm, task, incarnation=0, **record):
    kind = "spout" if tm.tasks[task]["component"] == "numbers" else "bolt"
    tm.handle(b"", wire.control("stats", task=task, incarnation=incarnation,
                                record={"kind": kind, "state": "running", "executed": 1, **record}))


def events(tm, kind):
    return [e for e in tm.observation.events if e["kind"] == kind]


def restarts_sent(tm):
    return [(ident, fields) for ident, kind, fields in tm.sent if kind == "restart"]


def bolt(tm):
    return tm.component_tasks["sink"][0]


# -- heartbeats ----------------------------------------------------------------------------

def test_instances_that_keep_reporting_are_never_hung(master):
    for task in master.tasks:
        start(master, task)
    for _ in range(200):  # 50 s of reports every 0.25 s, as under backpressure too
        master.clock.advance(0.25)
        for task in master.tasks:
            report(master, task)
        master.tick(master.clock())
    assert events(master, "hung") == [] and restarts_sent(master) == []


def test_a_silent_ready_instance_is_restarted_through_its_stream_manager(master):
    for task in master.tasks:
        start(master, task)
    hung = bolt(master)
    master.clock.advance(1.0)
    for task in master.tasks:
        if task != hung:
            report(master, task)
    master.tick(master.clock())
    assert restarts_sent(master) == []  # 1.0 s: not yet
    master.clock.advance(0.75)
    master.tick(master.clock())
    (event,) = events(master, "hung")
    assert event["task"] == hung and event["component"] == "sink"
    assert event["seconds"] == pytest.approx(1.75) and event["incarnation"] == 0
    ((ident, fields),) = restarts_sent(master)
    container = master.tasks[hung]["container"]
    assert ident == b"s%d.0" % container
    assert fields["task"] == hung and fields["incarnation"] == 0
    assert "no heartbeat for 1.8 s" in fields["reason"] and "1.5 s" in fields["reason"]
    assert master.tasks[hung]["state"] == "restarting"
    assert master.tasks[hung]["restarts"] == 0  # counted when its stream manager reports


def test_a_task_is_restarted_once_and_its_late_reports_are_ignored(master):
    for task in master.tasks:
        start(master, task)
    hung = bolt(master)
    master.clock.advance(2.0)
    master.tick(master.clock())
    assert len(restarts_sent(master)) == 4  # nobody reported: all four
    sent = len(master.sent)
    report(master, hung, executed=10**9, state="running")  # SIGCONT before the SIGKILL
    master.clock.advance(5.0)
    master.tick(master.clock())
    assert len(master.sent) == sent  # no second restart while the first is under way
    assert master.tasks[hung].get("executed") != 10**9
    assert master.tasks[hung]["state"] == "restarting"


def test_the_new_incarnation_is_watched_once_ready(master):
    for task in master.tasks:
        start(master, task)
    hung = bolt(master)
    master.clock.advance(2.0)
    for task in master.tasks:
        if task != hung:
            report(master, task)
    master.tick(master.clock())
    reason = restarts_sent(master)[0][1]["reason"]
    master.handle(b"", wire.control("restarted", task=hung, incarnation=1,
                                    restarts=1, reason=reason))
    assert master.tasks[hung]["restarts"] == 1
    (restarted,) = events(master, "restarted")
    assert restarted["task"] == hung and restarted["reason"].startswith("hung: ")
    master.clock.advance(60.0)  # the new one takes its time to start: not watched yet
    for task in master.tasks:
        if task != hung:
            report(master, task)
    master.tick(master.clock())
    assert len(events(master, "hung")) == 1
    start(master, hung, incarnation=1)
    report(master, hung, incarnation=1)
    assert master.tasks[hung]["state"] == "running"
    master.clock.advance(1.6)
    master.tick(master.clock())
    assert [e["incarnation"] for e in events(master, "hung") if e["task"] == hung] == [0, 1]


def test_an_instance_that_never_became_ready_is_not_hung(master):
    task = bolt(master)
    master.handle(b"i", wire.control("hello", role="instance", id=task, incarnation=0,
                                     pid=1))
    master.clock.advance(100.0)
    master.tick(master.clock())
    assert events(master, "hung") == []


def test_a_stopping_master_restarts_nothing(master):
    start(master, bolt(master))
    master.stopping = True
    master.clock.advance(100.0)
    master.tick(master.clock())
    assert events(master, "hung") == []


def test_a_hung_task_in_a_restarting_container_is_left_to_the_container(master):
    task = bolt(master)
    start(master, task)
    del master.supervision.sms[master.tasks[task]["container"]]
    master.clock.advance(2.0)
    master.tick(master.clock())
    assert len(events(master, "hung")) == 1 and restarts_sent(master) == []


def test_no_heartbeat_timeout_means_no_supervision(make_master):
    master = make_master(heartbeat_timeout=None)
    start(master, bolt(master))
    report(master, bolt(master))
    master.clock.advance(1e6)
    master.tick(master.clock())
    assert events(master, "hung") == [] and restarts_sent(master) == []


@pytest.mark.parametrize("timeout", [0, -1, "10"])
def test_a_meaningless_heartbeat_timeout_is_refused_before_anything_starts(make_master,
                                                                           timeout):
    with pytest.raises(TopologyError, match="heartbeat_timeout must be a number of seconds"):
        make_master(heartbeat_timeout=timeout)


# -- spout reports -----------------------------------------------------------------------

def test_a_replay_storm_is_warned_about_once_per_episode_per_component(master):
    """The wait at the cap is max_spout_pending ÷ the acks per second since the task's
    first report: 1000 in flight at 100/s is 10 s (33 % of 30 s), at 37/s 27 s (90 %)."""
    a, b = master.component_tasks["numbers"]
    for task in (a, b):
        start(master, task)
    acked = {a: 0, b: 0}

    def second(task, per_s):  # one second later, ``per_s`` more acks
        acked[task] += per_s
        report(master, task, max_spout_pending=1000, acked=acked[task])

    report(master, a, max_spout_pending=1000, acked=0)  # the baselines
    report(master, b, max_spout_pending=1000, acked=0)
    master.clock.advance(1.0)
    second(a, 100)
    assert events(master, "replay_storm_warning") == []
    second(b, 37)  # b: 37/s, 1000 / 37 = 27 s, 90 %
    for _ in range(3):  # and so on, report after report: one warning
        master.clock.advance(1.0)
        second(b, 37)
    (warning,) = events(master, "replay_storm_warning")
    assert warning["component"] == "numbers" and warning["task"] == b
    assert warning["max_spout_pending"] == 1000 and warning["message_timeout"] == 30.0
    assert warning["acks_per_s"] < 37.5 and warning["wait_s"] > 26.6
    assert warning["ratio"] == round(warning["wait_s"] / 30.0, 3)
    assert "replayed with no failure anywhere" in warning["message"]
    second(a, 0)  # a now averages 100 acks in 5 s: 20/s, 50 s: over, same episode
    assert len(events(master, "replay_storm_warning")) == 1
    assert "1,000 ÷ 37/s = 27.0 s, 90% of message_timeout (30 s)" in warning["message"]


def test_a_new_episode_starts_after_the_ratio_fell_below_the_off_mark(master):
    a, _ = master.component_tasks["numbers"]
    start(master, a)
    report(master, a, max_spout_pending=1000, acked=0)
    master.clock.advance(10.0)
    report(master, a, max_spout_pending=1000, acked=300)  # 30/s: 33 s, over
    report(master, a, max_spout_pending=100, acked=300)  # a lower cap: 3.3 s, episode over
    report(master, a, max_spout_pending=1000, acked=300)  # a new one
    assert [w["max_spout_pending"] for w in events(master, "replay_storm_warning")] == [
        1000, 1000]


def test_a_restarted_spout_counts_its_acks_afresh(master):
    a, _ = master.component_tasks["numbers"]
    start(master, a)
    report(master, a, max_spout_pending=2500, acked=0)
    master.clock.advance(10.0)
    report(master, a, max_spout_pending=2500, acked=10_000)  # 1000/s: 2.5 s
    master.handle(b"", wire.control("restarted", task=a, incarnation=1, restarts=1,
                                    reason="exited with code 70"))
    start(master, a, incarnation=1)
    report(master, a, incarnation=1, max_spout_pending=2500, acked=0)  # a new baseline
    master.clock.advance(1.0)
    # 1000/s since its own start: 2.5 s (counted from the first incarnation's start and
    # its count, 1000 in 11 s would be 27.5 s, a false alarm)
    report(master, a, incarnation=1, max_spout_pending=2500, acked=1000)
    assert events(master, "replay_storm_warning") == []


@pytest.mark.parametrize("told", [True, False], ids=["restart told", "hello first"])
def test_a_restarted_task_shows_none_of_the_dead_incarnations_report(master, told):
    """From its restart to its own first report, a task's record has no numbers: not the
    dead incarnation's (a restarted spout showed, running as incarnation 1, the dead one's
    cap and pending, and a test took them for the new one's)."""
    a, _ = master.component_tasks["numbers"]
    start(master, a)
    report(master, a, max_spout_pending=7, pending=9, acked=50, reported=123.0)
    if told:  # its stream manager's word may come after the new incarnation's hello
        master.handle(b"", wire.control("restarted", task=a, incarnation=1, restarts=1,
                                        reason="killed by signal 9"))
    start(master, a, incarnation=1)
    record = master.tasks[a]
    assert (record["incarnation"], record["state"], record["kind"]) == (1, "running", "spout")
    assert not {"max_spout_pending", "pending", "acked", "reported"} & set(record)
    report(master, a, incarnation=1, max_spout_pending=7, pending=0)
    assert (record["max_spout_pending"], record["pending"]) == (7, 0)


def test_spout_reports_without_the_new_fields_change_nothing(master):
    a = master.component_tasks["numbers"][0]
    start(master, a)
    report(master, a)
    report(master, a, max_spout_pending=None, complete_latency_ms=None, tuner_turns=None)
    assert events(master, "replay_storm_warning") == [] and events(master, "tuner") == []


def test_each_tuner_turn_is_an_event_with_its_action_and_new_value(master):
    a = master.component_tasks["numbers"][0]
    start(master, a)
    turns = [(0, None, 100), (1, "increase", 125), (1, "increase", 125),
             (2, "increase", 157), (2, "increase", 157), (3, "no_change", 125),
             (4, "decrease", 74)]
    for n, action, value in turns:
        report(master, a, tuner_turns=n, tuner_action=action, max_spout_pending=value)
    assert [(e["action"], e["max_spout_pending"], e["turns"], e["task"], e["component"])
            for e in events(master, "tuner")] == [
        ("increase", 125, 1, a, "numbers"), ("increase", 157, 2, a, "numbers"),
        ("no_change", 125, 3, a, "numbers"), ("decrease", 74, 4, a, "numbers")]


def test_a_tuner_event_carries_the_turn_as_data(master):
    a = master.component_tasks["numbers"][0]
    start(master, a)
    turn = {"progress": 1040, "previous": 1000, "similar": True, "band": 50.0,
            "action": "no_change", "move": "restore", "before": 125, "after": 100,
            "total": 7040, "in_flight": 90}
    report(master, a, tuner_turns=2, tuner_action="no_change", max_spout_pending=100,
           tuner_turn=turn)
    (event,) = events(master, "tuner")
    assert {k: event[k] for k in turn} == turn and event["turns"] == 2
    # a latency-bound change is no auto-tuner turn: the old turn's data stays out of it
    report(master, a, tuner_turns=3, tuner_action="latency_bound", max_spout_pending=40,
           tuner_turn=turn)
    assert "progress" not in events(master, "tuner")[-1]


def test_a_restarted_spouts_tuner_counts_afresh(master):
    a = master.component_tasks["numbers"][0]
    start(master, a)
    report(master, a, tuner_turns=3, tuner_action="increase", max_spout_pending=195)
    master.handle(b"", wire.control("restarted", task=a, incarnation=1, restarts=1,
                                    reason="exited with code 70"))
    start(master, a, incarnation=1)
    report(master, a, incarnation=1, tuner_turns=1, tuner_action="increase",
           max_spout_pending=125)
    assert [e["turns"] for e in events(master, "tuner")] == [3, 1]


# -- dispatch ----------------------------------------------------------------------------

def test_a_message_the_master_does_not_take_is_dropped_and_counted(master):
    master.handle(b"s0.0", wire.Kill())  # the master sends kills; it never takes one
    master.handle(b"s0.0", wire.Tap(stream="default", n=1, seconds=1.0))
    assert master.dropped == 2 and master.sent == [] and not master.stopping


def test_a_message_whose_handling_fails_is_dropped_and_counted(master):
    master.handle(b"", wire.control("exception", task=9999, incarnation=0, error="?",
                                    traceback="", time=0.0))  # no task 9999
    master.handle(b"", wire.Stats(task=bolt(master), incarnation=0, record="not a record"))
    assert master.dropped == 2
    master.handle(b"", wire.Stats(task=bolt(master), incarnation=5, record="not a record"))
    assert master.dropped == 2  # a report of another incarnation is ignored, not handled


def test_kill_is_an_ordinary_question_answered_once_the_topology_is_down(master):
    master.handle(b"c", wire.AskKill(id=3))
    assert master.stopping and master.sent == []  # no answer yet
    master.tick(master.clock())  # a stopping master restarts nothing and answers nothing
    assert master.sent == []


def test_every_question_gets_one_reply_with_its_id(master):
    for question in (wire.AskStatistics(id=1), wire.AskStatus(id=2), wire.AskEvents(id=3),
                     wire.AskExceptions(id=4), wire.AskMetrics(id=5, window="nope"),
                     wire.AskPause(id=6), wire.AskResume(id=7),
                     wire.AskRecord(id=8, component="numbers", stream="default", on=False),
                     wire.AskSetMaxSpoutPending(id=9, value="auto"),
                     wire.AskSample(id=10, component="numbers", stream="default", n=1),
                     wire.AskLogs(id=11, component="sink", task=999)):
        master.handle(b"c", question)
    replies = [(f["id"], f["ok"]) for ident, kind, f in master.sent if kind == "reply"]
    assert replies == [(1, True), (2, True), (3, True), (4, True), (5, False), (6, True),
                       (7, True), (8, True), (9, True), (10, True), (11, False)]
    assert master.dropped == 0
