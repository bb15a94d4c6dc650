"""A stateful or windowed bolt's checkpoints on the dashboard: the last committed
checkpoint (its id, how long it took from prepare to commit, when), how many committed
and how many rollbacks so far, and per task the checkpoints it saved (from
``statistics()``, each record's ``checkpoint``; docs/internals/checkpoints.md); for a
windowed task also its open windows' part of the last one it saved: the tuples held and
the snapshot's bytes. Pure: a function of a snapshot; "" when the component has no
stateful or windowed task, so other components' views do not change.

>>> snap = {"stats": [
...     {"component": "count", "task": 3, "checkpoint": {"stateful": True, "saved": 7,
...      "epoch": 2, "rollbacks": 1}},
...     {"component": "__checkpoint", "task": 9, "checkpoint": {"id": 12, "seconds": 0.004,
...      "time": 0, "committed": 11, "rollbacks": 2, "epoch": 2}}]}
>>> "checkpoint 12" in checkpoint_html(snap, "count"), checkpoint_html(snap, "other")
(True, '')
>>> snap["stats"].append({"component": "avg", "task": 4, "checkpoint": {"windowed": True,
...     "saved": 7, "epoch": 2, "window_tuples": 1500, "window_bytes": 40960}})
>>> shown = checkpoint_html(snap, "avg")
>>> 'data-value="1500">1.5k' in shown, "40 kB" in shown, "held tuples" in shown
(True, True, True)
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from . import _format

CHECKPOINTER = "__checkpoint"  # the checkpoint spout's component (runtime/state/)


def checkpoint_html(snapshot: Mapping[str, Any], component: str | None) -> str:
    stats = snapshot.get("stats") or []
    mine = sorted((s.get("task"), s["checkpoint"]) for s in stats
                  if s.get("component") == component and _kept(s.get("checkpoint")))
    if not mine:
        return ""
    windowed = any(c.get("windowed") for _, c in mine)
    spout = next((s.get("checkpoint") or {} for s in stats
                  if s.get("component") == CHECKPOINTER), {})
    cid = html.escape(str(spout.get("id")))
    last = (f'last committed: <b data-key="checkpoint_id" data-value="{cid}">checkpoint {cid}'
            f"</b>, took "
            f"<span data-key=\"checkpoint_seconds\">{_format.seconds(spout.get('seconds'))}"
            f"</span>; {_format.count(spout.get('committed'))} committed, "
            f"{_rollbacks(spout.get('rollbacks'))}"
            if spout.get("id") is not None else "no checkpoint committed yet")
    rows = "".join(f'<tr data-task="{html.escape(str(task))}"><td class="tf-name">'
                   f"{html.escape(component)}[{html.escape(str(task))}]</td>"
                   f"{_cell(c, 'saved')}{_cell(c, 'epoch')}"
                   f"{_window_cells(c) if windowed else ''}</tr>" for task, c in mine)
    heads = "<th>held tuples</th><th>snapshot</th>" if windowed else ""
    return (f'<div class="tupleflow-checkpoints"><b>checkpoints</b> <small>{last}</small>'
            f'<table class="tf-table"><tr><th>task</th><th>saved</th><th>epoch</th>{heads}'
            f"</tr>{rows}</table></div>")


def _kept(report: Mapping[str, Any] | None) -> bool:
    """A task whose checkpoints hold something of its own: keyed state or open windows."""
    return bool(report and (report.get("stateful") or report.get("windowed")))


def _window_cells(report: Mapping[str, Any]) -> str:
    """A windowed task's last saved snapshot: the tuples it held, its size (exact bytes in
    ``data-value``); a dash before its first save."""
    size = report.get("window_bytes")
    return (f"{_cell(report, 'window_tuples')}<td data-key=\"window_bytes\" "
            f'data-value="{html.escape(str(size))}">{_format.size(size)}</td>')


def _rollbacks(n: Any) -> str:
    """The rollbacks after the one every run (and every restart of the checkpoint spout,
    whose counts start again) begins with, which a learner would read as a failure.

    >>> _rollbacks(1), _rollbacks(3), _rollbacks(None)
    ('no rollback since the start', '2 rollbacks since the start', '–')
    """
    if not isinstance(n, int):
        return _format.MISSING
    after = max(0, n - 1)
    return ("no rollback" if after == 0 else f"{_format.count(after)} rollback"
            + ("s" if after > 1 else "")) + " since the start"


def _cell(report: Mapping[str, Any], key: str) -> str:
    """A count, its exact value in ``data-value`` (the text reads "1.2k")."""
    value = report.get(key)
    return (f'<td data-key="{key}" data-value="{html.escape(str(value))}">'
            f"{_format.count(value)}</td>")
