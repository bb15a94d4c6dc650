"""The Spark scheduler: every container of a topology runs as one task of a Spark barrier job.

Heron runs on the schedulers its users already have (Aurora, YARN, Mesos) instead of a
scheduler of its own; tupleflow's users already have Spark. So ``submit(scheduler="spark",
master=..., containers=N)`` works like the local scheduler, except for where containers run:

1. In the submitting process (the Spark driver): the plan, the pickled user code, the
   topology's HMAC secret and its two CURVE key pairs
   (:class:`runtime.processes.curve.TopologyKeys`) are made as for a local topology; the
   topology master starts beside the notebook, as today, but binds its control socket on
   TCP as a CURVE server and starts no container.
2. A thread of the submitting process runs ONE barrier job of N tasks (Spark's barrier
   mode gang-schedules them: all run at once, or none). Task ``c`` is container ``c``:
   :func:`run_container` starts the stream manager as ``python -m runtime.processes.stmgr`` with a
   boot on its stdin, restarts it with a back-off when it dies, and returns when it exits
   cleanly (the master told it the topology was killed).
3. The task closure carries only the master's address, the secret and the keys: never
   user code. Instances get the code from the master over the CURVE channel, inside a
   sealed message, exactly as in local mode.

A stream manager that dies is restarted by its task, on the port its predecessor had, so
peers reconnect by themselves. A lost task fails the whole job (Spark does not retry a
barrier result stage), so :class:`ContainerJob` submits it again; the new containers may
have new addresses, which the master's welcome tells the others. See docs/remote.md.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from runtime import _procs, wire
from runtime.model.constants import LOG_WAIT, RECORD_DIR
from runtime.state import check_submit

from . import launch as _scheduler
from .children import STABLE_AFTER  # seconds a process must live for its back-off to reset
from .client import RunningTopology
from .curve import TopologyKeys, make_client

log = logging.getLogger("tupleflow.spark")

CONTAINER_ENV = "TUPLEFLOW_CONTAINER"  # set in a container's processes: which container
FIRST_BACKOFF = 0.1  # seconds before a dead stream manager is started again; doubles...
MAX_BACKOFF = 5.0  # ...up to this
MAX_FAILURES = 10  # quick deaths in a row before the task gives up (and Spark retries it)
GENERATIONS = 1000  # generation = (round * this + Spark attempt) * this + restarts
JOB_END_TIMEOUT = 10.0  # seconds the Spark job gets to end after a kill before it is cancelled
LOOPBACK = "127.0.0.1"


# -- submit (the driver side) ---------------------------------------------------------------

def submit(topology, *, containers: int, config: Mapping[str, Any]) -> SparkTopology:
    """Start the master here and the containers as a Spark barrier job (see the module)."""
    config = dict(config)
    remote = remote_options(config)
    if config.pop("detached", False):
        raise ValueError("scheduler='spark': detached=True is not supported: this process "
                         "is the Spark driver, and when it exits Spark ends the application, "
                         "its executors and the stream managers running as their tasks, so "
                         "nothing could outlive it (while it runs, a master that dies is "
                         "replaced anyway); use the local scheduler to outlive the notebook")
    plan = topology.physical_plan(containers, **config)
    check_submit(topology, plan.config, processes=True)
    spark = spark_session(remote.pop("master"), remote)
    bundle = _scheduler.pickle_components(topology)
    secret, keys = secrets.token_bytes(32), TopologyKeys.generate()
    run_dir = _scheduler.make_run_dir(topology.name, containers)
    plan = _scheduler.with_run_dir(plan, run_dir)
    boot = {"secret": secret, "run_dir": run_dir, "plan": plan.to_data(), "bundle": bundle,
            "detached": False, "sys_path": _scheduler._sys_path(),
            "remote": {"keys": keys.to_data(), **remote}}
    submitted = time.time()
    proc = start_master(boot)
    endpoint = _scheduler._await_ready(proc, run_dir)
    job = ContainerJob(spark, topology.name, containers,
                       task_boot(topology.name, secret, keys, endpoint))
    running = SparkTopology(topology.name, plan, run_dir, secret, endpoint, proc, submitted,
                            lambda n: adopting_master(boot, running, n), keys=keys, job=job)
    running.topology = topology  # what workbench.reconcile reads a definition from
    job.start()
    return running


def start_master(boot: dict) -> subprocess.Popen:
    """The topology master, here beside the notebook, leading a new session (its process
    group is swept at kill)."""
    return _procs.spawn("runtime.processes.master", boot, new_session=True,
                        stdout=subprocess.PIPE, env=_scheduler._child_env(),
                        log_path=os.path.join(_procs.log_dir(boot["run_dir"]), "master.log"))


def adopting_master(boot: dict, running: SparkTopology, restarts: int) -> subprocess.Popen:
    """The ``restarts``-th master replacing a dead one (the handle's ``relaunch``): it
    binds the address the containers already know and adopts their stream managers,
    which run on in Spark's executors (runtime/processes/spark_adoption.py). It starts on
    the plan the handle last had (a rebalance may have changed it since submit), paused
    if the spouts were paused through the handle. The barrier job is not touched."""
    proc = start_master({**boot, "plan": running.plan.to_data(), "paused": running.paused_here,
                         "adopt": True, "master_restarts": restarts})
    _scheduler._await_ready(proc, boot["run_dir"])
    return proc


def remote_options(config: dict) -> dict:
    """Take the Spark scheduler's own options out of ``config`` (the rest are engine and
    user options): ``master`` (required), ``bind_host`` and ``advertise_host``.

    >>> remote_options({"master": "local[2]", "ackers": 1})
    {'master': 'local[2]', 'bind_host': '127.0.0.1', 'advertise_host': '127.0.0.1'}
    """
    master = config.pop("master", None)
    if master is None:
        raise ValueError("scheduler='spark' needs master=: a Spark master URL "
                         "('spark://HOST:PORT', 'yarn', 'k8s://...') or a SparkSession")
    bind_host = config.pop("bind_host", LOOPBACK)
    advertise = config.pop("advertise_host", None) or bind_host
    if advertise in ("0.0.0.0", "::", "*"):
        raise ValueError(f"scheduler='spark': bind_host={bind_host!r} is not an address the "
                         "containers can reach; set advertise_host to this machine's address")
    return {"master": master, "bind_host": bind_host, "advertise_host": advertise}


def spark_session(master, remote: dict):
    """The SparkSession given, or one for the master URL (an existing one if this process
    already has a SparkContext for that master; a clear error if for another)."""
    if not isinstance(master, str):
        if not hasattr(master, "sparkContext"):
            raise TypeError(f"scheduler='spark': master= must be a master URL or a "
                            f"SparkSession, not {type(master).__name__}")
        return master
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ImportError(f"scheduler='spark' needs pyspark (pip install pyspark): {exc}"
                          ) from exc

    active = SparkContext._active_spark_context
    if active is not None and active.master != master:
        raise ValueError(f"scheduler='spark': this process already runs a SparkContext for "
                         f"{active.master!r}, not {master!r}; pass that SparkSession as "
                         "master=, or stop it first")
    # pyspark picks the executors' Python from this variable (spark.pyspark.python is only
    # read by spark-submit): by default, the one running this, with tupleflow's dependencies
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master(master).appName("tupleflow")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.executorEnv.PYTHONPATH", _scheduler.package_root())
            .config("spark.driver.host", remote["advertise_host"])
            .config("spark.driver.bindAddress", remote["bind_host"])
            .config("spark.ui.enabled", "false")
            # a barrier job waits for N free slots, checking every 15 s by default: too slow
            # to replace containers (their slots free up a moment after a failed round)
            .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
            .getOrCreate())


def task_boot(name: str, secret: bytes, keys: TopologyKeys, endpoint: str) -> dict:
    """Everything a container task needs, and nothing more: no user code."""
    return {"name": name, "secret": secret, "tm": endpoint, "keys": keys.to_data(),
            "sys_path": _scheduler._sys_path(), "pythonpath": _scheduler.package_root(),
            "run_root": os.environ.get(_scheduler.RUN_ROOT_ENV)}


class ContainerJob(threading.Thread):
    """The barrier job whose tasks are the containers, run from a thread of the driver
    (a Spark action blocks until its job ends, which is when the topology is killed).

    Spark does not retry a failed barrier *result* stage: when a task or its executor is
    lost, the whole job fails (and Spark kills the other tasks, whose stream managers die
    with their Python workers). So the driver asks again: it submits the job anew, one
    *round* more, after a back-off; each round's stream managers say hello with a higher
    generation, and the master takes them as restarted containers.

    A rebalance to a new number of containers (:meth:`resize`) ends a round cleanly (the
    master stops every stream manager) and has the next one run that many tasks.
    """

    def __init__(self, spark, name: str, containers: int, boot: dict) -> None:
        super().__init__(name=f"tupleflow-spark-{name}", daemon=True)
        self.spark, self.containers, self.boot = spark, containers, boot
        self.group = f"tupleflow-{name}-{secrets.token_hex(4)}"
        self.result: list[dict] | None = None  # one summary per container, once it ends
        self.error: BaseException | None = None  # why the last round failed
        self.rounds = 0  # jobs submitted again after a failure
        self.resized = 0  # jobs submitted again with a new number of containers
        self.next_containers: int | None = None  # a rebalance asked for this many
        self.stopping = threading.Event()  # the topology is being killed: no new round

    def run(self) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, f"tupleflow topology {self.boot['name']!r}",
                       interruptOnCancel=True)
        streak = 0
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.result = self._collect(sc)
                if not self._next_size():
                    return
                streak = 0
                continue
            except Exception as exc:  # a task was lost, or the job was cancelled at kill
                self.error = exc
            if self.stopping.is_set():
                return
            streak, delay = backoff(streak, time.monotonic() - started)
            if delay is None:
                log.error("the Spark job of topology %r failed %d times in a row; giving up: "
                          "%s", self.boot["name"], streak, job_error(str(self.error)))
                return
            log.warning("the Spark job of topology %r failed (%s); submitting it again in "
                        "%.1f s", self.boot["name"], job_error(str(self.error)), delay)
            self.stopping.wait(delay)  # the back-off, cut short by a kill
            self.rounds += 1

    def resize(self, containers: int | None) -> None:
        """The next round runs ``containers`` tasks (None: it does not, the rebalance was
        refused). Asked before the master stops the containers, so the round that ends
        then is submitted again at once instead of ending the job."""
        self.next_containers = containers

    def _next_size(self) -> bool:
        """A round ended cleanly: whether to submit one with the new number of tasks."""
        containers, self.next_containers = self.next_containers, None
        if containers is None or self.stopping.is_set():
            return False
        log.info("topology %r: submitting the Spark job again with %d containers",
                 self.boot["name"], containers)
        self.containers, self.resized = containers, self.resized + 1
        return True

    def _collect(self, sc) -> list[dict]:
        # every round's stream managers have a higher generation than the last one's
        n, boot = self.containers, {**self.boot, "round": self.rounds + self.resized}
        rdd = sc.parallelize(range(n), n).barrier().mapPartitions(
            functools.partial(run_container, boot))
        return rdd.collect()

    def state(self) -> dict:
        error = None if self.error is None else job_error(str(self.error))
        return {"group": self.group, "running": self.is_alive(), "rounds": self.rounds,
                "resized": self.resized, "containers": self.containers, "last_error": error}

    def finish(self, timeout: float) -> None:
        """Wait for the job to end; cancel it if it does not (a stuck task)."""
        self.stopping.set()
        self.join(timeout)
        if self.is_alive():
            log.warning("the Spark job %s did not end in %.0f s: cancelling it", self.group,
                        timeout)
            self.spark.sparkContext.cancelJobGroup(self.group)
            self.join(timeout)


def job_error(text: str) -> str:
    """The telling line of a failed job's error: the Python exception raised in a task
    if there was one (Spark wraps it in a Java stack trace), else the first line.

    >>> job_error("An error occurred while calling o1.collect.\\n  File x\\n"
    ...           "ModuleNotFoundError: No module named 'zmq'\\n\\tat org.apache...")
    "ModuleNotFoundError: No module named 'zmq'"
    >>> job_error("An error occurred.\\norg.apache.spark.SparkException: Job aborted")
    'org.apache.spark.SparkException: Job aborted'
    """
    lines = text.splitlines() or [""]
    python = [line.strip() for line in lines if re.match(r"[A-Za-z_]\w*(Error|Exception): ", line)]
    java = [line.strip() for line in lines if re.match(r"[\w.]+\.\w+(Error|Exception): ", line)]
    return (python or java or lines)[0]


class SparkTopology(RunningTopology):
    """A topology whose containers are Spark tasks: the client is a CURVE client of the
    master, and killing it also ends the Spark job."""

    def __init__(self, *args: Any, keys: TopologyKeys, job: ContainerJob) -> None:
        self._keys, self.job = keys, job
        super().__init__(*args)

    def _secure(self, sock):
        """A CURVE client of the master, with the topology's keys."""
        return make_client(sock, self._keys)

    @property
    def record_base(self) -> str:
        """This run's folder in ``record_dir``; ValueError without it: the containers
        record on their executors' hosts, where this machine cannot read."""
        base = self.plan.config.get(RECORD_DIR)
        if not base:
            raise ValueError(f"topology {self.name!r} runs on Spark, so its recordings are "
                             "written on the executors' hosts; submit it with record_dir="
                             "<a folder every executor and this machine share> to read "
                             "them here")
        return base

    def profile(self, component: str, seconds: float = 2.0, task: int | None = None, *,
                rate: int = 100):
        """Not on Spark (yet): the instances run on the executors' hosts, where a sampler
        would have to run beside their stream manager (docs/internals/profiling.md)."""
        self._profiled_tasks(component, task)
        raise ValueError(f"topology {self.name!r} runs on Spark: its instances' pids are on "
                         "the executors' hosts, which running.profile cannot sample yet")

    def rebalance(self, parallelism: dict[str, int], containers: int | None = None,
                  timeout: float = 120.0) -> dict:
        """As for a local topology (:meth:`RunningTopology.rebalance`). A new number of
        containers ends the barrier job's round (the master stops its stream managers,
        keyed state moving through the checkpoint) and submits the job again with that
        many tasks, on the new plan; the master, its endpoint and the handle stay. More
        containers than the cluster has task slots is refused (ValueError) before anything
        stops: Spark would never start that barrier job."""
        resize = containers is not None and containers != self.plan.containers
        slots = task_slots(self.job.spark) if resize else None
        if slots is not None and containers > slots:
            raise ValueError(f"rebalance of {self.name!r}: containers={containers} needs "
                             f"{containers} Spark task slots at once (one barrier job), and "
                             f"the cluster has {slots}")
        if resize:
            self.job.resize(containers)
        try:
            return super().rebalance(parallelism, containers, timeout)
        except ValueError:  # refused before anything stopped: the round goes on
            if resize:
                self.job.resize(None)
            raise

    def kill(self, timeout: float = 2.0) -> None:
        self.job.stopping.set()  # first: a round that fails now is not submitted again
        super().kill(timeout)
        if self.job.ident is not None:  # started
            self.job.finish(JOB_END_TIMEOUT)

    def wait_active(self, timeout: float = 30.0) -> None:
        """As for a local topology; on timeout, the error also says how the Spark job is."""
        try:
            super().wait_active(timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; its Spark job: {self.job.state()}") from None

    def status(self) -> dict:
        """The master's status, plus ``spark_job``: its job group, whether it still runs,
        and why it ended if it failed (a job that cannot start its tasks — too few slots,
        tupleflow missing on the executors — leaves the topology ``starting``)."""
        status = super().status()
        status["spark_job"] = self.job.state()
        return status

    def logs(self, component: str, task: int) -> str:
        """An instance's log: read from its container's directory when that is on this
        machine, else sent by the container through the master (its last MiB, see
        ``LOG_TAIL``). FileNotFoundError naming the executor's path when neither can be
        had (the topology is gone, or the container does not answer)."""
        container = self.plan.task(task).container
        folder = self.status().get("container_dirs", {}).get(container)
        if folder is None:
            raise FileNotFoundError(f"container {container} of topology {self.name!r} has "
                                    "not said where it runs yet")
        path = os.path.join(folder, "logs", f"{component}-{task}.log")
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                return f.read()
        try:
            return self._ask(wire.AskLogs, timeout=LOG_WAIT + 5.0, component=component, task=task)
        except (RuntimeError, TimeoutError) as exc:  # TopologyDead is a RuntimeError
            raise FileNotFoundError(f"{path}: the log is on the host of the Spark executor "
                                    f"running container {container}, and it could not be "
                                    f"sent here: {exc}") from None


def task_slots(spark) -> int | None:
    """The task slots of Spark's executors now, as Spark's own check before a barrier
    stage counts them (``SparkContext.maxNumConcurrentTasks``, reached through py4j: not a
    public API); None if this Spark does not answer (then nothing is checked here).

    >>> task_slots(object()) is None
    True
    """
    try:
        sc = spark.sparkContext._jsc.sc()
        return int(sc.maxNumConcurrentTasks(sc.resourceProfileManager()
                                            .defaultResourceProfile()))
    except Exception:  # another Spark version, or a session already stopped
        return None


# -- the task (the executor side) -----------------------------------------------------------

def run_container(boot: dict, _rows: Iterator) -> Iterator[dict]:
    """The body of one barrier task: container number = partition number."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    c = ctx.partitionId()
    host = ctx.getTaskInfos()[c].address.rsplit(":", 1)[0] or LOOPBACK
    yield ContainerSupervisor(boot, c, ctx.attemptNumber(), host).run()


def backoff(streak: int, lived: float) -> tuple[int, float | None]:
    """After a stream manager that lived ``lived`` seconds died: the new streak of quick
    deaths, and the delay before the next start (None: give up, let Spark retry).

    >>> backoff(0, 100.0), backoff(2, 1.0), backoff(9, 1.0)
    ((1, 0.1), (3, 0.4), (10, None))
    """
    streak = 1 if lived > STABLE_AFTER else streak + 1
    if streak >= MAX_FAILURES:
        return streak, None
    return streak, min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (streak - 1))


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class ContainerSupervisor:
    """Starts one container's stream manager and restarts it when it dies."""

    def __init__(self, boot: dict, container: int, attempt: int, host: str) -> None:
        self.boot, self.container, self.attempt, self.host = boot, container, attempt, host
        root = boot.get("run_root")
        self.run_dir = tempfile.mkdtemp(prefix=f"tf-{boot['name'][:16]}-c{container}-",
                                        dir=root if root and os.path.isdir(root) else None)
        self.port = free_port(host)  # every generation binds it again: peers reconnect
        self.restarts = 0

    def sm_boot(self) -> dict:
        b = self.boot
        return {"secret": b["secret"], "tm": b["tm"], "keys": b["keys"],
                "container": self.container, "run_dir": self.run_dir,
                "generation": (self.boot.get("round", 0) * GENERATIONS + self.attempt)
                * GENERATIONS + self.restarts,
                "sys_path": b["sys_path"], "bind_host": self.host,
                "advertise_host": self.host, "inbound_port": self.port}

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (self.boot["pythonpath"], os.environ.get("PYTHONPATH")) if p))
        env[CONTAINER_ENV] = str(self.container)
        if self.boot.get("run_root"):  # so that a test's process guard sees them
            env[_scheduler.RUN_ROOT_ENV] = self.boot["run_root"]
        return env

    def run(self) -> dict:
        streak = 0
        path = os.path.join(_procs.log_dir(self.run_dir), "container.log")
        while True:
            started = time.monotonic()
            proc = _procs.spawn("runtime.processes.stmgr", self.sm_boot(), log_path=path,
                                env=self.env())
            code = proc.wait()
            _procs.close_pipe(proc)
            if code == 0:  # told to stop: the topology was killed
                return {"container": self.container, "restarts": self.restarts,
                        "run_dir": self.run_dir}
            streak, delay = backoff(streak, time.monotonic() - started)
            if delay is None:
                raise RuntimeError(f"container {self.container}: the stream manager died "
                                   f"{streak} times in a row (last exit code {code}); see "
                                   f"{path}")
            log.warning("container %d: stream manager exited with %d; restarting in %.1f s",
                        self.container, code, delay)
            time.sleep(delay)  # the back-off itself, not a wait for some other event
            self.restarts += 1
