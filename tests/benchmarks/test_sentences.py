"""Smoke test of ``benchmarks/sentences.py``: a tiny run of each acking mode, as a script
(the way it is run), whose RESULT and CPU lines must parse and whose checks must pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "sentences.py"
SENTENCES = 2000
# a guard against a hung run, not a speed check: with acking on (two tupleflow runs and
# two baselines) it took 92 s on a shared 2-core machine at load average ~40
GUARD_SECONDS = 300
ROLES = {"off": ["spout", "split", "count", "stmgr", "master", "benchmark", "total"],
         "on": ["spout", "split", "count", "acker", "stmgr", "master", "benchmark", "total"]}

pytestmark = pytest.mark.slow


def run_benchmark(*options: str, script: str = SCRIPT.name) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    return subprocess.run([sys.executable, str(SCRIPT.parent / script), *options],
                          capture_output=True, text=True, env=env, timeout=GUARD_SECONDS)


def fields(line: str) -> dict[str, str]:
    """``KIND key=value ...`` as a dict, the kind under "kind"."""
    kind, *pairs = line.split()
    return {"kind": kind, **dict(pair.split("=", 1) for pair in pairs)}


@pytest.mark.parametrize("acking", ["off", "on"])
def test_a_tiny_run_passes_its_checks_and_prints_parsable_lines(acking):
    done = run_benchmark("--sentences", str(SENTENCES), "--acking", acking, "--cpu")
    assert done.returncode == 0, done.stderr
    assert "FAILED" not in done.stderr
    lines = [fields(line) for line in done.stdout.splitlines()]
    results = [f for f in lines if f["kind"] == "RESULT"]
    expected = [("tupleflow", "sentences")] + (
        [("tupleflow", "sentences-half-rate")] if acking == "on" else []) + [
        ("python-loop", "sentences"), ("zmq-pipe", "sentences")]
    assert [(r["name"], r["workload"]) for r in results] == expected
    for r in results:
        assert int(r["tuples"]) == SENTENCES and r["words"] == "10"
        assert float(r["seconds"]) > 0 and int(r["tps"]) > 0
    tupleflow = [r for r in results if r["name"] == "tupleflow"]
    assert all(r["acking"] == acking for r in tupleflow)
    assert all(("p99_ms" in r) == (acking == "on") for r in tupleflow)
    cpu = [f for f in lines if f["kind"] == "CPU"]
    assert [c["role"] for c in cpu] == ROLES[acking]
    assert float(cpu[-1]["us_per_sentence"]) > 0


def test_the_slow_bolt_scenario_prints_its_figures_and_throttles_with_the_defaults():
    done = run_benchmark("--only", "tupleflow", "--count-sleep-ms", "10", "--seconds", "4")
    assert done.returncode == 0, done.stderr
    (result,) = [fields(line) for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert (result["workload"], result["acking"], result["seconds"]) == (
        "sentences-slow-bolt", "on", "4")
    assert int(result["acked"]) > 0 and (result["failed"], result["timed_out"]) == ("0", "0")
    assert float(result["throttled_after_s"]) < 4 and float(result["p99_ms"]) > 0


def test_the_hops_option_stamps_every_sentence_of_the_half_rate_run():
    done = run_benchmark("--only", "tupleflow", "--acking", "on", "--half-rate", "1000",
                         "--sentences", str(SENTENCES), "--hops")
    assert done.returncode == 0, done.stderr
    lines = [fields(line) for line in done.stdout.splitlines()]
    (result,) = [f for f in lines if f["kind"] == "RESULT"]  # no full-rate run
    assert result["workload"] == "sentences-half-rate" and int(result["tuples"]) == SENTENCES
    hops = {f.get("set"): f for f in lines if f["kind"] == "HOPS" and "set" in f}
    assert int(hops["all"]["sentences"]) == SENTENCES and hops["all"]["missing"] == "0"
    assert int(hops["slowest"]["sentences"]) == SENTENCES // 100
    longest = dict(pair.split(":") for pair in hops["all"]["longest"].split(","))
    assert sorted(longest) == ["count", "split", "spout"]
    assert sum(map(int, longest.values())) == SENTENCES
    roles = {f["process"] for f in lines if f["kind"] == "HOPS" and "process" in f}
    assert {"spout", "split", "count", "acker", "stmgr"} <= roles
    (calls,) = [f for f in lines if f["kind"] == "HOPS" and "spout_calls" in f]
    assert int(calls["spout_calls"]) >= SENTENCES
