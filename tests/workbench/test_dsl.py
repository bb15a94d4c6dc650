"""The ``%%topology`` cell grammar: what it builds, and every error it reports (pure, fast)."""

from __future__ import annotations

import doctest

import pytest

import runtime
import workbench
from runtime import Bolt, Spout, TopologyError
from runtime.groupings import Grouping
from runtime.testing import Doubler, ListSink, ListSpout
from workbench import (
    ParsedTopology,
    TopologySyntaxError,
    _dsl,
    _dsl_build,
    _dsl_window,
    parse_topology,
)


class RandomSentence(Spout):
    outputs = ["sentence"]


class SplitSentence(Bolt):
    outputs = {"default": ["word"], "errors": ["line", "reason"]}


class WordCount(Bolt):
    outputs = ["word", "count"]


class Reporter(Bolt):
    outputs = []


class EvenOdd(Grouping):
    def choose_tasks(self, values):
        return [self.target_tasks[values[0] % len(self.target_tasks)]]


NS = {
    "RandomSentence": RandomSentence,
    "SplitSentence": SplitSentence,
    "WordCount": WordCount,
    "Reporter": Reporter,
    "Doubler": Doubler,
    "ListSink": ListSink,
    "numbers": ListSpout([[1], [2]], fields=["n"]),
    "even_odd": EvenOdd(),
    "EvenOdd": EvenOdd,
    "runtime": runtime,
    "answer": 42,
}

WORDCOUNT_HEADER = "%%topology wordcount ackers=1 max_spout_pending=500 containers=2"
WORDCOUNT = """
# comments allowed, blank lines too

words:  RandomSentence * 2
split:  SplitSentence * 4   <- words shuffle
count:  WordCount * 4       <- split fields(word)      tick=5
report: Reporter            <- count global, split[errors] all   # two inputs
"""


def build(body: str, header: str = "t") -> ParsedTopology:
    return parse_topology(header, body, NS)


def edges(parsed: ParsedTopology) -> dict:
    graph = parsed.topology.graph
    return {(a, b): (d["streams"], d["groupings"]) for a, b, d in graph.edges(data=True)}


def error(body: str, header: str = "t") -> str:
    with pytest.raises(TopologySyntaxError) as info:
        build(body, header)
    return str(info.value)


# -- what it builds ----------------------------------------------------------------------------
def test_the_wordcount_example_builds_the_expected_graph():
    parsed = parse_topology(WORDCOUNT_HEADER, WORDCOUNT, NS)
    topo = parsed.topology
    assert topo.name == "wordcount" == parsed.name
    assert edges(parsed) == {
        ("words", "split"): (["default"], ["shuffle"]),
        ("split", "count"): (["default"], ["fields(word)"]),
        ("count", "report"): (["default"], ["global"]),
        ("split", "report"): (["errors"], ["all"]),
    }
    nodes = topo.graph.nodes
    assert {n: (nodes[n]["kind"], nodes[n]["parallelism"]) for n in nodes} == {
        "words": ("spout", 2), "split": ("bolt", 4), "count": ("bolt", 4), "report": ("bolt", 1)}
    assert topo.components["count"].config == {"tick_freq_secs": 5}
    assert topo.config == {"ackers": 1, "max_spout_pending": 500}
    assert parsed.containers == 2
    assert parsed.lines == {"words": 5, "split": 6, "count": 7, "report": 8}


@pytest.mark.parametrize("grouping, label", [
    ("", "shuffle"), ("shuffle", "shuffle"), ("fields(n)", "fields(n)"), ("all", "all"),
    ("global", "global"), ("local_or_shuffle", "local_or_shuffle"), ("direct", "direct"),
    ("custom(even_odd)", "custom"), ("custom(EvenOdd)", "custom"),
    ("partial_key(n)", "partial_key(n)"),
])
def test_every_grouping(grouping, label):
    parsed = build(f"nums: numbers\nsink: ListSink * 3 <- nums {grouping}")
    assert edges(parsed) == {("nums", "sink"): (["default"], [label])}


