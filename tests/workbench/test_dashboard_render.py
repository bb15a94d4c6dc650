"""The dashboard's pure parts: panels rendered from snapshot dicts, sparklines, history.

The snapshots here are shaped like what ``running.status()`` / ``.metrics()`` /
``.statistics()`` return (tests/workbench/test_dashboard.py renders real ones).
"""

from __future__ import annotations

import doctest
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from runtime.testing import Doubler, ListSink, ListSpout
from workbench import (
    TupleTable,
    _checkpoint_panel,
    _dashboard,
    _format,
    _history,
    _lists,
    _panels,
    _sparkline,
    _tap,
    _user_metrics,
    _verdict,
    parse_topology,
)

SVG = "{http://www.w3.org/2000/svg}"


def topology():
    return parse_topology("demo", """
src:  nums
dbl:  Doubler * 2 <- src
sink: ListSink    <- dbl global
""", {"nums": ListSpout([[1]], fields=["n"]), "Doubler": Doubler,
      "ListSink": ListSink}).topology


def snapshot(**extra) -> dict:
    components = {
        "src": {"kind": "spout", "emitted": 1200, "executed": 0, "acked": 1100, "failed": 3,
                "emitted_per_s": 120.0, "capacity": 0.25, "restarts": 0, "pending": 40,
                "max_spout_pending": 100},
        "dbl": {"kind": "bolt", "emitted": 1190, "executed": 1195, "acked": 1195,
                "emitted_per_s": 119.0, "capacity": 0.97, "restarts": 2,
                "latency_ms": {"process": {"p99": 1.25}}},
        "sink": {"kind": "bolt", "executed": 1180},
    }
    return {"name": "demo", "time": 1_700_000_000.0, "state": "running",
            "status": {"state": "running", "paused": False,
                       "backpressure": [{"cause": 2, "component": "dbl", "container": 0}]},
            "metrics": {"window": "1m", "components": components}, **extra}


def nodes(svg: str) -> dict[str, ET.Element]:
    return {g.get("data-component"): g for g in ET.fromstring(svg).iter(f"{SVG}g")
            if g.get("data-component")}


def cells(html: str) -> dict[str, list[str]]:
    """Metrics table: component -> the text of its cells (component cell first)."""
    root = ET.fromstring(f"<div>{html}</div>")
    return {tr.get("data-component"): ["".join(td.itertext()).strip() for td in tr.findall("td")]
            for tr in root.iter("tr") if tr.get("data-component")}


def test_the_graph_marks_the_backpressure_root_cause_only():
    svg = _panels.graph_html(topology(), snapshot())
    found = nodes(svg)
    assert set(found) == {"src", "dbl", "sink"}
    assert "tf-backpressure" in found["dbl"].get("class").split()
    assert not any("tf-backpressure" in found[c].get("class") for c in ("src", "sink"))
    stroke = found["dbl"].find(f"{SVG}rect").get("stroke")
    assert stroke == _panels.BACKPRESSURE
    assert "⚠ backpressure" in "".join(found["dbl"].itertext())


def test_no_backpressure_no_mark():
    snap = snapshot()
    snap["status"]["backpressure"] = []
    assert "tf-backpressure" not in _panels.graph_html(topology(), snap)


def test_restarts_failures_capacity_and_edge_rates_are_drawn():
    found = nodes(_panels.graph_html(topology(), snapshot()))
    assert "tf-restarted" in found["dbl"].get("class") and "↻ 2 restarts" in "".join(
        found["dbl"].itertext())
    assert "tf-failed" in found["src"].get("class") and "✗ 3 failed" in "".join(
        found["src"].itertext())
    bars = {c: g.find(f"{SVG}rect[@class='tf-capacity']") for c, g in found.items()}
    assert bars["sink"] is None  # no capacity reported: no bar, not an empty one
    assert bars["src"] is None  # a spout's "capacity" is time in its own next_tuple: none
    assert float(bars["dbl"].get("width")) > 0
    labels = [t.text for t in ET.fromstring(_panels.graph_html(topology(), snapshot())).iter(
        f"{SVG}text")]
    assert {"shuffle", "120/s", "global", "119/s"} <= set(labels)


