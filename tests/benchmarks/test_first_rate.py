"""Smoke test of ``benchmarks/first_rate.py``: one run, as a script, whose lines parse and
whose summary is computed from the run it printed (the figure itself is not checked: speed
is measured, not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "first_rate.py"
GUARD_SECONDS = 300  # a guard against a hung run, not a speed check

pytestmark = pytest.mark.slow


def test_one_run_prints_its_line_and_the_summary():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1"], capture_output=True,
                          text=True, env=env, timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = [dict(p.split("=", 1) for p in line.split()[1:])
             for line in done.stdout.splitlines() if line.startswith("RESULT")]
    run, summary = lines
    assert run["name"] == summary["name"] == "first-rate" and run["ms"] == "10"
    assert 0 < int(run["executed"]) < 2000  # seen in the middle of the burst's one frame
    assert summary["median_s"] == summary["max_s"] == run["seconds"]
