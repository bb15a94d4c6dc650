"""The dashboard's lists as HTML: the tapped tuples, the exceptions, the events grouped, the
changes of max spout pending, and one component's tasks. Pure functions of a snapshot (see
:mod:`workbench._panels`), like every panel.

A tap (``snapshot["tap"]``) is ``{"component", "stream", "tuples", "direction"}`` with,
optionally, ``"names"`` (task -> ``"split[3]"``) and ``"why"`` (why it is empty). An
input tap (``direction="in"``) shows what ``component`` receives.
"""

from __future__ import annotations

import datetime
import html
import linecache
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from . import _format
from ._style import style
from ._user_metrics import user_metrics_html

MISSING = _format.MISSING
EVENTS_SHOWN = 30  # raw events kept under each group
CHANGES_SHOWN = 10  # controls and tuner turns listed, newest first
CONTROLS = ("tuner", "max_spout_pending", "paused", "resumed", "recording_started",
            "recording_stopped")  # events a person caused (or the tuner): kept visible
HIDDEN = {"max_spout_pending": ("tasks",)}  # the master tells bolts too: their tasks mislead
EXIT_MEANING = {70: "crashed (user code raised)", 1: "crashed", -9: "killed (SIGKILL)",
                -15: "stopped (SIGTERM)"}  # instance exit codes (runtime/processes/instance.py)


# -- tap ------------------------------------------------------------------------------------
def tap_html(tap: Mapping[str, Any] | None) -> str:
    """The latest tuples on the tapped edge, newest first; when there are none, why."""
    if not tap:
        return "<small>no edge tapped</small>"
    tuples = list(tap.get("tuples") or [])[::-1]
    names = tap.get("names") or {}
    fields = next((t.get("fields") for t in tuples if t.get("fields")), None) or ["values"]
    head = "".join(f"<th>{_esc(f)}</th>" for f in fields)
    rows = "".join(_tap_row(t, len(fields), names) for t in tuples)
    why = tap.get("why") or "no tuples seen yet"
    empty = "" if tuples else f'<tr><td colspan="{len(fields) + 5}">{_esc(why)}</td></tr>'
    what = (f"into {_esc(tap.get('component'))} (what it receives)"
            if tap.get("direction") == "in" else
            f"{_esc(tap.get('component'))} [{_esc(tap.get('stream', 'default'))}]")
    return (f'<table class="tf-table"><caption>tap: {what}</caption>'
            f"<tr><th>time</th><th>from</th>{head}<th>to</th><th>root → edge</th>"
            f"<th>traced</th></tr>{rows}{empty}</table>")


def task_name(task: Any, names: Mapping[Any, str]) -> str:
    """``split[3]`` for task 3 of split, or the bare number when its component is unknown.

    >>> task_name(3, {3: "split[3]"}), task_name(9, {})
    ('split[3]', '9')
    """
    return names.get(task) or names.get(str(task)) or str(task)


def _tap_row(t: Mapping[str, Any], width: int, names: Mapping[Any, str]) -> str:
    values = list(t.get("values") or [])
    if len(values) != width:
        values = [values]
    cells = "".join(f"<td>{_esc(_short(v))}</td>" for v in values)
    to = t.get("to")
    to = ", ".join(task_name(x, names) for x in to) if isinstance(to, list | tuple) else to
    trace = t.get("trace")  # the traced tree it belongs to (workbench._lineage_tab)
    traced = (f'<td class="tf-traced" data-msg-id="{_esc(trace)}">tree of {_esc(trace)}</td>'
              if trace is not None else "<td></td>")
    return (f"<tr><td>{_esc(_clock(t.get('time'), ms=True))}</td>"
            f"<td>{_esc(task_name(t.get('task'), names))}</td>{cells}<td>{_esc(to)}</td>"
            f"{ids_cell(t.get('ids'))}{traced}</tr>")


