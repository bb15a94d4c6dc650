"""Live controls and grouped exceptions, at the master's level: no process is started.

The master's handlers are called with the messages instances would send, and what it
would send back is recorded (as in test_tmaster_logic.py).
"""

from __future__ import annotations

import re

import pytest

from runtime import Spout, Topology, wire
from runtime.model.controls import check_keep, check_max_spout_pending, check_n
from runtime.observe.exceptions import ExceptionLog, signature
from runtime.testing import ListSink, ListSpout


def traceback_at(line: int, error: str = "ValueError: bad") -> str:
    return (f'Traceback (most recent call last):\n  File "job.py", line {line}, in process\n'
            f"    raise ValueError('bad')\n{error}\n")


def report(task=3, time=1.0, line=9, error="Split.process raised ValueError: bad",
           component="split", fatal=True, last="ValueError: bad") -> dict:
    return {"component": component, "task": task, "incarnation": 0, "error": error,
            "traceback": traceback_at(line, last), "time": time, "fatal": fatal}


# -- grouping exceptions (pure) ------------------------------------------------------------

def test_the_same_error_is_one_record_with_a_count_times_and_tasks():
    log = ExceptionLog()
    for task, t in [(3, 10.0), (4, 11.0), (3, 12.0), (3, 13.0), (4, 14.0)]:
        log.add(report(task=task, time=t))
    (record,) = log.records()
    assert (record["count"], record["first"], record["last"]) == (5, 10.0, 14.0)
    assert record["tasks"] == [3, 4] and record["task"] == 4 and record["time"] == 14.0
    assert record["component"] == "split" and record["fatal"] is True
    assert "ValueError: bad" in record["traceback"]


@pytest.mark.parametrize("other", [
    {"component": "count"},  # another component
    {"line": 12},  # raised somewhere else
    {"error": "Split.process raised KeyError: 'x'", "last": "KeyError: 'x'"},  # another error
])
def test_errors_differing_in_component_place_or_message_are_kept_apart(other):
    log = ExceptionLog()
    log.add(report())
    log.add(report(time=2.0, **other))
    assert [r["count"] for r in log.records()] == [1, 1]


def test_records_are_newest_last_and_bounded_dropping_the_one_seen_longest_ago():
    log = ExceptionLog(limit=2)
    log.add(report(line=1, time=1.0))
    log.add(report(line=2, time=2.0))
    log.add(report(line=1, time=3.0))  # line 1 seen again: now the newest
    assert [r["count"] for r in log.records()] == [1, 2]
    log.add(report(line=3, time=4.0))  # a third distinct error: line 2 goes
    assert [signature("split", r["error"], r["traceback"])[3] for r in log.records()] == [
        'File "job.py", line 1, in process', 'File "job.py", line 3, in process']
    assert len(log) == 2


def test_a_group_is_fatal_if_any_occurrence_was_and_records_are_copies():
    log = ExceptionLog()
    log.add(report(fatal=False))
    log.add(report(fatal=True, time=2.0))
    log.add(report(fatal=False, time=3.0))
    records = log.records()
    assert records[0]["fatal"] is True
    records[0]["tasks"].append(99)
    assert log.records()[0]["tasks"] == [3]


def test_a_report_without_frames_groups_on_its_message():
    assert signature("c", "e", "TypeError: no\n") == ("c", "e", "TypeError: no", "")
    assert signature("c", "e", "") == ("c", "e", "", "")


# -- one validator per live setting (table-driven) -------------------------------------------

