"""Sparklines: a series of numbers as a tiny inline SVG polyline, no script, no font.

The dashboard draws one per component and metric (emitted, acked, failed, latency per
second over the last minutes). A missing point (None) breaks the line instead of being
drawn as 0, so "not reported" never looks like "idle".

>>> svg = sparkline([0, 2, 4, None, 1], title="acked/s")
>>> svg.startswith("<svg") and svg.count("<polyline") == 2 and "acked/s" in svg
True
>>> sparkline([]).endswith('viewBox="0 0 120 24"></svg>')  # nothing yet: an empty box
True
"""

from __future__ import annotations

import html
from collections.abc import Sequence

WIDTH, HEIGHT, PAD = 120, 24, 2


def sparkline(values: Sequence[float | None], *, colour: str = "#2f6db5",
              title: str = "", width: int = WIDTH, height: int = HEIGHT) -> str:
    """``values`` (oldest first) scaled to the box: 0 at the bottom, the maximum at the
    top; the last value is marked with a dot."""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="tf-spark" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}">')
    known = [v for v in values if v is not None]
    if not known:
        return head + "</svg>"
    top = max(known)
    scale = top if top > 0 else 1.0
    step = (width - 2 * PAD) / max(len(values) - 1, 1)

    def point(i: int, v: float) -> tuple[float, float]:
        return PAD + i * step, height - PAD - (height - 2 * PAD) * max(v, 0) / scale

    parts = [head, f"<title>{html.escape(title)} (max {top:g})</title>" if title else ""]
    for run in _runs(values):
        xy = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(i, v) for i, v in run))
        parts.append(f'<polyline points="{xy}" fill="none" stroke="{colour}" '
                     'stroke-width="1.2"/>')
    last = next(((i, v) for i, v in reversed(list(enumerate(values))) if v is not None))
    x, y = point(*last)
    parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="{colour}"/></svg>')
    return "".join(parts)


def _runs(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """Unbroken stretches of known values, with their indexes.

    >>> _runs([1, None, 2, 3])
    [[(0, 1)], [(2, 2), (3, 3)]]
    """
    runs: list[list[tuple[int, float]]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((i, v))
    return [r for r in runs if r]
