"""Shared test set-up: a hypothesis profile, and a guard against leaked topology processes.

Every test runs with ``TUPLEFLOW_RUN_ROOT`` pointing at a directory of its own. Run
directories go there, and every process of a topology the test starts (master, stream
managers, instances, and any submitter script it runs with this environment) inherits
the variable. That is how the guard tells this test's processes from those of anyone
else on the machine: by their environment, not by their age or their parent.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import signal
import sys
import time
import types

import psutil
import pytest
from hypothesis import settings


@functools.cache
def _iri_grammar() -> types.ModuleType:
    sys.modules.pop("rfc3987_syntax", None)  # the stand-in, replaced by the real package
    return importlib.import_module("rfc3987_syntax")


def _defer_the_iri_grammar() -> None:
    """jsonschema (which nbformat, nbclient and nbconvert import, for the notebook tests)
    imports rfc3987_syntax when it is installed, as jupyter_events asks, and that module
    builds an Earley parser of RFC 3987's grammar as it is imported: 2-3 s of CPU in every
    pytest worker, for the "iri" format that no test validates. A stand-in defers the
    build to the first check of an IRI, which then gives the real answer."""
    if "rfc3987_syntax" in sys.modules or importlib.util.find_spec("rfc3987_syntax") is None:
        return
    stand_in = types.ModuleType("rfc3987_syntax", _defer_the_iri_grammar.__doc__)
    stand_in.is_valid_syntax = lambda *args, **kwargs: _iri_grammar().is_valid_syntax(
        *args, **kwargs)  # the one name jsonschema imports
    sys.modules["rfc3987_syntax"] = stand_in


_defer_the_iri_grammar()

# The JVMs the suite starts (the bridge's local Spark session, the standalone cluster's
# master, worker and executors, the Spark sessions of the tutorials' kernels: all inherit
# this environment) each run a few minutes of small jobs. C1 alone compiles their code for
# a fraction of the CPU that C2 burns on it, and the serial collector starts no GC threads
# on 2 shared cores: tests/workbench/test_spark.py took 18-20 s of JVM CPU instead of 39-43 s
# (docs/internals/performance.md, "The suite's time"). Only the tests' JVMs: the
# bridge's own defaults for a user are untouched; a JAVA_TOOL_OPTIONS already set wins.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

settings.register_profile("tupleflow", deadline=None)
settings.register_profile("ci", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tupleflow"))

RUN_ROOT_ENV = "TUPLEFLOW_RUN_ROOT"  # runtime.processes.scheduler.RUN_ROOT_ENV
ROLES = (
    "runtime.processes.master",
    "runtime.processes.stmgr",
    "runtime.processes.instance",
    "runtime.recording._convert",
)
GRACE = 5.0  # seconds a leftover process gets to exit after its topology was killed


def is_tupleflow(proc: psutil.Process) -> bool:
    """Whether a process is a master, stream manager or instance (zombies are not)."""
    with contextlib.suppress(psutil.Error):
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = " ".join(proc.cmdline())
        return any(role in cmdline for role in ROLES)
    return False


def processes_under(run_root: str) -> list[psutil.Process]:
    """Live tupleflow processes whose environment names ``run_root``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or not is_tupleflow(proc):
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(RUN_ROOT_ENV) == run_root:
                found.append(proc)
    return found


