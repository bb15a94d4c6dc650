"""Live controls and grouped exceptions on real processes: pause and resume, changing
max_spout_pending of a running topology, and a repeated error shown once with a count.

Each test waits on the master's answers with a deadline. The one fixed wait is an
observation window (to see that a count does NOT grow), never a synchronisation.
"""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import pytest

from runtime import BasicBolt, Bolt, Spout, Topology

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST = {"spout_wait": 0.005, "stats_interval": 0.05}
OBSERVE = 0.7  # seconds: the window in which a paused spout must emit nothing


# -- components ---------------------------------------------------------------------------

class Tracked(Spout):
    """Emits ``[n]`` with ``msg_id=n``, at most ``rate`` a second, and appends each
    activate/deactivate call to ``hooks-<task>.txt`` in the run directory."""

    outputs = ["n"]

    def __init__(self, rate: int = 300) -> None:
        self.rate = rate

    def open(self, config, context):
        self.n, self.t0 = 0, time.monotonic()
        self.path = os.path.join(context.run_dir, f"hooks-{context.task_id}.txt")

    def _hook(self, what: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{what}\n")
        self.t0, self.n0 = time.monotonic(), self.n  # no burst to catch up after a pause

    def activate(self):
        self._hook("activate")

    def deactivate(self):
        self._hook("deactivate")

    def next_tuple(self):
        due = getattr(self, "n0", 0) + int((time.monotonic() - self.t0) * self.rate) + 1
        while self.n < due:
            self.emit([self.n], msg_id=self.n)
            self.n += 1


class Swallow(BasicBolt):
    outputs: list[str] = []

    def process(self, tup):
        pass


class FailsFiveTimes(Bolt):
    """Raises the same error on its first tuple, in each of its first five incarnations
    (counted in a file of the run directory), then executes everything."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.path = os.path.join(context.run_dir, "raised.txt")

    def process(self, tup):
        raised = os.path.getsize(self.path) if os.path.exists(self.path) else 0
        if raised < 5:
            with open(self.path, "a") as f:
                f.write("x")
            raise ValueError("the same error")


# -- helpers --------------------------------------------------------------------------------

def one(stats, component):
    (s,) = [s for s in stats if s.component == component]
    return s


def hooks(running, component):
    (task,) = running.plan.component_tasks()[component]
    path = os.path.join(running.run_dir, f"hooks-{task}.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split()


def wait_for(condition, timeout: float = 20.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(interval)
    return value


# -- tests ----------------------------------------------------------------------------------

def test_pause_stops_the_spout_while_its_acks_complete_and_resume_restarts_it():
    topo = Topology("pausing", **FAST)
    topo.spout("numbers", Tracked(rate=300))
    topo.bolt("sink", Swallow).shuffle_grouping("numbers")
    with topo.submit(containers=2, ackers=1) as running:
        # the first wait includes starting two containers: 20 s ran out at load 31
        running.wait_until(lambda s: one(s, "numbers").acked > 30, timeout=60)
        assert hooks(running, "numbers") == ["activate"]
        assert running.pause() is True and running.status()["paused"] is True
        wait_for(lambda: hooks(running, "numbers") == ["activate", "deactivate"])
        deactivated = time.time()  # the spout is inactive by now: it wrote the hook first
        # every tuple in flight is still acked: the paused spout keeps reading its input
        # (judged on a report sent after the pause: at 300 tuples/s with acks coming back
        # within milliseconds, an earlier report may show nothing pending by chance)
        paused = running.wait_until(
            lambda s: one(s, "numbers").reported > deactivated
            and one(s, "numbers").pending == 0
            and one(s, "numbers").acked == one(s, "numbers").emitted, timeout=20)
        time.sleep(OBSERVE)  # observation window: nothing may be emitted meanwhile
        still = running.statistics()
        assert one(still, "numbers").emitted == one(paused, "numbers").emitted
        assert running.pause() is False  # already paused
        assert running.resume() is True and running.status()["paused"] is False
        running.wait_until(lambda s: one(s, "numbers").acked
                           > one(paused, "numbers").acked + 30, timeout=20)
        assert hooks(running, "numbers") == ["activate", "deactivate", "activate"]
        kinds = [e["kind"] for e in running.events() if e["kind"] in ("paused", "resumed")]
    assert kinds == ["paused", "resumed"]


def test_set_max_spout_pending_changes_the_running_limit():
    topo = Topology("limits", **FAST)
    topo.spout("numbers", Tracked(rate=300))
    topo.bolt("sink", Swallow).shuffle_grouping("numbers")
    # target_latency=None: no latency bound, so that None is no limit at all
    with topo.submit(ackers=1, max_spout_pending=100, target_latency=None) as running:
        running.wait_until(lambda s: one(s, "numbers").max_spout_pending == 100
                           and one(s, "sink").kind == "bolt", timeout=20)
        (task,) = running.plan.component_tasks()["numbers"]
        assert running.set_max_spout_pending(7, component="numbers") == [task]
        running.wait_until(lambda s: one(s, "numbers").max_spout_pending == 7, timeout=20)
        assert running.set_max_spout_pending(None) == sorted(
            t for c, ts in running.plan.component_tasks().items() if c != "__acker"
            for t in ts)
        running.wait_until(lambda s: one(s, "numbers").max_spout_pending is None, timeout=20)
        with pytest.raises(ValueError, match="int >= 1"):
            running.set_max_spout_pending(0)
        with pytest.raises(ValueError, match="'sink' is a bolt"):
            running.set_max_spout_pending(5, component="sink")
        with pytest.raises(ValueError, match="no component 'nope'"):
            running.set_max_spout_pending(5, component="nope")
        events = [e for e in running.events() if e["kind"] == "max_spout_pending"]
    assert [(e["component"], e["value"]) for e in events] == [("numbers", 7), (None, None)]


def test_a_bolt_raising_the_same_error_five_times_shows_one_record_with_count_five():
    topo = Topology("repeated", **FAST)
    topo.spout("numbers", Tracked(rate=200))
    topo.bolt("flaky", FailsFiveTimes).shuffle_grouping("numbers")
    with topo.submit(restart_backoff_max=0.2) as running:
        (task,) = running.plan.component_tasks()["flaky"]
        running.wait_until(lambda s: one(s, "flaky").restarts >= 5
                           and one(s, "flaky").executed > 0, timeout=40)
        errors = wait_for(lambda: [e for e in running.exceptions() if e["count"] >= 5])
        everything = running.exceptions()
    assert everything == errors
    (error,) = errors
    assert (error["component"], error["count"], error["tasks"]) == ("flaky", 5, [task])
    assert error["fatal"] is True and error["first"] < error["last"]
    assert "ValueError: the same error" in error["traceback"]
