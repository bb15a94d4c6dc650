"""A windowed task's held tuples as msgpack data, for its checkpoints.

A tuple is saved as ``[source, values]``: ``source`` indexes a table of the (component,
task, stream, fields) the tuples came from, saved once with the snapshot, since every
tuple of one input task and stream shares its source (``runtime.model.api.TupleSource``).
So a held tuple costs its values plus a few bytes. The tracking ids are not saved: a
checkpointed topology runs with acking off (``runtime/model/plan.py``).

>>> from runtime.model.api import Tuple, TupleSource
>>> src = TupleSource.of("events", 4, "default", ["k", "ts"])
>>> out = Outgoing()
>>> out.encode(Tuple(["a", 10], src)), out.encode(Tuple(["b", 20], src)), out.sources
([0, ['a', 10]], [0, ['b', 20]], [['events', 4, 'default', ['k', 'ts']]])
>>> back = Incoming(out.sources).decode([0, ["b", 20]])
>>> back["k"], back.component, back.task, back.fields
('b', 'events', 4, ('k', 'ts'))
"""

from __future__ import annotations

from runtime.model.api import Tuple, TupleSource


class Outgoing:
    """Encodes the tuples of one snapshot; ``sources`` is the table they index."""

    def __init__(self) -> None:
        self.sources: list[list] = []
        self._index: dict[tuple, int] = {}

    def encode(self, tup: Tuple) -> list:
        return [self._source(tup.source), tup.values]

    def _source(self, src: TupleSource) -> int:
        key = (src.component, src.task, src.stream)
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.sources)
            self.sources.append([*key, list(src.fields)])
        return i


class Incoming:
    """Decodes the tuples of one snapshot, given its table of sources."""

    def __init__(self, sources: list) -> None:
        self.sources = [TupleSource.of(*row) for row in sources]

    def decode(self, saved: list) -> Tuple:
        i, values = saved
        return Tuple(values, self.sources[i])
