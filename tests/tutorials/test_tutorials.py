"""Every tutorial notebook runs end to end in a real kernel, as a learner would run it.

A notebook fails this test when any cell raises; the tutorials assert what they teach
(nothing lost with acking, exact counts with persistent state...), so a behaviour that
regresses fails here too. The kernel's working directory is ``tutorials/``.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

TUTORIALS = Path(__file__).resolve().parents[2] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]-*.ipynb"))
CELL_TIMEOUT = 120  # seconds for one cell; each tutorial is meant to run in under a minute


def test_the_tutorials_are_here():
    assert len(NOTEBOOKS) >= 1, f"no tutorials found in {TUTORIALS}"


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