def ids_cell(ids: Any) -> str:
    """A tapped tuple's ``{root: edge}`` ids as a cell: the last 6 hex digits of each
    (the whole ids in ``title`` and ``data-roots``); empty for an untracked tuple.

    >>> ids_cell({0x8000000000abcdef: 0x123456789})[-22:]
    '…abcdef → …456789</td>'
    >>> ids_cell(None)
    '<td class="tf-ids"></td>'
    """
    if not isinstance(ids, dict) or not ids:
        return '<td class="tf-ids"></td>'
    pairs = [(int(r), int(e)) for r, e in ids.items()]
    full = ", ".join(f"{r:x} → {e:x}" for r, e in pairs)
    short = ", ".join(f"…{r & 0xFFFFFF:06x} → …{e & 0xFFFFFF:06x}" for r, e in pairs)
    roots = " ".join(str(r) for r, _ in pairs)
    return f'<td class="tf-ids" data-roots="{roots}" title="{full}">{short}</td>'


# -- exceptions -----------------------------------------------------------------------------
def exception_key(record: Mapping[str, Any]) -> str:
    """What tells two exception records apart (the master groups by component and error)."""
    return f"{record.get('component')}\x00{record.get('error')}"


def exception_line(record: Mapping[str, Any]) -> str:
    """The part of an exception that changes: how many, in which tasks, when last."""
    return (f"<b>{_esc(record.get('component'))}</b> ×{_esc(record.get('count', 1))} "
            f"<small>(tasks {_esc(record.get('tasks', MISSING))}, last "
            f"{_esc(_clock(record.get('last')))}{', fatal' if record.get('fatal') else ''})"
            "</small>")


def exception_details(record: Mapping[str, Any], name: str = "NAME") -> str:
    """The part that does not change: the error, its traceback behind a click
    (``<details>``, no script), and where the whole log is."""
    log = (f"%topology logs {name} {record.get('component')} {record.get('task')}"
           if record.get("task") is not None else "")
    tail = f"<small>the instance's whole log: <code>{_esc(log)}</code></small>" if log else ""
    traceback = with_sources(str(record.get("traceback", "")), linecache.getline, cell_label)
    return (f"<details><summary>{_esc(record.get('error'))}</summary>"
            f"<pre>{_esc(traceback)}</pre>{tail}</details>")


FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?P<rest>.*)$')


def with_sources(text: str, getline: Callable[[str, int], str],
                 label: Callable[[str], str | None] = lambda _: None) -> str:
    r"""A traceback made in an instance, read where the code was written: each frame
    without its source line gets it from ``getline`` (the kernel's linecache holds every
    cell it ran, which the instance cannot read), and a cell's temporary file is named
    as IPython names it (``Cell In[7]``) by ``label``.

    >>> tb = 'Traceback:\n  File "/tmp/ipykernel_9/ab.py", line 2, in process\nKeyError: 1'
    >>> print(with_sources(tb, lambda f, n: "    x = d[1]\n", lambda f: "Cell In[7]"))
    Traceback:
      Cell In[7], line 2, in process
        x = d[1]
    KeyError: 1
    """
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        frame = FRAME.match(line)
        if frame is None:
            out.append(line)
            continue
        indent, file, number = frame["indent"], frame["file"], int(frame["line"])
        named = label(file)
        out.append(f"{indent}{named}, line {number}{frame['rest']}" if named else line)
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if following.startswith(indent + "  ") and not FRAME.match(following):
            continue  # the instance could read the source: it is there already
        source = getline(file, number).strip()
        if source:
            out.append(f"{indent}  {source}")
    return "\n".join(out)


