"""A windowed bolt's windows as its tasks report them, and summed for its component
(``running.metrics()``; docs/windows.md, "Seeing windows live").

A component's watermark is its slowest task's: the lowest, or None while any task has
none yet (that task still holds every window open). Open windows, held and late tuples
add up; the oldest open window is the earliest of any task.

>>> combine_windows([{"watermark": 9_000, "open_windows": 2, "oldest_window_start": 0,
...                   "open_tuples": 4, "late_tuples": 1, "evaluated": 3},
...                  {"watermark": 7_000, "open_windows": 1, "oldest_window_start": 5_000,
...                   "open_tuples": 2, "late_tuples": 0, "evaluated": 1}])
{'watermark': 7000, 'open_windows': 3, 'oldest_window_start': 0, 'open_tuples': 6, \
'late_tuples': 1, 'evaluated': 4}
>>> combine_windows([{"watermark": None, "open_windows": None}])["watermark"] is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SUMMED = ("open_tuples", "late_tuples", "evaluated")


def combine_windows(reports: Iterable[Mapping[str, Any] | None]) -> dict | None:
    """The component's windows from its tasks' reports (None: no task is windowed)."""
    known = [r for r in reports if r]
    if not known:
        return None
    out: dict[str, Any] = {"watermark": _lowest([r.get("watermark") for r in known]),
                           "open_windows": _total([r.get("open_windows") for r in known]),
                           "oldest_window_start": _earliest(
                               [r.get("oldest_window_start") for r in known])}
    out.update({key: sum(r.get(key) or 0 for r in known) for key in SUMMED})
    return out


def _lowest(values: list) -> int | None:
    """The minimum, or None when any value is None (a task with no watermark yet)."""
    return None if any(v is None for v in values) else min(values)


def _total(values: list) -> int | None:
    """The sum, or None when no task can count its windows (Count or processing time)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _earliest(values: list) -> int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None
