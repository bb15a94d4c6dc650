"""The dashboard's tuner view: the auto-tuner's turns over time, and what it would have done
with other settings on the same run.

Pure HTML from a snapshot's ``tuner`` events (each carries the turn as data: the progress of
the period and of the one before, the similarity test, the move, the cap before and after,
the spout's total progress and the roots in flight; ``runtime/acking/_tracking.py``). For
each spout task run by ``max_spout_pending="auto"`` it draws one SVG, no script, no web
font: on top the cap (solid), the cap a what-if replay (``runtime.tuning.replay``) gives
with the settings in ``snapshot["what_if"]`` (dashed) and the tuples in flight (dotted); below,
the progress of each period. Then the last turns as a table, and one line comparing the
replay with what the tuner did.

>>> events = [{"kind": "tuner", "component": "s", "task": 1, "time": 10.0 + i,
...            "progress": p, "previous": None if i == 0 else 100, "similar": None,
...            "band": None, "move": m, "before": b, "after": a, "total": 100 * (i + 1),
...            "in_flight": 50} for i, (p, m, b, a) in enumerate(
...            [(100, "increase", 1000, 1250), (100, "restore", 1250, 1000)])]
>>> html = tuner_html({"events": events, "what_if": {"similarity": 0.5}})
>>> "<svg" in html and "restore" in html and "similarity=0.5" in html
True
>>> tuner_html({"events": []})
''
"""

from __future__ import annotations

import html as _html
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.tuning import replay

__all__ = ["readings", "tuner_html", "turns_by_task", "what_if"]

W, H, PAD = 640, 200, 34  # the chart's box (px) and its left margin for the axis labels
TOP = 0.62  # share of the height for the cap panel; the progress panel has the rest
CAP, WHAT_IF, IN_FLIGHT, PROGRESS = "#2f6db5", "#e07b00", "#7a7a7a", "#3d9a50"
LAST_TURNS = 8  # rows in the table of turns


def turns_by_task(events: Sequence[Mapping[str, Any]] | None) -> dict[tuple, list[dict]]:
    """The auto-tuner's turns per (component, task), oldest first (latency-bound
    changes and turns without data are left out)."""
    out: dict[tuple, list[dict]] = {}
    for e in events or ():
        if e.get("kind") == "tuner" and isinstance(e.get("total"), int | float):
            out.setdefault((e.get("component"), e.get("task")), []).append(dict(e))
    return {k: sorted(v, key=lambda e: e["time"]) for k, v in out.items()}


