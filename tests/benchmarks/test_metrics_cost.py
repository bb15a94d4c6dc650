"""Smoke test of ``benchmarks/metrics_cost.py``'s end-to-end pairs (sentences and word
count): a tiny run, as a script (the way it is run), whose lines must parse, whose checks
(exact counts, every tuple acked, histograms only with metrics on) must pass, and whose two
summaries (rates, CPU per tuple) must be computed from the runs it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "metrics_cost.py"
TUPLES = {"sentences": 2000, "wordcount": 20000}
GUARD_SECONDS = 300  # a guard against a hung run, not a speed check

pytestmark = pytest.mark.slow


def fields(line: str) -> dict[str, str]:
    kind, *pairs = line.split()
    return {"kind": kind, **dict(pair.split("=", 1) for pair in pairs)}


@pytest.mark.parametrize("workload", sorted(TUPLES))
def test_a_pair_runs_both_sides_and_summarises_them(workload):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--workload", workload, "--tuples", str(TUPLES[workload]),
         "--rounds", "1", "--frames", "0", "--acking", "on"],
        capture_output=True, text=True, env=env, timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = [fields(line) for line in done.stdout.splitlines() if line.startswith("RESULT")]
    runs, (rates, cpu) = lines[:-2], lines[-2:]
    assert sorted(r["metrics"] for r in runs) == ["off", "on"]
    bolts = "2" if workload == "sentences" else "1"
    assert {(r["workload"], r["acking"], r["tuples"], r["bolts"]) for r in runs} == {
        (workload, "on", str(TUPLES[workload]), bolts)}
    tps = {r["metrics"]: int(r["tps"]) for r in runs}
    assert rates["name"] == "metrics-cost" and rates["workload"] == workload
    assert (int(rates["on_tps"]), int(rates["off_tps"])) == (tps["on"], tps["off"])
    assert float(rates["cost_pct"]) == pytest.approx((1 - tps["on"] / tps["off"]) * 100,
                                                      abs=0.05)
    spent = {r["metrics"]: float(r["cpu_us_per_tuple"]) for r in runs}
    assert all(us > 0 for us in spent.values())  # the processes were found and measured
    assert cpu["name"] == "metrics-cost-cpu" and cpu["target_pct"] == "3.0"
    assert (float(cpu["on_cpu_us"]), float(cpu["off_cpu_us"])) == (spent["on"], spent["off"])
    assert float(cpu["cost_pct"]) == pytest.approx((spent["on"] / spent["off"] - 1) * 100,
                                                   abs=0.1)
