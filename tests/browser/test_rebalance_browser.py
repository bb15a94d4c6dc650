"""The dashboard's rebalance control (issue 22) in real JupyterLab, in headless Chromium: a
notebook runs ``nums -> double * 2`` (``max_parallelism=4``) with its dashboard; a person
types ``double=3`` in the rebalance box and clicks. While it runs the box and button are
off and a line says what moves (the added task waits for a file the test writes, so the
"while" is a condition, not a race); then the line gives the event's figures and the
graph says ``× 3``; ``double=5`` is refused, in words, above the maximum. Screenshots go
to ``artifacts/browser/rebalancing.png`` and ``rebalanced.png``. Fixtures and helpers:
test_jupyterlab.py and conftest.py (docs/internals/browser-tests.md)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from . import test_jupyterlab as notebook

pytestmark = pytest.mark.slow

GATE = "open-the-gate"  # in the notebook's folder: the added tasks start once it exists
COMPONENTS = f'''import os, time
from runtime import Bolt
from runtime.testing import PacedSpout
class Gated(Bolt):
    """Doubles; an added task (index 2 and up: it starts with two) starts only once
    the gate file exists."""
    outputs = ["n"]
    def __init__(self, gate):
        self.gate = gate
    def prepare(self, config, context):
        while context.task_index > 1 and not os.path.exists(self.gate):
            time.sleep(0.01)
    def process(self, tup):
        self.emit([tup["n"] * 2])
gated = Gated(os.path.abspath({GATE!r}))'''
CELLS = [
    "%load_ext kernel_ext",
    COMPONENTS,
    "%%topology demo\nnums:   PacedSpout\ndouble: gated * 2   <- nums shuffle  max_parallelism=4",
    "%topology submit demo",
]
LINE, DASHBOARD = ".tupleflow-rebalance", notebook.DASHBOARD
KERNEL_WORK, REFRESH = notebook.KERNEL_WORK, notebook.REFRESH  # deadlines, ms
# The rebalance line's text, when it holds every one of `words` (else false).
LINE_SAYS = """([selector, words]) => {
    const node = document.querySelector(selector);
    const text = node === null ? '' : node.textContent;
    return words.every(w => text.includes(w)) ? text : false;
}"""
# Whether the graph's node for `component` says `tasks` (its `× N`, in data-tasks).
GRAPH_SAYS = """([component, tasks]) => {
    const node = document.querySelector(
        '.tupleflow-graph g[data-component="' + component + '"]');
    return node !== null && node.dataset.tasks === String(tasks)
        && node.textContent.includes('× ' + tasks);
}"""


def line_says(page, *words: str, timeout: int = REFRESH) -> str:
    found = page.wait_for_function(LINE_SAYS, arg=[LINE, list(words)], timeout=timeout)
    return str(found.json_value())


def rebalance(page, text: str) -> None:
    """Type ``text`` in the rebalance box and click the button, as a person would."""
    label = page.locator("label", has_text=re.compile("^rebalance$"))
    box = page.locator(f"{DASHBOARD} .widget-text").filter(has=label).locator("input").first
    box.fill(text)
    button(page).click()


def button(page):
    return page.locator(f"{DASHBOARD} button", has_text=re.compile(r"^\s*rebalance\s*$")).first


@pytest.mark.timeout(300)
def test_the_rebalance_control_shows_what_moves_then_what_it_did_or_why_not(
        lab, page, tupleflow_processes):
    notebook.run_notebook(page, lab, CELLS)
    notebook.wait_for_emitted(page, 0, KERNEL_WORK)
    page.wait_for_function(GRAPH_SAYS, arg=["double", 2], timeout=REFRESH)

    rebalance(page, "double=3")
    line_says(page, "rebalance double=3", "moving: double 2 → 3 tasks", timeout=KERNEL_WORK)
    # The widgets' updates reach the page model by model: wait for the button's (the
    # added task waits for the gate, so the rebalance cannot end meanwhile).
    expect(button(page)).to_be_disabled(timeout=REFRESH)
    notebook.refreshes(page, 2)  # the dashboard refreshes meanwhile
    assert button(page).is_disabled()
    notebook.scroll_to(page, LINE)
    page.screenshot(path=str(notebook.SHOTS / "rebalancing.png"))

    (lab.root / GATE).touch()
    line_says(page, "rebalance double=3: done in", "spouts paused", "double → 3 tasks",
              "tasks added", "keys moved", timeout=KERNEL_WORK)
    page.wait_for_function(GRAPH_SAYS, arg=["double", 3], timeout=REFRESH)
    expect(button(page)).to_be_enabled(timeout=REFRESH)
    notebook.scroll_to(page, f"{notebook.GRAPH} svg")
    page.screenshot(path=str(notebook.SHOTS / "rebalanced.png"))

    rebalance(page, "double=5")
    refused = line_says(page, "rebalance double=5: refused",
                        "component 'double': parallelism 5 is above its maximum "
                        "parallelism 4", timeout=KERNEL_WORK)
    assert "moving" not in refused
    page.wait_for_function(GRAPH_SAYS, arg=["double", 3], timeout=REFRESH)  # unchanged

    notebook.kill_and_stop(page, lab, tupleflow_processes)
