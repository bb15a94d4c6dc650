"""``%topology submit`` (with its dashboard), ``dashboard`` and ``tap``, through a real
IPython shell against a real running topology."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from runtime.testing import wait_for
from workbench import Dashboard, TupleTable

from .test_magics import ipython, magics

pytestmark = pytest.mark.slow
WIDGET = "application/vnd.jupyter.widget-view+json"
SETUP = """
from runtime.testing import PacedSpout, ListSink
source = PacedSpout(200)
"""
CELL = """
src:  source
sink: ListSink <- src shuffle
"""


@pytest.fixture
def running_demo():
    """A shell with ``demo`` submitted (its dashboard shown); unloads (kills) after."""
    ip = ipython()
    ip.run_line_magic("load_ext", "kernel_ext")
    ip.run_cell(SETUP)
    with capture_output() as out:
        ip.run_cell_magic("topology", "demo", CELL)
        running = ip.run_line_magic("topology", "submit demo")
    running.wait_active()
    yield ip, running, out
    ip.run_line_magic("unload_ext", "kernel_ext")


def boards(ip) -> list[Dashboard]:
    return magics(ip).registry.get("demo").dashboards


def test_submit_returns_the_handle_and_shows_a_live_dashboard(running_demo):
    ip, running, out = running_demo
    assert running is ip.user_ns["demo_running"]
    shown = out.outputs[-1].data
    assert WIDGET in shown and 'class="tupleflow-status"' in shown["text/html"]
    (board,) = boards(ip)
    assert board.running is running and board.topology is ip.user_ns["demo"]
    wait_for(lambda: board.snapshot.get("state") == "running" and board.ticks >= 2, 20,
             "the dashboard to refresh on its own")


def test_dashboard_reopens_another_view(running_demo):
    ip, running, _ = running_demo
    with capture_output() as out:
        ip.run_line_magic("topology", "dashboard demo interval=0.5")
    assert WIDGET in out.outputs[-1].data
    first, second = boards(ip)
    assert second.interval == 0.5 and second is not first


def test_kill_stops_every_dashboard_of_the_topology(running_demo):
    ip, running, _ = running_demo
    with capture_output():
        ip.run_line_magic("topology", "dashboard demo")
    opened = boards(ip)
    with capture_output() as out:
        ip.run_line_magic("topology", "kill demo")
    assert "killed demo" in out.stdout
    assert [(b.stopped, b.snapshot["state"]) for b in opened] == [(True, "killed")] * 2


def test_tap_shows_the_latest_tuples_as_a_table(running_demo):
    ip, running, _ = running_demo
    with capture_output() as out:
        wait_for(lambda: ip.run_line_magic("topology", "tap demo src default n=5") or
                 out.outputs, 30, "a tap with tuples")
    table = out.outputs[-1]
    assert 'class="tupleflow-tap"' in table.data["text/html"]
    lines = table.data["text/plain"].splitlines()
    assert lines[0].startswith("src [default]: ") and 1 <= len(lines) - 1 <= 5
    tapped = [int(line.rsplit("n=", 1)[1]) for line in lines[1:]]
    assert tapped == sorted(tapped, reverse=True)


def test_tap_on_a_silent_edge_says_there_is_nothing_yet(running_demo):
    ip, running, _ = running_demo
    with capture_output() as out:  # the sink declares a stream but never emits
        assert ip.run_line_magic("topology", "tap demo sink default") is None
    assert "no tuples seen on sink [default]" in out.stdout and out.outputs == []
    assert "sink sent nothing on any stream in the last 1m" in out.stdout  # why, in words


def test_tap_on_a_sink_shows_what_it_receives(running_demo):
    ip, running, _ = running_demo
    with capture_output() as out:
        wait_for(lambda: ip.run_line_magic("topology", "tap demo sink n=5") or
                 out.outputs, 30, "a tap of the sink's input with tuples")
    html = out.outputs[-1].data["text/html"]
    assert "into sink (what it receives)" in html and ">src[1]<" in html
    assert ">sink[2]<" in html


USAGE_ERRORS = [  # (line, what the one-line error says): one topology serves them all
    ("tap demo", "usage: %topology tap NAME COMPONENT [STREAM] [n=20]"),
    ("tap demo src default extra", "usage: %topology tap"),
    ("tap demo src x=1", "usage: %topology tap"),
    ("tap nope src", "no submitted topology `nope`"),
    ("tap dem src", "did you mean `demo`?"),
    ("tap demo scr", "did you mean 'src'?"),
    ("tap demo src errors", "stream"),
    ("tap demo src n=0", "n is a number of tuples from 1 to 10000, not `0`"),
    ("tap demo src n=many", "not `many`"),
    ("tap demo src n=10001", "not `10001`"),
    ("dashboard nope", "no submitted topology `nope`"),
    ("dashboard demo interval=0", "interval is a number of seconds > 0"),
    ("dashboard demo interval=soon", "interval is a number of seconds > 0"),
    ("dashboard demo every=2", "unknown option `every`"),
    ("dashboard demo 2", "usage: %topology dashboard NAME"),
]


def test_every_tap_and_dashboard_usage_error(running_demo):
    ip, _, _ = running_demo
    said = {}
    for line, _ in USAGE_ERRORS:
        with pytest.raises(UsageError) as err:
            ip.run_line_magic("topology", line)
        said[line] = str(err.value)
    assert {line: message in said[line] for line, message in USAGE_ERRORS} == {
        line: True for line, _ in USAGE_ERRORS}, said
    assert len(boards(ip)) == 1  # no error opened a dashboard


def test_tap_of_a_dead_topology_is_reported_not_raised(running_demo):
    ip, running, _ = running_demo
    running.kill()
    with capture_output() as out:
        assert ip.run_line_magic("topology", "tap demo src") is None
    assert "%topology tap: TopologyDead" in out.stderr


def test_tuple_table_is_public():
    assert repr(TupleTable("a", "default", [])) == "a [default]: 0 tuples"


def test_record_then_stop_recording_writes_parquet_the_bridge_reads(running_demo, tmp_path):
    from runtime.recording import read_table

    ip, running, _ = running_demo
    with capture_output() as out:
        ip.run_line_magic("topology", "record demo src")
    assert "recording src [default]" in out.stdout
    wait_for(lambda: read_table(running, "src").num_rows > 0, 30, "a recorded segment")
    with capture_output() as out:
        ip.run_line_magic("topology", "stop_recording demo src")
    assert "stopped recording src [default]" in out.stdout
    table = read_table(running, "src")
    assert {"_task", "_emit_ts", "_root_id"} <= set(table.column_names)


@pytest.mark.parametrize("line, message", [
    ("record demo nope", "no component 'nope' to record; components: sink, src"),
    ("record demo src nope", "component 'src' has no stream 'nope'"),
    ("stop_recording demo nope", "no component 'nope' to record"),
    ("record", r"usage: %topology record NAME COMPONENT \[STREAM\]"),
])
def test_record_errors_are_one_line_usage_errors(running_demo, line, message):
    ip, _, _ = running_demo
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("topology", line)


def test_the_handle_shown_under_a_dashboard_says_killed_after_the_kill(running_demo):
    ip, running, _ = running_demo
    with capture_output() as shown:
        ip.run_cell("demo_running")  # the handle as a cell's result
    assert any("<RunningTopology 'demo' running" in o.data.get("text/plain", "")
               for o in shown.outputs)
    ((handle, view),) = magics(ip).handles.shown
    assert handle is running and view.display_id
    with capture_output() as redrawn:
        ip.run_line_magic("topology", "kill demo")
    assert any("<RunningTopology 'demo' killed" in o.data.get("text/plain", "")
               for o in redrawn.outputs), [o.data for o in redrawn.outputs]
