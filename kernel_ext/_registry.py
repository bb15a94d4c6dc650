"""The topologies this kernel submitted: found by name, and killed with the kernel.

A topology submitted ``detached`` is listed but left running when the extension is
unloaded or the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    running: Any  # a runtime RunningTopology
    detached: bool = False


class Registry:
    """Name -> submitted topology. ``close()`` kills every attached one (also at exit)."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        atexit.register(self.close)

    def add(self, name: str, running: Any, *, detached: bool = False) -> None:
        self.entries[name] = Entry(running, detached)

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def pop(self, name: str) -> Entry | None:
        return self.entries.pop(name, None)

    def close(self) -> None:
        """Kill every topology not submitted detached; forget them all."""
        atexit.unregister(self.close)
        entries, self.entries = self.entries, {}
        for entry in entries.values():
            if not entry.detached:
                with contextlib.suppress(Exception):  # a dead one must not stop the rest
                    entry.running.kill()