def _sigkill(procs: list[psutil.Process]) -> None:
    """SIGKILL each process, and the whole group of a topology master (a group leader)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()


@pytest.fixture(autouse=True)
def topology_guard(request, tmp_path_factory, monkeypatch):
    """Kill what a test leaves running; fail it if any of its processes outlive that.

    Cheap for tests that start no topology: the process table is read only for tests
    marked ``slow`` or that submitted something.
    """
    from runtime.processes import scheduler as _scheduler

    run_root = str(tmp_path_factory.mktemp("runs"))
    monkeypatch.setenv(RUN_ROOT_ENV, run_root)
    handles = []
    submit = _scheduler.submit

    def recording_submit(*args, **kwargs):
        handles.append(submit(*args, **kwargs))
        return handles[-1]

    monkeypatch.setattr(_scheduler, "submit", recording_submit)
    yield run_root
    for handle in handles:
        handle.kill()
    if not handles and request.node.get_closest_marker("slow") is None:
        return
    leftovers = _wait_gone(run_root, GRACE)
    described = ", ".join(f"{p.pid} {' '.join(_cmdline(p))}" for p in leftovers)
    _sigkill(leftovers)
    assert not leftovers, f"tupleflow processes outlived the test: {described}"


def _wait_gone(run_root: str, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := processes_under(run_root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _cmdline(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return proc.cmdline()
    return ["?"]


@pytest.fixture
def tupleflow_processes(topology_guard):
    """A function that lists this test's live master, stream manager and instance
    processes, wherever they are in the process tree."""
    return lambda: processes_under(topology_guard)


@pytest.fixture
def without_spares():
    """A function: of a running topology's processes, those that are its master, its
    stream managers or its instances, leaving out the stream managers' warm spares
    (interpreters waiting for a task to replace, runtime/processes/children.py)."""
    def keep(running, procs: list[psutil.Process]) -> list[psutil.Process]:
        status = running.status()
        known = {status["pid"], *status["containers"].values(),
                 *(s.pid for s in running.statistics())}
        return [p for p in procs if p.pid in known]
    return keep


@pytest.fixture(params=["c", "python"])
def closures(request, monkeypatch):
    """Runs a test once with the engine's C closures and once with its Python ones
    (runtime/engine/hot.py chooses at wiring time by TUPLEFLOW_PURE_PYTHON): both
    must behave the same. The C run is skipped, saying so, only where the environment
    says it runs in pure Python; a checkout that should have built them and did not
    fails in tests/runtime/test_hot_closures.py."""
    from runtime.engine.hot import pure_python

    if request.param == "c" and pure_python():
        pytest.skip("TUPLEFLOW_PURE_PYTHON is set: the C closures are not in use here")
    monkeypatch.setenv("TUPLEFLOW_PURE_PYTHON", "1" if request.param == "python" else "0")
    return request.param


@pytest.fixture
def offline_master(tmp_path):
    """A factory of topology masters with no processes behind them: the clock is a
    FakeClock at 1000 s, and what a master would send is recorded in ``master.sent`` as
    ``(identity, kind, fields)``. Sockets are closed after the test."""
    from runtime.processes.master import TopologyMaster
    from runtime.testing import FakeClock

    made = []

    def make(topology, containers: int = 1, **config):
        plan = topology.physical_plan(containers, **config)
        master = TopologyMaster({"secret": b"s" * 32, "run_dir": str(tmp_path),
                                 "plan": plan.to_data(), "bundle": b""})
        master.clock = FakeClock(1000.0)
        master.sent = []
        master.send = lambda ident, msg: master.sent.append((ident, msg.KIND, msg.fields()))
        made.append(master)
        return master

    yield make
    for master in made:
        master.sock.close(linger=0)
        master.zctx.term()


# --- a real redis-server ------------------------------------------------------------------------


class RedisServer:
    """A ``redis-server`` of the test session's own, on a free loopback port, with no
    persistence. ``url`` is what ``redis.Redis.from_url`` and tupleflow's Redis adapters take."""

    def __init__(self, workdir) -> None:
        import shutil
        import socket
        import subprocess

        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed: run `make test` (it installs the Debian "
                        "package redis-server) or `apt-get install redis-server`")
        for _attempt in range(5):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
            self.proc = subprocess.Popen(
                [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                 "--appendonly", "no", "--dir", str(workdir), "--protected-mode", "yes"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if self._wait_ready():
                self.url = f"redis://127.0.0.1:{self.port}/0"
                return
            self.stop()
        pytest.fail("redis-server did not start on a free loopback port in 5 attempts")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False  # e.g. the port was taken between probe and start
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if client.ping():
                        return True
                time.sleep(0.02)  # polling a condition, not synchronising on time
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """One real redis-server for the whole session (see ``RedisServer``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    """The session's redis-server, emptied (FLUSHALL) before the test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def kafka_cluster():
    """librdkafka's mock cluster of one broker: a real Kafka-protocol peer on a loopback
    port, alive while its producer is. Yields ``(producer, brokers)``; a topic gets 4
    partitions the first time the producer writes to it."""
    from confluent_kafka import Producer

    producer = Producer({"test.mock.num.brokers": 1})
    brokers = ",".join(f"{b.host}:{b.port}"
                       for b in producer.list_topics(timeout=10).brokers.values())
    yield producer, brokers
    producer.flush(10)


# --- a real Spark standalone cluster on loopback ----------------------------------------------


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One Spark standalone master + worker for the whole session (tests/spark_cluster.py);
    starting them takes 15-40 s on a loaded machine. Stopped at the end of the session."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "spark_cluster", Path(__file__).with_name("spark_cluster.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # 4 task slots (a count Spark schedules by, not cores to burn): a rebalance to 3
    # containers runs a barrier job of 3 tasks (tests/runtime/test_remote_spark.py)
    cluster = module.SparkCluster(tmp_path_factory.mktemp("spark"), cores=4)
    yield cluster
    cluster.stop()


# `make test` runs the suite on three xdist workers (`-n 3 --dist loadgroup`, on 2 cores):
# most tests wait on processes and sockets, not on a core. A process holds one SparkContext,
# so the tests that ask for a Spark session go in two groups, each run by one worker in
# collection order: those on the standalone cluster ("spark-cluster": the remote scheduler's
# tests) and those on the bridge's local session ("spark-local", held for the worker's whole
# session). xdist hands out the largest groups first, one to a worker, so the two groups run
# side by side on two workers and never in one process.


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "spark_cluster" in fixtures:
            item.add_marker(pytest.mark.xdist_group("spark-cluster"))
        elif "spark" in fixtures:
            item.add_marker(pytest.mark.xdist_group("spark-local"))
    _slow_modules_first(items)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker sends the ids to the controller
def pytest_collection_finish(session):
    """Give each grouped test the ``@group`` suffix that ``--dist loadgroup`` groups by.

    pytest-xdist 3.8 adds it by assigning ``item._nodeid``; since pytest 9.2 the node id is
    ``item._id`` (a ``NodeId``) and that assignment changes nothing, so every test was
    handed out alone: both workers started a Spark cluster and a session of each kind
    (pytest-xdist issue 1386). Where the suffix is missing, it is added here the same way."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist workers only
        return
    for item in session.items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
            _rename(item, f"{item.nodeid}@{'_'.join(groups)}")


def _rename(item, nodeid: str) -> None:
    from _pytest.nodeid import NodeId  # pytest >= 9.2, where item._id is the node id

    item._id = NodeId.parse(nodeid)


# the longest tests, 20 to 70 s each: a notebook run through, a browser driving JupyterLab
LONGEST = ("tests/tutorials/", "tests/browser/")


def _slow_modules_first(items) -> None:
    """The longest tests first, then the modules that hold a test marked slow (processes,
    Spark), then the rest; each module's tests still together and in order. xdist hands
    the tests out in this order, and a minute-long test handed out last would keep one
    worker busy while the other idles at the end of the run. (The Spark groups go first
    anyway: xdist sends the largest groups first.)"""
    slow = {_module_of(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if _module_of(item).startswith(LONGEST)
               else 1 if _module_of(item) in slow else 2)


def _module_of(item) -> str:
    return item.nodeid.split("::")[0]
