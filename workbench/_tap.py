"""Taps for people: a component's output on one stream, or its input (what a sink receives),
tasks named ``split[3]``, and a precise reason when nothing was seen.

The runtime taps outputs only (``running.sample(component, stream)``: the tuples the
instances of ``component`` sent, each with the tasks it went ``to``). A component's input
is the outputs of its sources on the streams it subscribes to, kept when they went to one
of its tasks: no new request, no change in the instances.

A tap is named by a tuple: ``("out", component, stream)`` or ``("in", component, "")``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from runtime.options import STATS_INTERVAL

Tap = tuple[str, str, str]
DIRECTIONS = ("out", "in")


def names(component_tasks: Mapping[str, Iterable[int]]) -> dict[int, str]:
    """Task -> ``component[task]``, from a plan's ``component_tasks()``.

    >>> names({"split": (2, 3), "count": (4,)})
    {2: 'split[2]', 3: 'split[3]', 4: 'count[4]'}
    """
    return {t: f"{c}[{t}]" for c, ts in component_tasks.items() for t in ts}


def inputs(graph: Any, component: str) -> list[tuple[str, str]]:
    """The (source, stream) pairs ``component`` subscribes to, in the graph's order.

    >>> import networkx as nx
    >>> g = nx.DiGraph()
    >>> g.add_edge("split", "count", streams=["default"])
    >>> g.add_edge("src", "count", streams=["a", "b"])
    >>> inputs(g, "count")
    [('split', 'default'), ('src', 'a'), ('src', 'b')]
    """
    return [(u, s) for u, _, data in graph.in_edges(component, data=True)
            for s in (data.get("streams") or [data.get("stream", "default")])]


def choices(graph: Any, streams: Iterable[tuple[str, str]]) -> list[tuple[str, Tap | None]]:
    """The dropdown's options: every user stream's output, then every bolt's input."""
    users = [(c, s) for c, s in streams if not c.startswith("__") and not s.startswith("__")]
    out: list[tuple[str, Tap | None]] = [("(no tap)", None)]
    out += [(f"{c} [{s}] → out", ("out", c, s)) for c, s in users]
    out += [(f"→ {c} in (what it receives)", ("in", c, "")) for c in graph.nodes
            if inputs(graph, c)]
    return out


def received(tuples: Iterable[Mapping[str, Any]], tasks: Iterable[int]) -> list[dict]:
    """The tuples that went to one of ``tasks`` (a tuple sent to two subscribers is kept
    for the one that is ``tasks``' component), oldest first by send time.

    >>> got = received([{"to": [4], "time": 2.0}, {"to": [7], "time": 1.0},
    ...                 {"to": [5, 9], "time": 1.5}], tasks=(4, 5))
    >>> [t["time"] for t in got]
    [1.5, 2.0]
    """
    mine = set(tasks)
    kept = [dict(t, to=[x for x in t.get("to") or [] if x in mine]) for t in tuples
            if mine.intersection(t.get("to") or [])]
    return sorted(kept, key=lambda t: t.get("time") or 0)


def sample(running: Any, graph: Any, tap: Tap, n: int) -> list[dict]:
    """The newest ``n`` tuples of ``tap`` (one request per source stream for an input)."""
    direction, component, stream = tap
    if direction == "out":
        return running.sample(component, stream, n)
    tasks = running.plan.component_tasks().get(component, ())
    found: list[dict] = []
    for source, source_stream in inputs(graph, component):
        found += running.sample(source, source_stream, n)
    return received(found, tasks)[-n:]


def why_empty(snapshot: Mapping[str, Any], tap: Tap, graph: Any, since: float | None,
              now: float | None = None) -> str:
    """Why a tap shows nothing, in words: paused, nothing sent upstream, or not yet
    reported (with when the first tuples are due).

    >>> snap = {"state": "running", "config": {"stats_interval": 1.0}, "metrics": {
    ...     "window": "1m", "components": {"split": {"emitted_per_s": 0}}}}
    >>> why_empty(snap, ("out", "split", "default"), None, since=None)
    'split sent nothing on any stream in the last 1m'
    """
    if snapshot.get("state") == "paused":
        return "the spouts are paused: nothing flows (resume them)"
    components = (snapshot.get("metrics") or {}).get("components") or {}
    window = (snapshot.get("metrics") or {}).get("window", "1m")
    senders = [tap[1]] if tap[0] == "out" else [u for u, _ in inputs(graph, tap[1])]
    idle = [c for c in senders if (components.get(c) or {}).get("emitted_per_s") == 0]
    if senders and len(idle) == len(senders):
        return f"{', '.join(idle)} sent nothing on any stream in the last {window}"
    every = (snapshot.get("config") or {}).get(STATS_INTERVAL) or 1.0
    waited = (now or time.time()) - since if since else 0.0
    return (f"tapping for {waited:.0f} s: the instances report what they saw with their "
            f"statistics, every {every:g} s; the first tuples come with the next report")