@pytest.mark.parametrize(("value", "parsed"), [
    (1, 1), (500, 500), (None, None), ("auto", "auto"),
    (" 50 ", 50), ("7", 7), ("Auto", "auto"), (" AUTO ", "auto"), ("none", None), ("None", None),
    (0, ValueError), (-1, ValueError), ("0", ValueError), ("-1", ValueError), (True, ValueError),
    (False, ValueError), (1.0, ValueError), ("", ValueError), ("1.5", ValueError),
    ("lots", ValueError), ("５", ValueError), ([3], ValueError),
])
def test_max_spout_pending_has_one_reading(value, parsed):
    if parsed is ValueError:
        with pytest.raises(ValueError, match=r"^max_spout_pending must be .*, not " +
                           re.escape(repr(value)) + "$"):
            check_max_spout_pending(value)
    else:
        assert check_max_spout_pending(value) == parsed
        assert type(check_max_spout_pending(value)) is type(parsed)


@pytest.mark.parametrize(("value", "parsed"), [
    (1, 1), (10_000, 10_000), ("20", 20), (" 5 ", 5),
    (0, ValueError), (10_001, ValueError), (True, ValueError), (2.5, ValueError),
    ("", ValueError), ("-3", ValueError), ("x", ValueError), (None, ValueError),
])
def test_a_taps_n_has_one_reading(value, parsed):
    if parsed is ValueError:
        with pytest.raises(ValueError, match=r"^n must be an int from 1 to 10000, not "):
            check_n(value)
    else:
        assert check_n(value) == parsed


@pytest.mark.parametrize(("value", "parsed"), [
    (10, 10.0), (0.5, 0.5), (600, 600.0),
    (0, ValueError), (-1, ValueError), (601, ValueError), ("10", ValueError),
    (None, ValueError), (True, ValueError),
])
def test_a_taps_keep_has_one_reading(value, parsed):
    if parsed is ValueError:
        with pytest.raises(ValueError, match=r"^keep must be a number of seconds in \(0, 600\]"):
            check_keep(value)
    else:
        assert check_keep(value) == parsed


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "fast", [3]])
def test_a_bad_max_spout_pending_is_refused_with_a_clear_error(value):
    with pytest.raises(ValueError, match="an int >= 1, None .no limit. or 'auto'"):
        check_max_spout_pending(value)


def test_spouts_have_no_op_activate_and_deactivate_hooks():
    spout = Spout()
    assert spout.activate() is None and spout.deactivate() is None


# -- the master ------------------------------------------------------------------------------

@pytest.fixture
def master(offline_master):
    """Two spout tasks and two bolt tasks in two containers; sends are recorded."""
    topo = Topology("controls")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return offline_master(topo, 2, heartbeat_timeout=None)


def start(tm, task, incarnation=0):
    tm.handle(b"i%d.%d" % (task, incarnation),
              wire.control("hello", role="instance", id=task, incarnation=incarnation,
                           pid=100 + task))
    tm.handle(b"", wire.control("ready", task=task, incarnation=incarnation))
    kind = "spout" if tm.tasks[task]["component"] == "numbers" else "bolt"
    tm.handle(b"", wire.control("stats", task=task, incarnation=incarnation,
                                record={"kind": kind, "state": "running"}))


def start_all(tm):
    for task in tm.tasks:
        start(tm, task)
    tm.sent.clear()


def ask(tm, what, **fields):
    tm.handle(b"client", wire.control(f"ask_{what}", id=7, **fields))
    ((ident, kind, reply),) = [s for s in tm.sent if s[1] == "reply"]
    tm.sent.remove((ident, kind, reply))
    return reply


def told(tm, kind):
    return sorted(ident for ident, k, _ in tm.sent if k == kind)


def idents(tm, tasks):
    return sorted(b"i%d.0" % t for t in tasks)


def kinds(tm, kind):
    return [e for e in tm.observation.events if e["kind"] == kind]


def test_pause_deactivates_every_instance_and_resume_activates_them_again(master):
    start_all(master)
    reply = ask(master, "pause")
    assert reply["ok"] and reply["value"] is True
    assert told(master, "deactivate") == idents(master, master.tasks)
    assert ask(master, "status")["value"]["paused"] is True
    assert ask(master, "pause")["value"] is False  # already paused: nothing sent again
    assert len(told(master, "deactivate")) == len(master.tasks)
    master.sent.clear()
    assert ask(master, "resume")["value"] is True
    assert told(master, "activate") == idents(master, master.tasks)
    assert ask(master, "status")["value"]["paused"] is False
    assert [e["kind"] for e in master.observation.events if e["kind"] in ("paused", "resumed")] == [
        "paused", "resumed"]


