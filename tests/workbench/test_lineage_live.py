"""The lineage tab and the acker panel against a real running topology (processes, sockets,
a master): a bolt that never acks "moon", every spout tuple traced. The dashboard is
refreshed by the test (``start=False``); every wait is on a condition, with a deadline."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from runtime import Topology
from runtime.testing import KeepsWord, ListSpout, SplitSentence, wait_for
from workbench import Dashboard

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SENTENCES = [["the cow jumped over the moon"], ["an apple a day"]] * 100


@pytest.fixture
def board():
    topo = Topology("lineage-live", stats_interval=0.2)
    topo.spout("src", ListSpout(SENTENCES, fields=["sentence"], rate=40))
    topo.bolt("split", SplitSentence, parallelism=2).shuffle_grouping("src")
    topo.bolt("count", KeepsWord("moon"), parallelism=2).fields_grouping("split", ["word"])
    with topo.submit(ackers=1, trace=1.0, message_timeout=3.0) as running:
        board = Dashboard(running, topology=topo, start=False)
        yield board
        board.close()


def refreshed_until(board, condition, what: str):
    def check():
        board.refresh()
        return condition()
    return wait_for(check, 60, what)


def test_a_tapped_tuple_is_followed_to_its_tree_and_a_stalled_root_is_named(board):
    parts = board._parts
    parts.edge.value = ("out", "split", "default")
    parts.show_tab("tuple tap")
    refreshed_until(board, lambda: len(parts.follow.options) > 1, "a traced tapped tuple")
    assert 'class="tf-traced"' in parts.tap_table.value
    assert 'class="tf-ids" data-roots="' in parts.tap_table.value  # root and edge shown
    label, key = parts.follow.options[1]
    parts.follow.value = key  # a person follows it
    assert repr(board.chosen.msg_id) == key
    assert parts.tabs.selected_index == parts.tabs.titles.index("lineage")
    assert "<svg" in parts.lineage.value and f"msg_id {board.chosen.msg_id}" in \
        parts.lineage.value

    def stalled_named():  # the acker's oldest root: a "moon" sentence, named by msg_id
        oldest = [r for a in board.snapshot.get("acker") or () for r in a["oldest"]]
        return oldest and oldest[0]["msg_id"] is not None and \
            "moon" in SENTENCES[oldest[0]["msg_id"]][0]

    refreshed_until(board, stalled_named, "a stalled root named at the acker")
    assert "oldest roots" in parts.acker.value
