"""The acker, live: each acker task's pending roots by age and its oldest roots, named by
their spout task and msg_id (``running.acker_state()``; docs/internals/dashboard.md, "The
lineage tab and the acker panel").

Two reports meet here, both sent with the tasks' statistics. An acker task reports its
ledger's rotation slots (``acker_ages``: ``[youngest_s, oldest_s, count]``, newest
first; a root sits in the slot of its last (re)start, so its age is known to within one
slot, ``message_timeout / 2`` wide) and its oldest roots with their spout task
(``acker_oldest``: ``[root, spout_task, slot]``). The acker never knew the msg_id: each
spout task reports its own oldest roots in flight with msg_id and exact age
(``oldest_roots``: ``[root, msg_id, age_s]``), and a root is named when its spout task's
report holds it. A root that is among the acker's oldest but not among its spout task's
oldest (that spout has older roots, kept by another acker) keeps ``msg_id`` None.

Pure: it reads the master's task records and returns plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["acker_state", "age_label"]

Record = Mapping[str, Any]


def acker_state(records: Iterable[Record]) -> list[dict]:
    """One dict per acker task that has reported, by task: ``task``, ``container``,
    ``pending``, ``ages`` (``{"youngest_s", "oldest_s", "count"}`` per slot, newest
    first) and ``oldest`` (``{"root", "spout", "spout_task", "msg_id", "age_s",
    "slot"}``, oldest first; ``age_s`` is the spout's exact figure, None when unnamed).

    >>> acker = {"component": "__acker", "task": 3, "kind": "acker", "container": 0,
    ...          "pending": 1, "acker_ages": [[0, 1, 0], [1, 16, 1], [16, 31, 0]],
    ...          "acker_oldest": [[77, 1, 1]]}
    >>> spout = {"component": "src", "task": 1, "kind": "spout",
    ...          "oldest_roots": [[77, "m-4", 12.5]]}
    >>> [state] = acker_state([spout, acker])
    >>> state["oldest"][0]["msg_id"], state["oldest"][0]["age_s"], state["ages"][1]["count"]
    ('m-4', 12.5, 1)
    """
    records = list(records)
    named = _named_roots(records)
    return [_one(r, named) for r in sorted(records, key=lambda r: r.get("task", 0))
            if r.get("kind") == "acker" and "acker_ages" in r]


def _named_roots(records: list[Record]) -> dict[int, tuple[str, Any, float]]:
    """root -> (spout component, msg_id, age_s) from every spout task's oldest roots."""
    return {root: (r.get("component"), msg_id, age)
            for r in records if r.get("kind") == "spout"
            for root, msg_id, age in r.get("oldest_roots") or ()}


def _one(record: Record, named: Mapping[int, tuple]) -> dict:
    ages = [{"youngest_s": lo, "oldest_s": hi, "count": n}
            for lo, hi, n in record.get("acker_ages") or ()]
    return {"task": record["task"], "container": record.get("container"),
            "pending": record.get("pending", sum(a["count"] for a in ages)),
            "ages": ages,
            "oldest": [_root(root, task, slot, named)
                       for root, task, slot in record.get("acker_oldest") or ()]}


def _root(root: int, spout_task: int, slot: int, named: Mapping[int, tuple]) -> dict:
    spout, msg_id, age = named.get(root, (None, None, None))
    return {"root": root, "spout": spout, "spout_task": spout_task, "msg_id": msg_id,
            "age_s": age, "slot": slot}


def age_label(bar: Mapping[str, float]) -> str:
    """A slot's ages in words, for bars and tables.

    >>> age_label({"youngest_s": 1.0, "oldest_s": 16.0})
    '1-16 s'
    """
    return f"{bar['youngest_s']:.0f}-{bar['oldest_s']:.0f} s"
