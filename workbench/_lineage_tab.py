"""The dashboard's lineage tab and acker panel, as pure HTML from a snapshot.

A snapshot's ``traces`` are the recent :class:`runtime.observe.traces.Trace` records
(``running.traces(status, limit)``, newest first), ``trace`` the one chosen (kept while
it is chosen, even once it leaves the recent ones), and ``acker`` what
``running.acker_state()`` said. The tab lists the traces (one row each, the chosen one
marked) and draws the chosen tree (:mod:`workbench._lineage`); the acker panel draws each
acker task's pending roots per ledger slot as bars, then its oldest roots.

A tapped tuple (``running.sample``) belongs to a traced tree when a hop of that tree is
its delivery: same stream and values, received by one of the tasks it went ``to``, from
the task that sent it (:func:`trace_of`); the tap tab offers those trees to follow.

>>> from runtime.observe.traces import Hop, Trace
>>> t = Trace("m1", "src", 1, "acked", 3.5, (Hop("b", 2, "default", (7,), None, 1.0, 2.0,
...     "acked"),))
>>> html = lineage_html({"traces": [t], "trace": t})
>>> "<svg" in html and 'data-msg-id="&#x27;m1&#x27;"' in html
True
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._lineage import trace_svg

__all__ = ["acker_html", "choice_key", "lineage_html", "trace_choices", "trace_of",
           "traced_taps"]

BAR_W, BAR_H = 260, 14  # px: the longest bar of the acker panel, and each bar's height


def choice_key(trace: Any) -> str:
    """What a choice of trace carries: ``repr(msg_id)`` (msg_ids need not be strings)."""
    return repr(trace.msg_id)


def trace_choices(traces: Iterable[Any]) -> list[tuple[str, str]]:
    """The lineage tab's dropdown options: ``(label, key)`` per trace, newest first.

    >>> from runtime.observe.traces import Trace
    >>> trace_choices([Trace(4, "src", 1, "failed", 2.0, ())])
    [('4 · src:1 · failed', '4')]
    """
    return [(f"{t.msg_id} · {t.component}:{t.task} · {t.status}", choice_key(t))
            for t in traces]


def traces_html(traces: Sequence[Any], chosen: Any = None) -> str:
    """The recent traces, one row each: msg_id, spout task, status, time, hops, holder."""
    if not traces:
        return ("<small>no traces yet: trace a share of the spout tuples with "
                "<code>submit(trace=0.01)</code>, <code>running.set_trace(rate)</code> or "
                "the rate box above</small>")
    key = choice_key(chosen) if chosen is not None else None
    rows = "".join(_trace_row(t, choice_key(t) == key) for t in traces)
    return (f'<div class="tf-scroll"><table class="tf-table tf-traces">'
            f"<tr><th>msg_id</th><th>spout</th><th>status</th><th>complete ms</th>"
            f"<th>hops</th><th>held by</th></tr>{rows}</table></div>")


def _trace_row(t: Any, chosen: bool) -> str:
    held = getattr(t, "held_by", None)
    who = "" if not held else f"{held[0]}" + ("" if held[1] is None else f":{held[1]}")
    done = "" if t.complete_ms is None else f"{t.complete_ms:.1f}"
    mark = ' class="tf-chosen" style="background:#fff4d6"' if chosen else ""
    return (f'<tr data-msg-id="{_esc(choice_key(t))}" data-status="{_esc(t.status)}"{mark}>'
            f"<td>{_esc(t.msg_id)}</td><td>{_esc(t.component)}:{_esc(t.task)}</td>"
            f"<td>{_esc(t.status)}</td><td>{done}</td><td>{len(t.hops)}</td>"
            f"<td>{_esc(who)}</td></tr>")


def lineage_html(snapshot: Mapping[str, Any]) -> str:
    """The tab's body: the chosen tree's picture (if one is chosen), then the list."""
    traces, chosen = list(snapshot.get("traces") or ()), snapshot.get("trace")
    picture = (f'<div class="tf-scroll tupleflow-tree">{trace_svg(chosen)}</div>'
               if chosen is not None else
               "<small>choose a trace above (or follow a traced tuple from the tap)"
               "</small>")
    return f'{picture}<div class="tf-caption">recent traces</div>{traces_html(traces, chosen)}'


# -- the tap's traced tuples ---------------------------------------------------------------
def trace_of(tapped: Mapping[str, Any], traces: Iterable[Any]) -> Any:
    """The trace one tapped tuple belongs to, or None (see the module's docstring).

    >>> from runtime.observe.traces import Hop, Trace
    >>> t = Trace("m1", "src", 1, "acked", 1.0, (Hop("b", 2, "default", ("x",), None),))
    >>> trace_of({"task": 1, "stream": "default", "values": ["x"], "to": [2]}, [t]).msg_id
    'm1'
    >>> trace_of({"task": 9, "stream": "default", "values": ["x"], "to": [2]}, [t]) is None
    True
    """
    values, to = list(tapped.get("values") or ()), set(tapped.get("to") or ())
    for trace in traces:
        if any(_delivers(trace, hop, tapped, values, to) for hop in trace.hops):
            return trace
    return None


def _delivers(trace: Any, hop: Any, tapped: Mapping[str, Any], values: list, to: set) -> bool:
    if hop.stream != tapped.get("stream") or hop.task not in to or list(hop.values) != values:
        return False
    parent = hop.parent
    sender = trace.hops[parent].task if parent is not None and 0 <= parent < len(
        trace.hops) else trace.task
    return sender == tapped.get("task")


def traced_taps(tuples: Iterable[Mapping[str, Any]], traces: Sequence[Any]
                ) -> list[tuple[str, str]]:
    """The tap tab's "follow" options: one ``(label, key)`` per traced tree that a tapped
    tuple belongs to, in the tap's order (newest first), each tree once."""
    seen: dict[str, str] = {}
    for t in tuples:
        trace = trace_of(t, traces)
        if trace is not None and choice_key(trace) not in seen:
            seen[choice_key(trace)] = (f"{_short(t.get('values'))} → tree of msg_id "
                                       f"{trace.msg_id} ({trace.status})")
    return [(label, key) for key, label in seen.items()]


# -- the acker panel -----------------------------------------------------------------------
def acker_html(snapshot: Mapping[str, Any]) -> str:
    """Each acker task's pending roots per ledger slot (bars), then its oldest roots."""
    ackers = snapshot.get("acker")
    if ackers is None:
        return "<small>no acker state yet</small>"
    if not ackers:
        return "<small>no acker task (ackers=0), or none has reported yet</small>"
    return "".join(_acker_html(a) for a in ackers)


def _acker_html(acker: Mapping[str, Any]) -> str:
    ages = acker.get("ages") or []
    top = max([a["count"] for a in ages] + [1])
    bars = "".join(_bar(a, top) for a in ages)
    oldest = "".join(_oldest_row(r, ages) for r in acker.get("oldest") or ())
    table = (f'<table class="tf-table tf-oldest"><caption>oldest roots</caption>'
             f"<tr><th>root</th><th>spout</th><th>msg_id</th><th>age</th></tr>{oldest}"
             f"</table>" if oldest else "<div><small>nothing pending</small></div>")
    return (f'<div class="tupleflow-acker" data-task="{_esc(acker.get("task"))}">'
            f'<div class="tf-caption">acker task {_esc(acker.get("task"))}: '
            f'{_esc(acker.get("pending", 0))} pending</div>{bars}{table}</div>')


def _bar(bar: Mapping[str, Any], top: int) -> str:
    width = BAR_W * bar["count"] / top
    label = f"{bar['youngest_s']:.0f}-{bar['oldest_s']:.0f} s old"
    return (f'<div class="tf-age" data-count="{bar["count"]}" style="font-size:12px">'
            f'<span style="display:inline-block;width:110px">{_esc(label)}</span>'
            f'<svg width="{BAR_W + 60}" height="{BAR_H}" style="vertical-align:middle">'
            f'<rect width="{width:.1f}" height="{BAR_H}" fill="#2f6db5"/>'
            f'<text x="{width + 4:.1f}" y="{BAR_H - 3}" font-size="11">{bar["count"]}</text>'
            f"</svg></div>")


def _oldest_row(root: Mapping[str, Any], ages: list) -> str:
    age = root.get("age_s")
    slot = root.get("slot")
    if age is not None:
        shown = f"{age:.1f} s"
    elif slot is not None and 0 <= slot < len(ages):
        shown = f"{ages[slot]['youngest_s']:.0f}-{ages[slot]['oldest_s']:.0f} s"
    else:
        shown = "?"
    msg_id = root.get("msg_id")
    return (f'<tr data-root="{_esc(root.get("root"))}"><td>{_esc(hex(root.get("root") or 0))}'
            f'</td><td>{_esc(root.get("spout") or "?")}:{_esc(root.get("spout_task"))}</td>'
            f"<td>{_esc('?' if msg_id is None else _short(msg_id))}</td><td>{_esc(shown)}</td>"
            f"</tr>")


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _esc(value: Any) -> str:
    return _html.escape(str(value), quote=True)
