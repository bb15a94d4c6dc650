"""Tier 3: whole topologies on the local scheduler, with real processes and zmq sockets.

Each test starts a small topology (a master, one stream manager per container, one
process per task), waits on the master's statistics with a deadline, and checks what
came out. No test sleeps to synchronise or asserts on a duration.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import defaultdict

import cloudpickle
import psutil
import pytest

from runtime import Bolt, Spout, Topology, TopologyDead, wire
from runtime.testing import ListSink, ListSpout, WordCount, gone, read_sink, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

# The components below reach the instances by value, as a notebook's would.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = {"spout_wait": 0.005}  # a spout with nothing to emit idles 5 ms, not 1 ms


# -- components ---------------------------------------------------------------------------

class Numbers(Spout):
    """Emits ``[n, pid]`` for n = 0, 1, 2, ..., at most ``rate`` tuples a second."""

    outputs = ["n", "pid"]

    def __init__(self, rate: int = 200) -> None:
        self.rate = rate

    def open(self, config, context):
        self.n, self.pid, self.t0 = 0, os.getpid(), time.monotonic()

    def next_tuple(self):
        due = int((time.monotonic() - self.t0) * self.rate) + 1
        while self.n < due:
            self.emit([self.n, self.pid])
            self.n += 1


class Blocking(Spout):
    """Each ``next_tuple`` blocks for 20 ms, as a spout polling a queue would, then
    emits one tuple."""

    outputs = ["n"]

    def open(self, config, context):
        self.n = 0

    def next_tuple(self):
        time.sleep(0.02)
        self.emit([self.n])
        self.n += 1


class Hanging(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        time.sleep(3600)  # user code that never returns


class Poisoned(Bolt):
    """Raises on one value of ``n``; executes everything else."""

    outputs: list[str] = []
    poison = 30

    def process(self, tup):
        if tup["n"] == self.poison:
            raise ValueError(f"poison tuple {tup['n']}")


class Whoami(Spout):
    """Emits what its context says, once, from ``open``."""

    outputs = ["component", "task", "index", "parallelism", "where"]

    def open(self, config, context):
        self.emit([context.component_id, context.task_id, context.task_index,
                   context.parallelism, "open"])


class WhoamiBolt(Bolt):
    """Emits what its context says, once, from ``prepare``; passes its input on."""

    outputs = ["component", "task", "index", "parallelism", "where"]

    def prepare(self, config, context):
        self.emit([context.component_id, context.task_id, context.task_index,
                   context.parallelism, "prepare"])

    def process(self, tup):
        self.emit(list(tup.values))


class Ticking(Bolt):
    """Emits ``[ticks so far, is_tick, stream]`` on every tick tuple."""

    outputs = ["tick", "is_tick", "stream"]

    def prepare(self, config, context):
        self.ticks = 0

    def process_tick(self, tup):
        self.ticks += 1
        self.emit([self.ticks, tup.is_tick, tup.stream])


# -- helpers ------------------------------------------------------------------------------

def total(stats, component: str, field: str) -> int:
    return sum(getattr(s, field) for s in stats if s.component == component)


def one(stats, component: str):
    (s,) = [s for s in stats if s.component == component]
    return s


def topology_processes(running) -> list[psutil.Process]:
    """The master and every process under it (stream managers, instances)."""
    master = psutil.Process(running.status()["pid"])
    return [master, *master.children(recursive=True)]


def live_group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and not gone(proc):
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


# -- 1. word count across containers ------------------------------------------------------

def test_word_count_across_two_containers_is_exact():
    vocabulary = [f"w{i}" for i in range(20)]
    words = [[w] for i, w in enumerate(vocabulary) for _ in range(i + 1)]  # w_i: i+1 times
    topo = Topology("wordcount", **QUIET)
    topo.spout("words", ListSpout(words, fields=["word"]), parallelism=2)
    topo.bolt("count", WordCount, parallelism=2).fields_grouping("words", ["word"])
    topo.bolt("sink", ListSink).shuffle_grouping("count")
    with topo.submit(containers=2) as running:
        assert {t.container for t in running.plan.tasks} == {0, 1}
        running.wait_until(lambda s: total(s, "sink", "executed") == len(words)
                           and total(s, "words", "emitted") == len(words)
                           and total(s, "count", "executed") == len(words), timeout=20)
        records = read_sink(running.run_dir, "sink", with_source=True)
    counts_by_word = defaultdict(list)
    tasks_by_word = defaultdict(set)
    for (word, count), _src, src_task, _stream, _sink in records:
        counts_by_word[word].append(count)
        tasks_by_word[word].add(src_task)
    expected = {w: i + 1 for i, w in enumerate(vocabulary)}
    assert {w: max(c) for w, c in counts_by_word.items()} == expected
    assert {w: sorted(c) for w, c in counts_by_word.items()} == {
        w: list(range(1, n + 1)) for w, n in expected.items()}
    assert all(len(tasks) == 1 for tasks in tasks_by_word.values()), tasks_by_word
    count_tasks = set(running.plan.component_tasks()["count"])
    assert set().union(*tasks_by_word.values()) == count_tasks  # both tasks took a share


# -- 2. kill ------------------------------------------------------------------------------

def small_topology(name: str = "small") -> Topology:
    topo = Topology(name, **QUIET)
    topo.spout("numbers", Numbers(rate=100))
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return topo


def test_kill_leaves_no_process_and_is_idempotent(tupleflow_processes, without_spares):
    running = small_topology().submit(containers=2)
    running.wait_active(timeout=20)
    procs = topology_processes(running)
    # master, two stream managers, three instances (and a warm spare per container, if
    # one was started yet)
    assert len(without_spares(running, procs)) == 1 + 2 + 3 and len(procs) <= 1 + 2 + 3 + 2
    assert sorted(p.pid for p in tupleflow_processes()) == sorted(p.pid for p in procs)
    master = procs[0].pid
    running.kill()
    assert [p.pid for p in procs if not gone(p)] == []
    assert live_group_members(master) == []
    assert tupleflow_processes() == []
    running.kill()  # idempotent
    assert not running.alive
    with pytest.raises(TopologyDead):
        running.statistics()


def test_leaving_the_with_block_kills_the_topology(tupleflow_processes):
    with small_topology().submit() as running:
        running.wait_active(timeout=20)
        procs = topology_processes(running)
    assert [p.pid for p in procs if not gone(p)] == []
    assert tupleflow_processes() == []


def test_an_exception_in_the_with_block_still_kills_the_topology(tupleflow_processes):
    procs = []
    with pytest.raises(RuntimeError, match="the cell failed"), \
            small_topology().submit() as running:
        running.wait_active(timeout=20)
        procs = topology_processes(running)
        raise RuntimeError("the cell failed")
    assert procs and [p.pid for p in procs if not gone(p)] == []
    assert live_group_members(procs[0].pid) == []
    assert tupleflow_processes() == []


def test_kill_right_after_submit_leaves_no_process(tupleflow_processes):
    running = small_topology().submit(containers=2)
    running.kill()  # the containers are still starting
    assert tupleflow_processes() == []


def test_kill_stops_user_code_that_hangs(tupleflow_processes):
    topo = small_topology("hanging")
    topo.bolt("hang", Hanging).shuffle_grouping("numbers")
    running = topo.submit(containers=2)
    running.wait_until(lambda s: total(s, "sink", "executed") > 10, timeout=20)
    running.kill()
    assert tupleflow_processes() == []


def test_kill_sweeps_a_topology_whose_master_hangs(tupleflow_processes):
    running = small_topology("frozen").submit(containers=2)
    running.wait_active(timeout=20)
    procs = topology_processes(running)
    procs[0].suspend()  # SIGSTOP: the master hears nothing any more
    running.kill(timeout=0.5)
    assert tupleflow_processes() == []
    assert [p.pid for p in procs if not gone(p)] == []


def test_kill_while_another_thread_polls_statistics(tupleflow_processes):
    """A live view polls from a thread while the user kills the topology."""
    running = small_topology("polled").submit()
    running.wait_active(timeout=20)
    outcome = []
    polled = threading.Event()

    def poll():
        try:
            while True:
                running.statistics()
                polled.set()
        except Exception as exc:  # the outcome is checked below
            outcome.append(exc)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    assert polled.wait(timeout=10)
    running.kill()
    poller.join(timeout=10)
    assert not poller.is_alive()
    assert [type(e) for e in outcome] == [TopologyDead]
    assert tupleflow_processes() == []


def test_a_killed_master_is_replaced_while_its_topology_runs_on(tupleflow_processes):
    """A dead master no longer takes its topology along (issue 23): the handle starts a
    new one, which adopts the running stream managers and instances
    (test_mp_master_death.py has the at-least-once word count)."""
    running = small_topology("headless").submit(containers=2)
    running.wait_until(lambda s: total(s, "sink", "executed") > 10, timeout=20)
    old, containers = running.master_pid, running.status()["containers"]
    stream_managers = [psutil.Process(pid) for pid in containers.values()]
    psutil.Process(old).kill()
    wait_for(lambda: running.master_pid != old, timeout=60, what="a new master")
    assert running.alive
    wait_for(lambda: running.status()["state"] == "running", timeout=60,
             what="the new master to adopt the containers")
    executed = total(running.statistics(), "sink", "executed")
    running.wait_until(lambda s: total(s, "sink", "executed") > executed + 10, timeout=30)
    assert running.status()["containers"] == containers
    assert all(p.is_running() for p in stream_managers)
    running.kill()
    assert tupleflow_processes() == []


# -- 3. a bolt that raises ----------------------------------------------------------------

def test_a_raising_bolt_is_logged_reported_and_restarted_while_the_rest_runs():
    topo = Topology("poisoned", **QUIET)
    topo.spout("numbers", Numbers(rate=200))
    topo.bolt("flaky", Poisoned).shuffle_grouping("numbers")
    topo.bolt("steady", ListSink).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        (flaky_task,) = running.plan.component_tasks()["flaky"]
        running.wait_until(lambda s: one(s, "flaky").restarts >= 1
                           and one(s, "flaky").incarnation >= 1
                           and one(s, "flaky").state == "running", timeout=20)
        before = running.statistics()
        # the others were neither stopped nor restarted, and keep going
        after = running.wait_until(
            lambda s: one(s, "steady").executed > one(before, "steady").executed + 20
            and one(s, "numbers").emitted > one(before, "numbers").emitted + 20
            and one(s, "flaky").executed > 0, timeout=20)
        errors = running.exceptions()
        events = running.events()
        log_text = running.logs("flaky", flaky_task)
        sunk = read_sink(running.run_dir, "steady")
    for comp in ("numbers", "steady"):
        assert (one(after, comp).restarts, one(after, comp).incarnation) == (0, 0)
    (error,) = errors
    assert error["component"] == "flaky" and error["task"] == flaky_task
    assert error["incarnation"] == 0 and error["fatal"] is True
    assert "Poisoned.process" in error["error"] and "poison tuple 30" in error["error"]
    assert "Traceback" in error["traceback"] and "ValueError: poison tuple 30" in \
        error["traceback"]
    assert "ValueError: poison tuple 30" in log_text and "Traceback" in log_text
    assert any(e["kind"] == "restarted" and e["task"] == flaky_task
               and "code 70" in e["reason"] for e in events), events
    # tuple code ran in the spout's own process, never in this (the submitting) one
    spout_pids = {pid for _n, pid in sunk}
    assert spout_pids == {one(after, "numbers").pid}
    assert os.getpid() not in spout_pids


class Chatty(Bolt):
    """Says in its log that it is ready; takes its input silently."""

    outputs = []

    def prepare(self, config, context):
        print(f"chatty {context.task_id} ready", flush=True)

    def process(self, tup):
        pass


def test_an_instances_log_is_also_sent_by_its_container_through_the_master():
    topo = Topology("logs", **QUIET)
    topo.spout("numbers", ListSpout([[i] for i in range(10)], fields=["n"]))
    topo.bolt("chatty", Chatty, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        tasks = running.plan.component_tasks()["chatty"]
        assert {running.plan.task(t).container for t in tasks} == {0, 1}
        running.wait_until(lambda s: all(r.state == "running" for r in s), timeout=20)
        wait_for(lambda: all(f"chatty {t} ready" in running.logs("chatty", t) for t in tasks),
                 20, "both bolts' first line")
        for t in tasks:  # what a remote container's stream manager sends (docs/remote.md)
            sent = running._ask(wire.AskLogs, component="chatty", task=t)
            assert f"chatty {t} ready" in sent
            assert running.logs("chatty", t).startswith(sent)  # a log only grows
        with pytest.raises(RuntimeError, match="no task 999 of 'chatty'"):
            running._ask(wire.AskLogs, component="chatty", task=999)
        with pytest.raises(RuntimeError, match="no task"):
            running._ask(wire.AskLogs, component="numbers", task=tasks[0])


# -- 4. a value msgpack cannot carry --------------------------------------------------------

def test_an_unencodable_value_is_reported_dropped_and_the_topology_runs_on():
    tuples = [[i, {i} if i % 10 == 3 else i] for i in range(50)]  # a set is not msgpack
    good = [t for t in tuples if t[0] % 10 != 3]
    topo = Topology("unencodable", **QUIET)
    topo.spout("source", ListSpout(tuples, fields=["n", "value"]))
    topo.bolt("sink", ListSink).shuffle_grouping("source")
    with topo.submit() as running:
        stats = running.wait_until(lambda s: one(s, "source").dropped == 5
                                   and one(s, "sink").executed == len(good), timeout=20)
        errors = running.exceptions()
        sunk = read_sink(running.run_dir, "sink")
    assert sorted(sunk) == good
    source = one(stats, "source")
    assert (source.restarts, source.incarnation, source.state) == (0, 0, "running")
    assert [e["count"] for e in errors] == [5]  # the same error five times: one record
    for error in errors:
        assert error["component"] == "source" and error["fatal"] is False
        assert "'source'" in error["error"] and "stream 'default'" in error["error"]
        assert "value (set)" in error["error"]


def test_a_spout_whose_next_tuple_blocks_still_flushes_and_reports():
    """The instance must not make hundreds of slow next_tuple calls before it flushes:
    the first tuples reach the sink while the spout has emitted only a few."""
    topo = Topology("blocking", **QUIET)
    topo.spout("blocking", Blocking)
    topo.bolt("sink", ListSink).shuffle_grouping("blocking")
    with topo.submit() as running:
        stats = running.wait_until(lambda s: one(s, "sink").executed >= 3, timeout=30)
    assert one(stats, "blocking").emitted < 100


# -- 8. ticks and the context ---------------------------------------------------------------

def test_tick_tuples_reach_process_tick():
    topo = Topology("ticks", **QUIET)
    topo.spout("numbers", Numbers(rate=10))
    topo.bolt("ticker", Ticking, tick_freq_secs=0.05)
    topo.bolt("sink", ListSink).shuffle_grouping("ticker")
    with topo.submit() as running:
        running.wait_until(lambda s: one(s, "sink").executed >= 3, timeout=20)
        sunk = read_sink(running.run_dir, "sink")
    assert sunk[:3] == [[1, True, "__tick"], [2, True, "__tick"], [3, True, "__tick"]]


def test_instances_see_their_own_context():
    topo = Topology("context", **QUIET)
    topo.spout("who", Whoami, parallelism=3)
    topo.bolt("relay", WhoamiBolt, parallelism=2).shuffle_grouping("who")
    topo.bolt("sink", ListSink).shuffle_grouping("relay")
    with topo.submit(containers=2) as running:
        running.wait_until(lambda s: one(s, "sink").executed == 5, timeout=20)
        sunk = read_sink(running.run_dir, "sink")
        plan = running.plan
    expected = sorted([t.component, t.task, t.index, 3 if t.component == "who" else 2,
                       "open" if t.component == "who" else "prepare"]
                      for t in plan.tasks if t.component != "sink")
    assert sorted(sunk) == expected


# -- 9. a spout killed from outside ---------------------------------------------------------

def test_a_killed_spout_is_restarted_and_late_stats_do_not_win():
    topo = Topology("sigkill", **QUIET)
    topo.spout("numbers", Numbers(rate=200))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        first = running.wait_until(lambda s: one(s, "numbers").emitted > 0
                                   and one(s, "sink").executed > 0, timeout=20)
        old = one(first, "numbers")
        os.kill(old.pid, signal.SIGKILL)
        stats = running.wait_until(lambda s: one(s, "numbers").incarnation > old.incarnation
                                   and one(s, "numbers").state == "running"
                                   and one(s, "numbers").emitted > 0, timeout=20)
        new = one(stats, "numbers")
        assert new.restarts == 1 and new.pid != old.pid
        # a late report from the dead incarnation changes nothing
        send_as_instance(running, "stats", task=old.task, incarnation=old.incarnation,
                         record={"pid": old.pid, "emitted": 10**9, "state": "running",
                                 "incarnation": old.incarnation})
        after = one(running.statistics(), "numbers")
        assert (after.pid, after.incarnation) == (new.pid, new.incarnation)
        assert after.emitted < 10**9
        sink_before = one(stats, "sink").executed
        running.wait_until(lambda s: one(s, "sink").executed > sink_before + 20, timeout=20)
        events = running.events()
    assert any(e["kind"] == "restarted" and e["task"] == old.task
               and e["reason"] == f"killed by signal {signal.SIGKILL}" for e in events)


def send_as_instance(running, kind: str, **fields) -> None:
    """Send a sealed control message to the master, and return once it was handled
    (a request on the same connection is answered after it)."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(running.endpoint)
        secret = running._secret
        sock.send_multipart(wire.seal(secret, wire.control(kind, **fields)))
        sock.send_multipart(wire.seal(secret, wire.AskStatus(id=1)))
        assert sock.poll(10_000), "the master did not answer"
        assert isinstance(wire.unseal(secret, sock.recv_multipart()), wire.Reply)
    finally:
        sock.close()
        ctx.term()


