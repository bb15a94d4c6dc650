"""Definition-time validation of topologies, and the topology as data (issue 2, item 1).

Every mistake that can be seen when a topology is declared raises ``TopologyError``
there, naming the component and the problem; nothing is checked at launch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import runtime
from runtime import Bolt, Spout, Topology, TopologyError
from runtime.testing import ListSink, ListSpout


class Words(Spout):
    outputs = ["word", "n"]


class Split(Bolt):
    outputs = {"default": ["word"], "errors": ["line", "why"]}


class Count(Bolt):
    outputs = ["word", "count"]


def words() -> Topology:
    topo = Topology("t")
    topo.spout("words", Words)
    return topo


def bolt_with_outputs(outputs) -> type:
    return type("Odd", (Bolt,), {"outputs": outputs})


# -- ids ------------------------------------------------------------------------------------

def test_duplicate_id_of_a_spout():
    with pytest.raises(TopologyError, match="component 'words': the id is already used by a spout"):
        words().bolt("words", Count)


def test_duplicate_id_of_a_bolt():
    topo = words()
    topo.bolt("count", Count).shuffle_grouping("words")
    with pytest.raises(TopologyError, match="component 'count': the id is already used by a bolt"):
        topo.bolt("count", Count)


@pytest.mark.parametrize("bad", ["__acker", "__mine", "", "has space", "1st", 7])
def test_invalid_or_reserved_component_ids(bad):
    with pytest.raises(TopologyError, match="component"):
        words().bolt(bad, Count)


def test_reserved_component_id_says_why():
    with pytest.raises(TopologyError, match="starting with '__' are reserved"):
        words().bolt("__tick", Count)


def test_reserved_stream_id():
    with pytest.raises(TopologyError, match="component 'odd'.*'__' are reserved"):
        words().bolt("odd", bolt_with_outputs({"__tick": ["x"]}))


# -- sources and streams --------------------------------------------------------------------

def test_unknown_source_with_a_hint():
    with pytest.raises(TopologyError, match="component 'count': unknown source component 'word' "
                                            r"\(did you mean 'words'\?\)"):
        words().bolt("count", Count).shuffle_grouping("word")


def test_unknown_source_without_a_close_match():
    with pytest.raises(TopologyError, match="unknown source component 'zzz'$"):
        words().bolt("count", Count).shuffle_grouping("zzz")


def test_unknown_stream():
    with pytest.raises(TopologyError, match=r"component 'count': source 'words' declares no "
                                            r"stream 'other' \(it declares \['default'\]\)"):
        words().bolt("count", Count).shuffle_grouping("words", stream="other")


def test_fields_grouping_on_an_undeclared_field():
    with pytest.raises(TopologyError, match=r"component 'count': fields grouping on \['wrd'\] but "
                                            r"'words' stream 'default' declares fields \['word', "):
        words().bolt("count", Count).fields_grouping("words", ["wrd"])


def test_fields_grouping_on_no_fields():
    with pytest.raises(TopologyError, match="component 'count': fields grouping on"):
        words().bolt("count", Count).fields_grouping("words", [])


def test_fields_grouping_accepts_one_field_as_a_string():
    topo = words()
    topo.bolt("count", Count).fields_grouping("words", "word")
    assert topo.components["count"].inputs[0].grouping.fields == ("word",)


def test_a_spout_takes_no_inputs():
    topo = words()
    with pytest.raises(TopologyError, match="component 'more': only bolts take inputs"):
        topo.spout("more", Words).shuffle_grouping("words")


def test_subscribing_twice_to_one_stream_is_rejected():
    count = words().bolt("count", Count).shuffle_grouping("words")
    with pytest.raises(TopologyError, match="component 'count': already subscribed to 'words' "
                                            "stream 'default'"):
        count.fields_grouping("words", ["word"])


def test_two_streams_of_one_source_are_two_subscriptions():
    topo = words()
    topo.bolt("split", Split).shuffle_grouping("words")
    topo.bolt("sink", ListSink).shuffle_grouping("split").all_grouping("split", "errors")
    assert [s.stream for s in topo.components["sink"].inputs] == ["default", "errors"]


# -- components -----------------------------------------------------------------------------

@pytest.mark.parametrize("parallelism", [0, -1, 1.0, "2", True, None])
def test_parallelism_must_be_a_positive_int(parallelism):
    with pytest.raises(TopologyError, match="component 'count': parallelism must be an integer"):
        words().bolt("count", Count, parallelism=parallelism)


def test_not_a_component_class():
    with pytest.raises(TopologyError, match="component 'count': dict is not a Bolt subclass"):
        words().bolt("count", dict)


def test_a_spout_class_is_not_a_bolt():
    with pytest.raises(TopologyError, match="component 'count': Words is not a Bolt subclass"):
        words().bolt("count", Words)


def test_a_bolt_instance_is_not_a_spout():
    with pytest.raises(TopologyError, match="component 'src': Count is not a Spout subclass"):
        Topology("t").spout("src", Count())


@pytest.mark.parametrize("outputs, problem", [
    ("word", "outputs must be a list of field names"),
    (None, "outputs must be a list of field names"),
    ([1, 2], "fields must be a list of strings"),
    ({"default": "word"}, "fields must be a list of strings"),
    ({"default": 5}, "fields must be a list of strings"),
    (["a", "b", "a"], r"duplicate fields \['a'\]"),
    ({"bad stream": ["x"]}, "is not a valid id"),
])
def test_bad_outputs(outputs, problem):
    with pytest.raises(TopologyError, match=f"component 'odd'.*{problem}"):
        words().bolt("odd", bolt_with_outputs(outputs))


def test_unknown_component_option_lists_the_known_ones():
    with pytest.raises(TopologyError, match=r"component 'count': unknown option\(s\) "
                                            r"\['batch_sise'\] \(did you mean 'batch_size'\?\); "
                                            r"per-component options are"):
        words().bolt("count", Count, batch_sise=10)


def test_a_component_option_value_is_checked_when_declared():
    with pytest.raises(TopologyError, match=r"component 'count': batch_size must be an "
                                            r"integer >= 1, not 0"):
        words().bolt("count", Count, batch_size=0)


# -- topology and submit options --------------------------------------------------------------

def test_an_unknown_topology_option_is_refused_with_the_closest_key():
    with pytest.raises(TopologyError, match=r"topology 'x': unknown option 'max_spout_pendng' "
                                            r"\(did you mean 'max_spout_pending'\?\).*"
                                            r"config=\{\.\.\.\}"):
        Topology("x", max_spout_pendng=10)


@pytest.mark.parametrize("timeout", [0, None, -1.0])
def test_message_timeout_cannot_be_turned_off(timeout):
    with pytest.raises(TopologyError, match=r"topology 'x': message_timeout must be a number "
                                            r"of seconds > 0 \(timeouts cannot be turned off"):
        Topology("x", message_timeout=timeout)


def test_user_keys_go_in_config_and_engine_keys_there_are_checked():
    topo = Topology("x", config={"rate": 100, "ackers": 1}, batch_size=5)
    assert topo.config == {"rate": 100, "ackers": 1, "batch_size": 5}
    with pytest.raises(TopologyError, match=r"topology 'x': ackers must be an integer >= 0"):
        Topology("x", config={"rate": 100, "ackers": -1})
    with pytest.raises(TopologyError, match=r"config must be a dict"):
        Topology("x", config=[("rate", 1)])


def test_submit_refuses_unknown_options_before_anything_starts(monkeypatch):
    from runtime.processes import scheduler

    launched = []

    def submit(topology, **how):  # a stand-in scheduler: notes the call, returns a handle
        launched.append(how)
        return SimpleNamespace()

    monkeypatch.setattr(scheduler, "submit", submit)
    topo = words()
    with pytest.raises(TopologyError, match=r"topology 't': submit: unknown option 'acker' "
                                            r"\(did you mean 'ackers'\?\)"):
        topo.submit(acker=1)
    with pytest.raises(TopologyError, match=r"submit: message_timeout must be"):
        topo.submit(message_timeout=0)
    assert launched == []
    topo.submit(detached=True, ackers=1, config={"rate": 5})
    assert launched == [{"scheduler": "local", "containers": 1,
                         "config": {"rate": 5, "detached": True, "ackers": 1}}]


def test_known_component_options_are_kept():
    topo = words()
    topo.bolt("count", Count, tick_freq_secs=5, batch_size=10).shuffle_grouping("words")
    assert topo.components["count"].config == {"tick_freq_secs": 5, "batch_size": 10}


# -- whole-topology checks ------------------------------------------------------------------

def only_bolts() -> Topology:
    topo = Topology("t")
    topo.bolt("ticker", Count, tick_freq_secs=1)
    return topo


@pytest.mark.parametrize("call", [
    lambda t: t.validate(),
    lambda t: t.physical_plan(containers=1),
    lambda t: t.submit(),
])
def test_no_spout(call):
    with pytest.raises(TopologyError, match="topology 't': no spout"):
        call(only_bolts())


def test_a_bolt_with_no_inputs():
    topo = words()
    topo.bolt("count", Count)
    with pytest.raises(TopologyError, match="component 'count': bolt has no inputs"):
        topo.validate()


def test_a_ticking_bolt_needs_no_inputs():
    topo = words()
    topo.bolt("ticker", Count, tick_freq_secs=1)
    topo.validate()


def test_cycles_are_allowed():
    topo = words()
    a = topo.bolt("a", Count).shuffle_grouping("words")
    topo.bolt("b", Count).shuffle_grouping("a")
    a.shuffle_grouping("b")
    topo.validate()
    assert {("a", "b"), ("b", "a")} <= set(topo.graph.edges)


def test_a_bolt_may_feed_itself():
    topo = words()
    topo.bolt("loop", Count).shuffle_grouping("words").shuffle_grouping("loop")
    assert ("loop", "loop") in topo.graph.edges


# -- classes and prototypes -----------------------------------------------------------------

def test_a_class_gives_a_new_object_per_task():
    topo = words()
    spec = topo.components["words"]
    assert spec.class_name == "Words"
    assert isinstance(spec.new_instance(), Words)
    assert spec.new_instance() is not spec.new_instance()


def test_a_prototype_is_copied_per_task():
    proto = ListSpout([[1], [2]], fields=["n"])
    topo = Topology("t")
    topo.spout("numbers", proto)
    spec = topo.components["numbers"]
    one, two = spec.new_instance(), spec.new_instance()
    assert one is not proto and one is not two and one.tuples is not proto.tuples
    assert one.tuples == [[1], [2]] and spec.class_name == "ListSpout"
    assert spec.streams == {"default": ("n",)}


# -- the graph ------------------------------------------------------------------------------

def wordcount() -> Topology:
    topo = Topology("wc")
    topo.spout("words", Words, parallelism=2)
    topo.bolt("split", Split, parallelism=3).shuffle_grouping("words")
    topo.bolt("count", Count, parallelism=4).fields_grouping("split", ["word"])
    topo.bolt("sink", ListSink).global_grouping("count").all_grouping("split", "errors")
    return topo


def test_graph_nodes():
    graph = wordcount().graph
    assert list(graph.nodes) == ["words", "split", "count", "sink"]
    assert graph.nodes["split"] == {"kind": "bolt", "parallelism": 3, "max_parallelism": 128,
                                    "cls": "Split",
                                    "streams": {"default": ("word",),
                                                "errors": ("line", "why")}}
    assert graph.nodes["words"]["kind"] == "spout"


def test_graph_edges():
    import networkx as nx

    graph = wordcount().graph
    assert isinstance(graph, nx.DiGraph) and graph.graph["name"] == "wc"
    assert set(graph.edges) == {("words", "split"), ("split", "count"), ("count", "sink"),
                                ("split", "sink")}
    assert graph.edges["split", "count"]["grouping"] == "fields(word)"
    assert graph.edges["count", "sink"]["grouping"] == "global"
    assert graph.edges["split", "sink"]["stream"] == "errors"


def test_graph_edge_for_two_streams_lists_both():
    topo = Topology("t")
    topo.spout("split", ListSpout([], fields=["x"]))
    topo.bolt("relay", Split).shuffle_grouping("split")
    topo.bolt("sink", ListSink).shuffle_grouping("relay").all_grouping("relay", "errors")
    edge = topo.graph.edges["relay", "sink"]
    assert edge["streams"] == ["default", "errors"]
    assert edge["groupings"] == ["shuffle", "all"]


class Evens:
    """A duck-typed custom grouping: only ``choose_tasks``."""

    def choose_tasks(self, values):
        return [t for t in self.target_tasks if t % 2 == 0]


def test_custom_grouping_on_the_graph():
    topo = words()
    topo.bolt("count", Count).custom_grouping("words", Evens())
    assert topo.graph.edges["words", "count"]["grouping"] == "custom"
    assert topo.components["count"].inputs[0].describe() == "words --custom-->"


def test_custom_grouping_needs_choose_tasks():
    with pytest.raises(TopologyError, match="component 'count': custom grouping .* has no "
                                            r"choose_tasks\(values\) method"):
        words().bolt("count", Count).custom_grouping("words", object())


def test_graph_is_a_snapshot():
    topo = words()
    graph = topo.graph
    topo.bolt("count", Count).shuffle_grouping("words")
    assert "count" not in graph and "count" in topo.graph


# -- defining is not running ----------------------------------------------------------------

PROBE = textwrap.dedent("""
    import sys
    from runtime import Bolt, Spout, Topology

    class Words(Spout):
        outputs = ["word"]

    class Count(Bolt):
        outputs = ["word", "count"]

    topo = Topology("wc")
    topo.spout("words", Words, parallelism=2)
    topo.bolt("count", Count, parallelism=2).fields_grouping("words", ["word"])
    topo.validate()
    before = sorted(m for m in ("zmq", "networkx") if m in sys.modules)
    topo.graph
    print(",".join(before), "networkx" in sys.modules)
