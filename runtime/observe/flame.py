"""Flame graphs: sampled stacks, folded, drawn as an SVG a notebook shows inline.

A stack is folded as py-spy writes it (``--format raw``): frames from the outermost
to the innermost, joined by ``;``, then a space and the number of samples. A profile
keeps two such tables: samples where the thread was on a CPU, and samples where it
waited (sleeping, blocked on a socket or a lock). The drawing is one box per frame,
as wide as its samples, the outermost at the bottom; its colour tells the two apart:
warm (orange to red) for time on a CPU, blue for time waiting, mixed in proportion.
Pure: text in, text out, no clock and no network (the SVG links nothing).

>>> cpu = parse_folded("main;work 30\\nmain;work;inner 10\\n")
>>> waiting = parse_folded("main;poll 60\\n")
>>> tree = build_tree(cpu, waiting)
>>> tree.total, [(c.name, c.cpu, c.waiting) for c in tree.children]
(100, [('main', 40, 60)])
>>> svg = render_svg(cpu, waiting, "demo")
>>> svg.startswith("<svg") and "poll" in svg and "http" not in svg.split(">", 1)[1]
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape

WIDTH = 1000  # px of the drawing
ROW = 17  # px per stack depth
MARGIN = 10
HEADER = 34  # px above the frames: the title and the legend
MIN_LABEL_PX = 28  # a frame narrower than this is drawn but not labelled
CHAR_PX = 6.6  # px per character of the 11 px monospace label
MIN_BOX_PX = 0.3  # frames narrower than this are not drawn at all (they cannot be seen)


def parse_folded(text: str) -> dict[str, int]:
    """``{"outer;...;inner": samples}`` from folded lines; a line that does not end in
    a count is ignored (a partial last line of an interrupted sampler).

    >>> parse_folded("a;b 3\\na;b 2\\nbroken\\n\\nc 1")
    {'a;b': 5, 'c': 1}
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out[stack] = out.get(stack, 0) + int(count)
    return out


def fold(stacks: Mapping[str, int]) -> str:
    """The folded text of a table (the inverse of :func:`parse_folded`), heaviest first."""
    ordered = sorted(stacks.items(), key=lambda kv: (-kv[1], kv[0]))
    return "".join(f"{stack} {n}\n" for stack, n in ordered)


@dataclass
class Frame:
    """One box: a frame at one place in the call tree, with its samples below it."""

    name: str
    cpu: int = 0
    waiting: int = 0
    children: list[Frame] = field(default_factory=list)
    _index: dict[str, Frame] = field(default_factory=dict, repr=False)

    @property
    def total(self) -> int:
        return self.cpu + self.waiting

    def child(self, name: str) -> Frame:
        found = self._index.get(name)
        if found is None:
            found = self._index[name] = Frame(name)
            self.children.append(found)
        return found

    def add(self, frames: list[str], n: int, on_cpu: bool) -> None:
        """Count ``n`` samples of one stack on this frame and each one it calls."""
        self.count(n, on_cpu)
        node = self
        for name in frames:
            node = node.child(name)
            node.count(n, on_cpu)

    def count(self, n: int, on_cpu: bool) -> None:
        if on_cpu:
            self.cpu += n
        else:
            self.waiting += n

    def depth(self) -> int:
        return 1 + max((c.depth() for c in self.children), default=0)


def build_tree(cpu: Mapping[str, int], waiting: Mapping[str, int]) -> Frame:
    """The call tree of both tables under one root; children in name order, so that
    the same stacks always draw the same picture."""
    root = Frame("all")
    for stacks, on_cpu in ((cpu, True), (waiting, False)):
        for stack, n in stacks.items():
            root.add(stack.split(";"), n, on_cpu)
    _sort(root)
    return root


def _sort(node: Frame) -> None:
    node.children.sort(key=lambda c: c.name)
    for c in node.children:
        _sort(c)


def colour(cpu_share: float) -> str:
    """Warm for a frame on a CPU, blue for one waiting, in proportion.

    >>> colour(1.0), colour(0.0)
    ('rgb(232,93,36)', 'rgb(86,145,214)')
    """
    hot, cold = (232, 93, 36), (86, 145, 214)
    mix = [round(c * cpu_share + w * (1 - cpu_share)) for c, w in zip(hot, cold)]
    return "rgb({},{},{})".format(*mix)