def test_custom_grouping_is_the_named_object_or_a_new_instance_of_the_named_class():
    (sub,) = build("nums: numbers\nsink: ListSink <- nums custom(even_odd)") \
        .topology.components["sink"].inputs
    assert sub.grouping is NS["even_odd"]
    (sub,) = build("nums: numbers\nsink: ListSink <- nums custom(EvenOdd)") \
        .topology.components["sink"].inputs
    assert type(sub.grouping) is EvenOdd


def test_fields_grouping_on_several_fields_of_a_named_stream():
    parsed = build("w: RandomSentence\ns: SplitSentence <- w\nr: ListSink <- s[errors] "
                   "fields(line, reason)")
    assert edges(parsed)[("s", "r")] == (["errors"], ["fields(line, reason)"])


def test_partial_key_names_fields_the_source_declares():
    message = error("w: RandomSentence\ns: SplitSentence <- w\n"
                    "r: ListSink <- s[errors] partial_key(lin)")
    assert "has no field `lin` (did you mean `line`?)" in message
    assert "partial_key()" not in message


def test_named_streams_and_two_streams_of_one_source():
    parsed = build("w: RandomSentence\ns: SplitSentence <- w\n"
                   "r: ListSink <- s[default] global, s[errors] all")
    assert edges(parsed)[("s", "r")] == (["default", "errors"], ["global", "all"])


def test_forward_references_and_a_cycle():
    parsed = build("""
        a: Doubler <- nums, b local_or_shuffle
        b: Doubler * 2 <- a
        nums: numbers
    """)
    assert set(edges(parsed)) == {("nums", "a"), ("b", "a"), ("a", "b")}
    assert list(parsed.topology.components) == ["a", "b", "nums"]


def test_header_options_literals_aliases_and_containers():
    parsed = build("nums: numbers", header="t ackers=2 message_timeout=1.5 "
                   "max_spout_pending=auto batch_size=1_000 tick_freq_secs=None")
    assert parsed.topology.config == {"ackers": 2, "message_timeout": 1.5,
                                      "max_spout_pending": "auto", "batch_size": 1000,
                                      "tick_freq_secs": None}
    assert parsed.containers == 1
    parsed = build("nums: numbers", header="t timeout=3 max_spout_pending='auto' containers=4")
    assert parsed.topology.config == {"message_timeout": 3, "max_spout_pending": "auto"}
    assert parsed.containers == 4


def test_checkpoint_options_on_the_header():
    parsed = build("nums: numbers", header="t checkpoint_interval=0.5 state_store=sqlite")
    assert parsed.topology.config == {"checkpoint_interval": 0.5, "state_store": "sqlite"}
    parsed = build("nums: numbers", header="t checkpoint_interval=1 "
                   "state_store='redis://127.0.0.1:6379/0'")
    assert parsed.topology.config["state_store"] == "redis://127.0.0.1:6379/0"


def test_the_header_may_start_with_the_magic_itself():
    assert build("nums: numbers", header="%%topology  demo").name == "demo"
    assert build("nums: numbers", header="demo").name == "demo"


def test_component_options_full_names_and_short_ones():
    parsed = build("nums: numbers max_spout_pending=10 flush_interval=0.01\n"
                   "sink: ListSink tick=2 batch_size=5")
    comps = parsed.topology.components
    assert comps["nums"].config == {"max_spout_pending": 10, "flush_interval": 0.01}
    assert comps["sink"].config == {"tick_freq_secs": 2, "batch_size": 5}  # a tick-only bolt


def test_comments_blank_lines_tabs_and_tight_spacing():
    parsed = build("\n\n  # a comment\n\tnums:numbers*2 # trailing\n\nsink:ListSink<-nums global\n")
    assert edges(parsed) == {("nums", "sink"): (["default"], ["global"])}
    assert parsed.topology.components["nums"].parallelism == 2


def test_instances_dotted_names_and_factories():
    ns = {**NS, "make_sink": lambda: ListSink()}
    parsed = parse_topology("t", "nums: numbers\nsink: make_sink <- nums\n"
                            "more: runtime.testing.ListSink <- nums", ns)
    comps = parsed.topology.components
    assert comps["nums"].impl is NS["numbers"]
    assert isinstance(comps["sink"].impl, ListSink)
    assert comps["more"].impl is ListSink