""")


@pytest.fixture(scope="module")
def imported_by_defining() -> tuple[set[str], bool]:
    """Which of zmq/networkx a fresh interpreter has imported after defining a topology,
    and whether asking for ``topo.graph`` then imports networkx (proof the probe works)."""
    root = str(Path(runtime.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=60, env=env).stdout.split()
    modules = set(out[0].split(",")) - {""} if len(out) == 2 else set()
    return modules, out[-1] == "True"


def test_defining_a_topology_does_not_import_networkx(imported_by_defining):
    modules, graph_imports_networkx = imported_by_defining
    assert "networkx" not in modules
    assert graph_imports_networkx


def test_defining_a_topology_does_not_import_zmq(imported_by_defining):
    modules, _ = imported_by_defining
    assert "zmq" not in modules


# -- submit and persistent_aggregate reach the layers above the model through hooks ---------

def test_submit_looks_the_scheduler_up_at_each_call(monkeypatch):
    """The model imports no scheduler (pyproject.toml, [tool.importlinter]); runtime's
    facade plugs one in, looked up when submit is called, so a patch made afterwards
    (as tests/conftest.py makes) sees the launch."""
    from runtime.processes import scheduler

    launched = []
    handle = SimpleNamespace()
    monkeypatch.setattr(scheduler, "submit", lambda topology, **how: launched.append(
        (topology, how)) or handle)
    topo = Topology("patched")
    assert topo.submit(containers=2, ackers=1) is handle
    assert not hasattr(handle, "topology")  # the scheduler sets it, not the model
    assert launched == [(topo, {"scheduler": "local", "containers": 2,
                                "config": {"ackers": 1}})]


HOOK_PROBE = textwrap.dedent("""
    import sys
    import runtime.model.topology as topology   # the model alone, before anything else
    from runtime.model import hooks
    print(hooks.plugged("submit") is not None, hooks.plugged("persistent_aggregate") is not None,
          "runtime.processes.scheduler" in sys.modules)
