"""Schedulers: how a topology's processes get started. ``local`` runs them on this machine.
The steps every scheduler shares are in ``launch.py``; ``spark`` is ``spark_scheduler.py``.

The local scheduler starts the topology master in a new session (so that its whole
process tree can be swept at kill), gives it the plan, the topology's secret and the
pickled user code over its stdin pipe, and waits for it to say where it listens.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from runtime import _procs
from runtime.state import check_submit

from . import detached as _detached
from .client import RunningTopology
from .launch import (  # noqa: F401 (RUN_ROOT_ENV: its documented home, see tests/conftest.py)
    RUN_ROOT_ENV,
    _await_ready,
    _child_env,
    _sys_path,
    make_run_dir,
    pickle_components,
    with_run_dir,
)


def submit(topology, *, scheduler: str, containers: int,
           config: Mapping[str, Any]) -> RunningTopology:
    if scheduler == "spark":  # containers as Spark barrier tasks (docs/remote.md)
        from .spark_scheduler import submit as spark_submit

        return spark_submit(topology, containers=containers, config=config)
    if scheduler != "local":
        raise ValueError(f"unknown scheduler {scheduler!r}; this version has 'local' and "
                         "'spark'")
    config = dict(config)
    detached = bool(config.pop("detached", False))
    plan = topology.physical_plan(containers, **config)
    check_submit(topology, plan.config, processes=True)
    bundle = pickle_components(topology)
    secret = secrets.token_bytes(32)
    run_dir = make_run_dir(topology.name, containers)
    plan = with_run_dir(plan, run_dir)
    boot = {"secret": secret, "run_dir": run_dir, "plan": plan.to_data(), "bundle": bundle,
            "detached": detached, "sys_path": _sys_path()}
    submitted = time.time()
    if detached:  # what a stream manager starts a new master with, and attach reads
        boot["submitter_pid"], boot["submitted"] = os.getpid(), submitted
        _detached.write_boot(run_dir, boot)
    proc = start_master(boot)
    endpoint = _await_ready(proc, run_dir)
    running = RunningTopology(topology.name, plan, run_dir, secret, endpoint, proc, submitted,
                              relaunch=lambda n: adopting_master(
                                  {**boot, "paused": running.paused_here}, n))
    running.topology = topology  # what workbench.reconcile reads a definition from
    return running


def start_master(boot: dict) -> subprocess.Popen:
    """A topology master, leading a new session (its process group is swept at kill)."""
    log_path = os.path.join(_procs.log_dir(boot["run_dir"]), "master.log")
    return _procs.spawn("runtime.processes.master", boot, new_session=True,
                        stdout=subprocess.PIPE, log_path=log_path, env=_child_env())


def adopting_master(boot: dict, restarts: int) -> subprocess.Popen:
    """The ``restarts``-th master replacing a dead one: it binds where the first listened
    and adopts the running stream managers (runtime/processes/adoption.py); started and
    listening, or RuntimeError."""
    proc = start_master({**boot, "adopt": True, "master_restarts": restarts})
    _await_ready(proc, boot["run_dir"])
    return proc
