"""Keyed state follows its keys through a rebalance (issue 22; docs/internals/rebalance.md).

A StatefulBolt task's committed state is a list of ``[key, value]`` pairs. A key belongs to
one of its component's key groups (as many as its ``max_parallelism``, 128 by default:
:func:`~runtime.groupings.key_group` of its fields-grouping hash), and the groups are dealt
to the tasks in contiguous ranges (:func:`~runtime.groupings.key_task`), exactly as the
fields grouping deals the tuples.
So with the topology stopped, the committed checkpoint is copied into a new one in which
each rebalanced component's pairs are merged and split again over its new tasks (and a
windowed component's open windows, each held tuple to the task its key goes to now:
``runtime.windows.split_windows``, docs/internals/window-rebalance.md); every
task then restores its share from that checkpoint as it starts, and receives from the
fields grouping exactly the keys it holds. A rebalanced partitioned spout's positions
(``{partition: offset}`` per task) are merged, and every new task gets the whole map: it
restores the partitions it owns now, so each partition's position moves with it.

This assumes what a fields-grouped counter does: the state key is the grouping's key (the
field's value, or a tuple of the fields' values). A key the grouping never produces lands
on the task its hash says, which is still one task, but not necessarily the one its
tuples reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.groupings import KEY_GROUPS, field_hash, key_task
from runtime.windows import split_windows

from ._protocol import source_key, state_key, window_key


def split(pairs: list, n: int, groups: int = KEY_GROUPS) -> list[list]:
    """``[key, value]`` pairs dealt to ``n`` tasks as the fields grouping deals their keys
    (through ``groups`` key groups).

    >>> [len(part) for part in split([[f"k{i}", i] for i in range(100)], 3)]
    [26, 34, 40]
    """
    parts: list[list] = [[] for _ in range(n)]
    for key, value in pairs:
        parts[key_task(field_hash(_hashable(key)), n, groups)].append([key, value])
    return parts


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key  # a tuple key is stored as a list


def repartition(store, counts: Mapping[str, int],
                groups: Mapping[str, int] | None = None, *,
                plan_epoch: int | None = None) -> dict[str, int] | None:
    """Write a new checkpoint from the committed one with the state of each component in
    ``counts`` split over its new number of tasks, through its number of key groups in
    ``groups`` (its max_parallelism; ``KEY_GROUPS`` if not given), and commit it. Returns
    component -> the number of keys moved to a different task index (only components with
    saved state), or None when nothing was committed yet (the new tasks then start empty,
    as would the old); for a windowed component (not stateful too) the number of held
    tuples moved. ``plan_epoch``, the plan split for, is recorded in the commit (``plan``),
    as each checkpoint records the plan it was taken on: a checkpoint task that starts on
    a newer plan than that knows the split is still to come. Only with the topology's
    tasks stopped or taking part in no checkpoint: nothing else may write the store
    meanwhile."""
    committed = store.committed()
    if committed is None:
        return None
    old, info = committed
    snap = store.load_prefix(old, "")
    cid = store.next("checkpoint")
    # "state/<component>/" and "window/<component>/" are split below
    prefixes = tuple(key(c, 0)[:-1] for c in counts for key in (state_key, window_key))
    sources = {c: _positions(snap, c) for c in counts}
    sources = {c: merged for c, merged in sources.items() if merged is not None}
    for key, value in snap.items():
        if not key.startswith(prefixes + tuple(source_key(c, 0)[:-1] for c in sources)):
            store.save(cid, key, value)
    for component, merged in sources.items():
        for index in range(counts[component]):  # each task restores its own partitions
            store.save(cid, source_key(component, index), merged)
    groups = groups or {}
    moved = {c: _reshard(store, cid, snap, c, n, groups.get(c, KEY_GROUPS))
             for c, n in counts.items()}
    held = {c: _rewindow(store, cid, snap, c, n, groups.get(c, KEY_GROUPS))
            for c, n in counts.items()}
    moved.update((c, m) for c, m in held.items() if m is not None and moved[c] is None)
    made_for = {} if plan_epoch is None else {"plan": plan_epoch}
    store.commit(cid, {**info, "rebalanced_from": old, **made_for})
    return {c: m for c, m in moved.items() if m is not None}


def _rewindow(store, cid: int, snap: Mapping[str, Any], component: str, n: int,
              groups: int) -> int | None:
    """Save ``component``'s open windows dealt over ``n`` tasks (``split_windows``); the
    held tuples that changed task index (None if it saved no windows: not windowed)."""
    prefix = window_key(component, 0)[:-1]
    old = {int(k[len(prefix):]): v for k, v in snap.items() if k.startswith(prefix)}
    if not old:
        return None
    parts, moved = split_windows([old.get(i) for i in range(max(old) + 1)], n, groups)
    for index, saved in enumerate(parts):
        store.save(cid, window_key(component, index), saved)
    return moved


def _positions(snap: Mapping[str, Any], component: str) -> dict | None:
    """A partitioned spout's positions (``{partition: offset}`` per task) merged into one:
    each partition was read by one task, and a spout task restores only the partitions it
    owns now (``OffsetSpout.restore_position``). None when the component saved none, or a
    position that is no such mapping (it is then copied unchanged)."""
    prefix = source_key(component, 0)[:-1]
    found = [v for k, v in snap.items() if k.startswith(prefix)]
    if not found or not all(isinstance(v, Mapping) for v in found):
        return None
    merged: dict = {}
    for position in found:
        for partition, offset in position.items():  # never two owners; the lower is safe
            merged[partition] = min(offset, merged.get(partition, offset))
    return merged


def _reshard(store, cid: int, snap: Mapping[str, Any], component: str, n: int,
             groups: int) -> int | None:
    """Save ``component``'s state split over ``n`` tasks; the keys that changed task
    index (None if it saved no state: not a StatefulBolt)."""
    prefix = state_key(component, 0)[:-1]
    old = {int(k[len(prefix):]): pairs or [] for k, pairs in snap.items() if k.startswith(prefix)}
    if not old:
        return None
    before = {repr(k): i for i, pairs in old.items() for k, _ in pairs}
    parts = split([pair for pairs in old.values() for pair in pairs], n, groups)
    for index, pairs in enumerate(parts):
        store.save(cid, state_key(component, index), pairs)
    return sum(before[repr(k)] != i for i, pairs in enumerate(parts) for k, _ in pairs)
