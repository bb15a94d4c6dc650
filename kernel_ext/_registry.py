"""The topologies this kernel submitted: found by name, and killed with the kernel.

A topology submitted ``detached`` is listed but left running when the extension is
unloaded or the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    running: Any  # a runtime RunningTopology
    detached: bool = False
    topology: Any = None  # the Topology it runs (the dashboard draws its graph)
    dashboards: list = field(default_factory=list)  # the live views opened on it


class Registry:
    """Name -> submitted topology. ``close()`` kills every attached one (also at exit)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        atexit.register(self.close)

    def add(self, name: str, running: Any, *, detached: bool = False,
            topology: Any = None) -> None:
        self.entries[name] = Entry(running, detached, topology)

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def pop(self, name: str) -> Entry | None:
        return self.entries.pop(name, None)

    def close(self) -> None:
        """Close every dashboard; kill every topology not submitted detached; forget all."""
        atexit.unregister(self.close)
        entries, self.entries = self.entries, {}
        for entry in entries.values():
            for board in entry.dashboards:
                with contextlib.suppress(Exception):
                    board.close()
            if not entry.detached:
                with contextlib.suppress(Exception):  # a dead one must not stop the rest
                    entry.running.kill()
