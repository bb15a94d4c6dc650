"""What a user writes: ``StatefulBolt`` and the key-value ``State`` it is given."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.model.api import Bolt


class State:
    """One task's key-value state, restored from the last committed checkpoint. Keys and
    values must be msgpack types (they are saved as msgpack at each checkpoint)."""

    def __init__(self, values: Mapping | None = None) -> None:
        self._values: dict = dict(values or {})

    def get(self, key, default=None) -> Any:
        return self._values.get(key, default)

    def put(self, key, value) -> None:
        self._values[key] = value

    def delete(self, key) -> None:
        self._values.pop(key, None)

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._values.items()))

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key) -> bool:
        return key in self._values

    def snapshot(self) -> list:
        """The state as ``[key, value]`` pairs (any msgpack key survives the trip)."""
        return [[k, v] for k, v in self._values.items()]

    @classmethod
    def from_snapshot(cls, pairs) -> State:
        return cls({_key(k): v for k, v in pairs or ()})

    def __repr__(self) -> str:
        return f"State({len(self._values)} keys)"


def _key(k):
    return tuple(k) if isinstance(k, list) else k  # a tuple key comes back as a list


class StatefulBolt(Bolt):
    """A bolt whose key-value state is checkpointed (``submit(checkpoint_interval=...)``).

    ``init_state(state)`` is called after ``prepare``, before the first tuple, and again
    after each rollback, with the state of the last committed checkpoint (empty before the
    first). Updates made through ``state.put`` count once, whatever crashes: see
    docs/internals/checkpoints.md. Without checkpoints it is called once, with an empty
    state that is never saved (``runtime.state.started``)."""

    keyed_state = True  # its fields groupings go through key groups (ComponentSpec.keyed_state)

    def init_state(self, state: State) -> None:
        self.state = state
