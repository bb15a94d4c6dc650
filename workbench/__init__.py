"""What a person looks at: the ``%%topology`` cell grammar and a static picture of a
topology's graph today; widgets and the Spark bridge as they land. Importing this package
imports neither IPython nor ipywidgets.

>>> from runtime.testing import ListSpout, ListSink
>>> parsed = parse_topology("demo", '''
... nums: numbers
... sink: ListSink <- nums
... ''', {"numbers": ListSpout([[1]], fields=["n"]), "ListSink": ListSink})
>>> sorted(parsed.topology.graph.edges)
[('nums', 'sink')]
"""

from ._dsl import TopologySyntaxError
from ._dsl_build import ParsedTopology, parse_topology
from ._view import TopologyView, topology_svg

__all__ = [
    "ParsedTopology",
    "TopologySyntaxError",
    "TopologyView",
    "parse_topology",
    "topology_svg",
]
