"""``benchmarks/checkpoints.py`` on small runs, as a script (the way it is run): the
many-kill run's RESULT line parses and says the committed state equals the batch count,
and a cost pair's line parses. The full runs and their figures are in
docs/internals/checkpoints.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "checkpoints.py"


def run(*options: str) -> list[dict[str, str]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # runtime from this tree
    done = subprocess.run([sys.executable, str(SCRIPT), *options], capture_output=True,
                          text=True, env=env, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return [dict(pair.split("=", 1) for pair in words) for words in lines]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_small_many_kill_run_keeps_the_state_exact():
    (result,) = run("--only", "chaos", "--kills", "3", "--chaos-words", "20000", "--seed", "3")
    assert result["name"] == "checkpoint-chaos"
    assert (result["kills"], result["exact"]) == ("3", "1")
    assert int(result["epoch"]) >= 4  # the start, then one rollback per kill at least


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cost_pair_prints_both_rates_and_their_ratio():
    pair, summary = run("--only", "cost", "--pairs", "1", "--words", "40000")
    assert list(pair) == ["name", "pair", "words", "plain_wps", "checkpointed_wps", "cost",
                          "plain_cpu_us", "checkpointed_cpu_us", "cpu_cost",
                          "plain_task_cpu_us", "checkpointed_task_cpu_us", "task_cpu_cost",
                          "checkpoints"]
    assert float(pair["plain_wps"]) > 0 and float(pair["checkpointed_wps"]) > 0
    assert float(pair["plain_cpu_us"]) > 0 and float(pair["checkpointed_cpu_us"]) > 0
    # the counter tasks' own CPU, read in clock ticks (10 ms): a small run may read 0
    assert float(pair["plain_task_cpu_us"]) >= 0 and float(pair["checkpointed_task_cpu_us"]) >= 0
    assert summary["median_cost"] == pair["cost"]
    assert summary["median_cpu_cost"] == pair["cpu_cost"]


@pytest.mark.timeout(120)
def test_a_window_snapshot_line_gives_its_bytes_and_times_per_held_tuple():
    (line,) = run("--only", "windows", "--held", "2000", "--payload", "10", "--reps", "1")
    assert (line["name"], line["held"], line["payload"]) == ("window-snapshot", "2000", "10")
    per_tuple = float(line["bytes_per_tuple"])
    assert per_tuple == pytest.approx(int(line["bytes"]) / 2000, abs=0.05)
    assert per_tuple == pytest.approx(float(line["values_bytes_per_tuple"])
                                      + float(line["overhead_bytes_per_tuple"]), abs=0.1)
    assert float(line["values_bytes_per_tuple"]) > 10  # the text alone is 10 bytes
    for time_field in ("checkpoint_us_per_tuple", "restore_us_per_tuple",
                       "checkpoint_gc_on_us_per_tuple", "restore_gc_on_us_per_tuple"):
        assert float(line[time_field]) > 0


@pytest.mark.timeout(120)
def test_a_window_split_line_gives_its_time_per_held_tuple_beside_the_snapshots():
    (line,) = run("--only", "split", "--held", "2000", "--payload", "10", "--reps", "1")
    assert (line["name"], line["held"], line["tasks"]) == ("window-split", "2000", "2->3")
    assert float(line["split_us_per_tuple"]) > 0 and float(line["snapshot_us_per_tuple"]) > 0
    assert float(line["split_vs_snapshot"]) > 0
    assert 0 < int(line["moved"]) < 2000  # some keys' tuples moved, not all