""")


def test_the_hooks_are_plugged_whatever_is_imported_first():
    root = str(Path(runtime.__file__).parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", HOOK_PROBE], capture_output=True, text=True,
                         check=True, timeout=60, env=env).stdout.split()
    assert out == ["True", "True", "False"]  # plugged, and the scheduler not yet imported


# -- max_parallelism (issue 22) -----------------------------------------------------------------
def test_max_parallelism_defaults_to_128_or_the_parallelism_if_higher():
    topo = Topology("t")
    topo.spout("words", Words, parallelism=2)
    topo.bolt("few", ListSink, parallelism=3).shuffle_grouping("words")
    topo.bolt("many", ListSink, parallelism=200).shuffle_grouping("words")
    topo.bolt("set", ListSink, parallelism=2, max_parallelism=6).shuffle_grouping("words")
    maxima = {c: s.max_parallelism for c, s in topo.components.items()}
    assert maxima == {"words": 128, "few": 128, "many": 200, "set": 6}
    assert topo.physical_plan().config["max_parallelisms"] == maxima  # the master's guard


@pytest.mark.parametrize(("parallelism", "maximum", "problem"), [
    (4, 3, "component 'b': max_parallelism 3 is below its parallelism 4"),
    (1, 0, "component 'b': max_parallelism must be an integer from 1 to 32768, not 0"),
    (1, 32769, "component 'b': max_parallelism must be an integer from 1 to 32768, not 32769"),
    (1, 2.0, "component 'b': max_parallelism must be an integer from 1 to 32768, not 2.0"),
    (1, True, "component 'b': max_parallelism must be an integer from 1 to 32768, not True"),
    (1, "8", "component 'b': max_parallelism must be an integer from 1 to 32768, not '8'"),
])
def test_a_bad_max_parallelism_is_refused_at_definition_naming_the_component(
        parallelism, maximum, problem):
    with pytest.raises(TopologyError, match=problem):
        Topology("t").bolt("b", ListSink, parallelism=parallelism, max_parallelism=maximum)
    with pytest.raises(TopologyError, match=problem.replace("'b'", "'s'")):
        Topology("t").spout("s", Words, parallelism=parallelism, max_parallelism=maximum)


def test_max_parallelism_is_per_component_not_a_topology_option():
    with pytest.raises(TopologyError, match="unknown option 'max_parallelism'"):
        Topology("t", max_parallelism=8)
    with pytest.raises(TopologyError, match=r"did you mean 'max_parallelism'\?"):
        Topology("t").bolt("b", ListSink, max_paralelism=8)
