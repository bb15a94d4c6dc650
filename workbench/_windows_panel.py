"""A windowed bolt's windows on the dashboard: per task, the watermark, the open windows
and the oldest one's start, the tuples held, late tuples, windows evaluated, and the last
evaluated window's bounds and tuples (from
``statistics()``, each record's ``window``; docs/windows.md, "Seeing windows live").
Pure: a function of a snapshot (see :mod:`workbench._panels`); "" when the component has
no windowed task, so other components' views do not change.

Event times are ms. One that looks like a wall-clock time (after 1973) is shown as a UTC
clock, a small one (a tutorial's "12 s") in seconds; ``data-value`` keeps the exact ms.

>>> snap = {"stats": [{"component": "avg", "task": 3, "window": {
...     "watermark": 37_500, "open_windows": 1, "oldest_window_start": 30_000,
...     "open_tuples": 10, "late_tuples": 1, "evaluated": 3, "last_window_start": 10_000,
...     "last_window_end": 30_000, "last_window_tuples": 7}}]}
>>> "37.5 s" in windows_html(snap, "avg"), "(10 s, 30 s]" in windows_html(snap, "avg")
(True, True)
>>> windows_html(snap, "other")
''
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Mapping
from typing import Any

from . import _format

COLUMNS = (  # (heading, key of the task's window report, how it is shown)
    ("watermark", "watermark", "time"), ("open windows", "open_windows", "count"),
    ("oldest open start", "oldest_window_start", "time"),
    ("held tuples", "open_tuples", "count"), ("late tuples", "late_tuples", "count"),
    ("evaluated", "evaluated", "count"), ("last window", "last_window", "bounds"),
    ("its tuples", "last_window_tuples", "count"))
WALL_CLOCK_MS = 1e11  # ms after the epoch: 1973; an event time past it is a clock time


def windows_html(snapshot: Mapping[str, Any], component: str | None) -> str:
    """A table of ``component``'s windowed tasks, one ``tr[data-task]`` each."""
    mine = sorted((s.get("task"), s["window"]) for s in snapshot.get("stats") or []
                  if s.get("component") == component and s.get("window"))
    if not mine:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in COLUMNS)
    rows = "".join(_row(component, task, report) for task, report in mine)
    return (f'<div class="tupleflow-windows"><b>windows</b> <small>(event times: seconds, '
            f'or a UTC clock for wall-clock timestamps; a window (start, end] holds the '
            f'tuples after its start up to its end)</small><div class="tf-scroll">'
            f'<table class="tf-table"><tr><th>task</th>{head}</tr>{rows}</table></div></div>')


def _row(component: str, task: Any, report: Mapping[str, Any]) -> str:
    cells = "".join(_bounds_cell(report) if kind == "bounds" else
                    f'<td data-key="{key}" data-value="{html.escape(str(report.get(key)))}">'
                    f"{_shown(report.get(key), kind)}</td>" for _, key, kind in COLUMNS)
    return (f'<tr data-task="{html.escape(str(task))}"><td class="tf-name">'
            f"{html.escape(component)}[{html.escape(str(task))}]</td>{cells}</tr>")


def _bounds_cell(report: Mapping[str, Any]) -> str:
    """The last evaluated window as ``(start, end]``, each bound's ms in ``data-start`` and
    ``data-end`` ("None" in processing time, where windows have no event-time bounds)."""
    start, end = report.get("last_window_start"), report.get("last_window_end")
    shown = (f"({event_time(start)}, {event_time(end)}]" if end is not None
             else _format.MISSING)
    return (f'<td data-key="last_window" data-start="{html.escape(str(start))}" '
            f'data-end="{html.escape(str(end))}">{html.escape(shown)}</td>')


def _shown(value: Any, kind: str) -> str:
    if kind == "count":
        return _format.count(value)
    return event_time(value)


def event_time(ms: Any) -> str:
    """An event time for people: a UTC clock for a wall-clock one, else seconds.

    >>> event_time(1_700_000_000_000), event_time(37_500), event_time(None)
    ('22:13:20.000', '37.5 s', '–')
    """
    if _format.number(ms) is None:
        return _format.MISSING
    if abs(ms) < WALL_CLOCK_MS:
        return f"{ms / 1000:g} s"
    stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return stamp.strftime("%H:%M:%S.%f")[:-3]
