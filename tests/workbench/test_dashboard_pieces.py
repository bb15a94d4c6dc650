"""The learner's dashboard's pure pieces (issue 18): numbers for people, the health verdict
from recorded metrics, events grouped, the layout's HTML, the tap's names and reasons, the
final picture, and the exceptions that stay open. Fast: no topology runs here
(tests/workbench/test_dashboard.py drives real ones)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from workbench import _dashboard, _format, _lists, _panels, _parts, _style, _tap, _verdict


# -- numbers ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "text"), [(0, "0"), (999, "999"), (1_000, "1k"),
                                             (49_129, "49.1k"), (7_304_234, "7.3M"),
                                             (None, "–"), (True, "–"), ("12", "–")])
def test_counts_read_as_k_and_m(value, text):
    assert _format.count(value) == text


@pytest.mark.parametrize(("ms", "text"), [(0.043, "0.043 ms"), (10.161, "10.2 ms"),
                                          (57.549, "57.5 ms"), (999.0, "999 ms"),
                                          (1250.0, "1.25 s"), (30_000.0, "30 s")])
def test_latencies_switch_from_ms_to_seconds(ms, text):
    assert _format.millis(ms) == text


def test_cpu_above_what_the_machine_has_is_not_shown():
    assert _format.cpu(461.0, cores=2) == "–"  # the start-up artefact the learner saw
    assert _format.cpu(199.0, cores=2) == "199" and _format.cpu(-1.0, cores=2) == "–"


# -- the verdict, from recorded metrics dicts -------------------------------------------------
def recorded(**components) -> dict:
    """A snapshot shaped like collect()'s, from per-component metrics."""
    return {"state": "running", "config": {"message_timeout": 30.0},
            "status": {"state": "running", "backpressure": []},
            "metrics": {"window": "1m", "components": components}}


SPOUT = {"kind": "spout", "emitted": 14_124, "acked": 13_900, "failed": 0,
         "complete_latency_ms": {"count": 100, "p99": 40.0}}
SPLIT = {"kind": "bolt", "capacity": 0.01, "executed": 13_676}
IDLE_COUNT = {"kind": "bolt", "capacity": 0.2, "executed": 8_305}
SLOW_COUNT = {"kind": "bolt", "capacity": 0.98, "executed": 8_305}


def test_a_topology_that_keeps_up_is_healthy():
    found = _verdict.verdict(recorded(sentences=SPOUT, split=SPLIT, count=IDLE_COUNT))
    assert found["level"] == "healthy" and found["component"] is None


def test_a_bolt_at_capacity_is_degraded_and_named():
    found = _verdict.verdict(recorded(sentences=SPOUT, split=SPLIT, count=SLOW_COUNT))
    assert (found["level"], found["component"]) == ("degraded", "count")
    assert "count is at capacity (0.98)" in found["reason"]


def test_failed_spout_tuples_point_at_the_bolt_that_holds_the_spouts():
    # the learner's L12: acked 0, failed 49,129, backpressure from count
    snap = recorded(sentences={**SPOUT, "acked": 0, "failed": 49_129}, split=SPLIT,
                    count=SLOW_COUNT)
    snap["status"]["backpressure"] = [{"cause": 5, "component": "count", "container": 0}]
    found = _verdict.verdict(snap)
    assert (found["level"], found["component"]) == ("failing", "count")
    assert found["reason"] == ("spout sentences: 49.1k failed, none acked; count holds the "
                               "spouts (backpressure)")


def test_complete_latency_near_the_timeout_is_degraded():
    late = {**SPOUT, "complete_latency_ms": {"count": 10, "p99": 20_000.0}}
    found = _verdict.verdict(recorded(sentences=late, split=SPLIT, count=IDLE_COUNT))
    assert found["level"] == "degraded" and "20 s, near the 30 s message timeout" in \
        found["reason"]
    ok = {**SPOUT, "complete_latency_ms": {"count": 10, "p99": 20_000.0}}
    snap = recorded(sentences=ok, count=IDLE_COUNT)
    snap["config"]["message_timeout"] = 120.0
    assert _verdict.verdict(snap)["level"] == "healthy"


def test_recent_restarts_and_a_dead_master():
    snap = recorded(sentences=SPOUT, split={**SPLIT, "restarts": 106}) | {"time": 1000.0}
    snap["events"] = [{"kind": "restarted", "component": "split", "time": t}
                      for t in (100.0, 950.0, 990.0)]
    found = _verdict.verdict(snap)
    assert (found["level"], found["component"]) == ("degraded", "split")
    assert "restarted 2 times in the last 60 s" in found["reason"]
    snap["time"] = 2000.0  # a minute later with no new crash: healthy again
    assert _verdict.verdict(snap)["level"] == "healthy"
    assert _verdict.verdict({"state": "dead"})["level"] == "failing"
    assert _verdict.verdict({"state": "killed"})["level"] is None  # no verdict on the end


