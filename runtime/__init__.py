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

from runtime.model import hooks as _hooks
from runtime.model.api import BasicBolt, Bolt, Context, FailedException, Spout, Tuple
from runtime.model.topology import ComponentSpec, Declarer, Subscription, Topology, TopologyError
from runtime.observe.stats import InstanceStats
from runtime.processes.client import RunningTopology, TopologyDead

from .groupings import Grouping, stable_hash
from .model.windowing import Duration, Window
from .state import State, StatefulBolt
from .trident import (
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
from .windows import WindowedBolt

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
