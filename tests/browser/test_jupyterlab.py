"""A notebook run by a person, as closely as a test can: real JupyterLab, real kernel, real
topology processes, headless Chromium clicking the Run menu and typing into cells.

The dashboard's DOM contract (workbench's Dashboard, shown by ``%topology submit``):
``.tupleflow-dashboard`` is the root, ``.tupleflow-graph`` holds an inline ``<svg>``,
``.tupleflow-metrics`` is a table whose text changes as counts grow (the test reads its
"emitted" column), ``.tupleflow-status`` says "NAME: STATE". See docs/internals/browser-tests.md.
"""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Error as PlaywrightError

from runtime.testing import wait_for

pytestmark = pytest.mark.slow

NOTEBOOK = "dashboard.ipynb"
CELLS = [
    "%load_ext kernel_ext\nfrom runtime.testing import PacedSpout, Doubler",
    "%%topology demo\nnums:   PacedSpout\ndouble: Doubler * 2   <- nums shuffle",
    "%topology submit demo",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "artifacts" / "browser" / "dashboard.png"
DASHBOARD, GRAPH = ".tupleflow-dashboard", ".tupleflow-graph"
METRICS, STATUS = ".tupleflow-metrics", ".tupleflow-status"
# Deadlines (milliseconds, Playwright's unit) for conditions on a loaded 2-core machine;
# nothing is asserted about how fast anything is.
PAGE_LOAD, KERNEL_WORK, REFRESH = 60_000, 60_000, 20_000
# The status line reads "NAME: STATE HH:MM:SS ..."; the time changes at every refresh.
STATE_IS = """([selector, name, state]) => {
    const node = document.querySelector(selector);
    return node !== null && node.textContent.includes(name + ': ' + state);
}"""
# The sum of the "emitted" column over the component rows of the metrics table, when it is
# above `floor` (else false). Cells show numbers for people ("1.2k"); each carries the exact
# value in data-value. Any other column (CPU, RSS, capacity) changes too, so a mere text
# change would not prove that tuples flow.
EMITTED_ABOVE = """([selector, floor]) => {
    const table = document.querySelector(selector + ' table');
    if (table === null) return false;
    let total = 0;
    for (const cell of table.querySelectorAll('tr[data-component] td[data-key="emitted"]')) {
        total += Number(cell.dataset.value) || 0;
    }
    return total > floor ? total : false;
}"""
# The dashboard's own horizontal overflow (px): what it would scroll sideways. Tables may
# scroll inside their own .tf-scroll box; the dashboard itself must not.
OVERFLOW = """(selector) => {
    const node = document.querySelector(selector);
    return node.scrollWidth - node.clientWidth;
}"""
# What sticks out of the dashboard's right edge (to say why it overflows).
STICKING_OUT = """(selector) => {
    const node = document.querySelector(selector);
    const right = node.getBoundingClientRect().right;
    return [...node.querySelectorAll('*')]
        .filter(e => e.getBoundingClientRect().right > right + 1)
        .slice(0, 5).map(e => e.tagName + '.' + [...e.classList].join('.'));
}"""
# Whether the node's box is inside the browser's window (the header is "visible").
IN_VIEW = """(selector) => {
    const box = document.querySelector(selector).getBoundingClientRect();
    return box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight
        && box.left >= 0 && box.right <= window.innerWidth;
}"""
STATUS_CHANGED = """([selector, before]) => {
    const node = document.querySelector(selector);
    return node !== null && node.textContent !== before;
}"""
SHOTS = REPO / "artifacts" / "browser"
FLAKY = ("from runtime import Bolt\n"
         "class Flaky(Bolt):\n"
         "    outputs = ['n']\n"
         "    def process(self, tup):\n"
         "        if tup['n'] == 40:\n"
         "            raise ValueError('forty is right out')\n"
         "        self.emit(tup.values)")
LEARNER_CELLS = [
    "%load_ext kernel_ext\nfrom runtime.testing import PacedSpout, Doubler\n"
    "import runtime\nprint(runtime.__file__)",
    FLAKY,
    "%%topology demo\nnums:   PacedSpout\nflaky:  Flaky * 2  <- nums shuffle\n"
    "double: Doubler    <- flaky shuffle",
    "%topology submit demo",
]


def write_notebook(root: Path, cells: list[str] = CELLS) -> Path:
    """The notebook under test, with the python3 kernel named so JupyterLab starts it."""
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}})
    path = root / NOTEBOOK
    nbformat.write(notebook, path)
    return path


