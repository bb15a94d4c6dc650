"""A static picture of a topology's logical graph: plain, self-contained SVG.

The layout is layered, left to right: a depth-first walk from the spouts (in declaration
order) marks the edges that close a cycle as back edges; the rest is a DAG, layered by
longest path, so spouts sit in the first column. Within a column, components are ordered by
the mean row of their sources (one barycentre sweep), ties by declaration order. No script,
no font file, no random number: the same topology always gives the same bytes, and the
picture survives a saved notebook and an nbconvert export.

>>> from runtime import Topology
>>> from runtime.testing import ListSpout, ListSink
>>> topo = Topology("demo")
>>> _ = topo.spout("nums", ListSpout([[1]], fields=["n"]))
>>> _ = topo.bolt("sink", ListSink, parallelism=2).global_grouping("nums")
>>> svg = topology_svg(topo)
>>> svg.startswith("<svg") and "× 2" in svg and ">global<" in svg
True
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Mapping
from typing import Any

import networkx as nx

from ._format import count

DEFAULT_STREAM = "default"  # runtime.model.constants.DEFAULT_STREAM
COLOURS = {  # kind -> (fill, stroke)
    "spout": ("#fdebd3", "#d9822b"),
    "bolt": ("#dbe8f8", "#2f6db5"),
}
BOX_H, GAP_X, GAP_Y, MARGIN = 56, 90, 28, 24
CHAR_W = 7.2  # a generous average glyph width at font-size 12 (no font is embedded)
MAX_CHARS = 40  # longer ids and class names are cut with an ellipsis
PALETTE = ("#d9822b", "#2f6db5", "#3d9a50", "#8e5bb5", "#c2417a", "#1f9aa5", "#8a6d2f",
           "#5b6bbf")  # the live graph's colour per component, in declaration order
BACKPRESSURE = "#d62728"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not allowed in XML 1.0


class TopologyView:
    """Shows a topology's logical graph in a notebook (``_repr_svg_`` / ``_repr_html_``).

    Takes a :class:`runtime.Topology` or a :class:`workbench.ParsedTopology`.
    """

    def __init__(self, topology: Any) -> None:
        self.topology = getattr(topology, "topology", topology)

    def _repr_svg_(self) -> str:
        return topology_svg(self.topology)

    def _repr_html_(self) -> str:
        return f'<div class="tupleflow-topology">{self._repr_svg_()}</div>'

    def __repr__(self) -> str:
        return f"TopologyView({self.topology!r})"


def topology_svg(topology: Any, overlay: Mapping[str, Any] | None = None) -> str:
    """The logical graph of ``topology`` (a Topology, a ParsedTopology, or its logical
    graph) as an SVG string.

    ``overlay`` turns the static picture into a live one (the dashboard's graph, see
    :func:`live_overlay`): ``{"nodes": {component: {"capacity", "restarts", "failed",
    "backpressure"}}, "edges": {(source, target): "12/s"}}``. Each component then gets a
    colour of its own, a bar filled by its capacity, badges for failed tuples and
    restarted instances, and a red outline when it is a backpressure root cause; each
    edge gets its rate under its label. Anything missing from the overlay is simply not drawn.
    """
    graph = graph_of(topology)
    columns = layout(graph)
    box_w = _box_width(graph)
    pos = _positions(columns, box_w)
    width = MARGIN * 2 + len(columns) * box_w + max(len(columns) - 1, 0) * GAP_X
    height = MARGIN * 2 + max(map(len, columns), default=0) * (BOX_H + GAP_Y) + GAP_Y
    arrow = "tf-arrow-" + hashlib.sha1(graph.name.encode()).hexdigest()[:8]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f"<title>topology {_esc(graph.name)}</title>",
        f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
    ]
    layer = {n: i for i, col in enumerate(columns) for n in col}
    rates = (overlay or {}).get("edges", {})
    for u, v, data in graph.edges(data=True):
        parts.append(_edge(pos[u], pos[v], layer[v] - layer[u], u == v, box_w, arrow,
                           edge_label(data), rates.get((u, v), "")))
    if overlay is None:
        parts.extend(_node(n, graph.nodes[n], pos[n], box_w) for n in graph.nodes)
    else:
        live = overlay.get("nodes", {})
        parts.extend(_live_node(n, graph.nodes[n], pos[n], box_w, i, live.get(n, {}))
                     for i, n in enumerate(graph.nodes))
    parts.append("</svg>")
    return "\n".join(parts)


def graph_of(topology: Any) -> nx.DiGraph:
    """The logical graph of a Topology, a ParsedTopology, or that graph itself."""
    if isinstance(topology, nx.DiGraph):
        return topology
    return getattr(topology, "topology", topology).graph


# -- layout (pure: a graph in, columns out) ---------------------------------------------------
def layout(graph: nx.DiGraph) -> list[list[str]]:
    """Columns of component ids, left to right; spouts in the first."""
    back = back_edges(graph)
    dag = nx.DiGraph()
    dag.add_nodes_from(graph.nodes)
    dag.add_edges_from(e for e in graph.edges if e not in back)
    layer: dict[str, int] = {}
    for n in nx.lexicographical_topological_sort(dag, key=_order(graph).__getitem__):
        layer[n] = max((layer[p] + 1 for p in dag.predecessors(n)), default=0)
    columns = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in graph.nodes:
        columns[layer[n]].append(n)
    return _barycentre(graph, columns)


def back_edges(graph: nx.DiGraph) -> set[tuple[str, str]]:
    """Edges that close a cycle in a depth-first walk started at the spouts, then the rest."""
    starts = sorted(graph.nodes, key=lambda n: (graph.nodes[n].get("kind") != "spout",
                                                _order(graph)[n]))
    back, seen, on_path = set(), set(), set()

    def walk(node: str) -> None:  # topologies are small: recursion depth is their size
        seen.add(node)
        on_path.add(node)
        for nxt in graph.successors(node):
            if nxt in on_path:
                back.add((node, nxt))
            elif nxt not in seen:
                walk(nxt)
        on_path.discard(node)

    for node in starts:
        if node not in seen:
            walk(node)
    return back


def _order(graph: nx.DiGraph) -> dict[str, int]:
    return {n: i for i, n in enumerate(graph.nodes)}


def _barycentre(graph: nx.DiGraph, columns: list[list[str]]) -> list[list[str]]:
    """Order each column by the mean row of its sources in earlier columns."""
    order, row = _order(graph), {}
    for col in columns:
        def key(n: str) -> tuple[float, int]:
            rows = [row[p] for p in graph.predecessors(n) if p in row]
            return (sum(rows) / len(rows) if rows else -1.0, order[n])

        col.sort(key=key)
        row.update({n: i for i, n in enumerate(col)})
    return columns


def _positions(columns: list[list[str]], box_w: int) -> dict[str, tuple[float, float]]:
    """Top-left corner of each box; columns are centred vertically."""
    tallest = max(map(len, columns), default=0)
    pos = {}
    for i, col in enumerate(columns):
        top = MARGIN + GAP_Y + (tallest - len(col)) * (BOX_H + GAP_Y) / 2
        for j, n in enumerate(col):
            pos[n] = (MARGIN + i * (box_w + GAP_X), top + j * (BOX_H + GAP_Y))
    return pos


# -- drawing ----------------------------------------------------------------------------------
def edge_label(data: dict) -> str:
    """``grouping``, or ``[stream] grouping`` off the default stream; one per subscription."""
    pairs = zip(data.get("streams", [data.get("stream")]),
                data.get("groupings", [data.get("grouping")]))
    return ", ".join(g if s == DEFAULT_STREAM else f"[{s}] {g}" for s, g in pairs)


def _box_width(graph: nx.DiGraph) -> int:
    texts = [t for n, d in graph.nodes(data=True) for t in (n, d.get("cls", ""))]
    longest = max((len(_cut(t)) for t in texts), default=0)
    return max(140, int(longest * CHAR_W) + 24)


def _node(node: str, data: dict, xy: tuple[float, float], box_w: int) -> str:
    fill, stroke = COLOURS.get(data.get("kind"), ("#eeeeee", "#777777"))
    x, y = xy
    cx = x + box_w / 2
    return (f'<g class="tf-{_esc(data.get("kind", "component"))}">'
            f"<title>{_esc(data.get('kind', ''))} {_esc(node)}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{box_w}" height="{BOX_H}" rx="10" ry="10" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>'
            f'<text x="{cx:.1f}" y="{y + 20:.1f}" text-anchor="middle" font-weight="bold">'
            f"{_esc(_cut(node))}</text>"
            f'<text x="{cx:.1f}" y="{y + 36:.1f}" text-anchor="middle" fill="#333">'
            f"{_esc(_cut(data.get('cls', '')))}</text>"
            f'<text x="{cx:.1f}" y="{y + 50:.1f}" text-anchor="middle" fill="#555" '
            f'font-size="11">× {data.get("parallelism", 1)}</text></g>')


def _live_node(node: str, data: dict, xy: tuple[float, float], box_w: int, index: int,
               live: Mapping[str, Any]) -> str:
    """A box in the component's own colour with a capacity bar along its bottom, badges
    for failed tuples and restarts, and a red outline when it is a backpressure cause."""
    colour = PALETTE[index % len(PALETTE)]
    x, y = xy
    cx = x + box_w / 2
    cause = bool(live.get("backpressure"))
    classes = " ".join(["tf-" + str(data.get("kind", "component"))]
                       + ["tf-backpressure"] * cause
                       + ["tf-restarted"] * bool(live.get("restarts"))
                       + ["tf-failed"] * bool(live.get("failed")))
    stroke, width = (BACKPRESSURE, 4) if cause else (colour, 2)
    tip = f"{data.get('kind', '')} {node}" + (" — backpressure root cause" if cause else "")
    tasks = live.get("tasks") or data.get("parallelism", 1)  # live: a rebalance changes it
    parts = [f'<g class="{_esc(classes)}" data-component="{_esc(node)}" '
             f'data-tasks="{_esc(tasks)}"><title>{_esc(tip)}</title>',
             f'<rect x="{x:.1f}" y="{y:.1f}" width="{box_w}" height="{BOX_H}" rx="10" ry="10" '
             f'fill="{colour}" fill-opacity="0.12" stroke="{stroke}" stroke-width="{width}"/>',
             _capacity_bar(x, y, box_w, live.get("capacity")),
             f'<text x="{cx:.1f}" y="{y + 20:.1f}" text-anchor="middle" font-weight="bold">'
             f"{_esc(_cut(node))}</text>",
             f'<text x="{cx:.1f}" y="{y + 36:.1f}" text-anchor="middle" fill="#333">'
             f"{_esc(_cut(data.get('cls', '')))}</text>",
             f'<text x="{cx:.1f}" y="{y + 49:.1f}" text-anchor="middle" fill="#555" '
             f'font-size="11">× {tasks}{_capacity_text(live)}</text>']
    parts.extend(_badges(x, y, box_w, live, cause))
    parts.append("</g>")
    return "".join(parts)


def _capacity_bar(x: float, y: float, box_w: int, capacity: Any) -> str:
    """A bar along the box's bottom edge: green when idle, orange then red near 1."""
    if not isinstance(capacity, int | float):
        return ""
    share = max(0.0, min(1.0, float(capacity)))
    colour = "#3d9a50" if share < 0.5 else ("#e6a100" if share < 0.8 else BACKPRESSURE)
    return (f'<rect class="tf-capacity" x="{x + 6:.1f}" y="{y + BOX_H - 5:.1f}" '
            f'width="{(box_w - 12) * share:.1f}" height="3" fill="{colour}"/>')