def test_a_five_component_cell_parses_and_builds():
    parsed = parse_topology(WORDCOUNT_HEADER, WORDCOUNT + "audit: ListSink <- count all\n", NS)
    assert len(parsed.topology.components) == 5
    parsed.topology.physical_plan(containers=parsed.containers)


# -- errors ------------------------------------------------------------------------------------
def test_error_is_a_topology_error_with_its_parts():
    with pytest.raises(TopologyError) as info:
        build("nums: numbers\nsink: ListSnk <- nums")
    err = info.value
    assert isinstance(err, TopologySyntaxError)
    assert (err.lineno, err.line, err.col) == (3, "sink: ListSnk <- nums", 6)


def test_unknown_class_with_suggestion():
    assert error("words: RandomSentense * 2") == (
        "line 2: unknown name `RandomSentense` (did you mean `RandomSentence`?)\n"
        "    words: RandomSentense * 2\n"
        "           ^^^^^^^^^^^^^^")


def test_unknown_source_with_suggestion():
    assert error("words: RandomSentence\nsplit: SplitSentence <- wrods shuffle") == (
        "line 3: unknown source component `wrods` (did you mean `words`?)\n"
        "    split: SplitSentence <- wrods shuffle\n"
        "                            ^^^^^")


def test_unknown_grouping_with_suggestion():
    message = error("words: RandomSentence\nsplit: SplitSentence <- words shufle")
    assert message.startswith("line 3: unknown grouping `shufle` (did you mean `shuffle`?)")
    assert message.endswith("    split: SplitSentence <- words shufle\n"
                            "                                  ^^^^^^")


@pytest.mark.parametrize("body, word", [
    ("nums: numbers * 0", "0"), ("nums: numbers * two", "two"), ("nums: numbers * -1", "-1"),
])
def test_bad_parallelism(body, word):
    message = error(body)
    assert f"parallelism must be an integer >= 1, not `{word}`" in message
    assert message.endswith(" " * body.index(word) + "^" * len(word))


@pytest.mark.parametrize("header, body, problem, word", [
    ("t ackers=one", "nums: numbers", "`ackers` must be an integer >= 0, not 'one'", "one"),
    ("t ackers=-1", "nums: numbers", "`ackers` must be an integer >= 0, not -1", "-1"),
    ("t containers=0", "nums: numbers", "`containers` must be an integer >= 1, not 0", "0"),
    ("t message_timeout='soon'", "nums: numbers", "`message_timeout` must be a number of "
     "seconds > 0, not 'soon'", "'soon'"),
    ("t max_spout_pending=0", "nums: numbers", "`max_spout_pending` must be an integer >= 1, "
     "'auto' or None, not 0", "0"),
    ("t", "nums: numbers tick=0", "`tick` must be a number of seconds > 0 or None, not 0", "0"),
    ("t batch_size=1+", "nums: numbers", "`1+` is not a Python literal", "1+"),
    ("t state_store=disk", "nums: numbers", "`state_store` must be \"sqlite\", \"memory\" or "
     "a redis:// URL, not 'disk'", "disk"),
])
def test_bad_option_value(header, body, problem, word):
    message = error(body, header)
    assert problem in message
    shown = header if message.startswith("line 1:") else body
    assert message.endswith(f"    {shown}\n    " + " " * shown.rindex(word) + "^" * len(word))


def test_unknown_options_with_suggestions():
    assert "unknown topology option `acker` (did you mean `ackers`?)" in error(
        "nums: numbers", "t acker=1")
    assert "unknown per-component option `tik` (did you mean `tick`?)" in error(
        "nums: numbers tik=1")
    assert "`ackers` is a topology option: set it on the %%topology line" in error(
        "nums: numbers ackers=1")
    assert "`containers` is a topology option" in error("nums: numbers containers=2")


