"""The logical plan as a networkx graph (imported only when someone asks for it)."""

from __future__ import annotations

import networkx as nx

from runtime.groupings import label

from . import hooks


class LogicalGraph(nx.DiGraph):
    """A topology's logical graph: a ``networkx.DiGraph`` that a notebook shows as the
    picture ``%%topology`` draws (through ``hooks.picture``), not as ``<DiGraph at 0x…>``."""

    def _repr_svg_(self) -> str | None:
        return hooks.picture(self)


def logical_graph(topology) -> nx.DiGraph:
    """Nodes are components; an edge per (source, stream, grouping) subscription.

    A bolt subscribed twice to one source (two streams) gets one edge whose
    ``streams`` attribute lists both.
    """
    graph = LogicalGraph(name=topology.name)
    for spec in topology.components.values():
        graph.add_node(spec.id, kind=spec.kind, parallelism=spec.parallelism,
                       max_parallelism=spec.max_parallelism, cls=spec.class_name,
                       streams=dict(spec.streams))
    for spec in topology.components.values():
        for sub in spec.inputs:
            _add_edge(graph, sub, spec.id)
    return graph


def _add_edge(graph: nx.DiGraph, sub, target: str) -> None:
    if graph.has_edge(sub.source, target):
        data = graph.edges[sub.source, target]
        data["streams"].append(sub.stream)
        data["groupings"].append(label(sub.grouping))
        return
    graph.add_edge(sub.source, target, stream=sub.stream, grouping=label(sub.grouping),
                   streams=[sub.stream], groupings=[label(sub.grouping)])
