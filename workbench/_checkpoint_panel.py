"""A stateful bolt's checkpoints on the dashboard: the last committed checkpoint (its id,
how long it took from prepare to commit, when), how many committed and how many rollbacks
so far, and per task the checkpoints it saved (from ``statistics()``, each record's
``checkpoint``; docs/internals/checkpoints.md). Pure: a function of a snapshot; "" when
the component has no stateful task, so other components' views do not change.

>>> snap = {"stats": [
...     {"component": "count", "task": 3, "checkpoint": {"stateful": True, "saved": 7,
...      "epoch": 2, "rollbacks": 1}},
...     {"component": "__checkpoint", "task": 9, "checkpoint": {"id": 12, "seconds": 0.004,
...      "time": 0, "committed": 11, "rollbacks": 2, "epoch": 2}}]}
>>> "checkpoint 12" in checkpoint_html(snap, "count"), checkpoint_html(snap, "other")
(True, '')
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
                  if s.get("component") == component and (s.get("checkpoint") or {}).get(
                      "stateful"))
    if not mine:
        return ""
    spout = next((s.get("checkpoint") or {} for s in stats
                  if s.get("component") == CHECKPOINTER), {})
    last = (f"last committed: <b>checkpoint {html.escape(str(spout.get('id')))}</b>, took "
            f"<span data-key=\"checkpoint_seconds\">{_format.seconds(spout.get('seconds'))}"
            f"</span>; {_format.count(spout.get('committed'))} committed, "
            f"{_format.count(spout.get('rollbacks'))} rollbacks"
            if spout.get("id") is not None else "no checkpoint committed yet")
    rows = "".join(f'<tr data-task="{html.escape(str(task))}"><td class="tf-name">'
                   f"{html.escape(component)}[{html.escape(str(task))}]</td>"
                   f"<td>{_format.count(c.get('saved'))}</td>"
                   f"<td>{_format.count(c.get('epoch'))}</td></tr>" for task, c in mine)
    return (f'<div class="tupleflow-checkpoints"><b>checkpoints</b> <small>{last}</small>'
            f'<table class="tf-table"><tr><th>task</th><th>saved</th><th>epoch</th></tr>'
            f"{rows}</table></div>")
