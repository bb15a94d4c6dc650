"""``benchmarks/chaos.py`` on small runs, as a script (the way it is run): each scenario's
RESULT line parses, nothing is lost, and the duplicates stay within the tuples in flight at
the faults (or the uncommitted window of a spout restarted from its checkpoint).

The full runs (100,000 messages a scenario, all scenarios) are a benchmark; the figures are
in docs/reliability.md."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "chaos.py"
KEYS = ["scenario", "messages", "faults", "emitted", "acked", "failed", "replayed", "lost",
        "duplicates", "bound", "late", "recovery_s", "unrecovered", "peak_rss_mb", "seconds"]


def run_chaos(*options: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    return subprocess.run([sys.executable, str(SCRIPT), *options], capture_output=True,
                          text=True, env=env, timeout=170)


def results(stdout: str) -> list[dict[str, str]]:
    lines = [line.split()[1:] for line in stdout.splitlines() if line.startswith("RESULT ")]
    return [dict(pair.split("=", 1) for pair in words) for words in lines]


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("scenario", ["bolt-kill", "log-spout-kill", "redis-spout-kill",
                                      "stmgr-kill", "master-kill"])
def test_a_small_run_loses_nothing_and_bounds_its_duplicates(scenario):
    # 3 s of messages: the first fault comes 2 s in (chaos.py's floor), so it lands mid-stream
    done = run_chaos("--scenario", scenario, "--messages", "3600", "--rate", "1200",
                     "--every", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = results(done.stdout)
    assert list(result) == ["name", *KEYS] and result["scenario"] == scenario
    figures = {k: float(v) for k, v in result.items() if k not in ("name", "scenario")}
    assert figures["faults"] >= 1
    assert figures["lost"] == 0
    assert figures["duplicates"] <= figures["bound"]
    assert figures["peak_rss_mb"] > 0 and figures["acked"] > 0
    if scenario == "master-kill":  # a new master adopted the containers, and said when
        (words,) = [line.split()[2:] for line in done.stdout.splitlines()
                    if line.startswith("# master-kill: master_s=")]
        seconds = dict(word.split("=") for word in words)
        assert float(seconds["master_s"]) > float(seconds["adoption_s"]) > 0


# -- the pure parts --------------------------------------------------------------------------

def chaos_module():
    spec = importlib.util.spec_from_file_location("chaos_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # chaos.py registers itself with cloudpickle by name
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_the_bound_counts_the_batch_a_call_that_finds_room_emits():
    chaos = chaos_module()
    assert chaos.in_flight_bound(200, 50, 2) == 2 * 249  # room for one, then a batch of 50
    assert chaos.in_flight_bound(chaos.MAX_SPOUT_PENDING, chaos.BATCH, chaos.SPOUTS) == 498


def test_recovery_is_the_time_from_a_fault_to_full_rate_again():
    recovery = chaos_module().recovery
    rates = [100.0] * 6 + [20.0, 0.0, 50.0, 95.0, 100.0] + [100.0] * 5  # a dip at t=6..9
    series = [(float(t), r) for t, r in enumerate(rates)]
    assert recovery(series, [5.5]) == (3.5, 0)  # back at >= 90 at t=9
    assert recovery(series, [12.5]) == (0.0, 0)  # no dip after this one
    assert recovery(series[:9], [5.5]) == (0.0, 1)  # the run ended before it came back
    assert recovery([], [1.0]) == (0.0, 0) and recovery(series, []) == (0.0, 0)


def test_every_key_gets_its_values_in_order_from_the_records():
    chaos = chaos_module()
    assert chaos.expected_counts(250) == {k: 3 if k < 50 else 2 for k in range(100)}
    parts = chaos.by_partition(250)
    assert sum(len(p) for p in parts.values()) == 250
    assert parts[1][:2] == [b'{"k":1,"s":0}', b'{"k":5,"s":0}']
