"""``%topology lineage NAME MSG_ID`` (issue 20): the tree of one traced spout tuple, drawn;
through a real IPython shell, on the stand-in handle of test_magics."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from runtime.observe.traces import Hop, Trace

from .test_magics import CELL, FakeRunning, fake_submit, shell  # noqa: F401 - fixtures

TREE = Trace(42, "src", 0, "timed_out", None, (
    Hop("double", 2, "default", (84,), None, 0.5, 3.0, None),), held_by=("double", 2))
NAMED = Trace("cow", "src", 1, "acked", 2.0, (
    Hop("double", 3, "default", ("cowcow",), None, 0.5, 1.0, "acked"),))


@pytest.fixture
def traced(monkeypatch):
    asked = []

    def lineage(self, msg_id):
        asked.append(msg_id)
        return {42: TREE, "cow": NAMED}.get(msg_id)

    monkeypatch.setattr(FakeRunning, "lineage", lineage, raising=False)
    return asked


def submitted(shell):  # noqa: F811 - the fixture's value
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")


def test_lineage_draws_the_tree_of_a_msg_id(shell, fake_submit, traced):  # noqa: F811
    submitted(shell)
    with capture_output() as out:
        assert shell.run_line_magic("topology", "lineage demo 42") is None
        shell.run_line_magic("topology", "lineage demo cow")
    first, second = out.outputs
    assert "<svg" in first.data["text/html"] and "held by double:2" in first.data["text/html"]
    assert "held here" in first.data["image/svg+xml"]
    assert "src:1 msg_id &#x27;cow&#x27;: acked" in second.data["text/html"]
    assert traced == [42, "cow"]


def test_a_msg_id_not_traced_says_so(shell, fake_submit, traced):  # noqa: F811
    submitted(shell)
    with capture_output() as out:
        shell.run_line_magic("topology", "lineage demo 7")
    assert "msg_id 7 was not traced" in out.stdout and out.outputs == []
    assert traced == [7, "7"]  # the number, then the same word as a string msg_id


def test_lineage_usage(shell, fake_submit, traced):  # noqa: F811
    submitted(shell)
    with pytest.raises(UsageError, match="usage: %topology lineage NAME MSG_ID"):
        shell.run_line_magic("topology", "lineage demo")
    with pytest.raises(UsageError, match="no submitted topology `nope`"):
        shell.run_line_magic("topology", "lineage nope 1")