def _capacity_text(live: Mapping[str, Any]) -> str:
    capacity = live.get("capacity")
    return f" · cap {capacity:.2f}" if isinstance(capacity, int | float) else ""


def _badges(x: float, y: float, box_w: int, live: Mapping[str, Any], cause: bool) -> list[str]:
    """Small labels above the box's right corner: ⚠ backpressure, ✗ failed, ↻ restarts."""
    marks = ([("tf-badge-backpressure", "⚠ backpressure")] if cause else []) + \
        ([("tf-badge-failed", f"✗ {count(live['failed'])} failed")] if live.get("failed")
         else []) + \
        ([("tf-badge-restarts", f"↻ {count(live['restarts'])} restart"
                                 + "s" * (live["restarts"] != 1))]
         if live.get("restarts") else [])
    text = "  ".join(label for _, label in marks)
    if not text:
        return []
    cls = " ".join(c for c, _ in marks)
    return [f'<text class="{cls}" x="{x + box_w:.1f}" y="{y - 4:.1f}" text-anchor="end" '
            f'font-size="11" font-weight="bold" fill="{BACKPRESSURE}">{_esc(text)}</text>']


def _edge(src: tuple[float, float], dst: tuple[float, float], span: int, loop: bool,
          box_w: int, arrow: str, label: str, rate: str = "") -> str:
    """``span``: how many columns the edge goes right (0 or less: it closes a cycle);
    ``rate`` (live graph only) is written under the label."""
    (sx, sy), (tx, ty) = src, dst
    back = span <= 0
    if loop:  # a bolt subscribed to itself: an arc over its box
        x1, x2, y = sx + box_w * 0.65, sx + box_w * 0.35, sy
        d, lx, ly = f"M{x1:.1f},{y:.1f} C{x1:.1f},{y - 34:.1f} {x2:.1f},{y - 34:.1f} " \
                    f"{x2:.1f},{y:.1f}", sx + box_w / 2, y - 30
    elif back:  # closes a cycle: leave from below, come back in from below
        x1, y1, x2, y2 = sx + box_w / 2, sy + BOX_H, tx + box_w / 2, ty + BOX_H
        low = max(y1, y2) + GAP_Y
        d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{low:.1f} {x2:.1f},{low:.1f} {x2:.1f},{y2:.1f}"
        lx, ly = (x1 + x2) / 2, low - 2
    elif span > 1:  # skips columns: over the boxes in between, top to top
        x1, y1, x2, y2 = sx + box_w / 2, sy, tx + box_w / 2, ty
        high = min(y1, y2) - MARGIN * 0.8
        d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{high:.1f} {x2:.1f},{high:.1f} {x2:.1f},{y2:.1f}"
        lx, ly = (x1 + x2) / 2, high + MARGIN * 0.2
    else:
        x1, y1, x2, y2 = sx + box_w, sy + BOX_H / 2, tx, ty + BOX_H / 2
        mid = (x1 + x2) / 2
        d = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        lx, ly = mid, (y1 + y2) / 2 - 5
    return (f'<g class="tf-edge"><path d="{d}" fill="none" stroke="#555" stroke-width="1.3" '
            f'marker-end="url(#{arrow})"/>'
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle" font-size="11" fill="#222">'
            f'{_esc(label)}</text>{_rate(lx, ly, rate)}</g>')


def _rate(x: float, y: float, rate: str) -> str:
    if not rate:
        return ""
    return (f'<text class="tf-rate" x="{x:.1f}" y="{y + 17:.1f}" text-anchor="middle" '
            f'font-size="11" font-weight="bold" fill="#2f6db5">{_esc(rate)}</text>')


def _cut(text: str) -> str:
    text = str(text)
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def _esc(text: Any) -> str:
    """Text safe inside an SVG element or attribute: escaped, with no XML-illegal controls."""
    return html.escape(_CONTROL.sub("?", str(text)), quote=True)
