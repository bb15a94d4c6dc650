"""What a process start costs (docs/internals/performance.md): an instance leaves out, at
its start, the modules only other processes or rare paths need, and the usage it reports
without psutil is psutil's."""

from __future__ import annotations

import subprocess
import sys

import psutil

from runtime import _procs

# each imported where it is used: watching other processes, a SQLite store, starting a
# process, the Spark bridge's Java check, a "did you mean" hint
NOT_AT_START = ("psutil", "sqlite3", "subprocess", "shutil", "difflib")


def test_an_instance_starts_without_the_modules_it_rarely_needs():
    probe = ("import sys, runtime.processes.instance\n"
             f"print(sorted(m for m in {NOT_AT_START!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_own_usage_reads_what_psutil_reads():
    mib = 1024 * 1024
    ballast = bytearray(64 * mib)  # resident: 64 MiB of zeroes written
    me = psutil.Process()
    before, usage, after = me.memory_info().rss, _procs.own_usage(), me.memory_info().rss
    assert min(before, after) - mib <= usage["rss_bytes"] <= max(before, after) + mib
    assert usage["rss_bytes"] > len(ballast)
    cpu = me.cpu_times()
    # psutil reads /proc/<pid>/stat; os.times() the same ticks through times(2): the
    # reads are a moment apart, so allow a few 10 ms ticks between them
    assert abs(usage["cpu_seconds"] - (cpu.user + cpu.system)) < 0.05
