"""``%%topology NAME [options]`` builds and shows a topology; ``%topology SUB NAME ...``
submits and inspects it. Each subcommand reads its words and makes one call (``submit``
also shows the live dashboard). A new subcommand is a ``USAGE`` entry and a ``_<name>``
method taking the words as arguments.

Bad arguments raise IPython's ``UsageError`` (shown as one line, no traceback). A failure
of the topology itself (dead, not answering, refusing a value) is printed to stderr: a
magic never lets it escape.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import inspect
import shlex
import sys
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

import workbench
from runtime import Topology, attach
from runtime.options import check_max_spout_pending, check_n, check_trace

from ._registry import Registry

# subcommand -> its arguments after the subcommand (the usage line)
USAGE = {
    "submit": "NAME [--detached] [--no-dashboard] [key=value ...]",
    "attach": "NAME_OR_RUN_DIR [--no-dashboard]",
    "kill": "NAME",
    "list": "",
    "status": "NAME",
    "plan": "NAME",
    "exceptions": "NAME",
    "explain": "NAME",
    "logs": "NAME COMPONENT TASK",
    "pause": "NAME",
    "resume": "NAME",
    "tune": "NAME VALUE [COMPONENT]",
    "trace": "NAME RATE",
    "tap": "NAME COMPONENT [STREAM] [n=20]",
    "dashboard": "NAME [interval=1.0]",
    "record": "NAME COMPONENT [STREAM]",
    "stop_recording": "NAME COMPONENT [STREAM]",
    "profile": "NAME COMPONENT [SECONDS] [task=N]",
    "lineage": "NAME MSG_ID",
    "rebalance": "NAME COMPONENT=N ... [containers=N]",
}
DETACHED = "--detached"  # submit flag: the topology outlives the kernel
NO_DASHBOARD = "--no-dashboard"  # submit flag: do not show the live dashboard
FLAGS = (DETACHED, NO_DASHBOARD)
TAP_ROWS, TAP_WAIT = 20, 3.0  # %topology tap: default rows; seconds to wait for a first tuple


@magics_class
class TopologyMagics(Magics):
    """The ``topology`` line and cell magics, and the registry of what they submitted."""

    def __init__(self, shell) -> None:
        super().__init__(shell)
        self.registry = Registry()
        self.parsed: dict[str, workbench.ParsedTopology] = {}  # NAME -> its last cell
        self.handles = HandleViews()

    @line_cell_magic
    def topology(self, line: str, cell: str | None = None) -> Any:
        """``%%topology NAME [options]`` (docs/topology-magic.md) or ``%topology SUB ...``."""
        return self._line(line) if cell is None else self._cell(line, cell)

    # -- the cell -------------------------------------------------------------------------
    def _cell(self, line: str, cell: str) -> None:
        try:
            parsed = workbench.parse_topology(line, cell, self.shell.user_ns)
        except workbench.TopologySyntaxError as err:
            print(err, file=sys.stderr)
            return
        self.parsed[parsed.name] = parsed
        self.shell.user_ns[parsed.name] = parsed.topology
        display(workbench.TopologyView(parsed.topology))

    # -- the line -------------------------------------------------------------------------
    def _line(self, line: str) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as err:
            raise UsageError(f"%topology: {err}") from None
        if not words:
            raise UsageError(f"%topology: give a subcommand: {', '.join(USAGE)}")
        sub, args = words[0], words[1:]
        if sub not in USAGE:
            close = difflib.get_close_matches(sub, USAGE, n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            raise UsageError(f"%topology: unknown subcommand `{sub}`{hint}; the subcommands "
                             f"are {', '.join(USAGE)}")
        handler = getattr(self, f"_{sub}")
        try:
            inspect.signature(handler).bind(*args)
        except TypeError:  # too few or too many words
            raise UsageError(f"usage: %topology {sub} {USAGE[sub]}".rstrip()) from None
        try:
            return handler(*args)
        except UsageError:
            raise
        except Exception as err:  # the topology failed, not the kernel: report, go on
            print(f"%topology {sub}: {type(err).__name__}: {err}", file=sys.stderr)
            return None

    def _submit(self, name: str, *options: str) -> Any:
        detached = DETACHED in options
        config = dict(_option(o) for o in options if o not in FLAGS)
        entry = self.registry.get(name)
        if entry and entry.running.alive:
            raise UsageError(f"%topology: `{name}` is already running; "
                             f"`%topology kill {name}` first")
        submittable = self._submittable(name)
        running = submittable.submit(detached=detached, **config)
        self.registry.add(name, running, detached=detached,
                          topology=getattr(submittable, "topology", submittable))
        return self._bind(name, running, "submit", options)

    def _attach(self, where: str, *options: str) -> Any:
        """A handle on a running detached topology, by name or run directory (submitted
        from another kernel, or from this one before a restart): ``runtime.attach``.
        Listed as detached (the kernel's end leaves it running); ``kill`` ends it."""
        if set(options) - {NO_DASHBOARD}:
            raise UsageError(f"usage: %topology attach {USAGE['attach']}")
        running = attach(where)
        entry = self.registry.get(running.name)
        if entry and entry.running.alive:
            raise UsageError(f"%topology: `{running.name}` is already running here")
        self.registry.add(running.name, running, detached=True)
        return self._bind(running.name, running, "attach", options)

    def _bind(self, name: str, running: Any, sub: str, options: tuple[str, ...]) -> Any:
        """Bind NAME_running, and show the dashboard unless told not to."""
        self.shell.user_ns[f"{name}_running"] = running
        if NO_DASHBOARD not in options:
            try:
                self._dashboard(name)
            except Exception as err:  # the topology runs: say why there is no view, go on
                print(f"%topology {sub}: no dashboard: {type(err).__name__}: {err}",
                      file=sys.stderr)
        return running

    def _submittable(self, name: str) -> Any:
        """The ParsedTopology of NAME's cell (its containers), or NAME's plain Topology."""
        obj = self.shell.user_ns.get(name)
        parsed = self.parsed.get(name)
        if parsed is not None and obj is parsed.topology:
            return parsed
        if isinstance(obj, Topology | workbench.ParsedTopology):
            return obj
        names = [k for k, v in self.shell.user_ns.items()
                 if isinstance(v, Topology) and not k.startswith("_")]
        raise UsageError(f"%topology: `{name}` is not a topology{_hint(name, names)}")

    def _running(self, name: str) -> Any:
        entry = self.registry.get(name)
        if entry is None:
            raise UsageError(f"%topology: no submitted topology `{name}`"
                             f"{_hint(name, self.registry.entries)}; see `%topology list`")
        return entry.running

    def _kill(self, name: str) -> None:
        self._running(name)
        entry = self.registry.pop(name)
        entry.running.kill()
        for board in entry.dashboards:  # in this cell, so that their last picture lands now
            board.wait_stopped()
        self.handles.update()
        print(f"killed {name}")

    def _dashboard(self, name: str, *options: str) -> Any:
        """Show a (new) live dashboard of NAME: ``workbench.Dashboard(running).show()``."""
        running = self._running(name)
        settings = dict(_option(o, "dashboard") for o in options)
        unknown = set(settings) - {"interval"}
        if unknown:
            raise UsageError(f"usage: %topology dashboard {USAGE['dashboard']} "
                             f"(unknown option `{sorted(unknown)[0]}`)")
        interval = settings.get("interval", 1.0)
        if not isinstance(interval, int | float) or isinstance(interval, bool) or interval <= 0:
            raise UsageError(f"%topology dashboard: interval is a number of seconds > 0, "
                             f"not `{interval}`")
        entry = self.registry.get(name)
        board = workbench.Dashboard(running, interval=float(interval), topology=entry.topology)
        entry.dashboards.append(board)
        board.on_stop.append(self.handles.update)  # its handle's text says how it ended
        board.show()

    def _tap(self, name: str, component: str, *rest: str) -> None:
        """The latest tuples NAME's COMPONENT sent on STREAM: ``running.sample(...)``; for
        a component that sends nothing (a sink) and no STREAM given, what it receives."""
        running = self._running(name)
        stream, rows = _tap_args(rest)
        topology = self.registry.get(name).topology
        tap = ("out", component, stream)
        if not rest or rest[0].startswith("n="):
            tap = _default_tap(running, topology, component)
        try:
            tuples = _wait_for_tuples(running, topology, tap, rows)
        except ValueError as err:  # unknown component or stream: the user's words
            raise UsageError(f"%topology tap: {err}") from None
        names = workbench.task_names(running.plan.component_tasks())
        if not tuples:
            print(_silent(running, topology, tap))
            return
        display(workbench.TupleTable(component, stream, tuples, names, tap[0]))

    def _record(self, name: str, component: str, stream: str = "default") -> None:
        """Record NAME's COMPONENT's STREAM to Parquet: ``running.record(...)``."""
        running = self._running(name)
        try:
            running.record(component, stream)
        except ValueError as err:  # unknown component or stream: the user's words
            raise UsageError(f"%topology record: {err}") from None
        print(f"recording {component} [{stream}] to {running.recording_dir(component, stream)}"
              f"; read it with {name}_running.to_spark({component!r}, {stream!r})")

    def _stop_recording(self, name: str, component: str, stream: str = "default") -> None:
        """Stop recording: ``running.stop_recording(...)``."""
        try:
            self._running(name).stop_recording(component, stream)
        except ValueError as err:
            raise UsageError(f"%topology stop_recording: {err}") from None
        print(f"stopped recording {component} [{stream}]")

    def _profile(self, name: str, component: str, *rest: str) -> Any:
        """A flame graph of NAME's COMPONENT: ``running.profile(component, seconds,
        task)``, returned so the cell shows it (``_.folded`` is the data)."""
        running = self._running(name)
        seconds, task = _profile_args(rest)
        try:
            return running.profile(component, seconds, task)
        except ValueError as err:  # unknown component or task, bad seconds: the user's words
            raise UsageError(f"%topology profile: {err}") from None

    def _lineage(self, name: str, msg_id: str) -> None:
        """The tree of one traced spout tuple: ``running.lineage(msg_id)``, drawn. MSG_ID
        is read as a Python literal (``42``, ``'a b'``; a bare word is a string)."""
        running = self._running(name)
        wanted = _literal(msg_id)
        trace = running.lineage(wanted)
        if trace is None and wanted != msg_id:  # "42" may be a string msg_id too
            trace = running.lineage(msg_id)
        if trace is None:
            print(f"{name}: msg_id {wanted!r} was not traced (or its trace was dropped); "
                  f"trace more with `running.set_trace(rate)`")
            return
        display(workbench.TraceView(trace))

    def _list(self) -> None:
        self.handles.update()
        if not self.registry.entries:
            print("no topologies submitted from this kernel")
        for name, entry in self.registry.entries.items():
            detached = " (detached)" if entry.detached else ""
            print(f"{name}: {_state(entry.running)}{detached}  {entry.running.run_dir}")

    def _status(self, name: str) -> dict:
        return self._running(name).status()

    def _plan(self, name: str) -> None:
        print(self._running(name).plan)

    def _exceptions(self, name: str) -> None:
        records = self._running(name).exceptions()
        if not records:
            print(f"no exceptions in {name}")
        for r in records:
            print(f"{r['component']} ×{r['count']} (tasks {r['tasks']}): {r['error']}\n"
                  f"{r['traceback']}")

    def _explain(self, name: str) -> None:
        """Why it is slow: ``running.explain()``'s findings, most important first."""
        found = self._running(name).explain()
        if not found:
            print(f"{name}: nothing stands out (no bolt at capacity, no skew, no timeouts)")
        for rank, finding in enumerate(found, start=1):
            print(f"{rank}. {finding}")

    def _logs(self, name: str, component: str, task: str) -> None:
        if not task.isdigit():
            raise UsageError(f"usage: %topology logs {USAGE['logs']} (TASK is a task number)")
        print(self._running(name).logs(component, int(task)))

    def _pause(self, name: str) -> None:
        done = self._running(name).pause()
        print(f"paused {name}" if done else f"{name} was already paused")

    def _resume(self, name: str) -> None:
        done = self._running(name).resume()
        print(f"resumed {name}" if done else f"{name} was not paused")

    def _rebalance(self, name: str, *words: str) -> None:
        """``%topology rebalance NAME count=4 split=1 [containers=3]``: one call of
        ``running.rebalance``; the values must be integers (checked by the master)."""
        options = dict(_option(w, "rebalance") for w in words)
        containers = options.pop("containers", None)
        if not options:
            raise UsageError(f"usage: %topology rebalance {USAGE['rebalance']}")
        event = self._running(name).rebalance(options, containers=containers)
        print(f"rebalanced {name} in {event['seconds']:.2f} s (spouts paused "
              f"{event['paused_seconds']:.2f} s): {event['parallelism']}, "
              f"{event['containers']} container(s)")

    def _tune(self, name: str, value: str, component: str | None = None) -> None:
        running = self._running(name)
        tasks = running.set_max_spout_pending(_pending(value), component)
        topology = self.registry.get(name).topology
        names = workbench.task_names(running.plan.component_tasks())
        if topology is not None:  # the spouts' tasks only: bolts are told too, and ignore it
            graph = getattr(topology, "topology", topology).graph
            names = {t: n for t, n in names.items()
                     if graph.nodes.get(n.split("[")[0], {}).get("kind") == "spout"}
            tasks = [t for t in tasks if t in names]
        told = ", ".join(names.get(t, str(t)) for t in tasks) or "no spout task yet"
        print(f"max_spout_pending={value} sent to {told}")

    def _trace(self, name: str, rate: str) -> None:
        """Trace this fraction of the spout tuples of ``name`` from now on (0: off)."""
        try:
            value = check_trace(rate)
        except ValueError as err:
            raise UsageError(f"%topology trace: {err}") from None
        tasks = self._running(name).set_trace(value)
        print(f"trace={value:g} sent to {len(tasks)} task(s) of {name}"
              + ("" if value else " (tracing off)"))


class HandleViews:
    """Where this kernel showed a :class:`runtime.RunningTopology` (as a cell's result,
    ``<RunningTopology 'demo' running ...>``): each is a display with an id, redrawn when
    the topology stops, so the text under a dashboard never says "running" after a kill.
    Registered for the type by ``load_ipython_extension``."""

    def __init__(self) -> None:
        self.shown: list[tuple[Any, Any]] = []  # (handle, its display)

    def show(self, running: Any) -> None:
        self.shown.append((running, display(_Text(repr(running)), display_id=True)))

    def update(self) -> None:
        for running, view in self.shown:
            with contextlib.suppress(Exception):  # the frontend may be gone
                view.update(_Text(repr(running)))


class _Text:
    """Plain text as a display (no HTML: what the handle's repr shows)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        return {"text/plain": self.text}


def _option(word: str, sub: str = "submit") -> tuple[str, Any]:
    """``key=value`` with the value read as a Python literal (a bare word is a string)."""
    key, eq, text = word.partition("=")
    if not eq or not key:
        raise UsageError(f"usage: %topology {sub} {USAGE[sub]} (got `{word}`)")
    return key, _literal(text)


def _literal(word: str) -> Any:
    """A word as a Python literal, or the word itself (a bare word is a string).

    >>> _literal("42"), _literal("'a b'"), _literal("cow")
    (42, 'a b', 'cow')
    """
    try:
        return ast.literal_eval(word)
    except (ValueError, SyntaxError):
        return word


def _tap_args(rest: tuple[str, ...]) -> tuple[str, int]:
    """``[STREAM] [n=ROWS]`` -> (stream, rows); the stream defaults to ``default``."""
    words = list(rest)
    rows = TAP_ROWS
    if words and words[-1].startswith("n="):
        text = words.pop()[2:]
        try:
            rows = check_n(text)  # the one reading of a tap's n (runtime.model.controls)
        except ValueError:
            raise UsageError(f"%topology tap: n is a number of tuples from 1 to 10000, "
                             f"not `{text}`") from None
    if len(words) > 1 or any("=" in w for w in words):
        raise UsageError(f"usage: %topology tap {USAGE['tap']}")
    return (words[0] if words else "default"), rows


def _profile_args(rest: tuple[str, ...]) -> tuple[float, int | None]:
    """``[SECONDS] [task=N]`` -> (seconds, task); 2 seconds and every task by default."""
    seconds, task = 2.0, None
    for word in rest:
        key, eq, text = word.partition("=")
        try:
            if eq and key == "task":
                task = int(text)
            elif not eq:
                seconds = float(word)
            else:
                raise ValueError(word)
        except ValueError:
            raise UsageError(f"usage: %topology profile {USAGE['profile']} "
                             f"(got `{word}`)") from None
    return seconds, task


def _pending(value: str) -> int | str | None:
    """``auto``, ``none`` or an integer >= 1, parsed by the one validator of the setting
    (``runtime.model.controls.check_max_spout_pending``, as the dashboard's box is)."""
    try:
        return check_max_spout_pending(value)
    except ValueError as err:
        raise UsageError(f"%topology tune: {err}") from None


def _hint(word: str, choices) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _state(running: Any) -> str:
    """``running``/``starting`` (``paused``) as the master says; once it has stopped,
    ``killed`` (by a handle, or its master stopped cleanly) or ``crashed`` with what the
    exit code says."""
    if getattr(running, "killed", False) or not running.alive:
        return ended(running)
    try:
        status = running.status()
    except Exception as err:  # dying while we ask
        return f"not answering ({type(err).__name__})"
    return status.get("state", "?") + (" paused" if status.get("paused") else "")


def ended(running: Any) -> str:
    """How a stopped topology ended, in words.

    >>> class Gone: killed, alive, exit_code = False, False, 1
    >>> ended(Gone())
    'crashed (its master exited with code 1)'
    """
    if getattr(running, "killed", False) or getattr(running, "exit_code", 0) == 0:
        return "killed"
    return f"crashed (its master exited with code {running.exit_code})"


def _default_tap(running: Any, topology: Any, component: str) -> tuple:
    """What ``%topology tap NAME COMPONENT`` with no STREAM looks at: the component's
    default stream, or, for a component nobody subscribes to (a sink: what it sends goes
    nowhere), what it receives."""
    graph = getattr(topology, "topology", topology).graph if topology is not None else None
    if graph is None or component not in graph or graph.out_degree(component) \
            or not graph.in_degree(component):
        return ("out", component, "default")
    return ("in", component, "")


def _wait_for_tuples(running: Any, topology: Any, tap: tuple, rows: int) -> list:
    """Sample ``tap`` until some tuple comes or :data:`TAP_WAIT` seconds pass."""
    if tap[0] == "out":
        return running.sample(tap[1], tap[2], rows, wait=True, timeout=TAP_WAIT)
    graph = getattr(topology, "topology", topology).graph
    deadline = time.monotonic() + TAP_WAIT
    while True:
        found = workbench.sample_tap(running, graph, tap, rows)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)  # a poll interval, not synchronisation: the tap reports when it can


def _silent(running: Any, topology: Any, tap: tuple) -> str:
    """Why a tap saw nothing, in words (see ``workbench.tap_why_empty``)."""
    graph = getattr(topology, "topology", topology).graph if topology is not None else None
    try:
        snap = {"state": _state(running).split()[-1], "metrics": running.metrics("1m"),
                "config": {"stats_interval": running.plan.config.get("stats_interval")}}
    except Exception:  # dying while we ask: say only what we know
        snap = {}
    where = f"{tap[1]} [{tap[2]}]" if tap[0] == "out" else f"the input of {tap[1]}"
    why = workbench.tap_why_empty(snap, tap, graph, since=None)
    return f"no tuples seen on {where} in {TAP_WAIT:g} s: {why}"
