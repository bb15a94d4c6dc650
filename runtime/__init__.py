"""tupleflow's engine: define a topology of spouts and bolts, and run it.

>>> from runtime import Topology, Spout, Bolt
>>> class Words(Spout):
...     outputs = ["word"]
...     def next_tuple(self):
...         self.emit(["storm"])
>>> topo = Topology("wordcount")
>>> topo.spout("words", Words, parallelism=2)
Declarer('words')
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from runtime.model import hooks as _hooks

# Each public name and the module that defines it, imported at the first use of the name
# (PEP 562): every process a topology starts imports some runtime.* module, and with it
# this file, so an eager import of the whole API here cost each instance, stream manager
# and master about a third of its start-up CPU (0.63 -> 0.40 s measured, 2026-11-26).
_HOMES = {
    "BasicBolt": "runtime.model.api",
    "Bolt": "runtime.model.api",
    "Context": "runtime.model.api",
    "FailedException": "runtime.model.api",
    "Spout": "runtime.model.api",
    "Tuple": "runtime.model.api",
    "ComponentSpec": "runtime.model.topology",
    "Declarer": "runtime.model.topology",
    "Subscription": "runtime.model.topology",
    "Topology": "runtime.model.topology",
    "TopologyError": "runtime.model.topology",
    "InstanceStats": "runtime.observe.stats",
    "RunningTopology": "runtime.processes.client",
    "TopologyDead": "runtime.processes.client",
    "Grouping": "runtime.groupings",
    "stable_hash": "runtime.groupings",
    "Duration": "runtime.model.windowing",
    "Window": "runtime.model.windowing",
    "State": "runtime.state",
    "StatefulBolt": "runtime.state",
    "BatchLogSpout": "runtime.trident",
    "CombinerAggregator": "runtime.trident",
    "Count": "runtime.trident",
    "KafkaBatchSpout": "runtime.trident",
    "ListBatchSpout": "runtime.trident",
    "MemoryMap": "runtime.trident",
    "RedisMap": "runtime.trident",
    "ReducerAggregator": "runtime.trident",
    "SQLiteMap": "runtime.trident",
    "Sum": "runtime.trident",
    "WindowedBolt": "runtime.windows",
}

if TYPE_CHECKING:  # what static checkers and editors read
    from runtime.groupings import Grouping, stable_hash
    from runtime.model.api import BasicBolt, Bolt, Context, FailedException, Spout, Tuple
    from runtime.model.topology import (
        ComponentSpec,
        Declarer,
        Subscription,
        Topology,
        TopologyError,
    )
    from runtime.model.windowing import Duration, Window
    from runtime.observe.stats import InstanceStats
    from runtime.processes.client import RunningTopology, TopologyDead
    from runtime.state import State, StatefulBolt
    from runtime.trident import (
        BatchLogSpout,
        CombinerAggregator,
        Count,
        KafkaBatchSpout,
        ListBatchSpout,
        MemoryMap,
        RedisMap,
        ReducerAggregator,
        SQLiteMap,
        Sum,
    )
    from runtime.windows import WindowedBolt


def __getattr__(name: str):
    """A public name, imported from its module at its first use (then kept here)."""
    home = _HOMES.get(name)
    if home is None:  # also how `from runtime import wire` finds a sub-package not yet imported
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "BasicBolt",
    "BatchLogSpout",
    "Bolt",
    "CombinerAggregator",
    "ComponentSpec",
    "Context",
    "Count",
    "Declarer",
    "Duration",
    "FailedException",
    "Grouping",
    "InstanceStats",
    "KafkaBatchSpout",
    "ListBatchSpout",
    "MemoryMap",
    "RedisMap",
    "ReducerAggregator",
    "RunningTopology",
    "SQLiteMap",
    "Spout",
    "State",
    "StatefulBolt",
    "Subscription",
    "Sum",
    "Topology",
    "TopologyDead",
    "TopologyError",
    "Tuple",
    "Window",
    "WindowedBolt",
    "attach",
    "set_picture_maker",
    "stable_hash",
]

__version__ = "0.1.0"


def attach(name_or_run_dir: str) -> RunningTopology:
    """A handle on a running topology submitted ``detached=True`` (from this process or
    one that has ended), found by its run directory or its name: it reads statistics,
    controls and kills it as the submitter's handle did, and follows the new master a
    stream manager starts should the master die (docs/reliability.md, "A detached
    topology"). ValueError if no such topology runs, or several have that name."""
    from runtime.processes.detached import attach as _attach

    return _attach(name_or_run_dir)


def _submit(topology, **how):
    """``Topology.submit``: the scheduler's ``submit``, looked up at each call (so a test
    that patches ``runtime.processes.scheduler.submit`` sees every launch) and imported
    at the first (so ``import runtime`` starts no zmq, cloudpickle or subprocess)."""
    from runtime.processes import scheduler

    return scheduler.submit(topology, **how)


def _persistent_aggregate(*args, **kwargs):
    """``Topology.persistent_aggregate``: Trident's, looked up at each call."""
    from runtime import trident

    return trident.persistent_aggregate(*args, **kwargs)


def set_picture_maker(maker) -> None:
    """Plug in how a :class:`Topology` and its ``graph`` are drawn in a notebook:
    ``maker(topology_or_graph) -> SVG text``. ``import workbench`` plugs in its
    ``topology_svg`` (the picture ``%%topology`` shows); without one they show their repr."""
    _hooks.plug(picture=maker)


# The model may not import the layers above it (pyproject.toml, [tool.importlinter]);
# a Topology reaches them through these hooks. Every runtime.* import runs this file first.
_hooks.plug(submit=_submit, persistent_aggregate=_persistent_aggregate)