def render_svg(cpu: Mapping[str, int], waiting: Mapping[str, int], title: str = "") -> str:
    """The flame graph of two folded tables, as a standalone SVG document. Each box has a
    tooltip with its frame, samples, share of all samples, and share on a CPU."""
    root = build_tree(cpu, waiting)
    depth = root.depth()
    height = HEADER + depth * ROW + MARGIN
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH + 2 * MARGIN}" '
             f'height="{height}" font-family="monospace" font-size="11">',
             '<rect width="100%" height="100%" fill="#fbfbf8"/>',
             _header(title, root)]
    if root.total:
        scale = WIDTH / root.total
        _boxes(root, MARGIN, height - MARGIN - ROW, scale, root.total, parts)
    else:
        parts.append(f'<text x="{MARGIN}" y="{HEADER + 12}">no samples</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _header(title: str, root: Frame) -> str:
    share = f"{root.cpu / root.total:.0%}" if root.total else "-"
    text = (f"{escape(title)}  {root.total} samples, {share} on CPU"
            if title else f"{root.total} samples, {share} on CPU")
    return (f'<text x="{MARGIN}" y="16" font-size="13">{text}</text>'
            f'<rect x="{WIDTH - 190}" y="6" width="12" height="12" fill="{colour(1.0)}"/>'
            f'<text x="{WIDTH - 174}" y="16">on CPU</text>'
            f'<rect x="{WIDTH - 110}" y="6" width="12" height="12" fill="{colour(0.0)}"/>'
            f'<text x="{WIDTH - 94}" y="16">waiting</text>')


def _boxes(node: Frame, x: float, y: float, scale: float, everything: int,
           parts: list[str]) -> None:
    """Draw ``node`` at (x, y) and its children above it, left to right."""
    width = node.total * scale
    if width < MIN_BOX_PX:
        return
    parts.append(_box(node, x, y, width, everything))
    for child in node.children:
        _boxes(child, x, y - ROW, scale, everything, parts)
        x += child.total * scale


def _box(node: Frame, x: float, y: float, width: float, everything: int) -> str:
    share = node.cpu / node.total
    tip = (f"{node.name}: {node.total} samples ({node.total / everything:.1%}), "
           f"{share:.0%} on CPU")
    label = ""
    if width >= MIN_LABEL_PX:
        chars = int((width - 4) / CHAR_PX)
        shown = node.name if len(node.name) <= chars else node.name[:max(chars - 2, 1)] + ".."
        label = f'<text x="{x + 2:.1f}" y="{y + ROW - 5}">{escape(shown)}</text>'
    return (f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" '
            f'width="{max(width - 0.5, 0.1):.1f}" height="{ROW - 1}" rx="2" '
            f'fill="{colour(share)}"/>{label}</g>')


@dataclass
class Profile:
    """What ``running.profile`` returns: the folded stacks of a component's sampled tasks
    (``cpu`` and ``waiting``: ``{"outer;...;inner": samples}``), shown in a notebook as
    its flame graph. With more than one task, each stack starts with a ``task N`` frame."""

    component: str
    tasks: tuple[int, ...]
    seconds: float
    rate: int
    cpu: dict[str, int]
    waiting: dict[str, int]

    @property
    def samples(self) -> int:
        return sum(self.cpu.values()) + sum(self.waiting.values())

    @property
    def folded(self) -> str:
        """Every sample, on CPU or waiting, as folded text (what flamegraph.pl reads)."""
        both = dict(self.cpu)
        for stack, n in self.waiting.items():
            both[stack] = both.get(stack, 0) + n
        return fold(both)

    def top(self, n: int = 10, on_cpu: bool = True) -> list[tuple[str, int]]:
        """The ``n`` innermost frames with the most samples (on a CPU, or waiting)."""
        counts: dict[str, int] = {}
        for stack, k in (self.cpu if on_cpu else self.waiting).items():
            leaf = stack.rsplit(";", 1)[-1]
            counts[leaf] = counts.get(leaf, 0) + k
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def svg(self) -> str:
        tasks = ", ".join(str(t) for t in self.tasks)
        title = f"{self.component} (task {tasks}), {self.seconds:g} s at {self.rate} Hz"
        return render_svg(self.cpu, self.waiting, title)

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return (f"<Profile {self.component!r} tasks={list(self.tasks)} "
                f"samples={self.samples}>")
