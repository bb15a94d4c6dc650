"""Tier 3: the submitting process. User code defined in ``__main__`` or importable only
from the submitter's ``sys.path`` reaches the instances; a topology dies with its
submitter unless it was submitted detached.

The submitters here are scripts run as subprocesses, so that they can be killed. They
inherit this test's environment, including the run root the leak guard watches.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

from runtime import Topology
from runtime.testing import ListSink, ListSpout, gone, read_sink, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = """\
import json, os, sys, time
from runtime import Bolt, Spout, Topology
from runtime.testing import ListSink, read_sink

def done(running, component, n):
    running.wait_until(lambda s: sum(x.executed for x in s if x.component == component) >= n,
                       timeout=20)
"""


def run_script(tmp_path, body: str) -> subprocess.Popen:
    script = tmp_path / f"submitter_{uuid.uuid4().hex[:8]}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """One line of the script's output, within ``timeout`` seconds."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"the submitter printed nothing; its stderr:\n{err.decode()}")
    return line


# -- 6. shipping user code ----------------------------------------------------------------

def test_classes_defined_in_main_reach_the_instances_by_value(tmp_path):
    proc = run_script(tmp_path, """
        def shout(word):  # a plain function of __main__, used by the bolt
            return word.upper() + "!"

        class Words(Spout):
            outputs = ["word"]
            def open(self, config, context):
                self.todo = ["storm", "heron", "flink"]
            def next_tuple(self):
                if self.todo:
                    self.emit([self.todo.pop()])

        class Shout(Bolt):
            outputs = ["word", "pid"]
            def process(self, tup):
                self.emit([shout(tup["word"]), os.getpid()])

        topo = Topology("main_classes", spout_wait=0.005)
        topo.spout("words", Words)
        topo.bolt("shout", Shout).shuffle_grouping("words")
        topo.bolt("sink", ListSink).shuffle_grouping("shout")
        with topo.submit() as running:
            done(running, "sink", 3)
            print(json.dumps({"sunk": read_sink(running.run_dir, "sink"),
                              "me": os.getpid()}))
    """)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert sorted(word for word, _pid in result["sunk"]) == ["FLINK!", "HERON!", "STORM!"]
    assert result["me"] not in {pid for _word, pid in result["sunk"]}


def test_a_module_importable_only_from_the_submitters_path_works(tmp_path, monkeypatch):
    name = f"tf_user_module_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent("""
        from runtime import Bolt

        class Negate(Bolt):
            outputs = ["n"]
            def process(self, tup):
                self.emit([-tup["n"]])
    """))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = __import__(name)
    try:
        topo = Topology("by_reference", spout_wait=0.005)
        topo.spout("numbers", ListSpout([[1], [2], [3]], fields=["n"]))
        topo.bolt("negate", module.Negate).shuffle_grouping("numbers")
        topo.bolt("sink", ListSink).shuffle_grouping("negate")
        with topo.submit() as running:
            running.wait_until(lambda s: sum(x.executed for x in s
                                             if x.component == "sink") == 3, timeout=20)
            sunk = read_sink(running.run_dir, "sink")
    finally:
        sys.modules.pop(name, None)
    assert sorted(sunk) == [[-3], [-2], [-1]]


# -- 7. the submitter dies ------------------------------------------------------------------

SUBMIT_AND_WAIT = """
    class Numbers(Spout):
        outputs = ["n"]
        def open(self, config, context):
            self.n = 0
        def next_tuple(self):
            if self.n < 100_000:
                self.emit([self.n])
                self.n += 1
                time.sleep(0.01)

    topo = Topology("orphan", spout_wait=0.005)
    topo.spout("numbers", Numbers)
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    running = topo.submit(containers=2, detached={detached})
    running.wait_active(timeout=20)
    print(json.dumps({{"pid": running.status()["pid"], "run_dir": running.run_dir}}),
          flush=True)
    {after}
"""


def topology_processes(master_pid: int) -> list[psutil.Process]:
    master = psutil.Process(master_pid)
    procs = [master, *master.children(recursive=True)]
    # master, two stream managers, two instances, and a warm spare per stream manager
    # once it has started one (runtime/processes/children.py)
    assert 1 + 2 + 2 <= len(procs) <= 1 + 2 + 2 + 2, procs
    return procs


@contextlib.contextmanager
def script_submitted(tmp_path, detached: bool, after: str):
    """A submitter script running SUBMIT_AND_WAIT, and what it printed (the master's pid
    and the run directory); the script is killed at the end."""
    proc = run_script(tmp_path, SUBMIT_AND_WAIT.format(detached=detached, after=after))
    try:
        yield proc, json.loads(read_line(proc, timeout=30))
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def test_the_topology_dies_with_its_submitter(tmp_path):
    with script_submitted(tmp_path, False, "time.sleep(600)") as (proc, info):
        procs = topology_processes(info["pid"])
        proc.kill()
        proc.wait(timeout=10)
        wait_for(lambda: all(gone(p) for p in procs), timeout=15,
                 what="the topology's processes to exit after its submitter was killed")


def test_stream_managers_that_outlived_their_master_die_with_the_submitter(tmp_path):
    """A stream manager outlives its master (a new one adopts it, issue 23), but not the
    submitter of a topology that is not detached: with both gone, the containers stop
    by themselves."""
    with script_submitted(tmp_path, False, "time.sleep(600)") as (proc, info):
        procs = topology_processes(info["pid"])
        psutil.Process(proc.pid).suspend()  # its handle must not start a new master
        procs[0].kill()  # the master
        wait_for(lambda: gone(procs[0]), timeout=15, what="the master to die")
        assert not any(gone(p) for p in procs[1:])  # the containers outlive it
        proc.kill()
        proc.wait(timeout=10)
        wait_for(lambda: all(gone(p) for p in procs), timeout=30,
                 what="the containers to stop once the submitter was gone too")


def test_a_detached_topology_outlives_its_submitter(tmp_path):
    proc = run_script(tmp_path, SUBMIT_AND_WAIT.format(detached=True, after="pass"))
    procs = []
    try:
        info = json.loads(read_line(proc, timeout=30))
        procs = topology_processes(info["pid"])
        assert proc.wait(timeout=20) == 0  # the submitter is gone...
        sunk = len(read_sink(info["run_dir"], "sink"))
        wait_for(lambda: len(read_sink(info["run_dir"], "sink")) > sunk + 10, timeout=20,
                 what="the detached topology to go on sinking tuples")
        assert not any(gone(p) for p in procs)  # ...and the topology runs on
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
        kill_detached(procs)


def kill_detached(procs: list[psutil.Process]) -> None:
    """Stop a topology we hold no handle on: SIGTERM its master, SIGKILL the group if it
    has not gone in time."""
    if not procs:
        return
    master = procs[0]
    if not gone(master):
        master.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not all(gone(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    stuck = [p for p in procs if not gone(p)]
    for p in stuck:
        p.kill()
    assert stuck == [], "the detached topology did not stop on SIGTERM"


def test_sigterm_to_the_master_stops_the_whole_topology():
    topo = Topology("sigterm", spout_wait=0.005)
    topo.spout("numbers", ListSpout([[i] for i in range(10)], fields=["n"]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    running = topo.submit(containers=2)
    running.wait_active(timeout=20)
    master = psutil.Process(running.status()["pid"])
    procs = [master, *master.children(recursive=True)]
    master.send_signal(signal.SIGTERM)
    wait_for(lambda: all(gone(p) for p in procs), timeout=15,
             what="the topology to stop after its master got SIGTERM")
    assert not running.alive
    running.kill()