def test_missing_inputs_for_a_bolt():
    assert error("nums: numbers\nsink: ListSink * 2") == (
        "line 3: bolt `sink` (ListSink) has no inputs; subscribe it with `<- source grouping`\n"
        "    sink: ListSink * 2\n"
        "    ^^^^")


def test_fields_on_an_undeclared_field():
    assert error("words: RandomSentence\nsplit: SplitSentence <- words fields(sentense)") == (
        "line 3: `words` stream `default` has no field `sentense` (did you mean `sentence`?); "
        "it declares sentence\n"
        "    split: SplitSentence <- words fields(sentense)\n"
        "                                         ^^^^^^^^")


def test_unknown_stream_is_reported_by_the_runtime_at_the_stream():
    message = error("w: RandomSentence\ns: SplitSentence <- w\nr: ListSink <- s[eror] all")
    assert "source 's' declares no stream 'eror' (did you mean 'error" in message
    assert message.endswith("    r: ListSink <- s[eror] all\n                     ^^^^")


def test_runtime_errors_point_at_their_line():
    message = error("nums: numbers\nsink: ListSink <- nums, nums global")
    assert message.startswith("line 3: component 'sink': already subscribed to 'nums'")
    assert message.endswith("                             ^^^^^^")
    assert "is not a valid id" in error("nums: numbers", header="9lives")
    message = error("nums: numbers\n__sink: ListSink <- nums")
    assert message.startswith("line 3: component: ids starting with '__' are reserved")


@pytest.mark.parametrize("body, problem, word", [
    ("nums: numbers <- nums", "`nums` is a spout (an instance of ListSpout); only bolts take "
     "inputs", "<-"),
    ("nums: answer", "`answer` is an instance of int, not a Spout or Bolt subclass", "answer"),
    ("nums: runtime.testing.ListSpot",
     "`runtime` has no attribute `ListSpot` (did you mean `ListSpout`?)", None),
    ("nums: numbers\nsink: ListSink <- nums custom(missing)", "unknown name `missing`", "missing"),
    ("nums: numbers\nsink: ListSink <- nums custom(Doubler)", "has no choose_tasks", "Doubler"),
    ("nums: numbers\nsink: ListSink <- nums custom(a, b)", "takes exactly one name", "b"),
    ("nums: numbers\nsink: ListSink <- nums global(x)", "`global` grouping takes no", "("),
    ("nums: numbers\nsink: ListSink <- nums fields()", "an argument of `fields(...)`", ")"),
    ("nums: numbers\nsink: ListSink <- nums global nums", "separate inputs with `,`", "nums"),
    ("nums: numbers\nsink: ListSink <- nums[x", "`]` after the stream id", None),
    ("nums numbers", "expected `:` after the component id `nums`", "numbers"),
    ("nums: numbers\nnums: numbers", "`nums` is already declared on line 2", None),
    ("nums: numbers @", "unexpected character `@`", "@"),
    ("sink: ListSink <- sink", "topology `t` has no spout", None),
])
def test_other_mistakes(body, problem, word):
    message = error(body)
    assert problem in message
    if word is not None:
        shown = message.splitlines()[1][4:]
        assert message.endswith(" " * shown.rindex(word) + "^" * len(word))


def test_a_missing_name_in_the_header():
    assert error("nums: numbers", header="%%topology").startswith(
        "line 1: expected a topology name")


def test_a_failing_factory_is_reported_at_its_name():
    def broken():
        raise RuntimeError("no")

    with pytest.raises(TopologySyntaxError, match="calling `broken\\(\\)` raised RuntimeError"):
        parse_topology("t", "nums: broken", {"broken": broken})


# -- the package -------------------------------------------------------------------------------
def test_public_api_is_curated():
    assert workbench.__all__ == sorted(workbench.__all__)
    assert all(hasattr(workbench, name) for name in workbench.__all__)
    assert {"parse_topology", "ParsedTopology", "TopologySyntaxError"} <= set(workbench.__all__)


