"""The windows panel and the checkpoint panel (issue 21) in real JupyterLab, in headless
Chromium: a notebook runs a checkpointed topology whose spout sends events in event time
(every tenth one 3 s late) to a windowed bolt and to a stateful counter; a person opens the
tasks tab, chooses the windowed bolt (its windows, and its open windows' part of the
checkpoints), then the counter, and reads what the dashboard shows.
Screenshots go to ``artifacts/browser/windows.png`` and ``checkpoints.png``. Fixtures and
helpers: test_jupyterlab.py, test_lineage_browser.py and conftest.py
(docs/internals/browser-tests.md)."""

from __future__ import annotations

import pytest

from . import test_jupyterlab as notebook
from .test_lineage_browser import choose

pytestmark = pytest.mark.slow

COMPONENTS = '''import time
from runtime import Spout, StatefulBolt, WindowedBolt
class Events(Spout):
    """Event n happens at n * 100 ms (event time), 50 are sent a second; every tenth
    is sent 3 s of event time late (behind the watermark: a late tuple)."""
    outputs = ["key", "ts"]
    def open(self, config, context):
        self.n, self.t0 = 0, time.monotonic()
    def next_tuple(self):
        while self.n < int((time.monotonic() - self.t0) * 50) + 1:
            late = 3000 if self.n % 10 == 9 else 0
            self.emit([self.n % 8, max(0, self.n * 100 - late)])
            self.n += 1
class Total(WindowedBolt):
    outputs = ["start", "end", "n"]
    def process_window(self, window):
        self.emit([window.start, window.end, len(window.tuples)])
class Tally(StatefulBolt):
    outputs = ["key", "n"]
    def process(self, tup):
        n = self.state.get(tup["key"], 0) + 1
        self.state.put(tup["key"], n)
        self.emit([tup["key"], n])'''
CELLS = [
    "%load_ext kernel_ext",
    COMPONENTS,
    "%%topology demo checkpoint_interval=0.5\n"
    "events: Events\n"
    "total:  Total * 2 <- events fields(key)  window=2s slide=1s timestamp_field=ts "
    "lag=500ms watermark_interval=200ms late_stream=late\n"
    "tally:  Tally     <- events fields(key)",
    "%topology submit demo",
]
WINDOWS, CHECKPOINTS = ".tupleflow-windows", ".tupleflow-checkpoints"
KERNEL_WORK, REFRESH = notebook.KERNEL_WORK, notebook.REFRESH  # deadlines, ms
# A windows-table cell's exact value (data-value), per task row, as numbers (None when
# the task reports none).
WINDOW_VALUES = """([selector, key, attribute]) => [...document.querySelectorAll(
    selector + ' tr[data-task] td[data-key="' + key + '"]')].map(
    cell => cell.dataset[attribute] === 'None' ? null : Number(cell.dataset[attribute]))"""
# The id of the last committed checkpoint the panel names, when above `floor` (else false).
CHECKPOINT_ABOVE = """([selector, floor]) => {
    const node = document.querySelector(selector + ' [data-key="checkpoint_id"]');
    const id = node === null ? NaN : Number(node.dataset.value);
    return id > floor ? id : false;
}"""
# Whether every task row's `key` cell is above `floor` (and there are `rows` rows).
EVERY_ROW_ABOVE = """([selector, key, floor, rows]) => {
    const cells = [...document.querySelectorAll(
        selector + ' tr[data-task] td[data-key="' + key + '"]')];
    return cells.length === rows && cells.every(c => Number(c.dataset.value) > floor);
}"""


def window_values(page, key: str, attribute: str = "value") -> list:
    return page.evaluate(WINDOW_VALUES, [WINDOWS, key, attribute])


def checkpoint_above(page, floor: int) -> int:
    found = page.wait_for_function(CHECKPOINT_ABOVE, arg=[CHECKPOINTS, floor], timeout=REFRESH)
    return int(found.json_value())


def reads_windows(page) -> None:
    """The windowed bolt's two tasks: watermarks that advance, windows evaluated, late
    tuples counted, and the last evaluated window's bounds (2 s apart, ending on a
    1-s slide) and its tuple count."""
    page.wait_for_function(EVERY_ROW_ABOVE, arg=[WINDOWS, "evaluated", 0, 2],
                           timeout=KERNEL_WORK)
    page.wait_for_function(EVERY_ROW_ABOVE, arg=[WINDOWS, "late_tuples", 0, 2],
                           timeout=KERNEL_WORK)
    marks = window_values(page, "watermark")
    page.wait_for_function(  # each task's watermark moves on
        """([selector, before]) => [...document.querySelectorAll(
            selector + ' tr[data-task] td[data-key="watermark"]')].every(
            (c, i) => Number(c.dataset.value) > before[i])""",
        arg=[WINDOWS, marks], timeout=REFRESH)
    bounds = page.evaluate(  # both bounds in one read: a refresh between two would mix them
        """(selector) => [...document.querySelectorAll(
            selector + ' tr[data-task] td[data-key="last_window"]')].map(
            c => [Number(c.dataset.start), Number(c.dataset.end)])""", WINDOWS)
    assert len(bounds) == 2 and all(e - s == 2000 and e % 1000 == 0 for s, e in bounds), bounds
    assert all(n > 0 for n in window_values(page, "last_window_tuples"))
    text = page.locator(WINDOWS).first.inner_text()
    assert "watermark" in text and "late tuples" in text, text


def reads_checkpoints(page) -> None:
    """The counter's panel: a committed checkpoint whose id advances, and its task's row
    with the checkpoints it saved."""
    first = checkpoint_above(page, 0)
    checkpoint_above(page, first)
    page.wait_for_function(EVERY_ROW_ABOVE, arg=[CHECKPOINTS, "saved", 0, 1], timeout=REFRESH)
    assert "last committed" in page.locator(CHECKPOINTS).first.inner_text()


def reads_window_checkpoints(page) -> None:
    """The windowed bolt's open windows are in the checkpoint too: its panel has a row per
    task with the tuples held and the bytes of its last saved snapshot."""
    page.locator(CHECKPOINTS).first.wait_for(timeout=KERNEL_WORK)
    page.wait_for_function(EVERY_ROW_ABOVE, arg=[CHECKPOINTS, "window_bytes", 0, 2],
                           timeout=KERNEL_WORK)
    assert "held tuples" in page.locator(CHECKPOINTS).first.inner_text()


@pytest.mark.timeout(300)
def test_the_windows_and_checkpoint_panels_show_what_the_topology_does(
        lab, page, tupleflow_processes):
    notebook.run_notebook(page, lab, CELLS)

    page.locator(".lm-TabBar-tab", has_text="tasks").first.click()
    choose(page, "tasks of", "total")
    page.locator(WINDOWS).first.wait_for(timeout=KERNEL_WORK)
    reads_windows(page)
    reads_window_checkpoints(page)
    notebook.scroll_to(page, WINDOWS)
    page.screenshot(path=str(notebook.SHOTS / "windows.png"))

    choose(page, "tasks of", "tally")
    page.locator(CHECKPOINTS).first.wait_for(timeout=KERNEL_WORK)
    reads_checkpoints(page)
    assert page.locator(f"{notebook.DASHBOARD} {WINDOWS}").count() == 0  # tally has no window
    notebook.scroll_to(page, CHECKPOINTS)
    page.screenshot(path=str(notebook.SHOTS / "checkpoints.png"))

    notebook.kill_and_stop(page, lab, tupleflow_processes)