# -- a stream manager killed from outside ---------------------------------------------------

def test_a_killed_stream_manager_is_restarted_with_its_instances():
    topo = Topology("smkill", **QUIET)
    topo.spout("numbers", Numbers(rate=100), parallelism=2)
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        in_c1 = [t.task for t in running.plan.tasks_in(1)]
        spout_c1 = next(t for t in in_c1 if running.plan.task(t).component == "numbers")
        by_task = {s.task: s for s in running.wait_until(
            lambda s: all(x.executed > 0 for x in s if x.component == "sink"), timeout=20)}
        # a first restart of the spout in container 1, so that its incarnation is 1
        os.kill(by_task[spout_c1].pid, signal.SIGKILL)
        by_task = {s.task: s for s in running.wait_until(
            lambda s: next(x for x in s if x.task == spout_c1).incarnation == 1
            and next(x for x in s if x.task == spout_c1).state == "running", timeout=20)}
        sm = psutil.Process(running.status()["containers"][1])
        instances = sm.children()  # its instances and, once they run, its warm spare
        pids = {by_task[t].pid for t in in_c1}
        assert pids <= {p.pid for p in instances} and len(instances) <= len(pids) + 1
        sm.kill()
        stats = running.wait_until(
            lambda s: all(x.incarnation > by_task[x.task].incarnation
                          and x.state == "running" for x in s if x.task in in_c1)
            and all(x.emitted > 0 for x in s if x.task == spout_c1), timeout=30)
        assert all(gone(p) for p in instances)  # they died with their stream manager
        executed = {s.task: s.executed for s in stats if s.component == "sink"}
        running.wait_until(lambda s: all(x.executed > executed[x.task] + 10 for x in s
                                         if x.component == "sink"), timeout=20)
        status = running.status()
        events = running.events()
    assert status["containers"][1] != sm.pid
    assert any(e["kind"] == "container_restarted" and e["container"] == 1 for e in events)
    assert {s.task: s.restarts for s in stats if s.task in in_c1} == {
        t: by_task[t].restarts + 1 for t in in_c1}


# -- where a run lives ------------------------------------------------------------------------

def test_a_long_topology_name_still_fits_the_socket_paths():
    topo = Topology("a_topology_with_a_rather_long_name_" + "x" * 60, **QUIET)
    topo.spout("numbers", ListSpout([[1], [2]], fields=["n"]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    with topo.submit(containers=2) as running:
        running.wait_until(lambda s: one(s, "sink").executed == 2, timeout=20)


def test_a_run_root_too_deep_for_unix_sockets_is_refused_before_anything_starts(
        tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setenv("TUPLEFLOW_RUN_ROOT", str(deep))
    with pytest.raises(ValueError, match="TUPLEFLOW_RUN_ROOT"):
        small_topology().submit()
    assert list(deep.iterdir()) == []
