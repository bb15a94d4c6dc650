"""The dashboard's child widgets and how a snapshot is drawn into them.

Layout (docs/internals/dashboard.md): a header (status with the health verdict, the
controls, the message line) that stays at the top; then the graph; then the metrics
table in its own scrolling box; then tabs: a component's tasks, the tuple tap, the
exceptions, the events, the physical plan, max spout pending.

Every panel is an ``HTML`` widget whose value only the refresh thread assigns; traitlets
sends nothing when the value did not change. The exceptions are one small widget pair
each (a line that changes, and a ``<details>`` that does not), appended in the order
they were first seen: an opened traceback is never re-drawn, so it stays open.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from . import _lineage_tab, _lists, _panels
from ._checkpoint_panel import checkpoint_html
from ._style import style
from ._tuner_tab import tuner_html
from ._windows_panel import windows_html

WINDOWS = ("1m", "10m", "1h", "all")  # what running.metrics(window) accepts, shortest first
TABS = ("tasks", "tuple tap", "exceptions", "events", "physical plan", "max spout pending",
        "lineage", "acker")
STATUSES = ("acked", "failed", "timed_out", "pending")  # runtime.observe.traces.TRACE_STATUSES
NO_TRACE = ("(choose a trace)", "")
NO_FOLLOW = ("(follow a traced tuple to its tree)", "")
WIDE = {"description_width": "initial"}  # a control's label at its full width, never cut


class Exceptions:
    """One (line, details) widget pair per distinct error, in first-seen order."""

    def __init__(self) -> None:
        self.title = widgets.HTML()
        self.items: dict[str, tuple[widgets.HTML, widgets.HTML]] = {}
        self.box = widgets.VBox([self.title])
        self.box.add_class("tupleflow-exceptions")

    def draw(self, snap: dict) -> None:
        records = sorted(snap.get("exceptions") or [], key=lambda r: r.get("first") or 0)
        self.title.value = f"<b>exceptions</b> ({len(records)})" + (
            "" if records else "<div><small>none</small></div>")
        for record in records:
            line, details = self._pair(_lists.exception_key(record))
            line.value = _lists.exception_line(record)
            details.value = _lists.exception_details(record, snap.get("name") or "NAME")
        children = (self.title, *[w for pair in self.items.values() for w in pair])
        if children != self.box.children:  # appended only: the views already drawn stay
            self.box.children = children

    def _pair(self, key: str) -> tuple[widgets.HTML, widgets.HTML]:
        if key not in self.items:
            pair = (widgets.HTML(), widgets.HTML())
            pair[1].add_class("tupleflow-traceback")
            self.items[key] = pair
        return self.items[key]

    def all(self) -> list:
        return [self.title, self.box, *[w for pair in self.items.values() for w in pair]]


class Parts:
    """The dashboard's child widgets; ``board`` gets the controls' callbacks."""

    def __init__(self, board: Any, taps: list, components: list[str], spouts: list[str]
                 ) -> None:
        html = widgets.HTML
        self.style = html(style())
        self.status, self.graph, self.metrics = html(), html(), html()
        self.plan, self.pending, self.tap_table = html(), html(), html()
        self.events, self.message, self.tasks = html(), html(), html()
        self.lineage, self.acker = html(), html()
        self.moving = html()  # the rebalance line: what moves, then what it did or why not
        self.exceptions = Exceptions()
        for widget, cls in ((self.status, "status"), (self.graph, "graph"),
                            (self.metrics, "metrics"), (self.plan, "plan"),
                            (self.pending, "pending"), (self.tap_table, "tap"),
                            (self.events, "events"), (self.message, "message"),
                            (self.tasks, "tasks"), (self.lineage, "lineage"),
                            (self.acker, "ackers"), (self.moving, "rebalance")):
            widget.add_class(f"tupleflow-{cls}")
        self._controls(board, spouts)
        self.edge = widgets.Dropdown(options=taps, description="tap", style=WIDE)
        self.component = widgets.Dropdown(options=[("(choose a component)", "")] + [
            (c, c) for c in components], description="tasks of", style=WIDE)
        self.edge.observe(lambda _: board.tap_changed(), names="value")
        self.component.observe(lambda _: board.poke(), names="value")  # drawn by the thread
        self.window.observe(lambda change: board.set_window(change["new"]), names="value")
        self._lineage_controls(board)

    def _lineage_controls(self, board: Any) -> None:
        """The lineage tab's filter, choice and trace rate; the tap tab's "follow"."""
        self._drawing = False  # True while the refresh thread sets options (not a choice)
        self.status_filter = widgets.Dropdown(
            options=[("all statuses", "")] + [(s, s) for s in STATUSES], description="status",
            style=WIDE, layout={"width": "auto"})
        self.trace_pick = widgets.Dropdown(options=[NO_TRACE], description="trace",
                                           style=WIDE, layout={"width": "auto"})
        self.follow = widgets.Dropdown(options=[NO_FOLLOW], layout={"width": "auto"})
        self.rate_box = widgets.Text(placeholder="0.01", description="trace rate", style=WIDE,
                                     layout={"width": "200px"})
        self.set_rate = widgets.Button(description="set", layout={"width": "auto"})
        self.status_filter.observe(lambda _: board.poke(), names="value")
        self.trace_pick.observe(lambda c: self._chosen(board, c["new"], False), names="value")
        self.follow.observe(lambda c: self._chosen(board, c["new"], True), names="value")
        self.set_rate.on_click(lambda _: board.set_trace(self.rate_box.value))

    def _chosen(self, board: Any, key: str, show: bool) -> None:
        if not self._drawing and (key or not show):
            board.choose_trace(key or None, show=show)

    def trace_status(self) -> str | None:
        return self.status_filter.value or None

    def lineage_shown(self) -> bool:
        """Whether a tab that reads traces or the acker is in front (lineage, acker, tap)."""
        index = self.tabs.selected_index
        return index is not None and TABS[index] in ("lineage", "acker", "tuple tap")

    def show_tab(self, title: str) -> None:
        self.tabs.selected_index = TABS.index(title)

    def _controls(self, board: Any, spouts: list[str]) -> None:
        self.kill = widgets.Button(description="kill", button_style="danger", icon="stop",
                                   layout={"width": "auto"})
        self.pause = widgets.Button(description="pause spouts", icon="pause",
                                    layout={"width": "auto"})
        self.resume = widgets.Button(description="resume spouts", icon="play",
                                     layout={"width": "auto"})
        self.pending_box = widgets.Text(placeholder="auto, none or 100",
                                        description="max spout pending", style=WIDE,
                                        layout={"width": "300px"})
        self.spout = widgets.Dropdown(options=[("all spouts", "")] + [(c, c) for c in spouts],
                                      layout={"width": "auto"})
        self.set_pending = widgets.Button(description="set", layout={"width": "auto"})
        self.rebalance_box = widgets.Text(placeholder="count=4 [containers=2]",
                                          description="rebalance", style=WIDE,
                                          layout={"width": "300px"})
        self.rebalance = widgets.Button(description="rebalance", icon="random",
                                        layout={"width": "auto"})
        self.rebalance.on_click(lambda _: board.rebalance(self.rebalance_box.value))
        self.window = widgets.Dropdown(options=WINDOWS, value="1m", description="window",
                                       style=WIDE, layout={"width": "auto"})
        self.kill.on_click(lambda _: board.kill())
        self.pause.on_click(lambda _: board.pause())
        self.resume.on_click(lambda _: board.resume())
        self.set_pending.on_click(lambda _: board.set_max_spout_pending(
            self.pending_box.value, self.spout.value))

    def controls(self) -> list:
        return [self.kill, self.pause, self.resume, self.pending_box, self.spout,
                self.set_pending, self.rebalance_box, self.rebalance, self.window]

    def layout(self) -> list:
        bar = widgets.HBox(self.controls(), layout={"flex_flow": "row wrap"})
        bar.add_class("tupleflow-controls")
        header = widgets.VBox([self.style, self.status, bar, self.message, self.moving])
        header.add_class("tupleflow-header")
        lineage_bar = widgets.HBox([self.status_filter, self.trace_pick, self.rate_box,
                                    self.set_rate], layout={"flex_flow": "row wrap"})
        tabs = widgets.Tab(children=[widgets.VBox([self.component, self.tasks]),
                                     widgets.VBox([self.edge, self.follow, self.tap_table]),
                                     self.exceptions.box, self.events, self.plan,
                                     self.pending, widgets.VBox([lineage_bar, self.lineage]),
                                     self.acker])
        tabs.titles = TABS
        self.tabs = tabs
        self.boxes = [bar, header, tabs, lineage_bar, *tabs.children[:2], tabs.children[6]]
        return [header, self.graph, self.metrics, tabs]

    def all(self) -> list:
        return [self.style, self.status, self.graph, self.metrics, self.plan, self.pending,
                self.tap_table, self.events, self.message, self.moving, self.tasks, self.edge,
                self.component, self.lineage, self.acker, self.status_filter, self.trace_pick,
                self.follow, self.rate_box, self.set_rate, *self.exceptions.all(),
                *self.controls(), *self.boxes]

    def tap(self) -> Any:
        return self.edge.value

    def draw(self, snap: dict, topology: Any, history: Any) -> None:
        """Assign each panel's HTML; traitlets sends only the values that changed."""
        self.status.value = _panels.status_html(snap)
        self.graph.value = _panels.graph_html(topology, snap)
        self.metrics.value = _panels.metrics_html(snap, history, _panels.graph_order(topology))
        self.tasks.value = (_lists.tasks_html(snap, self.component.value)
                            + windows_html(snap, self.component.value)
                            + checkpoint_html(snap, self.component.value))
        self.plan.value = _panels.plan_html(snap)
        self.pending.value = _panels.pending_html(snap) + tuner_html(snap)
        self.tap_table.value = _lists.tap_html(snap.get("tap"))
        self._draw_lineage(snap)
        self.exceptions.draw(snap)
        self.events.value = _lists.events_html(snap)

    def _draw_lineage(self, snap: dict) -> None:
        """The lineage tab, the acker panel, and the choices (kept as chosen)."""
        traces, chosen = list(snap.get("traces") or ()), snap.get("trace")
        self.lineage.value = _lineage_tab.lineage_html(snap)
        self.acker.value = _lineage_tab.acker_html(snap)
        picks = [NO_TRACE] + _lineage_tab.trace_choices(traces)
        key = _lineage_tab.choice_key(chosen) if chosen is not None else ""
        if chosen is not None and key not in {k for _, k in picks}:
            picks += _lineage_tab.trace_choices([chosen])
        tapped = (snap.get("tap") or {}).get("tuples") or []
        follows = [NO_FOLLOW] + _lineage_tab.traced_taps(tapped[::-1], traces)
        self._drawing = True
        try:
            self._options(self.trace_pick, picks, key)
            self._options(self.follow, follows, "")
        finally:
            self._drawing = False

    @staticmethod
    def _options(dropdown: widgets.Dropdown, options: list, value: str) -> None:
        """New options and value, sent only when they changed."""
        if list(dropdown.options) != options:
            dropdown.options = options  # (a new list selects its first option)
        if dropdown.value != value:
            dropdown.value = value

    def rebalancing(self, busy: bool) -> None:
        """The rebalance box and button off while one of this dashboard's runs."""
        self.rebalance.disabled = self.rebalance_box.disabled = busy

    def disable(self) -> None:
        for widget in (*self.controls(), self.edge, self.set_rate, self.rate_box):
            widget.disabled = True
