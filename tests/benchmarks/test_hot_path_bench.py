"""Smoke test of ``benchmarks/hot_path.py``: one short round of each mode, as a script, whose
line parses and whose acking round acked every tuple it emitted (the script checks that
itself and exits non-zero otherwise; the figures are not checked: speed is measured, not
asserted). The acking round acked 320 of 200,000, unnoticed: the default
latency bound held its spout at 8 roots, and no test ran the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hot_path.py"
GUARD_SECONDS = 300  # a guard against a hung run, not a speed check

# CPU times, each >= 0. Not engine_ns: it is spout_ns - floor_ns, two times measured apart,
# and under load a round's floor can take longer than its spout (the run of 2026-11-27 with
# four xdist workers printed a negative one); the test checks the subtraction instead.
FIGURES = {"off": ("spout_ns", "floor_ns", "bolt_ns"),
           "on": ("spout_ns", "spout_acked_ns", "bolt_ns", "acker_ns", "total_ns")}


@pytest.mark.parametrize("acking", ["off", "on"])
def test_one_round_prints_its_line(acking):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(SCRIPT), "--tuples", "10000", "--rounds", "1",
                           "--acking", acking], capture_output=True, text=True, env=env,
                          timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [dict(p.split("=", 1) for p in line.split()[1:])
               for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert line["tuples"] == "10000" and line["rounds"] == "1"
    assert all(float(line[k]) >= 0 for k in FIGURES[acking])
    if acking == "off":  # each figure is rounded to a whole ns on its own
        assert abs(int(line["engine_ns"]) - (int(line["spout_ns"]) - int(line["floor_ns"]))) <= 1