def test_the_graph_shows_the_tasks_a_component_runs_now_after_a_rebalance():
    snap = snapshot()
    assert "× 2" in "".join(nodes(_panels.graph_html(topology(), snap))["dbl"].itertext())
    snap["metrics"]["components"]["dbl"]["instances"] = 5  # rebalanced to five tasks
    assert "× 5" in "".join(nodes(_panels.graph_html(topology(), snap))["dbl"].itertext())


def test_the_table_uses_the_graphs_colour_for_each_component():
    graph = nodes(_panels.graph_html(topology(), snapshot()))
    snap = snapshot()
    snap["metrics"]["components"] = {"__acker": {"kind": "bolt"},
                                     **dict(reversed(snap["metrics"]["components"].items()))}
    table = ET.fromstring(f"<div>{_panels.metrics_html(snap, order=['src', 'dbl', 'sink'])}</div>")
    swatch = {tr.get("data-component"): tr.find("td/span").get("style")
              for tr in table.iter("tr") if tr.get("data-component")}
    for component, g in graph.items():
        assert swatch[component] == f"color:{g.find(f'{SVG}rect').get('stroke')}" or \
            component == "dbl"  # dbl's outline is red: it is the backpressure cause
    assert swatch["dbl"] == f"color:{_panels.PALETTE[1]}"


def test_each_component_has_its_own_colour():
    found = nodes(_panels.graph_html(topology(), snapshot()))
    strokes = {found[c].find(f"{SVG}rect").get("stroke") for c in ("src", "sink")}
    assert len(strokes) == 2


def test_the_static_picture_is_unchanged_without_an_overlay():
    from workbench import topology_svg

    assert "data-component" not in topology_svg(topology())


def test_metrics_table_shows_counts_and_a_dash_for_missing_fields():
    table = cells(_panels.metrics_html(snapshot()))
    heads = [h for h, _, _ in _panels.COLUMNS]
    src = dict(zip(heads, table["src"][1:]))
    assert (src["emitted"], src["acked"], src["failed"]) == ("1.2k", "1.1k", "3")
    assert src["process p99"] == "–" and src["queued"] == "–"
    assert src["capacity"] == "–"  # a spout has no capacity (Storm: bolts only)
    dbl = dict(zip(heads, table["dbl"][1:]))
    assert dbl["process p99"] == "1.25 ms" and dbl["capacity"] == "0.97"
    sink = dict(zip(heads, table["sink"][1:]))
    assert sink["executed"] == "1.18k" and sink["emitted"] == "–"
    exact = ET.fromstring(f"<div>{_panels.metrics_html(snapshot())}</div>")
    assert {td.get("data-value") for td in exact.iter("td")
            if td.get("data-key") == "emitted"} == {"1200", "1190", None}


def test_no_metrics_at_all_is_said_not_raised():
    for snap in ({}, {"metrics": None}, {"metrics": {"components": None}}):
        assert "no metrics yet" in _panels.metrics_html(snap)
        assert "no instances reported" in _panels.plan_html(snap)


@pytest.mark.parametrize(("state", "colour"), [("running", "#3d9a50"), ("paused", "#e6a100"),
                                               ("killed", "#d62728"), ("dead", "#d62728")])
def test_status_line_names_the_state(state, colour):
    line = _panels.status_html({**snapshot(), "state": state})
    assert f">{state}</span>" in line and colour in line
    assert "backpressure from dbl" in line


def test_exceptions_open_their_traceback_on_click_and_are_escaped():
    snap = {"exceptions": [{"component": "dbl", "count": 4, "tasks": [2, 3], "last": None,
                            "error": "KeyError: '<x>'", "traceback": "Traceback\n  <frame>"}]}
    html = _panels.exceptions_html(snap)
    entry = ET.fromstring(f"<div>{html}</div>").find("div")
    assert "×4" in "".join(entry.itertext())
    details = entry.find("details")
    assert "KeyError: '<x>'" in "".join(details.find("summary").itertext())
    assert details.find("pre").text == "Traceback\n  <frame>"  # escaped, then read back