def open_notebook(page, lab, cells: int = len(CELLS)) -> None:
    """Open the notebook and wait until its cells are on the page and its kernel is idle,
    with the page connected to it (as the server sees it, and as the page shows it)."""
    page.goto(lab.url(f"/lab/tree/{NOTEBOOK}"), timeout=PAGE_LOAD)
    page.locator(".jp-Notebook .jp-Cell").nth(cells - 1).wait_for(timeout=PAGE_LOAD)
    wait_for(lambda: kernel_connected(lab), PAGE_LOAD / 1000,
             "the notebook's kernel to start and the page to connect to it")
    page.wait_for_function(
        """() => document.querySelector('.jp-Notebook-ExecutionIndicator')
                   ?.getAttribute('data-status') === 'idle'""", timeout=PAGE_LOAD)


def run_notebook(page, lab, cells: list[str]) -> None:
    """Write ``cells`` as the notebook, open it, Run All, and wait until the dashboard
    of the topology ``demo`` it submits says running (screenshots go to ``SHOTS``)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    write_notebook(lab.root, cells)
    open_notebook(page, lab, len(cells))
    run_all_cells(page)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "running"], timeout=KERNEL_WORK)


def kernel_connected(lab) -> bool:
    """Whether the server has an idle kernel with a client connected. Without this, a Run
    All clicked while the page is still connecting can be lost. While the kernel starts,
    the server may answer 500 for a moment: that is "not yet", not a failure."""
    try:
        kernels = lab.api("GET", "/api/kernels")
    except urllib.error.HTTPError:
        return False
    return any(k["execution_state"] == "idle" and k["connections"] for k in kernels)


def run_all_cells(page) -> None:
    """Run ▸ Run All Cells, through the menu bar as a person would."""
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()


def run_new_cell(page, source: str):
    """Add a cell below the last one, type ``source``, run it (Ctrl+Enter: run, and add no
    empty cell after it); the cell."""
    cells = page.locator(".jp-Notebook .jp-Cell")
    count = cells.count()
    cells.last.locator(".jp-InputPrompt").click()  # select it, in command mode
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # insert below
    cells.nth(count).wait_for()
    page.keyboard.press("Enter")  # edit mode
    page.keyboard.type(source)
    page.keyboard.press("Control+Enter")
    return cells.nth(count)


def wait_for_emitted(page, floor: int, timeout: int) -> int:
    """Wait until the metrics table's emitted count is above ``floor``; return it."""
    found = page.wait_for_function(EMITTED_ABOVE, arg=[METRICS, floor], timeout=timeout)
    return int(found.json_value())


def wait_for_counts_to_grow(page, timeout: int = REFRESH) -> None:
    """Two successive reads of the emitted count, the second larger: tuples flow, and the
    dashboard shows it."""
    first = wait_for_emitted(page, 0, timeout)
    wait_for_emitted(page, first, timeout)


def test_a_notebook_shows_a_live_dashboard_in_jupyterlab(lab, page, tupleflow_processes):
    write_notebook(lab.root)
    open_notebook(page, lab)
    run_all_cells(page)

    page.locator(DASHBOARD).first.wait_for(timeout=KERNEL_WORK)
    page.locator(f"{GRAPH} svg").first.wait_for(timeout=KERNEL_WORK)
    page.locator(METRICS).first.wait_for(timeout=KERNEL_WORK)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "running"], timeout=KERNEL_WORK)
    wait_for_emitted(page, 0, KERNEL_WORK)  # the topology has started: tuples counted
    wait_for_counts_to_grow(page)
    assert tupleflow_processes(), "the dashboard is up but no topology process runs"

    probe = run_new_cell(page, "6 * 7")  # the kernel answers while the dashboard refreshes
    probe.locator(".jp-OutputArea-output", has_text="42").wait_for(timeout=KERNEL_WORK)
    wait_for_counts_to_grow(page)  # ...and the dashboard still refreshes afterwards

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.locator(DASHBOARD).first.evaluate("node => node.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 0

    kill_and_stop(page, lab, tupleflow_processes)


def kill_and_stop(page, lab, tupleflow_processes) -> None:
    """A typed ``%topology kill demo``: it says so, the dashboard says killed, every
    topology process exits; then the notebook's kernel is closed and leaves no process
    behind."""
    kill = run_new_cell(page, "%topology kill demo")
    kill.locator(".jp-OutputArea-output", has_text="killed demo").wait_for(timeout=KERNEL_WORK)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "killed"], timeout=REFRESH)
    wait_for(lambda: not tupleflow_processes(), 30, "the topology's processes to exit")
    leftovers = lab.close()
    assert not leftovers, f"JupyterLab left processes behind: {leftovers}"


