"""The dashboard's panels as HTML, from a snapshot: pure functions, no widget, no socket.

A *snapshot* is a plain dict (built by ``workbench._dashboard.collect``)::

    {"name", "time", "state",          # "running", "paused", "killed", "dead", ...
     "status", "metrics", "stats",     # running.status(), .metrics("1m"), .statistics()
     "events", "exceptions",           # lists of dicts, as the master returns them
     "history", "tap", "error"}        # History, {"component", "stream", "tuples"}, str

Any of them may be missing or None (a topology that died, an older master, a field that
is not there yet): a missing value is shown as "–", never raised. Each ``*_html``
function returns one panel's inner HTML; the dashboard puts it in an HTML widget with the
panel's CSS class (``tupleflow-<panel>``). :func:`render` puts every panel in one
self-contained ``<div>``: the static picture a saved notebook keeps.

>>> html_ = render({"name": "demo", "state": "dead"})
>>> 'class="tupleflow-status"' in html_ and "dead" in html_
True
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Mapping
from typing import Any

from ._sparkline import sparkline
from ._view import BACKPRESSURE, PALETTE, topology_svg

MISSING = "–"
COLUMNS = (  # metrics table: (heading, key path in a component's metrics, format)
    ("emitted", "emitted", "int"), ("executed", "executed", "int"), ("acked", "acked", "int"),
    ("failed", "failed", "int"), ("emitted/s", "emitted_per_s", "rate"),
    ("executed/s", "executed_per_s", "rate"), ("capacity", "capacity", "share"),
    ("execute ms", "execute_latency_ms", "ms"),
    ("process p99 ms", "latency_ms.process.p99", "ms"),
    ("complete p99 ms", "latency_ms.complete.p99", "ms"),
    ("queued", "queued_tuples", "int"), ("sm queued bytes", "sm_queued_bytes", "int"),
    ("held s", "held_seconds", "rate"), ("cpu %", "cpu_percent", "rate"),
    ("restarts", "restarts", "int"))
SPARKS = (("emitted", "#2f6db5"), ("acked", "#3d9a50"), ("failed", BACKPRESSURE),
          ("latency", "#8e5bb5"))
EVENTS_SHOWN = 30


def render(snapshot: Mapping[str, Any], topology: Any = None) -> str:
    """Every panel in one ``<div>``: what a saved notebook shows when widgets cannot run."""
    panels = [("status", status_html(snapshot))]
    if topology is not None:
        panels.append(("graph", graph_html(topology, snapshot)))
    panels += [("metrics", metrics_html(snapshot, order=graph_order(topology))),
               ("plan", plan_html(snapshot)),
               ("pending", pending_html(snapshot)), ("tap", tap_html(snapshot.get("tap"))),
               ("exceptions", exceptions_html(snapshot)), ("events", events_html(snapshot))]
    body = "".join(f'<div class="tupleflow-{name}">{part}</div>' for name, part in panels)
    return f'<div class="tupleflow-snapshot">{body}</div>'


# -- status ---------------------------------------------------------------------------------
def status_html(snapshot: Mapping[str, Any]) -> str:
    """``name: state`` with the time, what is under backpressure, and any error."""
    state = snapshot.get("state") or MISSING
    colour = {"running": "#3d9a50", "paused": "#e6a100"}.get(state, BACKPRESSURE)
    causes = [str(c.get("component") or c.get("cause")) for c in backpressure(snapshot)]
    extra = f" · backpressure from {', '.join(causes)}" if causes else ""
    error = snapshot.get("error")
    extra += f" · {error}" if error else ""
    return (f'<b>{_esc(snapshot.get("name", ""))}</b>: '
            f'<span class="tf-state" style="color:{colour};font-weight:bold">{_esc(state)}'
            f"</span> <small>{_esc(_clock(snapshot.get('time')))}{_esc(extra)}</small>")


def backpressure(snapshot: Mapping[str, Any]) -> list[dict]:
    """The root causes the master reports now (``status()["backpressure"]``)."""
    found = (snapshot.get("status") or {}).get("backpressure") or []
    return [c for c in found if isinstance(c, Mapping)]


# -- graph ----------------------------------------------------------------------------------
def graph_html(topology: Any, snapshot: Mapping[str, Any]) -> str:
    """The logical graph with the live overlay (see :func:`workbench._view.topology_svg`)."""
    graph = getattr(topology, "topology", topology).graph
    return topology_svg(topology, overlay(snapshot, graph.edges(data=True)))


def graph_order(topology: Any) -> list[str]:
    """The components in the order the graph colours them (declaration order)."""
    if topology is None:
        return []
    return list(getattr(topology, "topology", topology).graph.nodes)


def overlay(snapshot: Mapping[str, Any], edges: Iterable[tuple] = ()) -> dict:
    """Capacity, failed tuples, restarts and backpressure per component; each edge's rate:
    the tuples per second its source emitted on the streams the edge subscribes to (its
    data's ``streams``; every subscriber of a stream gets all of it), or on all its
    streams for an edge given without data.

    >>> snap = {"metrics": {"components": {"a": {"capacity": 0.5, "emitted_per_s": 12.0,
    ...         "stream_emitted_per_s": {"default": 10.0, "odd": 2.0}}}},
    ...         "status": {"backpressure": [{"cause": 3, "component": "b"}]}}
    >>> overlay(snap, [("a", "b", {"streams": ["odd"]}), ("a", "c")])
    ... # doctest: +NORMALIZE_WHITESPACE
    {'nodes': {'a': {'capacity': 0.5, 'failed': None, 'restarts': None, 'backpressure': False},
               'b': {'backpressure': True}}, 'edges': {('a', 'b'): '2/s', ('a', 'c'): '12/s'}}
    """
    components = (snapshot.get("metrics") or {}).get("components") or {}
    causes = {c.get("component") for c in backpressure(snapshot)}
    nodes = {c: {"capacity": m.get("capacity"), "failed": m.get("failed"),
                 "restarts": m.get("restarts"), "backpressure": c in causes}
             for c, m in components.items()}
    for c in sorted(causes - set(nodes), key=str):
        nodes[c] = {"backpressure": True}
    rates = {}
    for u, v, *data in edges:
        rate = edge_rate(components.get(u) or {}, data[0] if data else {})
        if rate is not None:
            rates[(u, v)] = f"{_number(rate)}/s"
    return {"nodes": nodes, "edges": rates}


def edge_rate(source: Mapping[str, Any], data: Mapping[str, Any]) -> float | None:
    """Tuples per second on an edge from ``source``'s metrics and the edge's data."""
    streams = data.get("streams")
    by_stream = source.get("stream_emitted_per_s")
    if streams and isinstance(by_stream, Mapping):
        return sum(by_stream.get(s, 0) for s in set(streams))
    total = source.get("emitted_per_s")
    return total if isinstance(total, int | float) else None


# -- metrics --------------------------------------------------------------------------------
def metrics_html(snapshot: Mapping[str, Any], history: Any = None,
                 order: Iterable[str] = ()) -> str:
    """One row per component: counts, rates, capacity, latencies, sparklines. ``order``
    (the graph's components) gives each component the same colour as in the graph."""
    components = (snapshot.get("metrics") or {}).get("components") or {}
    history = history if history is not None else snapshot.get("history")
    head = "".join(f"<th>{_esc(h)}</th>" for h, _, _ in COLUMNS)
    spark_head = "".join(f"<th>{name}/s</th>" if name != "latency" else "<th>latency</th>"
                         for name, _ in SPARKS) if history is not None else ""
    colour = colours(order, components)
    rows = [_metrics_row(colour[c], c, m, history) for c, m in components.items()]
    body = "".join(rows) or f'<tr><td colspan="{len(COLUMNS) + 1}">no metrics yet</td></tr>'
    window = (snapshot.get("metrics") or {}).get("window", "1m")
    return (f'<table class="tf-table">'
            f"<caption>per component, counts over the last {_esc(window)}</caption>"
            f"<tr><th>component</th>{head}{spark_head}</tr>{body}</table>")


def colours(order: Iterable[str], more: Iterable[str] = ()) -> dict[str, str]:
    """The palette colour of each component: the graph's order first, then the rest
    (``__acker``, say), as the live graph colours them.

    >>> colours(["a", "b"], ["b", "__acker"]) == {"a": PALETTE[0], "b": PALETTE[1],
    ...                                           "__acker": PALETTE[2]}
    True
    """
    names = list(dict.fromkeys([*order, *more]))
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(names)}


def _metrics_row(colour: str, component: str, m: Mapping[str, Any], history: Any) -> str:
    cells = "".join(f"<td>{_fmt(field(m, key), kind)}</td>" for _, key, kind in COLUMNS)
    sparks = ""
    if history is not None:
        series = history.series(component)
        sparks = "".join(f"<td>{sparkline(series[n], colour=c, title=f'{component} {n}')}</td>"
                         for n, c in SPARKS)
    return (f'<tr data-component="{_esc(component)}"><td><span style="color:{colour}">■</span> '
            f"<b>{_esc(component)}</b> <small>{_esc(m.get('kind') or '')}</small></td>"
            f"{cells}{sparks}</tr>")


# -- physical plan --------------------------------------------------------------------------
def plan_html(snapshot: Mapping[str, Any]) -> str:
    """Containers → instances, with pid, state and restarts (from ``statistics()``)."""
    stats = snapshot.get("stats") or []
    pids = ((snapshot.get("status") or {}).get("containers")) or {}
    by_container: dict[Any, list] = {}
    for s in sorted(stats, key=lambda s: (str(s.get("container")), s.get("task") or 0)):
        by_container.setdefault(s.get("container"), []).append(s)
    blocks = []
    for container, instances in by_container.items():
        pid = pids.get(container, pids.get(str(container)))
        rows = "".join(
            f'<tr class="{"tf-restarted" if s.get("restarts") else ""}">'
            f"<td>{_esc(s.get('component'))}[{_esc(s.get('task'))}]</td>"
            f"<td>{_fmt(s.get('pid'), 'id')}</td><td>{_esc(s.get('state') or MISSING)}</td>"
            f"<td>{_fmt(s.get('restarts'), 'int')}</td></tr>" for s in instances)
        blocks.append(f'<tr><th colspan="4">container {_esc(container)} '
                      f"<small>(stream manager pid {_fmt(pid, 'id')})</small></th></tr>{rows}")
    body = "".join(blocks) or '<tr><td colspan="4">no instances reported</td></tr>'
    return ('<table class="tf-table"><caption>physical plan</caption><tr><th>instance</th>'
            f"<th>pid</th><th>state</th><th>restarts</th></tr>{body}</table>")


# -- max spout pending ----------------------------------------------------------------------
def pending_html(snapshot: Mapping[str, Any]) -> str:
    """Pending vs max spout pending per spout, and the tuner's and people's changes."""
    components = (snapshot.get("metrics") or {}).get("components") or {}
    history = snapshot.get("history")
    rows = "".join(
        f"<tr><td>{_esc(c)}</td><td>{_fmt(m.get('pending'), 'int')}</td>"
        f"<td>{_fmt(m.get('max_spout_pending'), 'limit')}</td>"
        f"<td>{_pending_bar(m.get('pending'), m.get('max_spout_pending'))}</td>"
        f"<td>{_pending_spark(history, c)}</td></tr>"
        for c, m in components.items() if m.get("kind") == "spout")
    changes = [e for e in snapshot.get("events") or []
               if e.get("kind") in ("tuner", "max_spout_pending")][-EVENTS_SHOWN:]
    turns = "".join(f"<li>{_esc(_clock(e.get('time')))} {_esc(_event_text(e))}</li>"
                    for e in changes) or "<li>no changes yet</li>"
    return ('<table class="tf-table"><caption>max spout pending</caption><tr><th>spout</th>'
            f"<th>pending</th><th>max</th><th>pending / max</th><th>pending over time</th></tr>"
            f"{rows}</table>"
            f'<small>changes:</small><ul class="tf-tuner">{turns}</ul>')


def _pending_spark(history: Any, component: str) -> str:
    if history is None:
        return ""
    return sparkline(history.series(component)["pending"], colour="#2f6db5",
                     title=f"{component} pending")


def _pending_bar(pending: Any, limit: Any) -> str:
    if not isinstance(pending, int | float) or not isinstance(limit, int | float) or limit <= 0:
        return ""
    share = max(0.0, min(1.0, pending / limit))
    return (f'<svg width="100" height="8"><rect width="100" height="8" fill="#eee"/>'
            f'<rect width="{100 * share:.1f}" height="8" fill="#2f6db5"/></svg>')


# -- tap, exceptions, events ----------------------------------------------------------------
def tap_html(tap: Mapping[str, Any] | None) -> str:
    """The latest tuples on the tapped edge, newest first."""
    if not tap:
        return "<small>no edge tapped</small>"
    tuples = list(tap.get("tuples") or [])[::-1]
    fields = next((t.get("fields") for t in tuples if t.get("fields")), None) or ["values"]
    head = "".join(f"<th>{_esc(f)}</th>" for f in fields)
    rows = "".join(_tap_row(t, len(fields)) for t in tuples)
    empty = ("" if tuples else
             f'<tr><td colspan="{len(fields) + 3}">no tuples seen yet</td></tr>')
    return ('<table class="tf-table"><caption>tap: '
            f"{_esc(tap.get('component'))} [{_esc(tap.get('stream', 'default'))}]</caption>"
            f"<tr><th>time</th><th>task</th>{head}<th>to</th></tr>{rows}{empty}</table>")


def _tap_row(t: Mapping[str, Any], width: int) -> str:
    values = list(t.get("values") or [])
    if len(values) != width:
        values = [values]
    cells = "".join(f"<td>{_esc(_short(v))}</td>" for v in values)
    return (f"<tr><td>{_esc(_clock(t.get('time'), ms=True))}</td><td>{_esc(t.get('task'))}</td>"
            f"{cells}<td>{_esc(t.get('to'))}</td></tr>")


def exceptions_html(snapshot: Mapping[str, Any]) -> str:
    """One line per distinct error (already grouped by the master); its traceback opens on
    click (``<details>``, which needs no script)."""
    records = snapshot.get("exceptions") or []
    items = "".join(
        f"<details><summary><b>{_esc(r.get('component'))}</b> ×{_esc(r.get('count', 1))} "
        f"(tasks {_esc(r.get('tasks', MISSING))}, last {_esc(_clock(r.get('last')))}): "
        f"{_esc(r.get('error'))}</summary><pre>{_esc(r.get('traceback', ''))}</pre></details>"
        for r in reversed(records))
    return f"<b>exceptions</b> ({len(records)}){items or '<div><small>none</small></div>'}"


def events_html(snapshot: Mapping[str, Any]) -> str:
    """The newest events first (restarts, backpressure, tuner, pause, ...)."""
    events = list(snapshot.get("events") or [])[-EVENTS_SHOWN:]
    items = "".join(f'<li class="tf-event-{_esc(e.get("kind"))}">'
                    f"{_esc(_clock(e.get('time')))} {_esc(_event_text(e))}</li>"
                    for e in reversed(events))
    return f"<b>events</b><ul>{items or '<li>none</li>'}</ul>"


def _event_text(event: Mapping[str, Any]) -> str:
    rest = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("kind", "time"))
    return f"{event.get('kind')}" + (f": {rest}" if rest else "")


