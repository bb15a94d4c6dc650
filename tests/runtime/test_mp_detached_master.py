"""A detached topology's master (issue 23): submitted ``detached=True`` by a script that
then exits, its master SIGKILLed, a stream manager starts a new one (nobody else is
watching), data flows on, and a handle attached from this process (by run directory or
by name) follows the new master, reads statistics and kills the topology cleanly.

The submitter is a script run as a subprocess (as in test_mp_submitter.py), so that it
can be gone; it inherits this test's run root, which the leak guard watches. Waits poll
with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

import runtime
from runtime.processes import detached as _detached
from runtime.testing import gone, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SUBMIT_AND_LEAVE = """\
import json
from runtime import Topology
from runtime.testing import ListSink, ListSpout

topo = Topology("drifter", ackers=1, max_spout_pending=100, spout_wait=0.005,
                message_timeout=10.0)
topo.spout("numbers", ListSpout([[i] for i in range(100000)], ["n"], replay=True, rate=150),
           parallelism=2)
topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
running = topo.submit(containers=2, detached=True)
running.wait_until(lambda s: sum(x.acked for x in s if x.component == "numbers") > 50,
                   timeout=90, interval=0.1)
print(json.dumps({"pid": running.master_pid, "run_dir": running.run_dir}), flush=True)
"""


def submit_and_leave(tmp_path) -> dict:
    """Run the submitter script to its end (its handle and process are gone); what it
    printed: the master's pid and the run directory."""
    script = tmp_path / "submit_and_leave.py"
    script.write_text(textwrap.dedent(SUBMIT_AND_LEAVE))
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, env=env,
                          cwd=str(tmp_path), timeout=150)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().splitlines()[-1])


def acked(stats) -> int:
    return sum(s.acked for s in stats if s.component == "numbers")


def test_a_stream_manager_replaces_the_master_of_a_detached_topology(tmp_path,
                                                                     tupleflow_processes):
    info = submit_and_leave(tmp_path)
    running = runtime.attach(info["run_dir"])
    assert running.master_pid == info["pid"] and running.name == "drifter"
    before = acked(running.wait_until(lambda s: acked(s) > 100, timeout=60, interval=0.1))
    containers = running.status()["containers"]

    old = psutil.Process(info["pid"])
    old.kill()
    wait_for(lambda: gone(old), 30, "the master to die")
    # nobody asked: the stream manager of container 0 starts the new master, and the
    # attached handle follows it
    wait_for(lambda: running.master_pid != info["pid"], 90, "the handle to see a new master")
    new = psutil.Process(running.master_pid)
    assert "runtime.processes.master" in " ".join(new.cmdline())
    assert new.ppid() == containers[0]  # started by container 0's stream manager
    running.wait_active(timeout=90)
    status = running.status()
    assert status["pid"] == new.pid and status["containers"] == containers  # adopted
    assert status["master_restarts"] == 1
    (restarted,) = [e for e in running.events() if e["kind"] == "master_restarted"]
    assert restarted["adopted"] == [0, 1]
    # data flows under the new master, and its statistics say so
    running.wait_until(lambda s: acked(s) > before + 200 and all(
        x.master_restarts == 1 for x in s), timeout=90, interval=0.1)

    # the stream manager's own master dies too (its child: a zombie until it reaps it)
    new.kill()
    wait_for(lambda: running.master_pid != new.pid, 90, "a third master")
    third = psutil.Process(running.master_pid)
    assert third.ppid() == containers[0]
    running.wait_active(timeout=90)
    assert running.status()["master_restarts"] == 2
    assert [e["kind"] for e in running.events()].count("master_restarted") == 2
    assert gone(new)  # reaped (or at least not running)
    at_third = acked(running.statistics())
    running.wait_until(lambda s: acked(s) > at_third + 100, timeout=90, interval=0.1)

    # a second handle, attached by name from here too, sees the same master
    again = runtime.attach("drifter")
    assert again.master_pid == third.pid and again.status()["pid"] == third.pid
    running.kill()
    wait_for(lambda: not tupleflow_processes(), 30, "every process of the topology to end")
    assert (_detached.read_master(info["run_dir"]) or {}).get("stopped") is True
    assert again.alive is False  # the master stopped cleanly: not waited for again
    with pytest.raises(ValueError, match="no running detached topology called 'drifter'"):
        runtime.attach("drifter")
    again.kill()


def test_attach_refuses_what_is_not_a_detached_topology(tmp_path):
    with pytest.raises(ValueError, match="not the run directory of a detached topology"):
        runtime.attach(str(tmp_path))
    with pytest.raises(ValueError, match="no running detached topology called 'nowhere'"):
        runtime.attach("nowhere")


def test_the_submitting_handle_not_a_stream_manager_replaces_a_master_while_it_runs(
        tupleflow_processes):
    from runtime import Topology
    from runtime.testing import ListSink, ListSpout

    topo = Topology("tethered", ackers=1, max_spout_pending=100, spout_wait=0.005)
    topo.spout("numbers", ListSpout([[i] for i in range(100000)], ["n"], replay=True,
                                    rate=150))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    running = topo.submit(containers=2, detached=True)
    running.wait_until(lambda s: acked(s) > 50, timeout=90, interval=0.1)
    old = running.master_pid
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: running.master_pid != old, 90, "a new master")
    running.wait_active(timeout=90)
    # the handle's relaunch started it (its child), not a stream manager
    assert psutil.Process(running.master_pid).ppid() == os.getpid()
    assert len([p for p in tupleflow_processes()
                if "runtime.processes.master" in " ".join(p.cmdline())]) == 1
    running.kill()
    assert tupleflow_processes() == []
