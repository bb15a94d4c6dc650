"""The dashboard's tuner view, from tuner events shaped as the runtime makes them: the turns
are drawn and listed as they happened, and the what-if line is the replay of the same
progress with other settings."""

from __future__ import annotations

import re

from runtime.tuning import MaxSpoutPendingTuner, replay
from workbench._panels import render
from workbench._tuner_tab import readings, tuner_html, turns_by_task, what_if

PROGRESS = [1000, 1500, 1520, 900, 950, 940, 945, 950, 948]  # acks per one-second period


def events(progress=PROGRESS, start=100.0, task=3):
    """The master's ``tuner`` events for a tuner fed ``progress``, one turn a second, as
    ``acking/_tracking.py`` reports them (plus one latency-bound event to be left out)."""
    tuner, total, out = MaxSpoutPendingTuner(1000), 5000, []
    for i, p in enumerate(progress):
        tuner.auto_tune(p)
        total += p
        turn = tuner.last_turn
        out.append({"kind": "tuner", "time": start + i + 1, "component": "numbers",
                    "task": task, "action": turn.action, "turns": i + 1,
                    "max_spout_pending": turn.after, "progress": p,
                    "previous": turn.previous, "similar": turn.similar, "band": turn.band,
                    "move": turn.move, "before": turn.before, "after": turn.after,
                    "total": total, "in_flight": min(turn.before, 800)})
    out.append({"kind": "tuner", "time": start, "component": "numbers", "task": 9,
                "action": "latency_bound", "turns": 1, "max_spout_pending": 40})
    return out


def test_the_turns_are_grouped_per_task_and_the_bound_is_left_out():
    grouped = turns_by_task(events())
    assert list(grouped) == [("numbers", 3)]
    assert [t["progress"] for t in grouped[("numbers", 3)]] == PROGRESS


def test_the_readings_rebuild_the_total_progress_with_a_baseline_a_period_earlier():
    turns = turns_by_task(events())[("numbers", 3)]
    got = readings(turns)
    assert got[0] == (100.0, 5000) and got[1] == (101.0, 6000)
    assert [b - a for (_, a), (_, b) in zip(got, got[1:])] == PROGRESS


def test_the_what_if_is_the_replay_of_the_same_progress():
    turns = turns_by_task(events())[("numbers", 3)]
    same = what_if(turns, {})
    assert [(r.move, r.after) for r in same] == [(t["move"], t["after"]) for t in turns]
    wide = what_if(turns, {"similarity": 0.6})
    assert [r.after for r in wide] == [r.after for r in replay(readings(turns), initial=1000,
                                                               similarity=0.6)]
    assert [r.move for r in wide][:2] == ["increase", "restore"]  # 1500 is within 60 %


def test_the_view_draws_the_cap_the_what_if_and_the_progress():
    html = tuner_html({"events": events(), "what_if": {"similarity": 0.6}})
    assert html.count("<svg") == 1 and html.count("<polyline") == 4
    assert 'data-component="numbers"' in html and 'data-task="3"' in html
    final = turns_by_task(events())[("numbers", 3)][-1]["after"]
    assert f"final cap {final:,}" in html
    wide = what_if(turns_by_task(events())[("numbers", 3)], {"similarity": 0.6})
    assert "with similarity=0.6: " in html and f"final cap {wide[-1].after:,}" in html
    rows = re.findall(r"<tr><td>[+-]", html)
    assert len(rows) == 8  # the last turns
    # 1520 vs 1500 is similar: the increase to ceil(1250 × 1.25) = 1563 is taken back
    assert "<td>restore</td><td>1,563 → 1,250</td>" in html


def test_settings_the_tuner_refuses_are_said_and_the_run_is_still_drawn():
    html = tuner_html({"events": events(), "what_if": {"step_up": 0.5}})
    assert "what-if settings refused" in html and "step_up" in html
    assert html.count("<polyline") == 3


def test_a_saved_snapshot_shows_the_tuner_too():
    assert "tf-tuner-chart" in render({"name": "t", "state": "killed", "events": events()})
    assert "tf-tuner-chart" not in render({"name": "t", "state": "killed", "events": []})