def cell_label(filename: str) -> str | None:
    """``Cell In[7]`` for the file IPython compiled cell 7 into, in this kernel; None
    elsewhere (IPython is not imported for this: only asked if it is running)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    named = getattr(getattr(shell, "compile", None), "format_code_name", lambda _: None)(filename)
    return " ".join(named) if named else None


def exceptions_html(snapshot: Mapping[str, Any]) -> str:
    """One entry per distinct error (already grouped by the master), newest first."""
    records = snapshot.get("exceptions") or []
    name = snapshot.get("name") or "NAME"
    items = "".join(f'<div class="tf-exception">{exception_line(r)}'
                    f"{exception_details(r, name)}</div>" for r in reversed(records))
    return f"<b>exceptions</b> ({len(records)}){items or '<div><small>none</small></div>'}"


# -- events ---------------------------------------------------------------------------------
def group_events(events: list[Mapping[str, Any]]) -> list[dict]:
    """Events grouped by kind and component: ``{"kind", "component", "count", "last",
    "events"}`` (the newest :data:`EVENTS_SHOWN` of the group), the newest group first.

    >>> groups = group_events([{"kind": "restarted", "component": "split", "time": 1},
    ...                        {"kind": "activated", "time": 2},
    ...                        {"kind": "restarted", "component": "split", "time": 3}])
    >>> [(g["kind"], g["component"], g["count"], g["last"]) for g in groups]
    [('restarted', 'split', 2, 3), ('activated', None, 1, 2)]
    """
    groups: dict[tuple, dict] = {}
    for e in events:
        key = (e.get("kind"), e.get("component"))
        group = groups.setdefault(key, {"kind": key[0], "component": key[1], "count": 0,
                                        "last": None, "events": []})
        group["count"] += 1
        group["last"] = e.get("time")
        group["events"] = (group["events"] + [e])[-EVENTS_SHOWN:]
    order = {key: i for i, key in enumerate(_last_seen(events))}
    return sorted(groups.values(), key=lambda g: order[(g["kind"], g["component"])])


def _last_seen(events: list[Mapping[str, Any]]) -> list[tuple]:
    """(kind, component) keys, the one seen most recently first."""
    return list(dict.fromkeys((e.get("kind"), e.get("component")) for e in reversed(events)))


def events_html(snapshot: Mapping[str, Any]) -> str:
    """The events grouped (a count per kind and component; each group opens on click to
    its latest events), and, always in view, the controls and the tuner's turns."""
    events = list(snapshot.get("events") or [])
    groups = "".join(_group_html(g) for g in group_events(events))
    return (f"{changes_html(snapshot, title='controls and tuner')}"
            f"<b>events</b> <small>({len(events)}, grouped)</small>"
            f'<div class="tf-groups">{groups or "<div>none</div>"}</div>')


def _group_html(group: Mapping[str, Any]) -> str:
    who = f" {group['component']}" if group["component"] else ""
    items = "".join(f"<li>{_esc(_clock(e.get('time')))} {_esc(event_text(e))}</li>"
                    for e in reversed(group["events"]))
    return (f'<details class="tf-event-{_esc(group["kind"])}"><summary><b>×{group["count"]}'
            f"</b> {_esc(group['kind'])}{_esc(who)} <small>last "
            f"{_esc(_clock(group['last']))}</small></summary><ul>{items}</ul></details>")


def changes_html(snapshot: Mapping[str, Any], title: str = "changes") -> str:
    """The controls people used and the tuner's turns, newest first."""
    changes = [e for e in snapshot.get("events") or [] if e.get("kind") in CONTROLS]
    turns = "".join(f"<li>{_esc(_clock(e.get('time')))} {_esc(event_text(e))}</li>"
                    for e in reversed(changes[-CHANGES_SHOWN:])) or "<li>none yet</li>"
    return f'<small>{_esc(title)}:</small><ul class="tf-tuner">{turns}</ul>'


def event_text(event: Mapping[str, Any]) -> str:
    """One event in words; an exit code says what it means.

    >>> event_text({"kind": "restarted", "task": 3, "reason": "exited with code 70"})
    'restarted: task=3, reason=crashed (user code raised), exit code 70'
    """
    hidden = HIDDEN.get(event.get("kind"), ()) + ("kind", "time")
    rest = ", ".join(f"{k}={_reason(v) if k == 'reason' else v}" for k, v in event.items()
                     if k not in hidden)
    return f"{event.get('kind')}" + (f": {rest}" if rest else "")


