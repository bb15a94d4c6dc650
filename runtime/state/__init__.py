"""Checkpointed state, exactly once for state (issue 21; docs/internals/checkpoints.md).

``StatefulBolt`` and ``State`` (what a user writes, ``_bolt.py``); the stores (``_store.py``:
memory, SQLite, Redis); the protocol's messages (``_protocol.py``); a task's side of it,
a wrapper round its executor (``_gate.py``); and the ``__checkpoint`` system component
that drives it (``_spout.py``). The drivers (instance process, in-memory cluster) build
the wrapper and the checkpoint spout with :func:`executor_for`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from runtime.model.constants import CHECKPOINT_INTERVAL, CHECKPOINTER, STATE_STORE

from ._bolt import State, StatefulBolt
from ._gate import Checkpointed
from ._protocol import state_key
from ._rebalance import repartition
from ._spout import CheckpointSpout
from ._store import open_store

__all__ = ["State", "StatefulBolt", "check_submit", "checkpointing", "committed_state",
           "executor_for", "open_store", "repartition", "replayable"]


def checkpointing(config: Mapping) -> bool:
    return bool(config.get(CHECKPOINT_INTERVAL))


def executor_for(plan, specs: Mapping, task: int, send, run_dir: str, incarnation: int,
                 build, clock=None):
    """The executor a driver runs for ``task`` in a checkpointed topology: the checkpoint
    spout, or ``build()`` (the task's own executor) wrapped in its side of the protocol."""
    store = open_store(str(plan.config.get(STATE_STORE, "sqlite")), run_dir)
    if plan.task(task).component == CHECKPOINTER:
        clocks = {"monotonic": clock, "wall": clock} if clock is not None else {}
        return CheckpointSpout(plan, specs, task, send, store, **clocks)
    return Checkpointed(build(), specs, send, store, incarnation)


def committed_state(store, component: str) -> tuple[int | None, dict]:
    """The last committed checkpoint id and ``component``'s state in it, merged over its
    tasks (each task holds its own keys)."""
    committed = store.committed()
    if committed is None:
        return None, {}
    merged: dict = {}
    prefix = state_key(component, 0).rsplit("/", 1)[0] + "/"
    for pairs in store.load_prefix(committed[0], prefix).values():
        merged.update(State.from_snapshot(pairs)._values)
    return committed[0], merged


def replayable(spout) -> bool:
    """Whether a spout can be rewound to a checkpoint's position."""
    return hasattr(spout, "checkpoint_position") and hasattr(spout, "restore_position")


def check_submit(topology, config: Mapping, *, processes: bool) -> None:
    """At submit: the memory store only where every task shares a process, and a warning
    for each spout that cannot be rewound (its tuples are then at least once)."""
    if not checkpointing(config):
        return
    if processes and config.get(STATE_STORE) == "memory":
        raise ValueError(f"topology {topology.name!r}: state_store='memory' is for the "
                         "in-memory cluster (runtime.testing); processes share 'sqlite' or a "
                         "redis:// URL")
    for spec in topology.components.values():
        if spec.kind == "spout" and not replayable(spec.new_instance()):
            warnings.warn(f"topology {topology.name!r}: spout {spec.id!r} cannot be rewound "
                          f"to a checkpoint ({spec.class_name}); after a rollback its tuples "
                          "are not replayed, so state is at least once for them, not exactly "
                          "once", stacklevel=3)

