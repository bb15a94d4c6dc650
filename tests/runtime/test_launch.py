"""The steps every scheduler shares (runtime/processes/launch.py), without starting one."""

from __future__ import annotations

import os
from pathlib import Path

import runtime
from runtime.processes.launch import _child_env


def test_children_import_the_runtime_the_submitter_imports():
    """The master's PYTHONPATH starts with the folder holding this runtime package (not
    the package itself: a move into runtime/processes/ once made it so)."""
    first = _child_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert Path(first) == Path(runtime.__file__).resolve().parent.parent