# -- formatting -----------------------------------------------------------------------------
def field(record: Any, path: str) -> Any:
    """``record["a"]["b"]`` for ``"a.b"``; None where any step is missing.

    >>> field({"latency_ms": {"process": {"p99": 1.5}}}, "latency_ms.process.p99")
    1.5
    >>> field({"latency_ms": None}, "latency_ms.process.p99") is None
    True
    """
    for key in path.split("."):
        if not isinstance(record, Mapping):
            return None
        record = record.get(key)
    return record


def _fmt(value: Any, kind: str) -> str:
    """A cell's text; "–" for anything missing or not a number."""
    if kind == "limit" and value is None:
        return "none"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return MISSING
    if kind in ("int", "id", "limit"):
        return f"{value:,.0f}" if kind != "id" else str(int(value))
    if kind == "share":
        return f"{value:.2f}"
    if kind == "ms":
        return f"{value:.3f}"
    return _number(value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _clock(t: Any, ms: bool = False) -> str:
    if not isinstance(t, int | float):
        return ""
    stamp = datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")
    return stamp[:-3] if ms else stamp[:-7]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def style() -> str:
    """A small stylesheet, scoped to the dashboard (no external file, no font)."""
    return ("<style>.tupleflow-dashboard table.tf-table,.tupleflow-snapshot table.tf-table"
            "{border-collapse:collapse;font-size:12px;margin:4px 0}"
            ".tf-table td,.tf-table th{border:1px solid #ddd;padding:2px 6px;text-align:right}"
            ".tf-table td:first-child,.tf-table th:first-child{text-align:left}"
            ".tf-table caption{text-align:left;font-weight:bold}"
            "tr.tf-restarted td{background:#fdecea}</style>")



class TupleTable:
    """Tuples from ``running.sample(...)`` as a table: HTML in a notebook, text elsewhere.

    >>> TupleTable("src", "default", [{"values": [1, "a"], "fields": ["n", "w"],
    ...                                "task": 3, "to": [4], "time": None}])
    src [default]: 1 tuple
    task 3 -> [4]: n=1 w='a'
    """

    def __init__(self, component: str, stream: str, tuples: list[dict]) -> None:
        self.component, self.stream, self.tuples = component, stream, tuples

    def _repr_html_(self) -> str:
        tap = {"component": self.component, "stream": self.stream, "tuples": self.tuples}
        return f'{style()}<div class="tupleflow-tap">{tap_html(tap)}</div>'

    def __repr__(self) -> str:
        head = f"{self.component} [{self.stream}]: {len(self.tuples)} tuple" + \
            ("s" * (len(self.tuples) != 1))
        lines = [f"task {t.get('task')} -> {t.get('to')}: " + " ".join(
            f"{f}={v!r}" for f, v in zip(t.get("fields") or [], t.get("values") or []))
            for t in reversed(self.tuples)]
        return "\n".join([head, *lines])
