"""What a person looks at: the ``%%topology`` cell grammar, a picture of a topology's
graph, the live :class:`Dashboard` of a running one, and ``spark_session()``, the session
the Spark bridge uses (``running.to_spark(...)``; docs/spark.md), and ``reconcile``: a
persistent aggregation's state against the same definition run by Spark. Importing this package
imports neither IPython, ipywidgets nor pyspark: each is imported when first used.

>>> from runtime.testing import ListSpout, ListSink
>>> parsed = parse_topology("demo", '''
... nums: numbers
... sink: ListSink <- nums
... ''', {"numbers": ListSpout([[1]], fields=["n"]), "ListSink": ListSink})
>>> sorted(parsed.topology.graph.edges)
[('nums', 'sink')]
"""

from typing import Any

import runtime

from ._dsl import TopologySyntaxError
from ._dsl_build import ParsedTopology, parse_topology
from ._lineage import TraceView, trace_svg
from ._lists import TupleTable
from ._tap import names as task_names
from ._tap import sample as sample_tap
from ._tap import why_empty as tap_why_empty
from ._verdict import verdict
from ._view import TopologyView, topology_svg

# A Topology and its graph show themselves as this picture in a notebook (runtime's model
# may not import the workbench: it asks through a hook, which this plugs in).
runtime.set_picture_maker(topology_svg)

__all__ = [
    "Dashboard",
    "ParsedTopology",
    "TopologySyntaxError",
    "TopologyView",
    "TraceView",
    "TupleTable",
    "batch_aggregate",
    "parse_topology",
    "reconcile",
    "sample_tap",
    "spark_session",
    "tap_why_empty",
    "task_names",
    "topology_svg",
    "trace_svg",
    "verdict",
]


def __getattr__(name: str) -> Any:
    """``Dashboard`` lives with ipywidgets, ``spark_session`` and ``reconcile`` with
    pyspark: import each only when someone asks for it."""
    if name == "Dashboard":
        from ._dashboard import Dashboard

        return Dashboard
    if name in ("reconcile", "batch_aggregate"):
        from . import _reconcile

        return getattr(_reconcile, name)
    if name == "spark_session":
        from runtime.recording import spark_session

        return spark_session
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
