"""A new master adopting a Spark topology's containers (runtime/processes/spark_adoption.py),
driven message by message on a fake clock, as tests/runtime/test_adoption.py drives the
local one: the master binds TCP with CURVE as on Spark, no stream manager is started, and
what it sends is recorded. The driver's side of a rebalance to a new number of containers
(``ContainerJob.resize``) is checked without Spark too. The real thing, on a loopback Spark
cluster: tests/runtime/test_remote_spark.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime import wire
from runtime.processes import adoption
from runtime.processes.curve import TopologyKeys
from runtime.processes.master import TopologyMaster
from runtime.processes.spark_adoption import SparkAdoption
from runtime.processes.spark_scheduler import ContainerJob
from runtime.testing import FakeClock

from .test_adoption import GENERATION, running, tasks_of, topology


@pytest.fixture
def adopting_remote(tmp_path):
    """A factory: ``make(pids)`` is a remote master adopting the containers whose stream
    managers said hello to the first (now dead) master with these pids (on their
    executors' hosts), at ``GENERATION``."""
    made = []
    remote = {"keys": TopologyKeys.generate().to_data(), "bind_host": "127.0.0.1",
              "advertise_host": "127.0.0.1"}
    boot = {"secret": b"s" * 32, "run_dir": str(tmp_path), "bundle": b"", "remote": remote,
            "plan": topology().physical_plan(2).to_data()}

    def make(pids: dict[int, int]) -> TopologyMaster:
        first = TopologyMaster(boot)  # it writes where it listens, then "dies"
        close(first)
        for c, pid in pids.items():
            adoption.write_container(str(tmp_path), c, pid, GENERATION)
        tm = TopologyMaster({**boot, "adopt": True, "master_restarts": 1})
        made.append(tm)
        assert tm.endpoint == first.endpoint and isinstance(tm.adoption, SparkAdoption)
        tm.clock = FakeClock(1000.0)
        tm.adoption = SparkAdoption(tm, 1, tm.clock())
        tm.sent = []
        tm.send = lambda ident, msg: tm.sent.append((ident, msg.KIND, msg.fields()))
        return tm

    yield make
    for tm in made:
        close(tm)


def close(tm) -> None:
    tm.sock.close(linger=0)
    tm.gate.stop()
    tm.zctx.term()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def answer_all(tm, containers=(0, 1)) -> None:
    for c in containers:
        tm.handle(b"s%d.3" % c, running(tm, c, {t: 0 for t in tasks_of(tm, c)}))


def test_a_container_is_asked_and_adopted_whatever_its_pid_says_here(adopting_remote):
    """A pid on an executor's host means nothing on this one: a pid that no process here
    has is still asked, and adopted when it answers; nothing is watched by pid."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tm = adopting_remote({0: dead.pid, 1: dead.pid})
    tm.tick(tm.clock())
    assert [i for i, kind, _ in tm.sent if kind == "adopt"] == [b"s0.3", b"s1.3"]
    answer_all(tm)
    tm.tick(tm.clock())
    sup = tm.supervision
    assert tm.adoption.done and sup.state == "running" and sup.containers == {}
    assert sup.status()["containers"] == {0: os.getpid(), 1: os.getpid()}  # as reported
    (event,) = [e for e in tm.observation.events if e["kind"] == "master_restarted"]
    assert event["adopted"] == [0, 1] and event["started_again"] == []


def test_a_silent_container_is_given_up_but_never_killed_nor_started_here(
        adopting_remote, sleeper):
    tm = adopting_remote({0: os.getpid(), 1: sleeper.pid})
    answer_all(tm, [0])
    tm.tick(tm.clock())
    assert not tm.adoption.done  # container 1 still has time to answer
    tm.clock.advance(adoption.ADOPT_WAIT + 1)
    tm.tick(tm.clock())
    assert tm.adoption.done and tm.adoption.given_up == {1}
    assert sleeper.poll() is None  # not ours to kill: its Spark task supervises it
    assert tm.supervision.containers == {}  # and nothing was started here
    (event,) = [e for e in tm.observation.events if e["kind"] == "master_restarted"]
    assert event["adopted"] == [0] and event["started_again"] == [1]


def test_a_container_restarted_while_no_master_ran_is_welcomed_after_the_adoption(
        adopting_remote):
    """Its Spark task started it again (a newer generation): its hello waits for the
    adoption, then every container gets the welcome with this master's incarnations."""
    tm = adopting_remote({0: os.getpid(), 1: os.getpid()})
    tm.handle(b"s1.4", wire.Hello(role="sm", id=1, incarnation=GENERATION + 1, pid=77,
                                  inbound="in-new", run_dir="there"))
    assert [k for _, k, _ in tm.sent if k == "welcome"] == []
    answer_all(tm, [0])
    tm.tick(tm.clock())
    assert tm.adoption.done
    welcomed = {i: fields for i, kind, fields in tm.sent if kind == "welcome"}
    assert sorted(welcomed) == [b"s0.3", b"s1.4"]
    assert welcomed[b"s1.4"]["inbound"] == {"0": "in-0", "1": "in-new"}
    assert set(welcomed[b"s1.4"]["incarnations"]) == set(tm.tasks)
    assert adoption.read_containers(tm.boot["run_dir"], 2)[1] == {
        "pid": 77, "generation": GENERATION + 1}  # for the next master, should this one die


def test_a_rebalance_to_new_containers_has_the_next_round_run_that_many_tasks():
    job = ContainerJob(None, "resized", 2, {"name": "resized"})
    assert job._next_size() is False  # a round that ends with no resize asked ends the job
    job.resize(3)
    assert job._next_size() is True and job.containers == 3 and job.resized == 1
    assert job._next_size() is False  # asked once, done once
    job.resize(4)
    job.resize(None)  # the master refused the rebalance
    assert job._next_size() is False and job.containers == 3
    job.resize(5)
    job.stopping.set()  # killed meanwhile: no new round
    assert job._next_size() is False and job.containers == 3
    assert job.state()["resized"] == 1 and job.state()["containers"] == 3
