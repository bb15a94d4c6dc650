"""Smoke test of ``benchmarks/windows.py``: a tiny run, as a script, whose RESULT lines
parse and whose own check (every tuple that left its window was acked) passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "windows.py"

pytestmark = pytest.mark.slow


def test_a_tiny_run_prints_a_result_per_window_and_the_bolt_ratio():
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    done = subprocess.run([sys.executable, str(SCRIPT), "--tuples", "2000", "--rounds", "1"],
                          capture_output=True, text=True, env=env, timeout=100)
    assert done.returncode == 0, done.stderr
    results = [dict(pair.split("=", 1) for pair in line.split()[1:])
               for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    managers = [r for r in results if r["name"] == "window-manager"]
    assert {r["window"] for r in managers} == {
        "event-sliding-20s-10s", "event-tumbling-10s", "count-sliding-1000-100",
        "processing-tumbling-1s"}
    assert all(int(r["windows"]) > 0 and float(r["ns_per_tuple"]) > 0 for r in managers)
    (bolt,) = [r for r in results if r["name"] == "window-bolt"]
    assert float(bolt["ratio"]) > 0 and int(bolt["tuples"]) == 500
    (report,) = [r for r in results if r["name"] == "window-report"]
    assert int(report["held"]) == 100 and float(report["us_per_report"]) > 0