def test_a_spout_restarted_while_paused_starts_paused(master):
    start_all(master)
    ask(master, "pause")
    spout = master.component_tasks["numbers"][0]
    master.handle(b"", wire.control("restarted", task=spout, incarnation=1,
                                    restarts=1, reason="exit code 70"))
    master.sent.clear()
    start(master, spout, incarnation=1)
    assert told(master, "activate") == []
    ask(master, "resume")
    assert b"i%d.1" % spout in told(master, "activate")


def test_paused_before_start_the_spouts_are_not_activated_until_resumed(master):
    assert ask(master, "pause")["value"] is True
    assert told(master, "deactivate") == []  # nobody is ready yet
    for task in master.tasks:
        start(master, task)
    assert master.supervision.state == "running" and told(master, "activate") == []
    ask(master, "resume")
    assert told(master, "activate") == idents(master, master.tasks)


def test_set_max_spout_pending_is_forwarded_remembered_and_recorded(master):
    start_all(master)
    spouts = master.component_tasks["numbers"]
    reply = ask(master, "set_max_spout_pending", value=50, component="numbers")
    assert reply["ok"] and reply["value"] == list(spouts)
    sets = [(ident, f) for ident, k, f in master.sent if k == "set"]
    assert sorted(i for i, _ in sets) == idents(master, spouts)
    assert all(f == {"key": "max_spout_pending", "value": 50} for _, f in sets)
    (event,) = kinds(master, "max_spout_pending")
    assert (event["component"], event["value"], event["tasks"]) == ("numbers", 50, list(spouts))
    # a restarted spout is told the new value before it is activated
    master.handle(b"", wire.control("restarted", task=spouts[0], incarnation=1,
                                    restarts=1, reason="exit code 70"))
    master.sent.clear()
    start(master, spouts[0], incarnation=1)
    assert [(k, f.get("value")) for _, k, f in master.sent if k != "welcome"] == [
        ("set", 50), ("activate", None)]


def test_set_max_spout_pending_for_every_component_and_to_auto_or_none(master):
    start_all(master)
    assert ask(master, "set_max_spout_pending", value="auto")["ok"]
    assert len(told(master, "set")) == 4  # bolts ignore it; the acker is never told
    assert ask(master, "set_max_spout_pending", value=None, component="numbers")["ok"]
    assert master.settings.spout_pending == {"numbers": None, "sink": "auto"}


@pytest.mark.parametrize(("fields", "message"), [
    ({"value": 0}, "int >= 1"),
    ({"value": 5, "component": "sink"}, "'sink' is a bolt"),
    ({"value": 5, "component": "nope"}, "no component 'nope'"),
    ({"value": 5, "component": "__acker"}, "no component '__acker'"),
])
def test_a_bad_setting_is_refused_with_the_reason(master, fields, message):
    start_all(master)
    reply = ask(master, "set_max_spout_pending", **fields)
    assert reply["ok"] is False and message in reply["value"]
    assert told(master, "set") == [] and master.settings.spout_pending == {}


def test_exceptions_are_answered_grouped(master):
    task = master.component_tasks["sink"][0]
    for t in range(3):
        master.handle(b"", wire.control("exception", task=task, incarnation=t,
                                        error="Sink.process raised ValueError: bad",
                                        traceback=traceback_at(4), time=100.0 + t))
    (record,) = ask(master, "exceptions")["value"]
    assert (record["component"], record["count"], record["first"], record["last"]) == (
        "sink", 3, 100.0, 102.0)
    assert record["tasks"] == [task] and record["incarnation"] == 2 and record["fatal"]
