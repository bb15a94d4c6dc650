"""The dashboard's checkpoint view, drawn from a real checkpointed topology's snapshot."""

from __future__ import annotations

import re
import sys

import cloudpickle
import pytest

from runtime import Topology
from runtime.sources import EmbeddedLog, LogSpout
from runtime.testing import StatefulWordCount, wait_for
from workbench import _dashboard
from workbench._checkpoint_panel import checkpoint_html

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_stateful_bolt_shows_its_last_committed_checkpoint(tmp_path):
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("words", 1)
        log.append_many("words", [b'"a"', b'"b"', b'"a"'])
    topo = Topology("ckpt-panel", stats_interval=0.05)
    topo.spout("words", LogSpout("words", root=str(tmp_path), fields=["word"]))
    topo.bolt("count", StatefulWordCount, parallelism=2).fields_grouping("words", ["word"])
    with topo.submit(checkpoint_interval=0.2) as running:
        wait_for(lambda: running.state("count") == {"a": 2, "b": 1}, 60, "a committed count")

        def drawn():
            shown = checkpoint_html(_dashboard.collect(running, slow=False), "count")
            return shown if "last committed: <b>checkpoint" in shown else None

        shown = wait_for(drawn, 30, "the checkpoint spout's report of a commit")
        assert len(re.findall(r'<tr data-task="\d+">', shown)) == 2  # both counter tasks
        assert checkpoint_html(_dashboard.collect(running, slow=False), "words") == ""