def test_pending_panel_shows_spouts_and_tuner_turns():
    snap = snapshot(events=[{"kind": "tuner", "time": None, "action": "grow", "value": 200},
                            {"kind": "activated", "time": None}])
    html = _panels.pending_html(snap)
    assert ">src<" in html and ">40<" in html and ">100<" in html and ">dbl<" not in html
    assert "tuner: action=grow, value=200" in html and "activated" not in html


def test_tap_table_newest_first_and_text():
    tuples = [{"values": [i], "fields": ["n"], "task": 1, "to": [2], "time": None}
              for i in range(3)]
    html = _panels.tap_html({"component": "src", "stream": "default", "tuples": tuples})
    rows = [["".join(td.itertext()) for td in tr.findall("td")]
            for tr in ET.fromstring(f"<div>{html}</div>").iter("tr") if tr.findall("td")]
    assert [r[2] for r in rows] == ["2", "1", "0"]
    assert repr(TupleTable("src", "default", tuples)).splitlines()[:2] == [
        "src [default]: 3 tuples", "task 1 -> [2]: n=2"]


def test_render_wraps_every_panel_once():
    html = _panels.render(snapshot(), topology())
    for panel in ("status", "graph", "metrics", "plan", "pending", "tap", "exceptions",
                  "events"):
        assert html.count(f'class="tupleflow-{panel}"') == 1


def test_sparkline_breaks_on_missing_points_and_scales_to_the_box():
    svg = ET.fromstring(_sparkline.sparkline([0, 10, None, 5, 5]))
    lines = svg.findall(f"{SVG}polyline")
    assert len(lines) == 2
    ys = [float(p.split(",")[1]) for p in lines[0].get("points").split()]
    assert ys == [_sparkline.HEIGHT - _sparkline.PAD, _sparkline.PAD]
    assert ET.fromstring(_sparkline.sparkline([0, 0])).find(f"{SVG}polyline") is not None


def test_history_survives_a_restart_without_negative_rates():
    h = _history.History()
    base = {"task": 5, "component": "dbl", "kind": "bolt"}
    h.add([{**base, "incarnation": 0, "emitted": 100, "executed": 100, "acked": 100,
            "busy_seconds": 0.1}], now=0.0)
    h.add([{**base, "incarnation": 0, "emitted": 300, "executed": 300, "acked": 300,
            "busy_seconds": 0.3}], now=1.0)
    h.add([{**base, "incarnation": 1, "emitted": 50, "executed": 50, "acked": 40,
            "busy_seconds": 0.5}], now=2.0)
    series = h.series("dbl")
    assert series["emitted"] == [200.0, 50.0] and series["acked"] == [200.0, 40.0]
    assert series["latency"] == [1.0, 10.0]


def test_history_keeps_a_spouts_complete_latency():
    h = _history.History()
    rec = {"task": 1, "component": "src", "kind": "spout", "incarnation": 0}
    h.add([{**rec, "complete_latency_ms": None}], now=0.0)
    h.add([{**rec, "complete_latency_ms": {"p99": 7.5}}], now=1.0)
    assert h.series("src")["latency"] == [7.5]


@pytest.mark.parametrize("text", ["0", "-3", "lots", "", "1.5"])
def test_bad_max_spout_pending_text_is_refused(text):
    with pytest.raises(ValueError, match="auto, none or an integer >= 1"):
        _dashboard.parse_pending(text)


def test_importing_workbench_imports_no_widgets():
    code = ("import sys, workbench; assert 'ipywidgets' not in sys.modules; "
            "workbench.Dashboard; assert 'ipywidgets' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("module", [_panels, _sparkline, _history, _dashboard, _format,
                                    _verdict, _lists, _tap, _user_metrics,
                                    _checkpoint_panel])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0
