"""The dashboard's panels as HTML, from a snapshot: pure functions, no widget, no socket.

A *snapshot* is a plain dict (built by ``workbench._dashboard.collect``)::

    {"name", "time", "state",          # "running", "paused", "killed", "dead", ...
     "status", "metrics", "stats",     # running.status(), .metrics(window), .statistics()
     "events", "exceptions",           # lists of dicts, as the master returns them
     "config", "interval",             # the topology's options; seconds between refreshes
     "history", "tap", "error"}        # History, the tapped tuples (see _lists), str

Any of them may be missing or None (a topology that died, an older master, a field that
is not there yet): a missing value is shown as "–", never raised. Each ``*_html``
function returns one panel's inner HTML; the dashboard puts it in an HTML widget with the
panel's CSS class (``tupleflow-<panel>``). :func:`render` puts every panel in one
self-contained ``<div>``: the static picture a saved notebook keeps. The lists (tap,
exceptions, events, a component's tasks) are in :mod:`workbench._lists`.

>>> html_ = render({"name": "demo", "state": "dead"})
>>> 'class="tupleflow-status"' in html_ and "dead" in html_
True
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Iterable, Mapping
from typing import Any

from . import _format, _lists
from ._lineage_tab import acker_html, lineage_html
from ._lists import TupleTable, events_html, exceptions_html, tap_html, tasks_html
from ._sparkline import sparkline
from ._style import style
from ._tuner_tab import tuner_html
from ._verdict import findings, held_by, verdict
from ._view import BACKPRESSURE, PALETTE, topology_svg

__all__ = ["TupleTable", "events_html", "exceptions_html", "style", "tap_html", "tasks_html"]

MISSING = _format.MISSING
COLUMNS = (  # metrics table: (heading, key path in a component's metrics, format)
    ("emitted", "emitted", "count"), ("executed", "executed", "count"),
    ("acked", "acked", "count"), ("failed", "failed", "count"),
    ("emitted/s", "emitted_per_s", "rate"), ("executed/s", "executed_per_s", "rate"),
    ("capacity", "capacity", "share"), ("execute", "execute_latency_ms", "ms"),
    ("process p99", "latency_ms.process.p99", "ms"),
    ("complete p99", "latency_ms.complete.p99", "ms"),
    ("queued", "queued_tuples", "count"), ("sm queued", "sm_queued_bytes", "bytes"),
    ("held", "held_seconds", "s"), ("cpu", "cpu_percent", "cpu"),
    ("restarts", "restarts", "whole"))
UNITS = {  # heading -> (unit shown under it, what it means: the header's tooltip)
    "emitted": ("tuples", "tuples emitted in the window"),
    "executed": ("tuples", "tuples executed (process called) in the window"),
    "acked": ("tuples", "tuples acked in the window"),
    "failed": ("tuples", "tuples failed or timed out in the window"),
    "emitted/s": ("rate", "tuples emitted per second over the window"),
    "executed/s": ("rate", "tuples executed per second over the window"),
    "capacity": ("0–1", "share of the time a bolt spends in process (1: it cannot keep up)"),
    "execute": ("latency", "mean time in process per tuple"),
    "process p99": ("latency", "99th percentile of the time in process"),
    "complete p99": ("latency", "99th percentile of a spout tuple's time to be fully acked"),
    "queued": ("tuples", "tuples waiting in the instances' queues"),
    "sm queued": ("bytes", "bytes the stream manager holds for the component"),
    "held": ("time", "time the spouts were held by backpressure"),
    "cpu": ("%", "CPU of the instances (100 = one core)"),
    "restarts": ("count", "instances restarted since the topology started"),
}
SPARKS = (("emitted", "#2f6db5"), ("acked", "#3d9a50"), ("failed", BACKPRESSURE),
          ("latency", "#8e5bb5"))
STALE_AFTER = 5.0  # seconds with no refresh before a live status says the view has ended
LEVEL_COLOURS = {"healthy": "#3d9a50", "degraded": "#e6a100", "failing": BACKPRESSURE}


def render(snapshot: Mapping[str, Any], topology: Any = None) -> str:
    """Every panel in one ``<div>``: what a saved notebook shows when widgets cannot run."""
    panels = [("status", status_html(snapshot, live=False))]
    if topology is not None:
        panels.append(("graph", graph_html(topology, snapshot)))
    panels += [("metrics", metrics_html(snapshot, order=graph_order(topology))),
               ("plan", plan_html(snapshot)),
               ("pending", pending_html(snapshot) + tuner_html(snapshot)),
               ("tap", tap_html(snapshot.get("tap"))),
               ("exceptions", exceptions_html(snapshot)), ("events", events_html(snapshot))]
    if snapshot.get("traces") or snapshot.get("trace") is not None:
        panels.append(("lineage", lineage_html(snapshot)))
    if snapshot.get("acker"):
        panels.append(("ackers", acker_html(snapshot)))
    body = "".join(f'<div class="tupleflow-{name}">{part}</div>' for name, part in panels)
    return f'<div class="tupleflow-snapshot">{body}</div>'


# -- status: the header ---------------------------------------------------------------------
def status_html(snapshot: Mapping[str, Any], live: bool = True) -> str:
    """``name: state`` with the time, the health verdict, what is under backpressure, and
    any error. A live view of a topology that runs also carries, hidden, "ended": shown by
    CSS alone once no refresh has replaced this line for a while (the kernel restarted,
    or the notebook was reopened from its saved widget state), so it never says
    "running" for a topology nobody is watching any more."""
    state = snapshot.get("state") or MISSING
    colour = {"running": "#3d9a50", "paused": "#e6a100"}.get(state, BACKPRESSURE)
    causes = [str(c.get("component") or c.get("cause")) for c in held_by(snapshot)]
    extra = f" · backpressure from {', '.join(causes)}" if causes else ""
    error = snapshot.get("error")
    extra += f" · {error}" if error and state not in ("killed", "dead", "closed") else ""
    shown = (f'<span class="tf-state" style="color:{colour};font-weight:bold">'
             f"{_esc(state)}</span>")
    verdict_ = verdict_html(snapshot)
    if live and state in ("running", "paused", "starting", "not answering"):
        shown = _stale(shown, snapshot)
        verdict_ = (f'<div class="tf-fades" style="--tf-stale:{_delay(snapshot):g}s">'
                    f"{verdict_}</div>")  # the last verdict, greyed with the "ended"
    return (f'<b>{_esc(snapshot.get("name", ""))}</b>: {shown} '
            f"<small>{_esc(_clock(snapshot.get('time')))}{_esc(extra)}</small>{verdict_}"
            f"{findings_html(snapshot)}")


SHOWN_FINDINGS = 3  # the top findings the header lists


def findings_html(snapshot: Mapping[str, Any]) -> str:
    """Why is it slow: the bottleneck finder's top findings, most important first, each
    with where, the evidence and the advice (``runtime.diagnosis``); nothing when none."""
    found = findings(snapshot)[:SHOWN_FINDINGS]
    if not found:
        return ""
    rows = "".join(_finding_html(rank, f) for rank, f in enumerate(found, start=1))
    return f'<ol class="tf-findings" style="margin:4px 0;padding-left:22px">{rows}</ol>'


def _finding_html(rank: int, f: Any) -> str:
    where = f.component if f.task is None else f"{f.component}[{f.task}]"
    evidence = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in f.evidence.items() if v is not None)
    return (f'<li class="tf-finding" data-rank="{rank}" data-kind="{_esc(f.kind)}" '
            f'data-component="{_esc(f.component)}"><b>{_esc(f.kind)}</b> at '
            f"<code>{_esc(where)}</code>: {_esc(f.advice)} "
            f'<small style="color:#777">({_esc(evidence)})</small></li>')


def _delay(snapshot: Mapping[str, Any]) -> float:
    """Seconds without a refresh after which a live view says it has ended."""
    return max(STALE_AFTER, 3 * (_format.number(snapshot.get("interval")) or 1.0))


def _stale(shown: str, snapshot: Mapping[str, Any]) -> str:
    """The state, and "ended" in the same place, swapped in by an animation that starts
    whenever this HTML is (re)drawn: each refresh restarts it, a dead kernel does not."""
    return (f'<span class="tf-states" style="--tf-stale:{_delay(snapshot):g}s">'
            f'<span class="tf-live">{shown}</span><span class="tf-ended">'
            '<span class="tf-state" style="color:#777;font-weight:bold">ended</span> '
            f"<small>(no update since {_esc(_clock(snapshot.get('time')))}: the kernel "
            "stopped or restarted; these are the last numbers)</small></span></span>")


def verdict_html(snapshot: Mapping[str, Any]) -> str:
    """The health verdict as a badge with its reason, or nothing when there is none."""
    found = verdict(snapshot)
    level = found["level"]
    if level is None:
        return ""
    reason = f": {found['reason']}" if found["reason"] else ""
    return (f'<div class="tf-verdict tf-{level}" data-level="{level}" '
            f'data-component="{_esc(found["component"] or "")}">'
            f'<span class="tf-level" style="background:{LEVEL_COLOURS[level]}">{level}</span>'
            f"{_esc(reason)}</div>")


def backpressure(snapshot: Mapping[str, Any]) -> list[dict]:
    """The root causes the master reports now (``status()["backpressure"]``)."""
    return held_by(snapshot)


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
    """Capacity (bolts only: a spout's is time in its own ``next_tuple``), failed tuples,
    restarts, the number of tasks and backpressure per component; each edge's label: the
    tuples per second delivered to its target (:func:`delivered`), and the queue at the
    target when any.

    >>> snap = {"metrics": {"components": {"a": {"kind": "spout", "capacity": 0.5,
    ...         "emitted_per_s": 12.0, "stream_emitted_per_s": {"default": 10.0, "odd": 2.0}},
    ...         "b": {"kind": "bolt", "capacity": 0.9, "queued_tuples": 1200}}},
    ...         "status": {"backpressure": [{"cause": 3, "component": "b"}]}}
    >>> overlay(snap, [("a", "b", {"streams": ["odd"]}), ("a", "c")])
    ... # doctest: +NORMALIZE_WHITESPACE
    {'nodes': {'a': {'capacity': None, 'failed': None, 'restarts': None, 'tasks': None,
                     'backpressure': False},
               'b': {'capacity': 0.9, 'failed': None, 'restarts': None, 'tasks': None,
                     'backpressure': True}},
     'edges': {('a', 'b'): '2/s · q 1.2k', ('a', 'c'): '12/s'}}
    """
    components = (snapshot.get("metrics") or {}).get("components") or {}
    causes = {c.get("component") for c in held_by(snapshot)}
    nodes = {c: {"capacity": m.get("capacity") if m.get("kind") != "spout" else None,
                 "failed": m.get("failed"), "restarts": m.get("restarts"),
                 "tasks": m.get("instances"),  # its tasks now: a rebalance changes them
                 "backpressure": c in causes}
             for c, m in components.items()}
    for c in sorted(causes - set(nodes), key=str):
        nodes[c] = {"backpressure": True}
    edges = [(u, v, data[0] if data else {}) for u, v, *data in edges]
    rates = {}
    for u, v, data in edges:
        rate = delivered(components, edges, u, v, data)
        if rate is not None:
            rates[(u, v)] = f"{_format.rate(rate)}/s" + _queue(components.get(v) or {})
    return {"nodes": nodes, "edges": rates}


def delivered(components: Mapping[str, Any], edges: list[tuple], u: str, v: str,
              data: Mapping[str, Any]) -> float | None:
    """Tuples per second ``v`` executes of what ``u`` sends it: ``v``'s executed rate,
    shared among its inputs in proportion to what each sends; what ``u`` sends when ``v``
    reports no executed rate. So an edge into a bolt that keeps up with 196/s says 196/s,
    not the 3,702/s its source emits.

    >>> comps = {"a": {"emitted_per_s": 300.0}, "b": {"emitted_per_s": 100.0},
    ...          "c": {"executed_per_s": 40.0}}
    >>> edges = [("a", "c", {}), ("b", "c", {})]
    >>> delivered(comps, edges, "a", "c", {}), delivered(comps, edges, "b", "c", {})
    (30.0, 10.0)
    """
    sent = edge_rate(components.get(u) or {}, data)
    executed = _format.number((components.get(v) or {}).get("executed_per_s"))
    if sent is None or executed is None:
        return sent
    into = [edge_rate(components.get(s) or {}, d) or 0 for s, t, d in edges if t == v]
    total = sum(into)
    return min(sent, executed * sent / total) if total > 0 else 0.0


def _queue(target: Mapping[str, Any]) -> str:
    queued = _format.number(target.get("queued_tuples"))
    return f" · q {_format.count(queued)}" if queued else ""


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
    (the graph's components) gives each component the same colour as in the graph. The
    table scrolls in its own box, its component column frozen."""
    components = (snapshot.get("metrics") or {}).get("components") or {}
    history = history if history is not None else snapshot.get("history")
    head = "".join(_heading(h, key) for h, key, _ in COLUMNS)
    spark_head = "".join(_heading(name, "spark-" + name, unit)
                         for name, unit in (("emitted", "per s"), ("acked", "per s"),
                                            ("failed", "per s"), ("latency", "ms")))
    spark_head = spark_head if history is not None else ""
    colour = colours(order, components)
    rows = [_metrics_row(colour[c], c, m, history) for c, m in components.items()]
    body = "".join(rows) or f'<tr><td colspan="{len(COLUMNS) + 1}">no metrics yet</td></tr>'
    window = (snapshot.get("metrics") or {}).get("window", "1m")
    return (f'<div class="tf-caption">per component, counts over the last {_esc(window)}</div>'
            f'<div class="tf-scroll"><table class="tf-table">'
            f'<tr><th data-key="component">component</th>{head}{spark_head}</tr>{body}'
            "</table></div>")


def _heading(name: str, key: str, unit: str | None = None) -> str:
    """A compact two-line header: the name, and its unit under it (the tooltip says more)."""
    unit, tip = UNITS.get(name, (unit or "", ""))
    return (f'<th data-key="{_esc(key)}" title="{_esc(tip)}">{_esc(name)}'
            f'<br/><small class="tf-unit">{_esc(unit)}</small></th>')


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
    cells = "".join(_cell(field(m, key), kind, key, m.get("kind")) for _, key, kind in COLUMNS)
    sparks = ""
    if history is not None:
        series = history.series(component)
        sparks = "".join(f"<td>{sparkline(series[n], colour=c, title=f'{component} {n}')}</td>"
                         for n, c in SPARKS)
    return (f'<tr data-component="{_esc(component)}"><td class="tf-name">'
            f'<span style="color:{colour}">■</span>\u00a0<b>{_esc(component)}</b>'
            f" <small>{_esc(m.get('kind') or '')}</small></td>{cells}{sparks}</tr>")


def _cell(value: Any, kind: str, key: str, component_kind: Any = "bolt") -> str:
    """A number cell: formatted for people, the exact value in ``data-value`` (and the
    tooltip) for anyone who needs it. Capacity is a bolt's measure only (a spout's is the
    time it spends in its own ``next_tuple``, which says nothing about load)."""
    if key == "capacity" and component_kind != "bolt":
        return f'<td data-key="capacity" class="tf-na">{MISSING}</td>'
    exact = _format.number(value)
    data = f' data-value="{exact!r}" title="{exact:,}"' if exact is not None else ""
    return f'<td data-key="{_esc(key)}"{data}>{_format.cell(value, kind)}</td>'


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
            f"<td>{_format.cell(s.get('pid'), 'id')}</td>"
            f"<td>{_esc(s.get('state') or MISSING)}</td>"
            f"<td>{_format.whole(s.get('restarts'))}</td></tr>" for s in instances)
        blocks.append(f'<tr><th colspan="4">container {_esc(container)} '
                      f"<small>(stream manager pid {_format.cell(pid, 'id')})</small></th></tr>"
                      f"{rows}")
    body = "".join(blocks) or '<tr><td colspan="4">no instances reported</td></tr>'
    return ('<table class="tf-table"><caption>physical plan</caption><tr><th>instance</th>'
            f"<th>pid</th><th>state</th><th>restarts</th></tr>{body}</table>")


# -- max spout pending ----------------------------------------------------------------------
def pending_html(snapshot: Mapping[str, Any]) -> str:
    """Pending vs max spout pending per spout, and the tuner's and people's changes."""
    components = (snapshot.get("metrics") or {}).get("components") or {}
    history = snapshot.get("history")
    rows = "".join(
        f"<tr><td>{_esc(c)}</td><td>{_format.whole(m.get('pending'))}</td>"
        f"<td>{_format.limit(m.get('max_spout_pending'))}</td>"
        f"<td>{_pending_bar(m.get('pending'), m.get('max_spout_pending'))}</td>"
        f"<td>{_pending_spark(history, c)}</td></tr>"
        for c, m in components.items() if m.get("kind") == "spout")
    return ('<table class="tf-table"><caption>max spout pending</caption><tr><th>spout</th>'
            f"<th>pending</th><th>max</th><th>pending / max</th><th>pending over time</th></tr>"
            f"{rows}</table>{_lists.changes_html(snapshot)}")


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


def _clock(t: Any, ms: bool = False) -> str:
    if not isinstance(t, int | float):
        return ""
    stamp = datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")
    return stamp[:-3] if ms else stamp[:-7]


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
