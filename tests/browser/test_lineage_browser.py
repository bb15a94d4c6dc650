"""The lineage tab and the acker panel (issue 20) in real JupyterLab, in headless Chromium:
a topology whose counting bolt never acks "moon", traced at rate 1; a person opens the
lineage tab, filters the timed-out traces, chooses one, and sees its tree with the holder
marked; then the acker tab, with the stalled roots among the oldest. Screenshots go to
``artifacts/browser/lineage.png`` and ``acker.png``. Fixtures and helpers: test_jupyterlab.py
and conftest.py (docs/internals/browser-tests.md)."""

from __future__ import annotations

import re

import pytest

from runtime.testing import wait_for

from .test_jupyterlab import (
    DASHBOARD,
    KERNEL_WORK,
    REFRESH,
    SHOTS,
    STATE_IS,
    STATUS,
    kill_and_stop,
    open_notebook,
    run_all_cells,
    scroll_to,
    write_notebook,
)

pytestmark = pytest.mark.slow

COMPONENTS = '''from runtime import Spout
from runtime.testing import KeepsWord, SplitSentence
class Sentences(Spout):
    outputs = ["sentence"]
    def open(self, config, context):
        self.n = 0
    def next_tuple(self):
        if self.n < 400:
            self.emit([("the cow jumped over the moon", "an apple a day")[self.n % 2]],
                      msg_id=self.n)
            self.n += 1
Split, Count = SplitSentence, KeepsWord'''
CELLS = [
    "%load_ext kernel_ext",
    COMPONENTS,
    "%%topology demo\nsrc:   Sentences\nsplit: Split * 2 <- src shuffle\n"
    "count: Count * 2 <- split fields(word)",
    "%topology submit demo ackers=1 trace=1.0 message_timeout=3.0 max_spout_pending=50",
]
LINEAGE, ACKERS = ".tupleflow-lineage", ".tupleflow-ackers"


def choose(page, label: str, option_text: str) -> str:
    """In the dashboard's dropdown labelled ``label``, choose the first option whose text
    holds ``option_text`` (waiting for one to be offered); the option's text."""
    named = page.locator("label", has_text=re.compile(f"^{label}$"))
    select = page.locator(f"{DASHBOARD} .widget-dropdown").filter(has=named).locator("select")

    def offered():
        texts = select.first.locator("option").all_text_contents()
        return next((t for t in texts if option_text in t), False)

    text = wait_for(offered, KERNEL_WORK / 1000, f"a {option_text!r} option in {label!r}")
    select.first.select_option(label=text)
    return text


@pytest.mark.timeout(300)
def test_the_lineage_tab_draws_a_timed_out_tree_and_the_acker_its_oldest_roots(
        lab, page, tupleflow_processes):
    SHOTS.mkdir(parents=True, exist_ok=True)
    write_notebook(lab.root, CELLS)
    open_notebook(page, lab, len(CELLS))
    run_all_cells(page)
    page.wait_for_function(STATE_IS, arg=[STATUS, "demo", "running"], timeout=KERNEL_WORK)

    page.locator(".lm-TabBar-tab", has_text="lineage").first.click()
    choose(page, "status", "timed_out")
    chosen = choose(page, "trace", "timed_out")
    tree = page.locator(f"{LINEAGE} svg.tf-lineage").first
    tree.wait_for(timeout=REFRESH)
    held = tree.locator("g.tf-held")
    assert held.count() == 1 and held.first.get_attribute("data-component") == "count"
    assert "moon" in held.first.text_content() and "held here" in tree.text_content()
    assert tree.locator("g.tf-hop").count() == 1 + 1 + 6  # spout, split, six words
    msg_id = chosen.split("·")[0].strip()  # (the browser shows spaces as no-break ones)
    assert page.locator(f'{LINEAGE} tr.tf-chosen[data-msg-id="{msg_id}"]').count() == 1
    # (each refresh may redraw the tab's HTML: scroll the widget, whose node stays)
    scroll_to(page, LINEAGE)
    page.screenshot(path=str(SHOTS / "lineage.png"))

    page.locator(".lm-TabBar-tab", has_text="acker").first.click()
    panel = page.locator(f"{ACKERS} .tupleflow-acker").first
    panel.wait_for(timeout=REFRESH)
    assert panel.locator(".tf-age").count() == 3  # the ledger's three slots
    scroll_to(page, ACKERS)
    page.screenshot(path=str(SHOTS / "acker.png"))

    kill_and_stop(page, lab, tupleflow_processes)