def test_the_header_shows_the_verdict_with_its_component():
    html = _panels.status_html(recorded(sentences=SPOUT, count=SLOW_COUNT) | {"name": "wc"})
    badge = ET.fromstring(f"<div>{html}</div>").find(".//div[@class='tf-verdict tf-degraded']")
    assert badge.get("data-level") == "degraded" and badge.get("data-component") == "count"


# -- events ----------------------------------------------------------------------------------
def test_a_flood_of_events_becomes_a_few_groups_and_controls_stay_visible():
    events = [{"kind": "restarted", "component": "split", "task": 3, "time": float(i),
               "reason": "exited with code 70"} for i in range(40)]
    events += [{"kind": k, "cause": 5, "component": "count", "time": 50.0 + i}
               for i, k in enumerate(["backpressure_on", "backpressure_off"] * 15)]
    events.insert(5, {"kind": "max_spout_pending", "component": None, "value": 200,
                      "tasks": [1], "time": 4.5})
    groups = _lists.group_events(events)
    assert [(g["kind"], g["component"], g["count"]) for g in groups] == [
        ("backpressure_off", "count", 15), ("backpressure_on", "count", 15),
        ("restarted", "split", 40), ("max_spout_pending", None, 1)]
    html = _lists.events_html({"events": events})
    root = ET.fromstring(f"<div>{html}</div>")
    assert len(root.findall(".//details")) == 4
    assert "crashed (user code raised), exit code 70" in html
    assert "max_spout_pending: component=None, value=200" in "".join(
        root.find("ul[@class='tf-tuner']").itertext())


# -- layout -----------------------------------------------------------------------------------
def test_the_stylesheet_freezes_the_component_column_and_keeps_tables_in_their_box():
    css = _style.CSS
    assert "position: sticky" in css and ".tf-scroll {overflow: auto; max-width: 100%" in css
    assert "min-width: 0" in css and "overflow-x: hidden" in css
    html = _panels.metrics_html(recorded(count=SLOW_COUNT))
    root = ET.fromstring(f"<div>{html}</div>")
    assert root.find("div[@class='tf-scroll']/table") is not None
    assert root.find(".//td[@class='tf-name']") is not None
    units = [h.find("small").text for h in root.iter("th") if h.find("small") is not None]
    assert "latency" in units and "bytes" in units


def test_a_live_status_turns_to_ended_by_css_alone_and_a_static_one_never_does():
    snap = {"name": "wc", "state": "running", "time": 0.0, "interval": 1.0}
    live = _panels.status_html(snap)
    assert 'class="tf-ended"' in live and "--tf-stale:5s" in live
    assert "tf-ended" not in _panels.status_html(snap, live=False)
    assert "tf-ended" not in _panels.status_html({**snap, "state": "killed"})
    assert "--tf-stale:30s" in _panels.status_html({**snap, "interval": 10.0})


def test_edges_say_what_the_target_keeps_up_with_and_its_queue():
    comps = {"sentences": {"kind": "spout", "emitted_per_s": 3702.0},
             "count": {"kind": "bolt", "executed_per_s": 196.0, "queued_tuples": 1500}}
    found = _panels.overlay({"metrics": {"components": comps}},
                            [("sentences", "count", {"streams": ["default"]})])
    assert found["edges"] == {("sentences", "count"): "196/s · q 1.5k"}
    assert found["nodes"]["sentences"]["capacity"] is None


# -- tap --------------------------------------------------------------------------------------
def test_a_sinks_input_is_what_went_to_its_tasks():
    tuples = [{"values": [i], "to": [2 + i % 2], "time": float(i), "task": 1} for i in range(6)]
    got = _tap.received(tuples, tasks=[3])
    assert [t["values"] for t in got] == [[1], [3], [5]]
    html = _lists.tap_html({"component": "count", "direction": "in", "tuples": got,
                            "names": _tap.names({"split": (1,), "count": (2, 3)})})
    assert "into count (what it receives)" in html and ">split[1]<" in html
    assert ">count[3]<" in html and ">[3]<" not in html


def test_an_empty_tap_says_why():
    snap = {"state": "running", "config": {"stats_interval": 2.0},
            "metrics": {"window": "1m", "components": {"src": {"emitted_per_s": 5.0}}}}
    why = _tap.why_empty(snap, ("out", "src", "default"), None, since=100.0, now=103.0)
    assert why.startswith("tapping for 3 s") and "every 2 s" in why
    assert "paused" in _tap.why_empty({**snap, "state": "paused"}, ("out", "src", "x"), None,
                                      since=None)


def test_the_component_view_shows_its_tasks_user_metrics():
    def report(seen, depth=None):
        return {"counters": {"seen": seen}, "gauges": {} if depth is None else {"depth": depth},
                "histograms": {}}

    snap = {"metrics": {"instances": {"2": {"component": "count"}, "3": {"component": "count"}}},
            "stats": [{"component": "count", "task": 3, "user_metrics": report(7, depth=2)},
                      {"component": "count", "task": 2, "user_metrics": report(12_500)},
                      {"component": "split", "task": 1, "user_metrics": report(1)}]}
    html = _lists.tasks_html(snap, "count")
    table = html[html.index("user metrics"):]
    assert table.index(">count[2]<") < table.index(">count[3]<")  # by task
    assert "<th title=\"counter\">seen</th>" in table and "12.5k" in table
    assert "<th title=\"gauge\">depth</th>" in table and "–" in table  # task 2 has no depth
    assert ">split[1]<" not in html
    assert "user metrics" not in _lists.tasks_html(snap, "split2")