def refreshes(page, count: int) -> None:
    """Wait for ``count`` refreshes of the dashboard (its status line changes every tick:
    it shows the time of the refresh)."""
    for _ in range(count):
        before = page.locator(STATUS).first.text_content()
        page.wait_for_function(STATUS_CHANGED, arg=[STATUS, before], timeout=REFRESH)


def fits(page, width: int) -> None:
    """At a window ``width`` px wide: the dashboard does not scroll sideways, its header is
    in view once the dashboard is scrolled to, and a screenshot is saved."""
    page.set_viewport_size({"width": width, "height": 1000})
    refreshes(page, 1)
    assert page.evaluate(OVERFLOW, DASHBOARD) <= 1, (
        f"the dashboard scrolls sideways at {width}: {page.evaluate(STICKING_OUT, DASHBOARD)}")
    page.locator(DASHBOARD).first.evaluate("node => node.scrollIntoView({block: 'start'})")
    assert page.evaluate(IN_VIEW, ".tupleflow-header"), f"header out of view at {width}"
    page.screenshot(path=str(SHOTS / f"dashboard-{width}.png"))


def restart_kernel(page) -> None:
    """Kernel ▸ Restart Kernel…, and confirm, as a person would."""
    page.locator(".lm-MenuBar-item", has_text="Kernel").first.click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Restart Kernel…", exact=True).click()
    page.locator(".jp-Dialog-button.jp-mod-accept").click()


