"""A detached topology: it outlives the process that submitted it until it is killed (as
a Storm topology outlives ``storm jar``), so its master, should it die, is replaced by a
stream manager, and a new process can attach a handle to it (docs/reliability.md, "A
detached topology").

The run directory holds what that takes:

- ``master.json``: the current master's pid, how many masters came before it, and
  ``stopped`` once it ended cleanly (a kill): written by every master;
- ``master.boot``: a detached topology's submit boot (plan, secret, user code), readable
  by its owner only, as a Jupyter connection file is: what a stream manager starts a new
  master with, and what :func:`attach` reads the secret from.

:class:`MasterKeeper` is the stream manager's: once a second, the stream manager of the
lowest-numbered living container looks whether the master runs; if it died (not
stopped) and the submitting process is gone too (while it lives, its handle replaces the
master), it starts an adopting master, under an exclusive lock on ``master.lock`` and
after checking again under it, so that two never start at once. At most ``REVIVALS`` a
minute, as the handle does.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import select
import subprocess
import tempfile
import threading
import time
from collections import deque
from typing import Any

from runtime import _procs, wire

from .adoption import Orphan, _write, read_containers, read_endpoint

log = logging.getLogger("tupleflow.detached")

MASTER_FILE = "master.json"
BOOT_FILE = "master.boot"
LOCK_FILE = "master.lock"
LOOK_EVERY = 1.0  # seconds between a stream manager's looks at its master
READY_WAIT = 15.0  # seconds a new master has to say READY (as launch.READY_TIMEOUT)
FOLLOW_WAIT = 60.0  # seconds an attached handle waits for the stream manager's new master
REVIVALS, REVIVAL_WINDOW = 3, 60.0  # at most 3 new masters a minute (as master_link's)


# -- the run directory ---------------------------------------------------------------------

def write_master(run_dir: str, pid: int, restarts: int, stopped: bool = False) -> None:
    _write(os.path.join(run_dir, MASTER_FILE),
           json.dumps({"pid": pid, "restarts": restarts, "stopped": stopped}))


def read_master(run_dir: str) -> dict | None:
    with contextlib.suppress(OSError, ValueError), \
            open(os.path.join(run_dir, MASTER_FILE)) as f:
        return json.load(f)
    return None


def write_boot(run_dir: str, boot: dict) -> None:
    """Keep a detached topology's boot, readable and writable by its owner only."""
    path = os.path.join(run_dir, BOOT_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(wire.pack(boot))


def read_boot(run_dir: str) -> dict:
    """A detached topology's boot; ValueError if ``run_dir`` holds none."""
    try:
        with open(os.path.join(run_dir, BOOT_FILE), "rb") as f:
            return wire.unpack(f.read())
    except (OSError, wire.WireError) as exc:
        raise ValueError(f"{run_dir!r} is not the run directory of a detached topology "
                         f"(no readable {BOOT_FILE}: {exc})") from None


def _runs(pid: int | None) -> bool:
    return pid is not None and Orphan(pid).poll() is None


# -- the stream manager's side ------------------------------------------------------------------

class MasterKeeper:
    """Owns a detached topology's stream manager's watch over its master: when it next
    looks, the master it started (to reap it) and the thread starting one, and when it
    started the last ones (the cap)."""

    def __init__(self, run_dir: str, container: int, watcher: int | None) -> None:
        self.run_dir, self.container = run_dir, container
        self.watcher = watcher  # the submitting process: while it runs, its handle revives
        self.next = 0.0
        self.started: subprocess.Popen | None = None
        self.starting: threading.Thread | None = None
        self.revived: deque[float] = deque(maxlen=REVIVALS)
        self.gave_up = False

    def look(self, now: float) -> None:
        if now < self.next:
            return
        self.next = now + LOOK_EVERY
        if self.started is not None and self.started.poll() is not None:
            self.started = None  # reaped: a master this process started has ended
        if self.starting is not None and self.starting.is_alive():
            return
        if self._mine() and not self._capped(now):
            self.revived.append(now)
            self.starting = threading.Thread(target=self.revive, name="revive-master",
                                             daemon=True)
            self.starting.start()

    def _mine(self) -> bool:
        """The master died (not stopped), nobody else will replace it, and this is the
        lowest-numbered container still running."""
        record = read_master(self.run_dir)
        if record is None or record.get("stopped") or _runs(record.get("pid")):
            return False
        if _runs(self.watcher):
            return False
        lower = read_containers(self.run_dir, self.container)
        return not any(_runs(sm.get("pid")) for sm in lower.values())

    def _capped(self, now: float) -> bool:
        if len(self.revived) == REVIVALS and now - self.revived[0] < REVIVAL_WINDOW:
            if not self.gave_up:  # said once
                log.error("the master died %d times in %.0f s: not replaced again",
                          REVIVALS + 1, REVIVAL_WINDOW)
            self.gave_up = True
        return self.gave_up

    def revive(self) -> None:
        """Start an adopting master, unless another process did meanwhile (under the
        lock); never raises (a thread of the stream manager)."""
        try:
            with locked(self.run_dir):
                record = read_master(self.run_dir) or {}
                if record.get("stopped") or _runs(record.get("pid")):
                    return
                self.started = start_adopting(self.run_dir, int(record.get("restarts", 0)) + 1)
        except Exception:
            log.exception("container %d: could not start a new master", self.container)


@contextlib.contextmanager
def locked(run_dir: str):
    """The run directory's master lock, held exclusively (released if this process dies)."""
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start_adopting(run_dir: str, restarts: int) -> subprocess.Popen:
    """A master adopting the running processes, from the kept boot, in a session of its
    own (it must outlive this stream manager); started and listening, or RuntimeError."""
    from .launch import _child_env  # (cloudpickle: only for a process that starts one)

    boot = {**read_boot(run_dir), "adopt": True, "master_restarts": restarts}
    log.warning("the master of a detached topology died: starting master %d", restarts)
    path = os.path.join(_procs.log_dir(run_dir), "master.log")
    proc = _procs.spawn("runtime.processes.master", boot, new_session=True,
                        stdout=subprocess.PIPE, log_path=path, env=_child_env())
    _procs.close_pipe(proc)  # its stdin's end: it is detached, it runs on
    ready, _, _ = select.select([proc.stdout], [], [], READY_WAIT)
    line = proc.stdout.readline().decode() if ready else ""
    proc.stdout.close()
    if not line.startswith("READY "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the new master did not start; see {path}")
    return proc


# -- attaching from another process ---------------------------------------------------------------

class RecordedMaster(Orphan):
    """The master of a topology this process attached to: watched by pid, its exit code
    0 if it wrote that it stopped (a kill), -1 if it died."""

    def __init__(self, run_dir: str, pid: int) -> None:
        super().__init__(pid)
        self.run_dir = run_dir

    def poll(self) -> int | None:
        code = super().poll()
        if code == -1:
            record = read_master(self.run_dir) or {}
            if record.get("pid") == self.pid and record.get("stopped"):
                self.returncode = code = 0
        return code


def follow(run_dir: str, dead: int, timeout: float = FOLLOW_WAIT) -> RecordedMaster:
    """The master that replaced ``dead`` (a stream manager starts it), once it runs;
    RuntimeError if none does in ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_master(run_dir) or {}
        if record.get("stopped"):
            break
        if record.get("pid") not in (None, dead) and _runs(record["pid"]):
            return RecordedMaster(run_dir, record["pid"])
        time.sleep(0.1)  # polling a file another process writes
    raise RuntimeError(f"no new master for {run_dir!r} in {timeout:.0f} s")


def find_run_dir(name_or_run_dir: str) -> str:
    """The run directory given, or the one of the detached topology called that whose
    master has not stopped (in ``TUPLEFLOW_RUN_ROOT``, else the temp dir); ValueError
    for none or several."""
    if os.path.isdir(name_or_run_dir):
        return name_or_run_dir
    from .launch import RUN_ROOT_ENV

    root = os.environ.get(RUN_ROOT_ENV) or tempfile.gettempdir()
    found = [d for d in glob.glob(os.path.join(root, f"tf-{name_or_run_dir[:24]}-*"))
             if _named(d, name_or_run_dir)]
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise ValueError(f"{what} running detached topology called {name_or_run_dir!r} in "
                         f"{root!r}{': ' + ', '.join(sorted(found)) if found else ''}; "
                         "give its run directory")
    return found[0]


def _named(run_dir: str, name: str) -> bool:
    record = read_master(run_dir)
    if record is None or record.get("stopped") or not os.path.exists(
            os.path.join(run_dir, BOOT_FILE)):
        return False
    try:
        return read_boot(run_dir)["plan"]["topology"] == name
    except (ValueError, KeyError, TypeError):
        return False


def attach(name_or_run_dir: str) -> Any:
    """A handle on a running detached topology, from any process of its user: by its run
    directory, or by its name. It follows the master a stream manager starts should the
    current one die; ``kill()`` ends the topology."""
    from runtime.model.plan import PhysicalPlan

    from .client import RunningTopology

    run_dir = find_run_dir(name_or_run_dir)
    boot, record = read_boot(run_dir), read_master(run_dir) or {}
    if record.get("stopped") or "pid" not in record:
        raise ValueError(f"the topology of {run_dir!r} is not running (its master stopped)")
    plan = PhysicalPlan.from_data(boot["plan"])
    master = RecordedMaster(run_dir, record["pid"])
    running = RunningTopology(plan.topology, plan, run_dir, boot["secret"],
                              read_endpoint(run_dir), master, boot.get("submitted", 0.0),
                              relaunch=lambda n: follow(run_dir, running.master_pid))
    return running