def _reason(text: Any) -> Any:
    for code, meaning in EXIT_MEANING.items():
        if text in (f"exited with code {code}", f"killed by signal {-code}"):
            return f"{meaning}, exit code {code}"
    return text


# -- one component's tasks ------------------------------------------------------------------
TASK_COLUMNS = (("emitted/s", "emitted_per_s", "rate"), ("executed/s", "executed_per_s", "rate"),
                ("capacity", "capacity", "share"), ("execute", "execute_latency_ms", "ms"),
                ("queued", "queued_tuples", "count"), ("failed", "failed", "count"),
                ("cpu %", "cpu_percent", "cpu"), ("restarts", "restarts", "whole"))


def tasks_html(snapshot: Mapping[str, Any], component: str | None) -> str:
    """Each task of ``component``: rates, capacity, latency, queue, CPU, restarts (from
    ``metrics()["instances"]``), with pid, state and container (from ``statistics()``)."""
    if not component:
        return "<small>choose a component to see its tasks</small>"
    instances = (snapshot.get("metrics") or {}).get("instances") or {}
    stats = {s.get("task"): s for s in snapshot.get("stats") or []}
    mine = sorted((int(t), m) for t, m in instances.items()
                  if isinstance(m, Mapping) and m.get("component") == component)
    head = "".join(f"<th>{_esc(h)}</th>" for h, _, _ in TASK_COLUMNS)
    rows = "".join(_task_row(component, t, m, stats.get(t) or {}) for t, m in mine)
    rows = rows or f'<tr><td colspan="{len(TASK_COLUMNS) + 4}">no task reported</td></tr>'
    return (f'<div class="tf-scroll"><table class="tf-table"><tr><th>task</th>{head}'
            f"<th>pid</th><th>container</th><th>state</th></tr>{rows}</table></div>"
            + user_metrics_html(snapshot, component))


def _task_row(component: str, task: int, m: Mapping[str, Any], s: Mapping[str, Any]) -> str:
    cells = "".join(f"<td>{_format.cell(m.get(key), kind)}</td>" for _, key, kind in TASK_COLUMNS)
    return (f'<tr data-task="{task}"><td class="tf-name">{_esc(component)}[{task}]</td>{cells}'
            f"<td>{_format.cell(s.get('pid'), 'id')}</td><td>{_esc(s.get('container', MISSING))}"
            f"</td><td>{_esc(m.get('state') or s.get('state') or MISSING)}</td></tr>")


# -- helpers --------------------------------------------------------------------------------
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


class TupleTable:
    """Tuples from ``running.sample(...)`` as a table: HTML in a notebook, text elsewhere.

    >>> TupleTable("src", "default", [{"values": [1, "a"], "fields": ["n", "w"],
    ...                                "task": 3, "to": [4], "time": None}])
    src [default]: 1 tuple
    task 3 -> [4]: n=1 w='a'
    """

    def __init__(self, component: str, stream: str, tuples: list[dict],
                 names: Mapping[Any, str] | None = None, direction: str = "out") -> None:
        self.component, self.stream, self.tuples = component, stream, tuples
        self.names, self.direction = dict(names or {}), direction

    def _repr_html_(self) -> str:
        tap = {"component": self.component, "stream": self.stream, "tuples": self.tuples,
               "names": self.names, "direction": self.direction}
        return f'{style()}<div class="tupleflow-tap">{tap_html(tap)}</div>'

    def __repr__(self) -> str:
        head = f"{self.component} [{self.stream}]: {len(self.tuples)} tuple" + \
            ("s" * (len(self.tuples) != 1))
        lines = [f"task {t.get('task')} -> {t.get('to')}: " + " ".join(
            f"{f}={v!r}" for f, v in zip(t.get("fields") or [], t.get("values") or []))
            for t in reversed(self.tuples)]
        return "\n".join([head, *lines])
