"""Starting and stopping the runtime's processes.

Every child is started as ``python -m runtime.<role>`` and reads a bootstrap blob
(the topology's secret, its addresses, its identity) from its stdin pipe: a channel
only its parent can write to, and one that never shows in ``ps``. The parent keeps the
pipe open; end-of-file tells the child its parent is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import struct
import sys
import time
from typing import TYPE_CHECKING, Any

from . import wire

if TYPE_CHECKING:  # imported where a process is started or stopped: an instance does
    import subprocess  # neither, and would pay ~5 ms of CPU at its start for it

_LEN = struct.Struct("<I")
log = logging.getLogger("tupleflow.procs")


def spawn(module: str, boot: dict, *, log_path: str, new_session: bool = False,
          stdout: Any = None, env: dict | None = None) -> subprocess.Popen:
    """Start ``python -m module`` with ``boot`` on its stdin; output goes to ``log_path``
    (stdout may be redirected elsewhere, e.g. a pipe the parent reads).

    The boot also tells the child its parent's pid (see :func:`die_with_parent`). A child
    that dies before reading it is not an error here: whoever supervises it sees it exit.
    """
    proc = start(module, log_path=log_path, new_session=new_session, stdout=stdout, env=env)
    send_boot(proc, boot)
    return proc


def start(module: str, *, log_path: str, new_session: bool = False, stdout: Any = None,
          env: dict | None = None) -> subprocess.Popen:
    """Start ``python -m module`` without its boot: it imports its modules, then waits on
    its stdin (a warm spare, see :class:`runtime.processes.children.Spare`)."""
    import subprocess

    with open(log_path, "ab") as logfile:
        return subprocess.Popen(
            [sys.executable, "-m", module], stdin=subprocess.PIPE,
            stdout=stdout if stdout is not None else logfile, stderr=logfile,
            start_new_session=new_session, close_fds=True, env=env)


def send_boot(proc: subprocess.Popen, boot: dict) -> None:
    """Write the bootstrap blob, with this process's pid as the parent's, to ``proc``."""
    blob = wire.pack({**boot, "parent": os.getpid()})
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(_LEN.pack(len(blob)) + blob)
        proc.stdin.flush()


def log_to(path: str | None) -> None:
    """Send this process's stdout and stderr to ``path`` from now on (a warm spare learns
    its task, and with it its log file, only from its boot); None: leave them."""
    if path is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # as open() makes it
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)


def read_boot() -> dict:
    """The bootstrap blob a parent wrote with :func:`spawn`."""
    stdin = sys.stdin.buffer
    (size,) = _LEN.unpack(_read_exact(stdin, _LEN.size))
    return wire.unpack(_read_exact(stdin, size))


def _read_exact(stream, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) != size:
        raise SystemExit("bootstrap: parent closed the pipe early")
    return data


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere).

    ``parent`` is the pid the parent wrote in the boot: if it is no longer this process's
    parent, the parent died before prctl took effect (and the orphan was adopted by init
    or by a subreaper, so comparing with 1 is not enough).
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):
        os._exit(1)


def setup_logging(path: str) -> None:
    """Log to the process's own file (its stdout and stderr already go there)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def terminate(procs: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM, wait up to ``timeout`` seconds in all, then SIGKILL what is left."""
    import subprocess

    for p in procs:
        signal_quietly(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.poll() is None:
            signal_quietly(p, signal.SIGKILL)
            p.wait()


def signal_quietly(proc: subprocess.Popen, sig: int) -> None:
    """Send a signal to a child, unless it has already gone."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def kill_group(pgid: int, timeout: float) -> None:
    """SIGKILL a process group, and wait up to ``timeout`` seconds until none of its
    members runs. Orphans (say, instances whose stream manager was killed) are reaped by
    init, which may take its time: a zombie counts as gone, as it runs nothing."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # the group is empty (the usual case after a clean shutdown)
    deadline = time.monotonic() + timeout
    while _group_runs(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _group_runs(pgid: int) -> bool:
    import psutil  # only needed on this rare path

    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def close_pipe(proc: subprocess.Popen) -> None:
    """Close our end of a child's stdin (a process we did not start has none)."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.close()


def own_usage() -> dict:
    """CPU seconds (user + system) and resident memory of this process, read as psutil's
    ``cpu_times`` and ``memory_info`` read them on Linux, without importing psutil (~10 %
    of an instance's start-up CPU); nothing if /proc will not say."""
    try:
        with open("/proc/self/statm", "rb") as statm:  # sizes in pages; resident second
            resident = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return {}
    times = os.times()
    return {"cpu_seconds": times.user + times.system,
            "rss_bytes": resident * os.sysconf("SC_PAGE_SIZE")}


def log_dir(run_dir: str) -> str:
    path = os.path.join(run_dir, "logs")
    os.makedirs(path, exist_ok=True)
    return path
