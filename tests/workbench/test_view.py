"""The static topology picture: valid, complete, escaped, deterministic SVG."""

from __future__ import annotations

import doctest
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import networkx as nx

from runtime import Bolt, Topology
from runtime.testing import Doubler, ListSink, ListSpout
from workbench import TopologyView, _view, parse_topology, topology_svg

SVG = "{http://www.w3.org/2000/svg}"


class Split(Bolt):
    outputs = {"default": ["word"], "errors": ["line"]}


def five() -> Topology:
    return parse_topology("five", """
words:  nums * 2
split:  Split * 3        <- words shuffle
count:  Doubler * 4      <- split fields(word)
report: ListSink         <- count global, split[errors] all
audit:  ListSink         <- words local_or_shuffle
""", {"nums": ListSpout([[1]], fields=["n"]), "Split": Split, "Doubler": Doubler,
      "ListSink": ListSink}).topology


def texts(svg: str) -> list[str]:
    return [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_five_components_every_id_class_parallelism_and_grouping():
    svg = topology_svg(five())
    boxes = [[t.text for t in g.iter(f"{SVG}text")] for g in ET.fromstring(svg).iter(f"{SVG}g")
             if g.get("class") in ("tf-spout", "tf-bolt")]
    assert boxes == [["words", "ListSpout", "× 2"], ["split", "Split", "× 3"],
                     ["count", "Doubler", "× 4"], ["report", "ListSink", "× 1"],
                     ["audit", "ListSink", "× 1"]]
    shown = texts(svg)
    assert {"shuffle", "fields(word)", "global", "[errors] all", "local_or_shuffle"} <= set(shown)


def test_spouts_come_first_and_layers_follow_the_longest_path():
    assert _view.layout(five().graph) == [["words"], ["split", "audit"], ["count"], ["report"]]


def test_colour_per_kind():
    root = ET.fromstring(topology_svg(five()))
    fills = {g.get("class"): g.find(f"{SVG}rect").get("fill") for g in root.iter(f"{SVG}g")
             if g.get("class") in ("tf-spout", "tf-bolt")}
    assert fills == {"tf-spout": _view.COLOURS["spout"][0], "tf-bolt": _view.COLOURS["bolt"][0]}


def test_a_cycle_and_a_self_loop_are_laid_out():
    topo = Topology("loop")
    topo.spout("src", ListSpout([[1]], fields=["n"]))
    first = topo.bolt("a", Doubler).shuffle_grouping("src")
    topo.bolt("b", Doubler).shuffle_grouping("a")
    first.all_grouping("b")
    topo.bolt("me", Doubler).shuffle_grouping("src").shuffle_grouping("me")
    assert _view.back_edges(topo.graph) == {("b", "a"), ("me", "me")}
    assert _view.layout(topo.graph) == [["src"], ["a", "me"], ["b"]]
    svg = topology_svg(topo)
    assert len(ET.fromstring(svg).findall(f".//{SVG}path[@marker-end]")) == 5
    assert "all" in texts(svg)


def test_hostile_names_are_escaped():
    """The runtime checks ids, but class names and custom labels are anyone's: escape all."""
    graph = nx.DiGraph(name="</svg><script>")
    graph.add_node("<b>src&", kind="spout", parallelism=1, cls='<script>alert("x")</script>')
    graph.add_node("bolt\x01", kind="bolt", parallelism=2, cls="Ok")
    graph.add_edge("<b>src&", "bolt\x01", stream="s'", grouping='<img src=x onerror="a()">',
                   streams=["s'"], groupings=['<img src=x onerror="a()">'])
    svg = topology_svg(SimpleNamespace(graph=graph))
    assert "<script" not in svg and "<img" not in svg and "<b>" not in svg
    assert "\x01" not in svg
    assert {"<b>src&", '<script>alert("x")</script>', "bolt?",
            """[s'] <img src=x onerror="a()">"""} <= set(texts(svg))


def test_a_hostile_class_name_through_the_runtime():
    nasty = type('<script>alert("x")</script>&', (Doubler,), {})
    topo = Topology("evil")
    topo.spout("src", ListSpout([[1]], fields=["n"]))
    topo.bolt("b", nasty).shuffle_grouping("src")
    assert '<script>alert("x")</script>&' in texts(topology_svg(topo))


def test_deterministic_self_contained_and_html_wraps_the_svg():
    svg = topology_svg(five())
    assert svg == topology_svg(five())
    assert "<script" not in svg and "http" not in svg.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    view = TopologyView(parse_topology("one", "s: nums", {"nums": ListSpout([[1]])}))
    assert view._repr_html_().startswith("<div") and view._repr_svg_() in view._repr_html_()


def test_docstrings_run():
    assert doctest.testmod(_view).failed == 0


def test_an_edge_that_skips_a_column_arcs_over_the_boxes_between():
    """A straight line from the first to the third column would pass behind the second
    column's box, hiding the edge and its label."""
    topo = Topology("skip")
    topo.spout("a", ListSpout([[1]], fields=["n"]))
    topo.bolt("b", Doubler).shuffle_grouping("a")
    topo.bolt("c", ListSink).shuffle_grouping("b").all_grouping("a")
    svg = ET.fromstring(topology_svg(topo))
    ns = "{http://www.w3.org/2000/svg}"
    boxes = {g.find(f"{ns}title").text.split()[-1]: g.find(f"{ns}rect")
             for g in svg.iter(f"{ns}g") if g.find(f"{ns}rect") is not None}
    (skip,) = [g for g in svg.iter(f"{ns}g") if g.findtext(f"{ns}text") == "all"]
    start_y = float(skip.find(f"{ns}path").get("d").split()[0].split(",")[1])
    assert start_y == float(boxes["a"].get("y"))  # leaves from the top of the box
    label_y = float(skip.find(f"{ns}text").get("y"))
    assert label_y < float(boxes["b"].get("y"))  # and is drawn above the box it passes


def test_a_topology_and_its_graph_show_the_cells_picture():
    import runtime

    topo = five()
    assert topo._repr_svg_() == topology_svg(topo) == TopologyView(topo)._repr_svg_()
    assert topo.graph._repr_svg_() == topology_svg(topo)  # not <networkx DiGraph at 0x…>
    runtime.set_picture_maker(None)  # no maker plugged in: the repr shows, no error
    try:
        assert topo._repr_svg_() is None and topo.graph._repr_svg_() is None
    finally:
        runtime.set_picture_maker(topology_svg)
