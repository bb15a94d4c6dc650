"""Smoke test of ``benchmarks/startup.py``'s import measurement: as a script, one import
per role, whose lines parse (the figures are not checked: speed is measured, not
asserted; the topology half of the script is left to the benchmark runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "startup.py"
GUARD_SECONDS = 120  # a guard against a hung run, not a speed check


def test_one_import_per_role_prints_its_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "0", "--import-runs", "1"],
                          capture_output=True, text=True, env=env, timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = [dict(p.split("=", 1) for p in line.split()[1:])
             for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert [(r["role"], r["stat"], r["runs"]) for r in lines] == [
        ("instance", "import_cpu", "1"), ("stmgr", "import_cpu", "1"),
        ("master", "import_cpu", "1")]
    assert all(0 < float(r["p50_s"]) == float(r["max_s"]) for r in lines)
