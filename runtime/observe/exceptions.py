"""Exceptions grouped as Heron's UI shows them: one record per distinct error.

Two reports are the same error when they come from the same component, say the same
thing (the error's type and message) and were raised at the same place (the innermost
frame of the traceback). Each record keeps how often it happened, when first and last,
in which tasks, the last traceback, and whether any occurrence ended its instance.

>>> log = ExceptionLog(limit=10)
>>> tb = 'Traceback:\\n  File "s.py", line 9, in process\\nValueError: bad\\n'
>>> for task, t in [(3, 1.0), (4, 2.0), (3, 5.0)]:
...     _ = log.add({"component": "split", "task": task, "incarnation": 0, "time": t,
...                  "error": "Split.process raised ValueError: bad", "traceback": tb,
...                  "fatal": True})
>>> [(r["count"], r["first"], r["last"], r["tasks"]) for r in log.records()]
[(3, 1.0, 5.0, [3, 4])]
"""

from __future__ import annotations

from collections import OrderedDict

MAX_RECORDS = 1000  # distinct errors kept; the one seen longest ago is dropped first


def signature(component: str, error: str, traceback: str) -> tuple[str, str, str, str]:
    """What makes two reports the same error: component, error text, the traceback's
    last line (type and message) and its innermost ``File ..., line ..., in ...`` frame.

    >>> signature("c", "e", 'Traceback:\\n  File "a.py", line 1, in f\\n    x()\\nKeyError: 1\\n')
    ('c', 'e', 'KeyError: 1', 'File "a.py", line 1, in f')
    """
    lines = [line.strip() for line in traceback.splitlines() if line.strip()]
    frames = [line for line in lines if line.startswith("File ")]
    return (component, error, lines[-1] if lines else "", frames[-1] if frames else "")


class ExceptionLog:
    """Distinct errors, the one seen most recently last; at most ``limit`` of them."""

    def __init__(self, limit: int = MAX_RECORDS) -> None:
        self.limit = limit
        self._records: OrderedDict[tuple, dict] = OrderedDict()

    def add(self, report: dict) -> dict:
        """Count one report (component, task, incarnation, error, traceback, time, fatal);
        return its record."""
        key = signature(report["component"], report["error"], report["traceback"])
        record = self._records.pop(key, None)
        record = _merged(record, report) if record is not None else _first(report)
        self._records[key] = record
        while len(self._records) > self.limit:
            self._records.popitem(last=False)
        return record

    def records(self) -> list[dict]:
        """Copies of the records, the most recently seen last."""
        return [{**r, "tasks": list(r["tasks"])} for r in self._records.values()]

    def __len__(self) -> int:
        return len(self._records)


def _first(report: dict) -> dict:
    return {**report, "count": 1, "first": report["time"], "last": report["time"],
            "tasks": [report["task"]]}


def _merged(record: dict, report: dict) -> dict:
    """The record with one more occurrence: the latest report's task, traceback and time."""
    tasks = sorted({*record["tasks"], report["task"]})
    return {**record, **report, "count": record["count"] + 1,
            "first": min(record["first"], report["time"]),
            "last": max(record["last"], report["time"]), "tasks": tasks,
            "fatal": record["fatal"] or report["fatal"]}
