"""Smoke test of ``benchmarks/wordcount.py --cpu``: a tiny tupleflow run of each acking
mode, as a script, whose RESULT lines keep their format and whose CPU lines name every
role of the topology once (the figures are not checked: speed is measured, not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "wordcount.py"
TUPLES = 20_000
GUARD_SECONDS = 300  # a guard against a hung run, not a speed check
ROLES = {"off": ["spout", "count", "stmgr", "master", "benchmark", "total"],
         "on": ["spout", "count", "acker", "stmgr", "master", "benchmark", "total"]}

pytestmark = pytest.mark.slow


def fields(line: str) -> dict[str, str]:
    """``KIND key=value ...`` as a dict, the kind under "kind"."""
    kind, *pairs = line.split()
    return {"kind": kind, **dict(pair.split("=", 1) for pair in pairs)}


@pytest.mark.parametrize("acking", ["off", "on"])
def test_cpu_lines_follow_the_full_speed_run_and_name_every_role(acking):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "tupleflow", "--tuples",
                           str(TUPLES), "--acking", acking, "--cpu"],
                          capture_output=True, text=True, env=env, timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = [fields(line) for line in done.stdout.splitlines()]
    kinds = [f["kind"] for f in lines]
    n = len(ROLES[acking])
    # the full-speed RESULT, its CPU lines, then (acking on) the half-rate RESULT alone
    assert kinds == ["RESULT"] + ["CPU"] * n + (["RESULT"] if acking == "on" else [])
    result, cpu = lines[0], lines[1:1 + n]
    assert (result["name"], result["workload"], result["acking"]) == (
        "tupleflow", "wordcount", acking)
    assert int(result["tuples"]) == TUPLES and int(result["tps"]) > 0
    assert [c["role"] for c in cpu] == ROLES[acking]
    assert all(c["workload"] == "wordcount" and c["acking"] == acking for c in cpu)
    assert all(float(c["ns_per_tuple"]) >= 0 for c in cpu)
    assert float(cpu[-1]["ns_per_tuple"]) > 0
