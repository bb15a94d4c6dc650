"""``running.profile``: the Python stacks of a component's instances, sampled by py-spy
from outside, without stopping them (``docs/internals/profiling.md``).

py-spy reads a process's memory (``process_vm_readv``, which needs ptrace permission:
root, ``CAP_SYS_PTRACE``, or a Yama ``ptrace_scope`` of 0) and, with ``--nonblocking``,
never pauses it; so it samples an instance stuck in user code, in ``open``/``prepare``,
or in a C call holding the GIL, none of which an in-process sampler thread could. It
runs here, in the submitter's process (the notebook kernel, which waits for the picture
anyway): the master's loop never blocks on it, and no control message is needed, since
the statistics carry each instance's pid. That holds while the instances run on this
machine; a remote container's pids are on another host (``SparkTopology.profile`` says
so), where its stream manager would have to run the sampler.

On-CPU and waiting time are told apart by two samplers per process at the same rate:
one records only threads on a CPU, the other (``--idle``) every sample; a stack's waiting
samples are the difference (statistical: the two sample at slightly different instants).
Waiting is counted for the main thread only (the one running the task's user code):
the instance's heartbeat thread, or a user's own thread, waits nearly all the time, and
that is not time the task spends; their on-CPU samples are kept.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping

from runtime.observe.flame import Profile, parse_folded

MAX_SECONDS = 60.0  # the longest profile one call takes
RATES = (1, 1000)  # samples per second a call may ask for
# the outermost frame of every thread but the main one: their waiting is left out (an
# instance's heartbeat thread sleeps all the time, which says nothing about the task)
OTHER_THREAD = "Thread._bootstrap "
EXIT_WAIT = 5.0  # seconds py-spy may take to write its output once told to stop
START_WAIT = 10.0  # seconds py-spy may take to attach (a loaded machine: half a second)


def check_profile(seconds: object, rate: object) -> tuple[float, int]:
    """``seconds`` in (0, 60] and ``rate`` an integer in 1..1000, or ValueError.

    >>> check_profile(2, 100)
    (2.0, 100)
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not (
            0 < seconds <= MAX_SECONDS):
        raise ValueError(f"seconds must be a number in (0, {MAX_SECONDS:g}], not {seconds!r}")
    if isinstance(rate, bool) or not isinstance(rate, int) or not RATES[0] <= rate <= RATES[1]:
        raise ValueError(f"rate must be an integer in {RATES[0]}..{RATES[1]} (samples per "
                         f"second), not {rate!r}")
    return float(seconds), rate


def py_spy() -> str:
    """The py-spy executable: beside this Python's (a virtualenv's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = beside if os.access(beside, os.X_OK) else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("running.profile needs py-spy: pip install py-spy "
                           "(it is in tupleflow's notebook extra)")
    return found


def profile(component: str, pids: Mapping[int, int], seconds: float, rate: int) -> Profile:
    """Sample the processes ``pids`` (task -> pid) for ``seconds`` at ``rate`` Hz; with
    more than one task, each stack starts with a ``task N`` frame."""
    seconds, rate = check_profile(seconds, rate)
    with tempfile.TemporaryDirectory(prefix="tf-profile-") as tmp:
        runs = {(task, idle): _start(pid, rate, idle, os.path.join(tmp, f"{task}-{idle}"))
                for task, pid in pids.items() for idle in (False, True)}
        said = _stop_after(runs, seconds)
        ended = {key: _finish(*run) for key, run in runs.items()}  # every one, then errors
    tables = {key: _table(key[0], pids[key[0]], table, said[key] + out)
              for key, (table, out) in ended.items()}
    return Profile(component, tuple(pids), seconds, rate, *_split(pids, tables))


def _split(pids: Mapping[int, int], tables: Mapping) -> tuple[dict, dict]:
    """On-CPU and waiting stacks of every task, from its two samplers' tables."""
    cpu: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for task in pids:
        prefix = f"task {task};" if len(pids) > 1 else ""
        on_cpu, every = tables[(task, False)], tables[(task, True)]
        _merge(cpu, on_cpu, prefix)
        _merge(waiting, {s: n - on_cpu.get(s, 0) for s, n in every.items()
                         if not s.startswith(OTHER_THREAD)}, prefix)
    return cpu, waiting


def _start(pid: int, rate: int, idle: bool, path: str) -> tuple[subprocess.Popen, str]:
    """One py-spy recording raw folded stacks to ``path`` until it is interrupted (its
    ``--duration`` takes whole seconds only). It says on stdout when it samples."""
    cmd = [py_spy(), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
           "--nonblocking", "--output", path, *(["--idle"] if idle else [])]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT), path


def _stop_after(runs: Mapping, seconds: float) -> dict:
    """Once every sampler has said it samples, let them run for the profile's length (the
    measurement itself), then tell each to write what it has (SIGINT: py-spy's Ctrl-C).
    A SIGINT before py-spy has attached would end it with nothing written."""
    deadline = time.monotonic() + START_WAIT
    said = {key: _await_sampling(proc, deadline) for key, (proc, _) in runs.items()}
    time.sleep(seconds)
    for proc, _ in runs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    return said


def _await_sampling(proc: subprocess.Popen, deadline: float) -> bytes:
    """Read py-spy's output until its "Sampling process" line, its exit, or the deadline;
    what it said (for the error message, if any)."""
    seen = b""
    while b"Sampling process" not in seen:
        left = deadline - time.monotonic()
        ready = select.select([proc.stdout], [], [], left)[0] if left > 0 else []
        chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            break
        seen += chunk
    return seen


def _finish(proc: subprocess.Popen, path: str) -> tuple[dict[str, int] | None, bytes]:
    """Wait for a sampler to write and exit: its stacks (None if it wrote nothing), and
    the rest of what it said."""
    try:
        out, _ = proc.communicate(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    if not os.path.exists(path):
        return None, out
    with open(path) as f:
        return parse_folded(f.read()), out


def _table(task: int, pid: int, table: dict[str, int] | None, said: bytes) -> dict[str, int]:
    if table is None:
        raise RuntimeError(f"could not sample task {task} (pid {pid}): {_why(said)}")
    return table


def _why(err: bytes) -> str:
    text = err.decode(errors="replace").strip()
    last = text.splitlines()[-1] if text else "py-spy wrote nothing"
    if "ermission" in text or "not permitted" in text:
        last += (" (py-spy needs ptrace permission: run as root, with CAP_SYS_PTRACE, "
                 "or with kernel.yama.ptrace_scope=0)")
    return last


def _merge(into: dict[str, int], table: Mapping[str, int], prefix: str) -> None:
    for stack, n in table.items():
        if n > 0:
            into[prefix + stack] = into.get(prefix + stack, 0) + n
