"""A notebook run end to end by nbclient in a real ipykernel: magics, the live dashboard,
``%topology tap``, kill; the saved outputs keep a static picture; nbconvert exports it.
"""

from __future__ import annotations

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from runtime.testing import wait_for

pytestmark = pytest.mark.slow
REPO = pathlib.Path(__file__).resolve().parents[2]
WIDGET = "application/vnd.jupyter.widget-view+json"
CELLS = [
    f"import sys; sys.path.insert(0, {str(REPO)!r})\n%load_ext kernel_ext\n"
    "from runtime.testing import PacedSpout, Doubler, ListSink, wait_for\n"
    "source = PacedSpout(200)",
    "%%topology demo\nsrc:  source\ndbl:  Doubler * 2 <- src shuffle\n"
    "sink: ListSink    <- dbl global",
    "%topology submit demo",
    "wait_for(lambda: sum(s.executed for s in demo_running.statistics()\n"
    "                     if s.component == 'sink') > 50, 60, 'tuples at the sink')\n"
    "# the tap is on for 10 s after a request: make sure it has seen 5 tuples (a loaded\n"
    "# machine may take longer than the magic's own wait)\n"
    "wait_for(lambda: len(demo_running.sample('src', n=5)) == 5, 60, 'a tap of 5')",
    "%topology tap demo src n=5",
    "6 * 7",
    "%topology kill demo",
]
SUBMIT, TAP, ANSWER, KILL = 2, 4, 5, 6


def notebook(cells: list[str]):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def client(nb, tmp_path) -> NotebookClient:
    return NotebookClient(nb, timeout=90, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})


def data(cell, mimetype: str) -> list:
    return [o["data"][mimetype] for o in cell.outputs if mimetype in o.get("data", {})]


def test_a_notebook_submits_watches_taps_and_kills(tmp_path, tupleflow_processes):
    nb = notebook(CELLS)
    run = client(nb, tmp_path)
    with run.setup_kernel():
        for index in range(KILL):
            run.execute_cell(nb.cells[index], index)
        live = nb.cells[SUBMIT]
        assert data(live, WIDGET), "the submit cell shows the dashboard widget"
        (fallback,) = data(live, "text/html")
        assert 'class="tupleflow-dashboard"' not in fallback  # the picture, not the widget
        assert 'class="tupleflow-graph"' in fallback and "<svg" in fallback
        assert "RunningTopology 'demo'" in data(live, "text/plain")[-1]
        assert tupleflow_processes()
        run.execute_cell(nb.cells[KILL], KILL)
    assert "data" in nb.cells[TAP].outputs[-1], nb.cells[TAP].outputs
    tap = nb.cells[TAP].outputs[-1]["data"]
    assert 'class="tupleflow-tap"' in tap["text/html"]
    assert tap["text/plain"].startswith("src [default]: 5 tuples")
    assert data(nb.cells[ANSWER], "text/plain") == ["42"]
    assert "killed demo" in nb.cells[KILL].outputs[0]["text"]
    # the dashboard's output became its last state, as static HTML with no widget or script
    stopped = nb.cells[SUBMIT]
    assert not data(stopped, WIDGET), [o.get("data", o).keys() for o in stopped.outputs]
    (picture,) = data(stopped, "text/html")
    assert ">killed</span>" in picture and "<svg" in picture and "<script" not in picture
    assert 'data-component="sink"' in picture and "container 0" in picture
    wait_for(lambda: not tupleflow_processes(), 30, "the topology's processes to exit")
    nbformat.write(nb, tmp_path / "dashboard.ipynb")
    exported, _ = HTMLExporter().from_filename(str(tmp_path / "dashboard.ipynb"))
    assert ">killed</span>" in exported and 'class="tupleflow-metrics"' in exported


def test_shutting_the_kernel_down_kills_its_topologies(tmp_path, tupleflow_processes):
    nb = notebook(CELLS[:3])
    run = client(nb, tmp_path)
    with run.setup_kernel():
        for index, cell in enumerate(nb.cells):
            run.execute_cell(cell, index)
        wait_for(tupleflow_processes, 30, "the topology's processes")
    wait_for(lambda: not tupleflow_processes(), 30, "the processes to die with the kernel")
