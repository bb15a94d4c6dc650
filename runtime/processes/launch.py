"""What every scheduler does to start a topology master: ship the user's code, make the
run directory, boot the master and wait for it to listen. The local scheduler
(``scheduler.py``) and the Spark one (``spark_scheduler.py``) both use it, and neither
imports the other for it.
"""

from __future__ import annotations

import dataclasses
import os
import select
import subprocess
import sys
import tempfile

import cloudpickle

from runtime import _procs
from runtime.model.constants import CHECKPOINT_INTERVAL, RECORD_DIR, STATE_DIR
from runtime.model.topology import TopologyError

READY_TIMEOUT = 15.0  # seconds for the topology master to start listening
RUN_ROOT_ENV = "TUPLEFLOW_RUN_ROOT"  # where run directories go (default: the temp dir)
IPC_PATH_MAX = 107  # bytes in a unix socket path (sockaddr_un.sun_path, less the NUL)


def with_record_root(plan, run_dir: str):
    """``plan``, whose ``record_dir`` (if given) now names this run's own folder in it
    (named after the run directory), so that two runs never mix their recordings."""
    folder = plan.config.get(RECORD_DIR)
    if not folder:
        return plan
    root = os.path.join(folder, os.path.basename(run_dir))
    return dataclasses.replace(plan, config={**plan.config, RECORD_DIR: root})


def with_run_dir(plan, run_dir: str):
    """``plan`` as this run's processes need it: its recordings' folder
    (:func:`with_record_root`) and, with checkpoints, the run directory where every
    container's tasks and the submitter find the one state store."""
    plan = with_record_root(plan, run_dir)
    if not plan.config.get(CHECKPOINT_INTERVAL):
        return plan
    return dataclasses.replace(plan, config={**plan.config, STATE_DIR: run_dir})


def pickle_components(topology) -> bytes:
    """The user's classes and groupings, by value where they live in ``__main__``."""
    try:
        return cloudpickle.dumps(topology.components)
    except Exception:
        for spec in topology.components.values():
            try:
                cloudpickle.dumps(spec)
            except Exception as exc:
                raise TopologyError(f"component {spec.id!r}: {spec.class_name} cannot be "
                                    f"shipped to its instances: {exc}") from exc
        raise


def make_run_dir(name: str, containers: int) -> str:
    """A fresh run directory, short enough for the stream managers' unix sockets: a
    path that does not fit would make every stream manager fail at start."""
    root = os.environ.get(RUN_ROOT_ENV)
    run_dir = tempfile.mkdtemp(prefix=f"tf-{name[:24]}-", dir=root)
    longest = os.path.join(run_dir, f"sm-{containers - 1}-local.sock")
    if len(os.fsencode(longest)) > IPC_PATH_MAX:
        os.rmdir(run_dir)
        raise ValueError(f"the run directory {run_dir!r} is too deep for a unix socket path "
                         f"({len(os.fsencode(longest))} > {IPC_PATH_MAX} bytes); set "
                         f"{RUN_ROOT_ENV} (now {root!r}) to a shorter directory")
    return run_dir


def _await_ready(proc: subprocess.Popen, run_dir: str) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
    line = proc.stdout.readline().decode() if ready else ""
    if not line.startswith("READY "):
        proc.kill()  # it has started nothing yet: it starts containers after READY
        proc.wait()
        proc.stdout.close()
        _procs.close_pipe(proc)
        log = os.path.join(run_dir, "logs", "master.log")
        raise RuntimeError(f"the topology master did not start; see {log}")
    proc.stdout.close()
    return line.split()[1]


def _sys_path() -> list[str]:
    """The submitter's import path, so instances import what the notebook imports."""
    return [os.path.abspath(p or os.getcwd()) for p in sys.path]


def package_root() -> str:
    """The folder that holds the ``runtime`` package (this file is three levels down), put
    on the path of every process a topology starts, here or in a Spark executor."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
    return env
