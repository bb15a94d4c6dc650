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

from runtime.model.api import rewindable
from runtime.model.constants import (
    CHECKPOINT_INTERVAL,
    CHECKPOINTER,
    STATE_DIR,
    STATE_STORE,
    WINDOW,
)
from runtime.windows import WindowedBolt, unsplittable

from ._bolt import State, StatefulBolt
from ._gate import Checkpointed
from ._protocol import state_key
from ._rebalance import repartition
from ._spout import CheckpointSpout
from ._store import open_store

__all__ = ["State", "StatefulBolt", "check_submit", "checkpointing", "committed_state",
           "executor_for", "fixed_windows", "open_store", "repartition", "started"]


def checkpointing(config: Mapping) -> bool:
    return bool(config.get(CHECKPOINT_INTERVAL))


def executor_for(plan, specs: Mapping, task: int, send, run_dir: str, incarnation: int,
                 build, clock=None):
    """The executor a driver runs for ``task`` in a checkpointed topology: the checkpoint
    spout, or ``build()`` (the task's own executor) wrapped in its side of the protocol.
    The store is the run's (``state_dir``, set by the scheduler), not ``run_dir``, which on
    Spark is the container's own."""
    store = open_store(str(plan.config.get(STATE_STORE, "sqlite")),
                       str(plan.config.get(STATE_DIR) or run_dir))
    if plan.task(task).component == CHECKPOINTER:
        clocks = {"monotonic": clock, "wall": clock} if clock is not None else {}
        return CheckpointSpout(plan, specs, task, send, store, **clocks)
    return Checkpointed(build(), specs, send, store, incarnation)


def started(executor, config: Mapping) -> None:
    """Called by a driver once a task's executor has started (``prepare`` ran). Without
    checkpoints a StatefulBolt is given an empty state here, never saved: it runs as a
    plain bolt, its state lost with its process. With them, ``Checkpointed`` gives it the
    committed state itself."""
    user = getattr(executor, "user", None)
    if not checkpointing(config) and isinstance(user, StatefulBolt):
        user.init_state(State())


def fixed_windows(executor, config: Mapping) -> str | None:
    """Why a rebalance may not change this task's component's parallelism, or None when
    it may. Under checkpoints a WindowedBolt's open windows are in the checkpoint
    (docs/windows.md, "Checkpoints"), and a rebalance deals them over the new tasks
    (``runtime.windows.split_windows``) unless it cannot: count windows, or an input whose
    grouping gives no rule (``runtime.windows.unsplittable`` says which and why); their
    tuples would be lost (the sources' positions are past them), so that is refused.
    Without checkpoints the held tuples are acked only when they leave a window, and a
    removed task's are replayed after ``message_timeout``, as any tuple in flight."""
    user, spec = getattr(executor, "user", None), getattr(executor, "spec", None)
    if not checkpointing(config) or not isinstance(user, WindowedBolt) or spec is None:
        return None
    return unsplittable(spec.config.get(WINDOW), spec.inputs)


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


def check_submit(topology, config: Mapping, *, processes: bool) -> None:
    """At submit: no cycle, the memory store only where every task shares a process, and a
    warning for each spout that cannot be rewound (see docs/internals/checkpoints.md)."""
    if not checkpointing(config):
        return
    if processes and config.get(STATE_STORE) == "memory":
        raise ValueError(f"topology {topology.name!r}: state_store='memory' is for the "
                         "in-memory cluster (runtime.testing); processes share 'sqlite' or a "
                         "redis:// URL")
    loop = _cycle(topology.components)
    if loop:
        raise ValueError(f"topology {topology.name!r}: checkpoints need an acyclic topology, "
                         f"and {' -> '.join(loop)} is a cycle (a bolt would wait for its own "
                         "barrier)")
    for spec in topology.components.values():
        if spec.kind == "spout" and not rewindable(spec.new_instance()):
            warnings.warn(f"topology {topology.name!r}: spout {spec.id!r} cannot be rewound "
                          f"to a checkpoint ({spec.class_name}): its tuples are at least once, "
                          "not exactly once: each is acked once the checkpoint holding it "
                          "commits, and a rollback fails those emitted since, which only a "
                          "spout whose fail() replays emits again (else their state updates "
                          "are lost); state is exact only for replayable spouts (LogSpout, "
                          "KafkaSpout)", stacklevel=3)



def _cycle(specs: Mapping) -> list[str]:
    """A cycle of components (each reading from the next), or [] when there is none."""
    reads = {c: [i.source for i in s.inputs if i.source in specs] for c, s in specs.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(c: str, path: list[str]) -> list[str]:
        state[c] = 1
        for src in reads[c]:
            if state.get(src) == 1:
                return path[path.index(src):] + [c] if src in path else [src, c]
            if src not in state and (found := visit(src, path + [c])):
                return found
        state[c] = 2
        return []

    for c in specs:
        if c not in state and (found := visit(c, [])):
            return found
    return []