@pytest.mark.timeout(300)  # a kernel restart: two kernels, one after the other
def test_a_learner_can_read_the_dashboard(lab, page, tupleflow_processes):
    """Issue 18: fits at 950 and 1400 px, header in view, an opened traceback stays open,
    the killed picture keeps its last counts, and after a kernel restart it says ended."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    write_notebook(lab.root, LEARNER_CELLS)
    open_notebook(page, lab, len(LEARNER_CELLS))
    run_all_cells(page)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "running"], timeout=KERNEL_WORK)
    first = page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-OutputArea-output")
    assert str(REPO) in first.text_content()  # the kernel runs this checkout's code
    wait_for_counts_to_grow(page)
    for width in (950, 1400):
        fits(page, width)

    page.locator(".lm-TabBar-tab", has_text="exceptions").first.click()
    summary = page.locator(".tupleflow-traceback details summary").first
    summary.wait_for(timeout=KERNEL_WORK)
    summary.click()
    refreshes(page, 3)
    assert page.locator(".tupleflow-traceback details").first.evaluate("d => d.open")
    page.screenshot(path=str(SHOTS / "traceback-open.png"))

    kill = run_new_cell(page, "%topology kill demo")
    kill.locator(".jp-OutputArea-output", has_text="killed demo").wait_for(timeout=KERNEL_WORK)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "killed"], timeout=REFRESH)
    wait_for_emitted(page, 0, REFRESH)  # the last real numbers, not zeros
    assert "TopologyDead" not in page.locator(STATUS).first.text_content()
    scroll_to(page, STATUS)
    page.screenshot(path=str(SHOTS / "killed.png"))
    wait_for(lambda: not tupleflow_processes(), 30, "the topology's processes to exit")

    again = run_new_cell(page, "%topology submit demo")
    again.locator(STATUS).filter(has_text="demo: running").wait_for(timeout=KERNEL_WORK)
    restart_kernel(page)
    status = again.locator(STATUS)

    def ended() -> str | bool:  # what a person reads (innerText: CSS-hidden text left out)
        said = status.inner_text()
        return said if ("ended" in said or "closed" in said) else False

    said = wait_for(ended, KERNEL_WORK / 1000, "the restarted kernel's dashboard to say ended")
    assert "running" not in said, said
    status.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "after-restart.png"))
    wait_for(lambda: not tupleflow_processes(), 30, "the restarted kernel's topologies to exit")
    # The restarted kernel answers a cell, as a person checks before closing: jupyter_server
    # fails a shutdown that comes while a restart is still under way (500, InvalidStateError)
    # and the kernel would then have to be killed after STOP_TIMEOUT instead of exiting.
    probe = run_new_cell(page, "6 * 7")
    probe.locator(".jp-OutputArea-output", has_text="42").wait_for(timeout=KERNEL_WORK)
    leftovers = lab.close()
    assert not leftovers, f"JupyterLab left processes behind: {leftovers}"


# Freezes the status line's 5-s "no refresh → ended" animation from the page's first
# moment, so that only the view's own knowledge that no kernel stands behind it can make a
# reopened dashboard say "ended" (and a slow machine cannot pass the test by the clock).
FREEZE_STALE_CLOCK = """document.addEventListener('DOMContentLoaded', () => {
    const style = document.createElement('style');
    style.textContent = '.tf-live, .tf-ended, .tf-fades {animation-play-state: paused !important}';
    document.head.appendChild(style);
});"""
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
EMITTED_CELL = re.compile(r'<td data-key="emitted" data-value="(\d+)"')


def saved_running(path: Path) -> bool:
    """Whether the notebook on disk holds its dashboard's widget state, saved while the
    topology ran and counted (a status widget saying running, an emitted count above 0).
    A file the server is still writing is "not yet"."""
    try:
        notebook = nbformat.read(path, as_version=4)
    except (OSError, ValueError):  # nbformat's NotJSONError is a ValueError
        return False
    models = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    values = [str(m.get("state", {}).get("value", "")) for m in models.values()]
    counts = [int(n) for v in values for n in EMITTED_CELL.findall(v)]
    return any("demo</b>: " in v and ">running<" in v for v in values) and sum(counts) > 0


def shut_down_sessions(lab) -> None:
    """Close every notebook session through the server's API: its kernel exits, as when
    the server is stopped for the night."""
    for session in lab.api("GET", "/api/sessions"):
        lab.api("DELETE", f"/api/sessions/{session['id']}")


@pytest.mark.timeout(300)  # two kernels start, one after the other, on a loaded machine
def test_a_reopened_notebook_says_ended_at_once(lab, page, tupleflow_processes):
    """Issue 18: a notebook saved while its dashboard ran, reopened later with a new kernel,
    shows "ended" and the counts it saved from its first picture, never "running"."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = write_notebook(lab.root)
    open_notebook(page, lab)
    run_all_cells(page)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "running"], timeout=KERNEL_WORK)
    wait_for_counts_to_grow(page)
    page.locator(".lm-MenuBar-item", has_text="File").first.click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Save Notebook", exact=True).click()
    wait_for(lambda: saved_running(path), KERNEL_WORK / 1000,
             "the notebook to be saved with the running dashboard's widget state")

    shut_down_sessions(lab)
    wait_for(lambda: not tupleflow_processes(), 30, "the closed kernel's topologies to exit")
    page.add_init_script(FREEZE_STALE_CLOCK)
    open_notebook(page, lab)  # a new page load: a new session, a new kernel
    status = page.locator(STATUS).first
    status.wait_for(timeout=KERNEL_WORK)  # drawn from the notebook's saved widget state
    said = status.inner_text()
    assert "ended" in said and "running" not in said, said
    wait_for_emitted(page, 0, REFRESH)  # the numbers it saved, not zeros
    status.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "reopened.png"))
    leftovers = lab.close()
    assert not leftovers, f"JupyterLab left processes behind: {leftovers}"


def scroll_to(page, selector: str, attempts: int = 5) -> None:
    """Scroll a dashboard part into view for its screenshot. Each refresh draws the
    dashboard's parts anew, so the element found may be replaced (detached) while
    Playwright waits for it to be stable: find it again, a few times."""
    for attempt in range(attempts):
        try:
            return page.locator(selector).first.scroll_into_view_if_needed(timeout=REFRESH)
        except PlaywrightError:
            if attempt == attempts - 1:
                raise
