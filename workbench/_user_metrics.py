"""The user's own metrics (``context.register_metric``) of a component's tasks, as a small
table under the tasks in the component view: one row per task, one column per metric.
Pure: a snapshot in, HTML out.

>>> snap = {"stats": [{"component": "count", "task": 2, "user_metrics": {
...     "counters": {"seen": 1200}, "gauges": {"depth": 0.5},
...     "histograms": {"size": {"bounds": [1.0], "counts": [1, 3], "sum": 8.0, "count": 4}}}}]}
>>> html_ = user_metrics_html(snap, "count")
>>> "seen" in html_ and "1.2k" in html_ and "0.5" in html_ and "4 · mean 2" in html_
True
>>> user_metrics_html(snap, "other")
''
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from . import _format

KINDS = (("counters", "counter"), ("gauges", "gauge"), ("histograms", "histogram"))


def user_metrics_html(snapshot: Mapping[str, Any], component: str | None) -> str:
    """The table, or nothing when no task of ``component`` registered a metric."""
    mine = sorted(((s.get("task") or 0, s.get("user_metrics") or {})
                   for s in snapshot.get("stats") or []
                   if s.get("component") == component and s.get("user_metrics")),
                  key=lambda tm: tm[0])
    columns = _columns(m for _, m in mine)
    if not columns:
        return ""
    head = "".join(f'<th title="{kind}">{_esc(name)}</th>' for name, _, kind in columns)
    rows = "".join(f"<tr><td class=\"tf-name\">{_esc(component)}[{task}]</td>"
                   + "".join(f"<td>{_value(m.get(key, {}).get(name), key)}</td>"
                             for name, key, _ in columns) + "</tr>"
                   for task, m in mine)
    return ('<div class="tf-scroll"><table class="tf-table tf-user-metrics">'
            f"<caption>user metrics</caption><tr><th>task</th>{head}</tr>{rows}</table></div>")


def _columns(reports) -> list[tuple[str, str, str]]:
    """(name, report key, kind) of every metric any task reported, by kind then name."""
    seen: set[tuple[str, str, str]] = set()
    for report in reports:
        for key, kind in KINDS:
            seen.update((name, key, kind) for name in report.get(key) or {})
    order = {key: i for i, (key, _) in enumerate(KINDS)}
    return sorted(seen, key=lambda c: (order[c[1]], c[0]))


def _value(value: Any, key: str) -> str:
    if value is None:
        return _format.MISSING
    if key == "counters":
        return _format.count(value)
    if key == "gauges":
        return _format.rate(value)
    n = value.get("count") or 0
    mean = _format.rate(value.get("sum", 0) / n) if n else _format.MISSING
    return f"{_format.count(n)} · mean {mean}"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
