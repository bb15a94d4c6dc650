"""Live controls of a running topology, checked before anything is sent: pure functions
shared by the client (which checks first, to fail in the caller's frame) and the master."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._constants import ACKER, AUTO


def check_max_spout_pending(value: Any) -> int | str | None:
    """A valid live ``max_spout_pending``: an int >= 1, None (no limit) or "auto".

    >>> check_max_spout_pending(100), check_max_spout_pending(None), check_max_spout_pending("auto")
    (100, None, 'auto')
    >>> check_max_spout_pending(0)
    Traceback (most recent call last):
    ...
    ValueError: max_spout_pending must be an int >= 1, None (no limit) or 'auto', not 0
    """
    if value is None or value == AUTO or (type(value) is int and value >= 1):
        return value
    raise ValueError(f"max_spout_pending must be an int >= 1, None (no limit) or {AUTO!r}, "
                     f"not {value!r}")


def spout_targets(component_tasks: Mapping[str, tuple[int, ...]], kinds: Mapping[int, Any],
                  component: str | None) -> dict[str, tuple[int, ...]]:
    """The components (and their tasks) a spout setting goes to: ``component``, or every
    user component when None. ``kinds`` (task -> reported kind) rules out a component
    known to be a bolt; one that has not reported yet is given the benefit of the doubt
    (a bolt ignores spout settings).

    >>> tasks = {"words": (1, 2), "count": (3,), "__acker": (4,)}
    >>> spout_targets(tasks, {3: "bolt"}, None)
    {'words': (1, 2), 'count': (3,)}
    >>> spout_targets(tasks, {3: "bolt"}, "count")
    Traceback (most recent call last):
    ...
    ValueError: component 'count' is a bolt; max_spout_pending applies to spouts (words)
    """
    users = {c: ts for c, ts in component_tasks.items() if c != ACKER}
    if component is None:
        return users
    spouts = ", ".join(c for c, ts in users.items()
                       if not all(kinds.get(t) == "bolt" for t in ts))
    if component not in users:
        raise ValueError(f"no component {component!r} in this topology (spouts: {spouts})")
    if all(kinds.get(t) == "bolt" for t in users[component]):
        raise ValueError(f"component {component!r} is a bolt; max_spout_pending applies "
                         f"to spouts ({spouts})")
    return {component: users[component]}