@pytest.mark.parametrize("module", [workbench, _dsl, _dsl_build, _dsl_window])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_record_option_takes_one_stream_or_a_quoted_list():
    ns = {"nums": ListSpout([[1]], fields=["n"]), "ListSink": ListSink}
    one = parse_topology("demo", "src: nums record=default\nsink: ListSink <- src", ns)
    assert one.topology.components["src"].config["record"] == ["default"]
    quoted = parse_topology("demo", 'src: nums record="default"\nsink: ListSink <- src', ns)
    assert quoted.topology.components["src"].config["record"] == ["default"]
    with pytest.raises(TopologySyntaxError, match="cannot record stream 'defualt' "
                                                  r"\(did you mean 'default'\?\)"):
        parse_topology("demo", "src: nums record=defualt\nsink: ListSink <- src", ns)


# -- windowed bolts (issue 21) -------------------------------------------------------------------
class Average(runtime.WindowedBolt):
    outputs = ["avg"]

    def process_window(self, window):
        self.emit([len(window.tuples)])


WINDOW_NS = {"events": ListSpout([[1, 0, "k"]], fields=["v", "ts", "key"]),
             "Average": Average, "ListSink": ListSink}


def window_of(line: str) -> runtime.Window:
    parsed = parse_topology("w", f"ev: events\n{line}", WINDOW_NS)
    return parsed.topology.components["avg"].config["window"]


def test_window_options_build_the_window_the_api_would():
    from runtime import Count, Duration, Window

    got = window_of("avg: Average * 2 <- ev fields(key) window=20s slide=10s "
                    "timestamp_field=ts lag=5s watermark_interval=500ms late_stream=late")
    assert got == Window.sliding(Duration(20), Duration(10), timestamp_field="ts",
                                 lag=Duration(5), watermark_interval=Duration(0.5),
                                 late_stream="late")
    assert window_of("avg: Average <- ev window=100") == Window.tumbling(Count(100))
    assert window_of("avg: Average <- ev window=2m slide=10") == Window.sliding(
        Duration(120), Count(10))


@pytest.mark.parametrize("line, problem, word", [
    ("avg: Average <- ev window=20x", "must be a length", "20x"),
    ("avg: Average <- ev window=1.5", "count of tuples is an integer", "1.5"),
    ("avg: Average <- ev slide=10s", "needs `window=LENGTH`", "slide"),
    ("avg: Average <- ev window=10s late_stream=late", "needs a timestamp_field", "window"),
    ("avg: Average <- ev", "needs window=", "avg"),
])
def test_window_mistakes_point_at_the_word(line, problem, word):
    with pytest.raises(TopologySyntaxError, match=problem) as info:
        parse_topology("w", f"ev: events\n{line}", WINDOW_NS)
    err = info.value
    assert err.lineno == 3 and err.line[err.col:].startswith(word)


def test_max_parallelism_on_a_component_line():
    """Issue 22: ``max_parallelism=N`` is the ``max_parallelism=`` of ``topo.bolt``."""
    parsed = build("words: RandomSentence * 2 max_parallelism=4\n"
                   "count: WordCount * 3 <- words fields(sentence) max_parallelism=16")
    maxima = {c: s.max_parallelism for c, s in parsed.topology.components.items()}
    assert maxima == {"words": 4, "count": 16}
    assert build("words: RandomSentence").topology.components["words"].max_parallelism == 128


@pytest.mark.parametrize(("header", "body", "problem", "word"), [
    ("t", "words: RandomSentence * 4 max_parallelism=2",
     "component 'words': max_parallelism 2 is below its parallelism 4", "words"),
    ("t", "words: RandomSentence max_parallelism=0",
     "`max_parallelism` must be an integer from 1 to 32768, not 0", "0"),
    ("t", "words: RandomSentence max_parallelism=many",
     "`max_parallelism` must be an integer from 1 to 32768, not 'many'", "many"),
    ("t max_parallelism=8", "words: RandomSentence",
     "`max_parallelism` is a per-component option: set it on a component's line",
     "max_parallelism"),
])
def test_a_bad_max_parallelism_is_shown_under_its_word(header, body, problem, word):
    message = error(body, header)
    assert problem in message
    shown = header if message.startswith("line 1:") else body
    assert message.endswith(f"    {shown}\n    " + " " * shown.index(word) + "^" * len(word))
