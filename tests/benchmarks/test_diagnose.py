"""Smoke test of ``benchmarks/diagnose.py``: one short run of one scenario, as a script
(the way it is run), whose RESULT lines must parse and add up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "diagnose.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def fields(line: str) -> dict[str, str]:
    kind, *pairs = line.split()
    return {"kind": kind, **dict(pair.split("=", 1) for pair in pairs)}


def test_one_run_of_one_scenario_prints_its_line_and_the_total():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "1", "--seconds", "2",
                           "--scenario", "slow_sink", "--seed", "7"],
                          capture_output=True, text=True, env=env, timeout=220)
    assert done.returncode == 0, done.stderr
    results = [fields(line) for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert [r["scenario"] for r in results] == ["slow_sink", "all"]
    one, total = results
    assert one["name"] == total["name"] == "diagnose"
    assert one["runs"] == total["runs"] == "1" and one["top1"] == total["top1"]
    assert one["expected"] == "slow_bolt@sink" and 0 <= float(one["top1_rate"]) <= 1
    assert "# slow_sink run 0 seed" in done.stderr  # the per-run line names its seed
