"""Every tutorial notebook runs end to end in a real kernel, as a learner would run it.

A notebook fails this test when any cell raises; the tutorials assert what they teach
(nothing lost with acking, exact counts with persistent state...), so a behaviour that
regresses fails here too. The kernel's working directory is ``tutorials/``. Each executed
notebook is also exported to HTML as ``make tutorials`` writes it, and every dashboard it
showed must be there as its static last picture (readable with no kernel and no widgets).

The notebooks are kept in git without outputs: what a learner reads with outputs is
``make tutorials``' ``build/tutorials/*.html``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]-*.ipynb"))
CELL_TIMEOUT = 120  # seconds for one cell; each tutorial is meant to run in under a minute


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_tutorials_are_here():
    assert len(NOTEBOOKS) >= 1, f"no tutorials found in {TUTORIALS}"


def test_the_readme_lists_every_tutorial_in_order():
    """The README's table is where a learner finds the tutorials: one row a notebook, by
    its number, and no row for a notebook that is not there."""
    readme = (TUTORIALS.parent / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `(\d\d-[\w-]+)` \|", readme, flags=re.M)
    assert [name for _, name in rows] == [p.stem for p in NOTEBOOKS], rows
    assert all(int(number) == int(name[:2]) for number, name in rows), rows


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_tutorials_are_stored_without_outputs(path: Path):
    """Outputs belong in build/tutorials (``make tutorials``), not in git: a stored output
    goes stale as the code changes, and makes every diff of the notebook noisy."""
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} hold outputs or execution counts"
    assert "widgets" not in nb.metadata, f"{path.name} holds saved widget state"


def static_pictures(nb) -> tuple[list[int], int, str]:
    """The cells whose widget output carries no static picture of its dashboard, how many
    outputs are such pictures, and the notebook as the HTML ``make tutorials`` writes."""
    bare, pictures = [], 0
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            picture = "tupleflow-snapshot" in data.get("text/html", "")
            pictures += picture
            if WIDGET_VIEW in data and not picture:
                bare.append(i)
    body, _ = HTMLExporter().from_notebook_node(nb)
    return bare, pictures, body


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_tutorial_runs(path: Path, tmp_path: Path, monkeypatch):
    # The kernel inherits the environment: make the checkout importable for it, and keep the
    # tutorial's run directories and data in this test's folder.
    root = str(TUTORIALS.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("TUPLEFLOW_LOG_ROOT", str(tmp_path / "log"))
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(TUTORIALS)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    bare, pictures, body = static_pictures(nb)
    assert not bare, f"cells {bare} show a widget with no static picture for the HTML copy"
    assert body.count('class="tupleflow-snapshot"') >= pictures, "the HTML lost a picture"
