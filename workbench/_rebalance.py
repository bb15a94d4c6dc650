"""The words of the dashboard's rebalance control (issue 22; docs/internals/rebalance.md):
what its box accepts, what the rebalance line says while one runs, and what it did, from
the ``rebalanced`` event's figures. Pure: :class:`workbench.Dashboard` asks, in a thread
of its own, and writes these to the line."""

from __future__ import annotations


def parse_rebalance(text: str) -> tuple[dict[str, int], int | None]:
    """What the rebalance box accepts: ``component=N ...`` and optionally
    ``containers=N``, as ``%topology rebalance`` does (the master checks the rest).

    >>> parse_rebalance(" count=4 split=1 "), parse_rebalance("count=2 containers=3")
    (({'count': 4, 'split': 1}, None), ({'count': 2}, 3))
    """
    asked: dict[str, int] = {}
    for word in text.split():
        key, eq, value = word.partition("=")
        if not eq or not key or not value.strip().isdigit():
            raise ValueError(f"{word!r}: give component=N (and containers=N), e.g. count=4")
        asked[key] = int(value)
    containers = asked.pop("containers", None)
    if not asked:
        raise ValueError("give component=N (and containers=N), e.g. count=4")
    return asked, containers


def moving(asked: dict[str, int], now: dict[str, int], containers: int | None) -> str:
    """What a rebalance about to run moves, in words, for the rebalance line.

    >>> moving({"count": 4, "split": 1}, {"count": 2, "split": 1}, None)
    'moving: count 2 → 4 tasks, split 1 → 1 tasks'
    >>> moving({"count": 2}, {}, 3)
    'moving: count ? → 2 tasks, to 3 containers (they restart)'
    """
    moves = [f"{c} {now.get(c, '?')} → {n} tasks" for c, n in asked.items()]
    if containers is not None:
        moves.append(f"to {containers} containers (they restart)")
    return "moving: " + ", ".join(moves)


def rebalanced(event: dict) -> str:
    r"""A rebalance's outcome in words, from its event's figures, for the rebalance line.

    >>> print(rebalanced({"seconds": 1.5, "paused_seconds": 0.04, "parallelism": {"c": 3},
    ...                   "containers": 1, "tasks_added": [7], "tasks_removed": [],
    ...                   "keys_moved": {"c": 58}}).replace("; ", ";\n"))
    done in 1.50 s (spouts paused 0.04 s): c → 3 tasks, 1 container(s);
    tasks added 7, removed none;
    keys moved: c 58
    """
    added, removed = event.get("tasks_added"), event.get("tasks_removed")
    tasks = ("containers restarted" if added is None else
             f"tasks added {_ids(added)}, removed {_ids(removed or [])}")
    moved = event.get("keys_moved")
    keys = ("none (no committed keyed state)" if moved is None else
            ", ".join(f"{c} {n}" for c, n in moved.items()) or "none (no keyed state)")
    changed = ", ".join(f"{c} → {n} tasks" for c, n in event["parallelism"].items())
    return (f"done in {event['seconds']:.2f} s (spouts paused {event['paused_seconds']:.2f} s)"
            f": {changed or 'no change'}, {event['containers']} container(s); {tasks}; "
            f"keys moved: {keys}")


def _ids(tasks: list[int]) -> str:
    return ", ".join(map(str, tasks)) or "none"
