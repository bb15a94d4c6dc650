"""One traced tuple tree as a picture: plain, self-contained SVG (no script, no font, no
library), what the dashboard's lineage tab and ``%topology lineage`` show.

The tree grows left to right: the spout tuple first, then one box per hop (a delivery of
a tuple of the tree: ``component:task``, its stream and values, abbreviated, and its
queued and executed milliseconds), each joined to the hop whose ``process`` emitted it.
Leaves take consecutive rows in causal order; a parent sits level with its first child.
The slowest hop (``Trace.slowest()``: queued + executed) is drawn thick and orange; for a
timed-out or failed tree, the hops of the task that held it (``held_by``) are outlined red
and marked "held here", and a tree lost between tasks (``held_by`` ``("<transit>",
None)``) marks the hops that were never processed "lost in transit".

>>> from runtime.observe.traces import Hop, Trace
>>> t = Trace("m1", "sentences", 1, "timed_out", None, hops=(
...     Hop("split", 3, "default", ("the cow",), None, 0.4, 1.0, "acked"),
...     Hop("count", 5, "default", ("cow",), 0, 0.2, 9.0, None)),
...     held_by=("count", 5), values=("the cow",))
>>> svg = trace_svg(t)
>>> svg.startswith("<svg") and "held here" in svg and "count:5" in svg
True
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["TraceView", "holders", "layout", "trace_svg", "trace_title"]

TRANSIT = "<transit>"  # runtime.observe.traces.TRANSIT (workbench draws; it need not import)
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 190, 50, 36, 10, 12  # px
CHARS = 28  # characters of a box's line (190 px at ~6.5 px per glyph, font-size 11)
MAX_HOPS = 300  # hops drawn at most; a bigger tree is cut, and the picture says so
OUTCOME = {"acked": ("#e6f4ea", "#3d9a50"), "failed": ("#fdecea", "#d62728"),
           None: ("#f4f4f4", "#8a8a8a")}  # a hop's outcome -> (fill, stroke)
SPOUT = ("#fdebd3", "#d9822b")
SLOWEST, HELD = "#e07b00", "#d62728"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not allowed in XML 1.0


class TraceView:
    """Shows one trace's tree in a notebook (``_repr_html_``: its title line, then the
    picture; ``_repr_svg_``: the picture), what ``%topology lineage`` displays.

    >>> from runtime.observe.traces import Trace
    >>> "acked" in TraceView(Trace("m", "src", 0, "acked", 1.0, ()))._repr_html_()
    True
    """

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    def _repr_svg_(self) -> str:
        return trace_svg(self.trace)

    def _repr_html_(self) -> str:
        return (f'<div class="tupleflow-lineage"><div><b>{_esc(trace_title(self.trace))}'
                f"</b></div>{self._repr_svg_()}</div>")

    def __repr__(self) -> str:
        return f"TraceView({trace_title(self.trace)})"


def layout(parents: Sequence[int | None]) -> tuple[list[int], list[float]]:
    """Depth and row of each hop of a tree given each hop's parent (an index, or None for
    a child of the spout tuple, which is depth 0, row 0): leaves take consecutive rows in
    the order given, a parent the row of its first child.

    >>> layout([None, 0, 0, None])
    ([1, 2, 2, 1], [0.0, 0.0, 1.0, 2.0])
    """
    children: dict[int | None, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p if p is not None and 0 <= p < i else None, []).append(i)
    depth, row = [0] * len(parents), [0.0] * len(parents)
    next_row = [0.0]

    def place(i: int, d: int) -> float:
        depth[i] = d
        kids = children.get(i, [])
        row[i] = min([place(k, d + 1) for k in kids]) if kids else _take(next_row)
        return row[i]

    for top in children.get(None, []):
        place(top, 1)
    return depth, row


def _take(counter: list[float]) -> float:
    value = counter[0]
    counter[0] += 1.0
    return value


def holders(trace: Any) -> set[int]:
    """The hops ``held_by`` points at: the holder's hops not acked, or, for a tree lost
    in transit, the hops never processed.

    >>> from runtime.observe.traces import Hop, Trace
    >>> t = Trace(1, "s", 0, "timed_out", None, (Hop("b", 2, "default", (), None, 1, 1,
    ...     "acked"), Hop("b", 2, "default", (), 0, 1, 1, None)), held_by=("b", 2))
    >>> holders(t)
    {1}
    """
    held = getattr(trace, "held_by", None)
    if not held:
        return set()
    component, task = held
    if component == TRANSIT:
        return {i for i, h in enumerate(trace.hops) if h.executed_ms is None}
    return {i for i, h in enumerate(trace.hops)
            if h.component == component and h.task == task and h.outcome != "acked"}


def trace_title(trace: Any) -> str:
    """One line about a trace: spout, msg_id, status, time and holder.

    >>> from runtime.observe.traces import Trace
    >>> trace_title(Trace("m1", "src", 1, "timed_out", None, (), held_by=("<transit>", None)))
    "src:1 msg_id 'm1': timed_out, held by <transit> (lost between tasks), 0 hops"
    """
    done = "" if trace.complete_ms is None else f" in {trace.complete_ms:.1f} ms"
    held = getattr(trace, "held_by", None)
    who = ""
    if held:
        who = (", held by <transit> (lost between tasks)" if held[0] == TRANSIT
               else f", held by {held[0]}:{held[1]}")
    return (f"{trace.component}:{trace.task} msg_id {trace.msg_id!r}: {trace.status}{done}"
            f"{who}, {len(trace.hops)} hops")


def trace_svg(trace: Any, max_hops: int = MAX_HOPS) -> str:
    """The tree of ``trace`` (a :class:`runtime.observe.traces.Trace`) as an SVG string."""
    hops = list(trace.hops[:max_hops])
    depth, row = layout([h.parent for h in hops])
    slowest = trace.slowest() if hasattr(trace, "slowest") else None
    held = holders(trace)
    rows = max([r + 1 for r in row] + [1.0])
    levels = max(depth + [0]) + 1
    width = MARGIN * 2 + levels * BOX_W + (levels - 1) * GAP_X
    height = MARGIN * 2 + rows * (BOX_H + GAP_Y) + 18
    parts = [_edges(hops, depth, row), _spout_box(trace)]
    held_by = getattr(trace, "held_by", None)
    label = "lost in transit" if held_by and held_by[0] == TRANSIT else "held here"
    parts += [_hop_box(i, h, depth[i], row[i], i == slowest, label if i in held else "")
              for i, h in enumerate(hops)]
    note = (f"{len(trace.hops) - len(hops)} more hops not drawn"
            if len(trace.hops) > len(hops) else trace_title(trace))
    parts.append(_text(MARGIN, height - 8, note, size=11, colour="#555"))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="tf-lineage" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'font-family="sans-serif" data-msg-id="{_esc(trace.msg_id)}">'
            f"<title>{_esc(trace_title(trace))}</title>{''.join(parts)}</svg>")


def _xy(depth: int, row: float) -> tuple[float, float]:
    return MARGIN + depth * (BOX_W + GAP_X), MARGIN + row * (BOX_H + GAP_Y)


def _edges(hops: list, depth: list[int], row: list[float]) -> str:
    out = []
    for i, h in enumerate(hops):
        p = h.parent if h.parent is not None and 0 <= h.parent < i else None
        x1, y1 = _xy(depth[p] if p is not None else 0, row[p] if p is not None else 0.0)
        x2, y2 = _xy(depth[i], row[i])
        x1, y1, y2 = x1 + BOX_W, y1 + BOX_H / 2, y2 + BOX_H / 2
        mid = (x1 + x2) / 2
        out.append(f'<path d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} '
                   f'{x2:.1f},{y2:.1f}" fill="none" stroke="#999" stroke-width="1.2"/>')
    return "".join(out)


def _spout_box(trace: Any) -> str:
    x, y = _xy(0, 0.0)
    values = getattr(trace, "values", ()) or ()
    lines = [(f"{trace.component}:{trace.task}", True), (f"msg_id {_short(trace.msg_id)}", False),
             (_values(values), False)]
    return _box(x, y, SPOUT, lines, 'class="tf-hop tf-spout"')


def _hop_box(i: int, hop: Any, depth: int, row: float, slowest: bool, held: str) -> str:
    """One hop's box; ``held`` is the holder's label ("held here", "lost in transit") or ''."""
    x, y = _xy(depth, row)
    fill, stroke = OUTCOME.get(hop.outcome, OUTCOME[None])
    lines = [(f"{hop.component}:{hop.task}", True),
             (_short(f"[{hop.stream}] {tuple(hop.values)!r}", CHARS), False),
             (f"q {_ms(hop.queued_ms)} · x {_ms(hop.executed_ms)}", False)]
    marks = (" tf-slowest" if slowest else "") + (" tf-held" if held else "")
    attrs = (f'class="tf-hop{marks}" data-hop="{i}" data-component="{_esc(hop.component)}" '
             f'data-task="{_esc(hop.task)}"')
    tip = f"{hop.component}:{hop.task} [{hop.stream}] {_short(tuple(hop.values), 500)}"
    out = _box(x, y, (fill, stroke), lines, attrs, slowest, bool(held), tip)
    if held:
        out += _text(x + BOX_W - 4, y - 2, held, size=10, colour=HELD, anchor="end")
    elif slowest:
        out += _text(x + BOX_W - 4, y - 2, "slowest", size=10, colour=SLOWEST, anchor="end")
    return out


def _box(x: float, y: float, colours: tuple[str, str], lines: list[tuple[str, bool]],
         attrs: str, slowest: bool = False, held: bool = False, tip: str = "") -> str:
    fill, stroke = colours
    stroke = HELD if held else SLOWEST if slowest else stroke
    width = 3 if held or slowest else 1.2
    dash = ' stroke-dasharray="5,3"' if held and not slowest else ""
    text = "".join(_text(x + 6, y + 15 + 14 * k, line, bold=bold)
                   for k, (line, bold) in enumerate(lines))
    title = f"<title>{_esc(tip)}</title>" if tip else ""
    return (f"<g {attrs}>{title}<rect x=\"{x:.1f}\" y=\"{y:.1f}\" width=\"{BOX_W}\" "
            f'height="{BOX_H}" rx="5" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{width}"{dash}/>{text}</g>')


def _text(x: float, y: float, text: str, *, size: int = 11, bold: bool = False,
          colour: str = "#222", anchor: str = "start") -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{colour}" '
            f'text-anchor="{anchor}"{weight}>{_esc(text)}</text>')


def _values(values: Sequence[Any]) -> str:
    """Values, abbreviated to one box line.

    >>> _values(("the cow jumped over the moon and far away",))
    "('the cow jumped over th…"
    """
    return _short(tuple(values), CHARS - 3)


def _short(value: Any, limit: int = CHARS) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ms(value: Any) -> str:
    """Milliseconds for a box: two decimals below 1 ms, one below 100, none above."""
    if value is None:
        return "–"
    return f"{value:.2f} ms" if value < 1 else f"{value:.1f} ms" if value < 100 else \
        f"{value:.0f} ms"


def _esc(value: Any) -> str:
    return html.escape(_CONTROL.sub("", str(value)), quote=True)

