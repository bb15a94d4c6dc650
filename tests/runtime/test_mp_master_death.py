"""A master that may die (issue 23, part 1): an at-least-once word count whose topology
master is SIGKILLed keeps routing and acking, a new master adopts its running processes,
and every sentence is acked, with real processes and sockets.

Waits poll the handle's statistics, or the sink's file, with deadlines; nothing sleeps to
synchronise.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import psutil
import pytest

from runtime import Topology, TopologyDead
from runtime.model.constants import DEFAULTS, STATS_INTERVAL
from runtime.testing import ListSink, ListSpout, SplitSentence, WordCount, gone, read_sink, wait_for

from .test_checkpoints_mp import GO, go

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SENTENCES = 6000
RATE = 250  # sentences a second per spout task until go(): the run outlives the kill and
# the adoption; after them the rest is emitted as fast as max spout pending lets it
OPTIONS = {"ackers": 2, "max_spout_pending": 200, "message_timeout": 10.0, "spout_wait": 0.005}


def sentence(i: int) -> list[str]:
    """Sentence ``i`` carries a word of its own (``m<i>``), so the sink shows it arrived."""
    return [f"m{i} w{i % 7} w{i % 11}"]


def word_count(name: str) -> Topology:
    topo = Topology(name, **OPTIONS)
    sentences = ListSpout([sentence(i) for i in range(SENTENCES)], ["sentence"], replay=True,
                          rate=RATE, rate_until=GO)
    topo.spout("sentences", sentences, parallelism=2)
    topo.bolt("split", SplitSentence, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("count", WordCount, parallelism=2).fields_grouping("split", ["word"])
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("count")
    return topo


STATS_EVERY = float(DEFAULTS[STATS_INTERVAL])  # seconds between an instance's reports


def flowing(name: str, **options):
    """The word count, submitted in two containers, once some sentences are acked."""
    running = word_count(name).submit(containers=2, **options)
    running.wait_until(lambda s: acked(s) > 300, timeout=90, interval=0.1)
    return running


def acked(stats) -> int:
    return sum(s.acked for s in stats if s.component == "sentences")


def all_acked(stats) -> bool:
    """Every sentence acked (a sentence is replayed only after it failed, so it is acked
    at most once)."""
    return acked(stats) == SENTENCES


def sink_words(running) -> list[str]:
    return [values[0] for values in read_sink(running.run_dir, "sink")]


def unseen(running) -> list[int]:
    """The sentences whose own word never reached the sink (lost ones)."""
    seen = set(sink_words(running))
    return [i for i in range(SENTENCES) if f"m{i}" not in seen]


def kill_master(running, before_the_new_one) -> None:
    """SIGKILL the master, have ``before_the_new_one()`` run while it is dead and no new
    one has started (the handle's relaunch waits for it), and wait for the new one."""
    old, relaunch = running.master_pid, running._link.relaunch

    def later(n):
        before_the_new_one()
        return relaunch(n)

    running._link.relaunch = later
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: running.master_pid != old, 90, "a new master")


def test_a_killed_master_is_replaced_and_the_data_flow_goes_on_without_it(tupleflow_processes):
    running = flowing("orphaned")
    old, containers = running.master_pid, running.status()["containers"]
    stream_managers = [psutil.Process(pid) for pid in containers.values()]
    instances = {s.task: s.pid for s in running.statistics()}
    flowed = []

    def sink_grows_with_no_master():
        at_death = len(sink_words(running))
        wait_for(lambda: len(sink_words(running)) > at_death + 300, 60,
                 "words to reach the sink while no master runs")
        flowed.append(len(sink_words(running)) - at_death)

    kill_master(running, before_the_new_one=sink_grows_with_no_master)
    go(running)
    stats = running.wait_until(all_acked, timeout=150, interval=0.2)
    status, events = running.status(), running.events()

    assert flowed and flowed[0] > 300  # routed and processed with no master at all
    assert status["pid"] == running.master_pid != old
    assert status["containers"] == containers  # the same stream managers, adopted
    assert all(p.is_running() for p in stream_managers)
    assert {s.task: s.pid for s in stats} == instances  # no instance restarted for it
    assert {s.master_restarts for s in stats} == {1} and status["master_restarts"] == 1
    (restarted,) = [e for e in events if e["kind"] == "master_restarted"]
    assert restarted["adopted"] == [0, 1] and restarted["started_again"] == []
    assert unseen(running) == []
    running.kill()
    assert tupleflow_processes() == []


def test_a_container_that_died_with_no_master_is_started_again_by_the_new_one(
        tupleflow_processes):
    # the tuples container 1 held when it died are replayed once they time out: a timeout
    # shorter than OPTIONS' (as the chaos tests' 4 s) so that the run does not wait 10 s
    running = flowing("bereft", message_timeout=4.0)
    containers = running.status()["containers"]
    victim = psutil.Process(containers[1])

    def kill_container_1():
        victim.kill()
        wait_for(lambda: gone(victim), 30, "container 1's stream manager to die")

    kill_master(running, before_the_new_one=kill_container_1)
    go(running)
    running.wait_until(all_acked, timeout=150, interval=0.2)
    status = running.status()
    (restarted,) = [e for e in running.events() if e["kind"] == "master_restarted"]
    assert restarted["adopted"] == [0] and restarted["started_again"] == [1]
    assert status["containers"][0] == containers[0]
    assert status["containers"][1] != containers[1]
    assert unseen(running) == []
    running.kill()
    assert tupleflow_processes() == []


def test_a_paused_topology_stays_paused_under_a_new_master_and_resumes(tupleflow_processes):
    running = flowing("paused")
    assert running.pause() is True
    # a report a whole interval after the pause is from a paused spout: pending 0 in an
    # earlier one may be a moment between two emits of the running spout (CI saw 45
    # more sentences emitted after such a moment)
    paused_at = time.time() + STATS_EVERY
    emitted = running.wait_until(lambda s: all(x.pending == 0 and (x.reported or 0) > paused_at
                                               for x in s if x.component == "sentences"),
                                 timeout=60)
    old = running.master_pid
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: running.master_pid != old, 90, "a new master")
    running.wait_active(timeout=90)
    assert running.status()["paused"] is True
    held = running.wait_until(lambda s: all(x.master_restarts == 1 and x.reported
                                            for x in s), timeout=60)
    assert sum(s.emitted for s in held if s.component == "sentences") == \
        sum(s.emitted for s in emitted if s.component == "sentences")  # nothing emitted
    assert running.resume() is True
    go(running)
    running.wait_until(all_acked, timeout=150, interval=0.2)
    assert unseen(running) == []
    running.kill()
    assert tupleflow_processes() == []


def test_a_master_that_keeps_dying_is_given_up_and_kill_sweeps_every_master_s_processes(
        tupleflow_processes):
    running = word_count("cursed").submit(containers=2)
    running.wait_active(timeout=90)
    masters = []
    for _ in range(4):  # REVIVALS (3) new masters a minute, then no more
        pid = running.master_pid
        masters.append(pid)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda pid=pid: running.master_pid != pid or not running.alive, 90,
                 "a new master, or the handle giving up")
    assert running.master_restarts == 3 and not running.alive
    with pytest.raises(TopologyDead, match="not replaced again"):
        running.statistics()
    assert len(set(masters)) == 4
    # the stream managers outlived every master; kill sweeps each master's group
    assert any("runtime.processes.stmgr" in " ".join(p.cmdline())
               for p in tupleflow_processes())
    running.kill()
    assert tupleflow_processes() == []
