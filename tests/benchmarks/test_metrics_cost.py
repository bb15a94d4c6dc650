"""Smoke test of ``benchmarks/metrics_cost.py``'s end-to-end sentences pair: a tiny run,
as a script (the way it is run), whose lines must parse, whose checks (exact counts, every
sentence acked, histograms only with metrics on) must pass, and whose summary must be
computed from the runs it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "metrics_cost.py"
SENTENCES = 2000
GUARD_SECONDS = 300  # a guard against a hung run, not a speed check

pytestmark = pytest.mark.slow


def fields(line: str) -> dict[str, str]:
    kind, *pairs = line.split()
    return {"kind": kind, **dict(pair.split("=", 1) for pair in pairs)}


def test_the_sentences_pair_runs_both_sides_and_summarises_them():
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--workload", "sentences", "--tuples", str(SENTENCES),
         "--rounds", "1", "--frames", "0", "--acking", "on"],
        capture_output=True, text=True, env=env, timeout=GUARD_SECONDS)
    assert done.returncode == 0, done.stderr
    lines = [fields(line) for line in done.stdout.splitlines() if line.startswith("RESULT")]
    runs, (summary,) = lines[:-1], lines[-1:]
    assert sorted(r["metrics"] for r in runs) == ["off", "on"]
    assert {(r["workload"], r["acking"], r["tuples"], r["bolts"]) for r in runs} == {
        ("sentences", "on", str(SENTENCES), "2")}
    tps = {r["metrics"]: int(r["tps"]) for r in runs}
    assert summary["name"] == "metrics-cost" and summary["workload"] == "sentences"
    assert (int(summary["on_tps"]), int(summary["off_tps"])) == (tps["on"], tps["off"])
    assert float(summary["cost_pct"]) == pytest.approx((1 - tps["on"] / tps["off"]) * 100,
                                                        abs=0.05)