# -- the end ----------------------------------------------------------------------------------
def test_the_final_picture_keeps_the_last_real_numbers():
    live = recorded(src={"kind": "spout", "emitted": 200})
    zeros = recorded(src={"kind": "spout", "emitted": 0})
    assert _dashboard.has_numbers(live) and not _dashboard.has_numbers(zeros)
    end = _dashboard.final({"state": "killed", "time": 5.0,
                            "error": "TopologyDead: topology 'wc' died"}, live)
    html = _panels.render(end)
    assert "TopologyDead" not in html and ">killed</span>" in html
    assert 'data-value="200"' in html


# -- exceptions that stay open ----------------------------------------------------------------
def test_an_opened_traceback_is_never_redrawn():
    board = _parts.Exceptions()
    first = {"component": "split", "error": "KeyError: 'x'", "traceback": "TB", "count": 1,
             "first": 1.0, "last": 1.0, "task": 3, "tasks": [3]}
    board.draw({"name": "wc", "exceptions": [first]})
    line, details = board.items[_lists.exception_key(first)]
    sent = []
    details.observe(sent.append, names="value")
    children = board.box.children
    later = {**first, "count": 7, "last": 9.0}
    other = {**first, "error": "ValueError", "first": 5.0}
    board.draw({"name": "wc", "exceptions": [other, later]})  # the master's order: by last
    assert sent == []  # the <details> HTML was not touched: an open one stays open
    assert "×7" in line.value
    assert board.box.children[:len(children)] == children  # the new one is appended
    assert "%topology logs wc split 3" in details.value


def test_a_traceback_from_an_instance_gets_the_cells_source_lines():
    tb = ('Traceback (most recent call last):\n'
          '  File "/usr/lib/x.py", line 3, in run\n'
          '    known()\n'
          '  File "/tmp/ipykernel_7/12.py", line 5, in process\n'
          "ValueError: forty is right out")
    lines = {("/tmp/ipykernel_7/12.py", 5): "            raise ValueError('forty')\n"}
    shown = _lists.with_sources(tb, lambda f, n: lines.get((f, n), ""),
                                lambda f: "Cell In[3]" if "ipykernel" in f else None)
    assert shown.splitlines()[1:] == [
        '  File "/usr/lib/x.py", line 3, in run', "    known()",
        "  Cell In[3], line 5, in process", "    raise ValueError('forty')",
        "ValueError: forty is right out"]


def test_a_bolt_busy_in_the_last_seconds_is_at_capacity_before_the_window_says_so():
    # the window's capacity counts the start-up: 0.4 after 4 s of a 10 s span
    snap = recorded(src=SPOUT, count={**IDLE_COUNT, "capacity": 0.4})
    assert _verdict.verdict(snap)["level"] == "healthy"
    snap["recent"] = {"count": {"capacity": 0.97}, "src": {"capacity": 1.0}}
    found = _verdict.verdict(snap)
    assert (found["level"], found["component"]) == ("degraded", "count")


# -- why is it slow (issue 19): the bottleneck finder's panel and the verdict -------------------
def skewed() -> dict:
    """Three tasks of ``count``, one at capacity with a hot key, the others idle."""
    hot = {"total": 1000, "top": [{"key": "the", "tuples": 640, "share": 0.64}]}
    count = {**SLOW_COUNT, "instances": 3, "skew": {"executed": 2.6, "busy": 2.4},
             "hot_keys": hot}
    snap = recorded(sentences=SPOUT, split=SPLIT, count=count)
    snap["metrics"]["instances"] = {
        3: {"component": "count", "capacity": 0.98}, 4: {"component": "count", "capacity": 0.1},
        5: {"component": "count", "capacity": 0.15}}
    return snap


def test_the_findings_panel_names_the_hot_key_at_the_top():
    snap = skewed()
    html = _panels.status_html(snap)
    assert 'class="tf-findings"' in html
    first = html.split('class="tf-finding"')[1]
    assert 'data-kind="skew"' in first and 'data-component="count"' in first
    assert "the" in first and "partial_key_grouping" in first and "count[3]" in first
    assert _panels.findings_html(recorded(sentences=SPOUT, split=SPLIT, count=IDLE_COUNT)) == ""


def test_the_verdict_names_the_top_finding_it_does_not_already_say():
    found = _verdict.verdict(skewed())
    assert found["level"] == "degraded" and found["component"] == "count"
    snap = recorded(sentences={**SPOUT, "pending": 2, "max_spout_pending": 2}, split=SPLIT,
                    count={**IDLE_COUNT, "capacity": 0.05})
    found = _verdict.verdict(snap)
    assert (found["level"], found["component"]) == ("degraded", "sentences")
    assert found["reason"].startswith("max spout pending at sentences:")