def readings(turns: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """``(time, total progress)`` for a replay: a baseline one period before the first
    turn (the period being the median gap between turns, 0 with one turn), then one per
    turn."""
    times = [t["time"] for t in turns]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    gap = gaps[len(gaps) // 2] if gaps else 0.0
    first = turns[0]
    base = (first["time"] - gap, first["total"] - first["progress"])
    return [base] + [(t["time"], t["total"]) for t in turns]


def what_if(turns: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list:
    """The replay of these turns' progress with ``settings`` (those of
    ``runtime.tuning.replay``), starting from the cap the tuner started from."""
    return replay(readings(turns), initial=turns[0]["before"], **settings)


def tuner_html(snapshot: Mapping[str, Any]) -> str:
    """The tuner view of every auto-tuned spout task in the snapshot ('' with none)."""
    settings = dict(snapshot.get("what_if") or {})
    parts = []
    for (component, task), turns in turns_by_task(snapshot.get("events")).items():
        parts.append(_task_html(component, task, turns, settings))
    return "".join(parts)


def _task_html(component: Any, task: Any, turns: list[dict], settings: dict) -> str:
    try:
        replayed, why = what_if(turns, settings), ""
    except (TypeError, ValueError) as err:  # settings that mean nothing: say so, draw the run
        replayed, why = None, f"what-if settings refused: {err}"
    title = f"tuner of {component} task {task}: {len(turns)} turns"
    return (f'<div class="tf-tuner" data-component="{_esc(component)}" data-task="{_esc(task)}">'
            f"<b>{_esc(title)}</b>{chart_svg(turns, replayed)}"
            f"{_compare(turns, replayed, settings, why)}{_turns_table(turns)}</div>")


# -- the chart ----------------------------------------------------------------------------
def chart_svg(turns: Sequence[Mapping[str, Any]], replayed: Sequence[Any] | None) -> str:
    """Cap, what-if cap and in-flight (top), progress per period (bottom), over time."""
    t0, t1 = turns[0]["time"], turns[-1]["time"]
    span = (t1 - t0) or 1.0
    caps = [(t["time"], t["after"]) for t in turns]
    start = [(t0, turns[0]["before"])]
    other = start + [(r.time, r.after) for r in replayed] if replayed else []
    flight = [(t["time"], t.get("in_flight")) for t in turns]
    progress = [(t["time"], t["progress"]) for t in turns]
    top_h, low_h = H * TOP, H * (1 - TOP)
    cap_max = max([v for _, v in start + caps + other] + [v or 0 for _, v in flight]) or 1
    prog_max = max(v for _, v in progress) or 1

    def x(t: float) -> float:
        return PAD + (W - PAD - 4) * (t - t0) / span

    def line(points, top: float, height: float, vmax: float, colour: str, dash: str = "",
             step: bool = True) -> str:
        xy, last = [], None
        for t, v in points:
            if v is None:
                continue
            y = top + height - 4 - (height - 8) * v / vmax
            if step and last is not None:
                xy.append(f"{x(t):.1f},{last:.1f}")
            xy.append(f"{x(t):.1f},{y:.1f}")
            last = y
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        return (f'<polyline points="{" ".join(xy)}" fill="none" stroke="{colour}" '
                f'stroke-width="1.5"{dashes}/>')

    body = [line(start + caps, 0, top_h, cap_max, CAP),
            line(flight, 0, top_h, cap_max, IN_FLIGHT, "2,2", step=False),
            line(progress, top_h, low_h, prog_max, PROGRESS, step=False)]
    if other:
        body.insert(1, line(other, 0, top_h, cap_max, WHAT_IF, "6,3"))
    labels = [_text(2, 12, f"{cap_max:,.0f}"), _text(2, top_h - 4, "0"),
              _text(2, top_h + 12, f"{prog_max:,.0f}"), _text(2, H - 4, "0"),
              _text(PAD + 4, 12, "cap", CAP), _text(PAD + 34, 12, "what-if cap", WHAT_IF),
              _text(PAD + 114, 12, "in flight", IN_FLIGHT),
              _text(PAD + 4, top_h + 12, "progress per period", PROGRESS),
              _text(W - 70, H - 4, f"{span:,.0f} s")]
    rule = f'<line x1="{PAD}" x2="{W}" y1="{top_h:.1f}" y2="{top_h:.1f}" stroke="#ccc"/>'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="tf-tuner-chart" width="{W}" '
            f'height="{H}" viewBox="0 0 {W} {H}">{rule}{"".join(body)}{"".join(labels)}</svg>')


def _text(x: float, y: float, text: str, colour: str = "#555") -> str:
    return (f'<text x="{x:.0f}" y="{y:.0f}" font-size="10" font-family="sans-serif" '
            f'fill="{colour}">{_esc(text)}</text>')


# -- the words ------------------------------------------------------------------------------
def _compare(turns: list[dict], replayed: list | None, settings: dict, why: str) -> str:
    if replayed is None:
        return f"<div><small>{_esc(why)}</small></div>"
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "the same settings"
    moves = _moves([t["move"] for t in turns])
    theirs = _moves([r.move for r in replayed])
    return (f"<div><small>done: {moves}; final cap {turns[-1]['after']:,}.<br>"
            f"what auto would have done on this run's progress with {_esc(shown)}: "
            f"{theirs}; final cap {replayed[-1].after:,}.</small></div>")


def _moves(moves: list[str]) -> str:
    counts = {m: moves.count(m) for m in ("increase", "decrease", "restore", "no_change")}
    return ", ".join(f"{n} {m}" for m, n in counts.items() if n)


def _turns_table(turns: list[dict]) -> str:
    rows = "".join(
        f"<tr><td>{t['time'] - turns[0]['time']:+.1f} s</td>"
        f"<td>{_num(t.get('previous'))}</td><td>{_num(t['progress'])}</td>"
        f"<td>{_similar(t)}</td><td>{_esc(t['move'])}</td>"
        f"<td>{t['before']:,} → {t['after']:,}</td></tr>"
        for t in turns[-LAST_TURNS:])
    return ('<table class="tf-table"><tr><th>turn at</th><th>progress before</th>'
            '<th>progress</th><th>similar?</th><th>move</th><th>cap</th></tr>'
            f"{rows}</table>")


def _similar(turn: Mapping[str, Any]) -> str:
    if turn.get("similar") is None:
        return "first turn"
    word = "yes" if turn["similar"] else "no"
    return f"{word} (±{_num(turn.get('band'))})"


def _num(value: Any) -> str:
    return "–" if not isinstance(value, int | float) else f"{value:,.0f}"


def _esc(value: Any) -> str:
    return _html.escape(str(value))
