"""The live dashboard of a running topology: an ipywidgets box that refreshes itself.

How it refreshes (docs/internals/dashboard.md): one daemon thread per dashboard asks the
topology master (``running.status()``, ``.metrics("1m")``, ``.statistics()`` every tick;
events and exceptions every ``slow_every`` ticks), renders the panels with the pure
functions of :mod:`workbench._panels`, and assigns the strings to ``HTML`` widgets. Only
that thread writes those widgets, and a value that did not change is not sent (traitlets
compares). ipykernel (6 and later) sends comm messages from any thread through its IOPub
thread, so the kernel's main thread is never blocked: a cell runs while the dashboard
updates. Button callbacks run in the kernel's main thread; they call the topology and then
wake the refresh thread, which draws the result.

The refresh stops when :meth:`Dashboard.close` is called, or when the topology is found
dead or killed; the status line says which. A dashboard shown with :meth:`Dashboard.show`
then replaces its output with the static HTML picture of its last state, so a saved
notebook or an nbconvert export keeps something readable without a widget manager.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from runtime.options import check_max_spout_pending

from . import _panels
from ._history import History

SLOW_EVERY = 5  # ticks between two asks for events and exceptions (they only grow)
TAP_ROWS = 20
NO_TAP = "(no tap)"
STOPPED = ("killed", "dead", "closed")


def collect(running: Any, *, window: str = "1m", slow: bool = True,
            tap: tuple[str, str] | None = None, tap_rows: int = TAP_ROWS) -> dict:
    """One snapshot of ``running`` for :mod:`workbench._panels` (see its docstring).

    Never raises for the topology's sake: a dead master gives ``state="dead"`` (or
    ``"killed"`` when it was killed through its handle), a master that does not answer
    in time gives ``state="not answering"`` with the error.
    """
    snap: dict[str, Any] = {"name": running.name, "time": time.time()}
    if running.killed or not running.alive:
        snap["state"] = _ended(running)
        return snap
    try:
        snap["status"] = running.status()
        snap["metrics"] = running.metrics(window)
        snap["stats"] = [_record(s) for s in running.statistics()]
        if slow:
            snap["events"] = running.events()
            snap["exceptions"] = running.exceptions()
        if tap is not None:
            snap["tap"] = {"component": tap[0], "stream": tap[1],
                           "tuples": running.sample(tap[0], tap[1], tap_rows)}
    except Exception as err:  # the master died or stalled while we asked
        snap["error"] = f"{type(err).__name__}: {err}"
        if running.killed or not running.alive:
            snap["state"] = _ended(running)
            return snap
        snap["state"] = "not answering"
        return snap
    snap["state"] = state_of(snap["status"])
    return snap


def _changes(running: Any) -> dict:
    """Events and exceptions now (normally asked every ``SLOW_EVERY`` ticks)."""
    try:
        return {"events": running.events(), "exceptions": running.exceptions()}
    except Exception:  # dying while we ask: the next refresh says so
        return {}


def state_of(status: dict) -> str:
    """``running``/``starting``, or ``paused`` when the master says the spouts are.

    >>> state_of({"state": "running", "paused": True}), state_of({"state": "starting"})
    ('paused', 'starting')
    """
    state = str(status.get("state", "?"))
    return "paused" if state == "running" and status.get("paused") else state


def parse_pending(text: str) -> int | str | None:
    """What the max-spout-pending box accepts: what ``%topology tune`` and
    ``running.set_max_spout_pending`` accept, parsed by the one validator of the setting
    (``runtime.options.check_max_spout_pending``).

    >>> parse_pending(" 200 "), parse_pending("Auto"), parse_pending("none")
    (200, 'auto', None)
    """
    return check_max_spout_pending(text)


def tap_choices(running: Any) -> list[tuple[str, tuple[str, str] | None]]:
    """The edges one can tap: every user stream of every component (``__`` streams are
    the runtime's own), as dropdown options ``(label, (component, stream))``."""
    streams = [(c, s) for c, s in running.plan.streams
               if not c.startswith("__") and not s.startswith("__")]
    return [(NO_TAP, None)] + [(f"{c} [{s}]", (c, s)) for c, s in streams]


def _ended(running: Any) -> str:
    """``killed`` when the topology was told to stop (through this handle, or its master
    exited cleanly: a kill in progress elsewhere), ``dead`` when its master crashed."""
    return "killed" if running.killed or running.exit_code == 0 else "dead"


def _record(stats: Any) -> dict:
    return dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else dict(stats)


class Dashboard(widgets.VBox):
    """A live view of ``running`` (a :class:`runtime.RunningTopology`), refreshed every
    ``interval`` seconds until closed or until the topology stops.

    ``topology`` (the :class:`runtime.Topology` that was submitted) draws the logical graph;
    without it the graph shows the components only. ``start=False`` leaves the refresh
    to the caller (:meth:`refresh`), as tests do.

    DOM contract (a browser test relies on it): the root has CSS class
    ``tupleflow-dashboard``; ``tupleflow-graph`` (inline ``<svg>``), ``tupleflow-metrics``
    (emitted/executed/acked per component), ``tupleflow-status`` (the state) are HTML
    widgets.
    """

    def __init__(self, running: Any, interval: float = 1.0, *, topology: Any = None,
                 window: str = "1m", start: bool = True, **kwargs: Any) -> None:
        if not interval > 0:
            raise ValueError(f"Dashboard: interval must be > 0 seconds, not {interval!r}")
        self.running, self.interval, self.window = running, float(interval), window
        topology = topology if topology is not None else getattr(running, "topology", None)
        self.topology = topology if topology is not None else _components_only(running)
        self.history = History()
        self.snapshot: dict = {"name": running.name, "state": "starting"}
        self.ticks = 0
        self._wake, self._done = threading.Event(), threading.Event()  # tick; stop asked
        self._over = threading.Event()  # stopped, and the last picture drawn and sent
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._parts = _Parts(self, tap_choices(running))
        super().__init__(children=self._parts.layout(), **kwargs)
        self.add_class("tupleflow-dashboard")
        self._draw(self.snapshot)
        if start:
            self.start()

    # -- refreshing -----------------------------------------------------------------------
    def start(self) -> None:
        """Refresh in a daemon thread every ``interval`` seconds (idempotent)."""
        if self._thread is None and not self._done.is_set():
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"tupleflow-dashboard-{self.running.name}")
            self._thread.start()

    def _loop(self) -> None:
        while not self._done.is_set():
            try:
                self.refresh()
            except Exception as err:  # a rendering bug must not kill the loop silently
                self._parts.message.value = f"dashboard error: {type(err).__name__}: {err}"
            self._wake.wait(self.interval)
            self._wake.clear()

    def refresh(self) -> dict:
        """Ask the master once, redraw what changed, and stop if the topology is gone.
        Returns the snapshot. Does nothing (returns the last one) once stopped."""
        if self._done.is_set():
            return self.snapshot
        slow = self.ticks % SLOW_EVERY == 0
        snap = collect(self.running, window=self.window, slow=slow, tap=self._parts.tap())
        if self._done.is_set():  # closed while we asked: draw nothing more
            return self.snapshot
        self.ticks += 1
        if not slow and snap["state"] != self.snapshot.get("state") and \
                snap["state"] not in STOPPED and "error" not in snap:
            snap = {**snap, **_changes(self.running)}  # a new state: its event, at once
        if not slow:  # keep the last events and exceptions on the screen
            snap.setdefault("events", self.snapshot.get("events"))
            snap.setdefault("exceptions", self.snapshot.get("exceptions"))
        if snap.get("stats") is not None:
            self.history.add(snap["stats"], snap["time"])
        if snap["state"] in STOPPED or snap.get("metrics") is None:  # keep the last numbers
            snap = {**self.snapshot, **snap}
        self.snapshot = snap
        self._draw(snap)
        if snap["state"] in STOPPED:
            self._finish()
        return snap

    def _draw(self, snap: dict) -> None:
        self._parts.draw({**snap, "history": self.history}, self.topology, self.history)

    def poke(self) -> None:
        """Refresh now rather than at the next tick (after a control was used)."""
        self._wake.set()

    @property
    def stopped(self) -> bool:
        """Whether the dashboard has stopped refreshing (closed, or topology gone) and
        drawn its last state."""
        return self._over.is_set()

    def _finish(self) -> None:
        """No more refreshes: controls off, the display turned into its static picture."""
        self._done.set()
        self._wake.set()
        self._parts.disable()
        if self._handle is not None:
            with contextlib.suppress(Exception):  # the frontend may be gone
                self._handle.update(_Static(self.static_html()), raw=False)
        self._over.set()

    def close(self) -> None:
        """Stop refreshing, show the last state as static HTML, and close the widgets."""
        if not self._done.is_set():
            self._done.set()  # first stop the thread, so that nothing draws after "closed"
            self._wake.set()
            self._join()
            self.snapshot = {**self.snapshot, "state": "closed"}
            self._draw(self.snapshot)
            self._finish()
        self._join()
        for child in self._parts.all():
            child.close()
        super().close()

    def _join(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    # -- showing ----------------------------------------------------------------------------
    def show(self) -> Dashboard:
        """Display the dashboard in the notebook (with an id, so that the output becomes a
        static picture when it stops); returns itself."""
        from IPython.display import display

        self._handle = display(self, display_id=True)
        return self

    def static_html(self) -> str:
        """The last state as self-contained HTML (no script): every panel and the graph."""
        return _panels.style() + _panels.render({**self.snapshot, "history": self.history},
                                                self.topology)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        """The widget view, plus text/html of the current state for any frontend (or
        export) that cannot run widgets."""
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/html"] = self.static_html()
        return bundle

    # -- controls (called by the buttons; also usable directly) ----------------------------
    def act(self, what: str, action: Callable[[], Any]) -> None:
        """Run one control action; its outcome (or error) goes to the message line."""
        try:
            outcome = action()
        except Exception as err:
            self._parts.message.value = f"{what}: {type(err).__name__}: {err}"
        else:
            self._parts.message.value = f"{what}: {outcome}" if outcome is not None else what
        self.poke()

    def kill(self) -> None:
        """Kill the topology and stop the dashboard (the status line shows ``killed``)."""
        self.act("killed", self.running.kill)
        self.wait_stopped()

    def wait_stopped(self, timeout: float = 10.0) -> bool:
        """After the topology was killed: refresh now and wait until the dashboard has
        stopped (its last picture drawn); True if it has. Without a refresh thread, the
        refresh happens here."""
        if self._thread is None or not self._thread.is_alive():
            self.refresh()
        else:
            self.poke()
            self._over.wait(timeout)
        return self.stopped

    def pause(self) -> None:
        self.act("paused", self.running.pause)

    def resume(self) -> None:
        self.act("resumed", self.running.resume)

    def set_max_spout_pending(self, text: str, component: str | None = None) -> None:
        self.act(f"max spout pending = {text.strip()} (tasks told)",
                 lambda: self.running.set_max_spout_pending(parse_pending(text),
                                                            component or None))


class _Parts:
    """The dashboard's child widgets and how a snapshot is drawn into them."""

    def __init__(self, board: Dashboard, choices: list) -> None:
        html = widgets.HTML
        self.style = html(_panels.style())
        self.status, self.graph, self.metrics = html(), html(), html()
        self.plan, self.pending, self.tap_table = html(), html(), html()
        self.exceptions, self.events, self.message = html(), html(), html()
        for widget, cls in ((self.status, "status"), (self.graph, "graph"),
                            (self.metrics, "metrics"), (self.plan, "plan"),
                            (self.pending, "pending"), (self.tap_table, "tap"),
                            (self.exceptions, "exceptions"), (self.events, "events"),
                            (self.message, "message")):
            widget.add_class(f"tupleflow-{cls}")
        self.kill = widgets.Button(description="kill", button_style="danger", icon="stop")
        self.pause = widgets.Button(description="pause spouts", icon="pause")
        self.resume = widgets.Button(description="resume spouts", icon="play")
        self.pending_box = widgets.Text(placeholder="auto, none or a number",
                                        description="max pending", layout={"width": "260px"})
        self.spout = widgets.Dropdown(options=[("all spouts", "")] + [
            (c, c) for c in _spouts(board.topology)], layout={"width": "140px"})
        self.set_pending = widgets.Button(description="set")
        self.edge = widgets.Dropdown(options=choices, description="tap edge")
        self.kill.on_click(lambda _: board.kill())
        self.pause.on_click(lambda _: board.pause())
        self.resume.on_click(lambda _: board.resume())
        self.set_pending.on_click(lambda _: board.set_max_spout_pending(
            self.pending_box.value, self.spout.value))
        self.edge.observe(lambda _: board.poke(), names="value")

    def controls(self) -> list:
        return [self.kill, self.pause, self.resume, self.pending_box, self.spout,
                self.set_pending]

    def layout(self) -> list:
        bar = widgets.HBox(self.controls())
        bar.add_class("tupleflow-controls")
        tabs = widgets.Tab(children=[self.plan, self.pending,
                                     widgets.VBox([self.edge, self.tap_table]),
                                     self.exceptions, self.events])
        for i, title in enumerate(("physical plan", "max spout pending", "tuple tap",
                                   "exceptions", "events")):
            tabs.set_title(i, title)
        self.boxes = [bar, tabs, tabs.children[2]]
        return [self.style, self.status, bar, self.message, self.graph, self.metrics, tabs]

    def all(self) -> list:
        return [self.style, self.status, self.graph, self.metrics, self.plan, self.pending,
                self.tap_table, self.exceptions, self.events, self.message, self.edge,
                *self.controls(), *self.boxes]

    def tap(self) -> tuple[str, str] | None:
        return self.edge.value

    def draw(self, snap: dict, topology: Any, history: History) -> None:
        """Assign each panel's HTML; traitlets sends only the values that changed."""
        self.status.value = _panels.status_html(snap)
        self.graph.value = _panels.graph_html(topology, snap)
        self.metrics.value = _panels.metrics_html(snap, history, _panels.graph_order(topology))
        self.plan.value = _panels.plan_html(snap)
        self.pending.value = _panels.pending_html(snap)
        self.tap_table.value = _panels.tap_html(snap.get("tap"))
        self.exceptions.value = _panels.exceptions_html(snap)
        self.events.value = _panels.events_html(snap)

    def disable(self) -> None:
        for widget in (*self.controls(), self.edge):
            widget.disabled = True


class _Static:
    """What a stopped dashboard's output becomes: text/html only (no widget view)."""

    def __init__(self, html: str) -> None:
        self.html = html

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return {"text/html": self.html, "text/plain": "tupleflow dashboard (stopped)"}


def _spouts(topology: Any) -> list[str]:
    """The spout components of the logical graph, in declaration order."""
    graph = getattr(topology, "topology", topology).graph
    return [c for c, kind in graph.nodes(data="kind") if kind == "spout"]


def _components_only(running: Any) -> Any:
    """The plan's components with no edges, for a dashboard given no topology."""
    import types

    import networkx as nx

    graph = nx.DiGraph(name=running.name)
    for component, tasks in running.plan.component_tasks().items():
        if not component.startswith("__"):
            graph.add_node(component, parallelism=len(tasks))
    return types.SimpleNamespace(graph=graph)
