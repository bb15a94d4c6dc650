"""The lineage view (issue 20): a traced tree as SVG, the lineage tab, the acker panel, the
tap's traced tuples, and the dashboard's controls for them. Fast: traces are built by
hand, and the dashboard talks to a stand-in handle (tests/workbench/test_dashboard.py and
tests/browser/ drive real topologies)."""

from __future__ import annotations

import types
import xml.etree.ElementTree as ET

import pytest

from runtime.observe.traces import TRANSIT, Hop, Trace
from workbench import _dashboard, _lineage, _lineage_tab, _lists, _panels, _parts

SVG = "{http://www.w3.org/2000/svg}"


def sentence(status="acked", held_by=None, msg_id="s-1", slow=2) -> Trace:
    """A sentence tree: the splitter's hop, then one hop per word, the ``slow``-th word
    taking 40 ms; the second word's hop not acked (and not run) unless acked."""
    words = ("the", "cow", "jumped")
    hops = [Hop("split", 3, "default", ("the cow jumped",), None, 0.5, 1.0, "acked")]
    for i, w in enumerate(words):
        done = status == "acked" or i != 1
        hops.append(Hop("count", 5 + i % 2, "default", (w,), 0, 0.3 if done else None,
                        (40.0 if i == slow else 0.2) if done else None,
                        "acked" if done else None))
    return Trace(msg_id, "sentences", 1, status, 45.0 if status == "acked" else None,
                 tuple(hops), held_by=held_by, values=("the cow jumped",))


def boxes(svg: str) -> list:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return [g for g in root.iter(f"{SVG}g") if "tf-hop" in g.get("class", "")]


# -- the picture ------------------------------------------------------------------------------
def test_a_sentence_tree_has_one_box_per_hop_and_an_edge_from_each_parent():
    svg = _lineage.trace_svg(sentence())
    found = boxes(svg)
    assert len(found) == 1 + 4  # the spout tuple, then 1 + 3 hops
    assert [g.get("data-component") for g in found[1:]] == ["split", "count", "count", "count"]
    assert len(list(ET.fromstring(svg).iter(f"{SVG}path"))) == 4
    texts = " ".join(t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text"))
    assert "split:3" in texts and "[default] ('cow',)" in texts and "q 0.30 ms · x 40.0 ms" in texts


def test_the_words_sit_one_column_right_of_the_splitter_in_rows_of_their_own():
    depth, row = _lineage.layout([None, 0, 0, 0, 1])
    assert depth == [1, 2, 2, 2, 3]
    assert row == [0.0, 0.0, 1.0, 2.0, 0.0]  # a parent level with its first child


def test_the_slowest_hop_is_highlighted_and_only_it():
    svg = _lineage.trace_svg(sentence(slow=2))
    slow = [g.get("data-hop") for g in boxes(svg) if "tf-slowest" in g.get("class")]
    assert slow == ["3"] and "slowest" in svg
    other = [g.get("data-hop") for g in boxes(_lineage.trace_svg(sentence(slow=0)))
             if "tf-slowest" in g.get("class")]
    assert other == ["1"]


def test_the_holder_of_a_timed_out_tree_is_marked():
    trace = sentence("timed_out", held_by=("count", 6))
    svg = _lineage.trace_svg(trace)
    held = [g.get("data-hop") for g in boxes(svg) if "tf-held" in g.get("class")]
    assert held == ["2"]  # count:6 got "cow" and never acked it ("jumped" at 5 was acked)
    assert "held here" in svg and "held by count:6" in svg


def test_a_tree_lost_in_transit_marks_the_hops_never_processed():
    trace = sentence("timed_out", held_by=(TRANSIT, None))
    svg = _lineage.trace_svg(trace)
    held = [g.get("data-hop") for g in boxes(svg) if "tf-held" in g.get("class")]
    assert held == ["2"] and "lost in transit" in svg and "&lt;transit&gt;" in svg


def test_an_acked_tree_marks_no_holder():
    assert "tf-held" not in _lineage.trace_svg(sentence())


def test_values_are_abbreviated_and_escaped_and_control_characters_dropped():
    long = Trace("<m&1>", "src", 0, "acked", 1.0, (
        Hop("b", 1, "default", ("x" * 200 + "\x01<script>",), None, 1.0, 1.0, "acked"),))
    svg = _lineage.trace_svg(long)
    ET.fromstring(svg)
    assert "<script>" not in svg and "xxxx…" in svg and "\x01" not in svg


def test_a_huge_tree_is_cut_and_says_so():
    hops = tuple(Hop("b", 1, "default", (i,), None, 0.1, 0.1, "acked") for i in range(20))
    svg = _lineage.trace_svg(Trace(1, "src", 0, "acked", 1.0, hops), max_hops=5)
    assert len(boxes(svg)) == 1 + 5 and "15 more hops not drawn" in svg


# -- the tab ----------------------------------------------------------------------------------
def test_the_list_marks_the_chosen_trace_and_names_holders():
    a, b = sentence(msg_id="a"), sentence("timed_out", held_by=("count", 6), msg_id="b")
    html = _lineage_tab.lineage_html({"traces": [b, a], "trace": b})
    rows = ET.fromstring(f"<div>{html.split('recent traces</div>')[1]}</div>").iter("tr")
    cells = [[td.text for td in tr.iter("td")] for tr in rows]
    assert cells[1] == ["b", "sentences:1", "timed_out", None, "4", "count:6"]
    assert cells[2][2:4] == ["acked", "45.0"]
    assert 'class="tf-chosen"' in html and html.index("<svg") < html.index("recent traces")


def test_no_traces_says_how_to_get_some():
    assert "submit(trace=0.01)" in _lineage_tab.lineage_html({"traces": []})


# -- the tap's traced tuples ------------------------------------------------------------------
def tapped(task, values, to, stream="default", ids=None) -> dict:
    return {"task": task, "values": list(values), "to": list(to), "stream": stream,
            "fields": ["word"], "time": 1.0, "ids": ids}


def test_a_tapped_tuple_belongs_to_the_tree_that_delivered_it():
    a, b = sentence(msg_id="a"), sentence(msg_id="b")
    b = Trace("b", "sentences", 1, "acked", 1.0, (
        Hop("split", 4, "default", ("a moon",), None, 0.1, 0.1, "acked"),
        Hop("count", 5, "default", ("moon",), 0, 0.1, 0.1, "acked")))
    assert _lineage_tab.trace_of(tapped(3, ["cow"], [6]), [b, a]) is a
    assert _lineage_tab.trace_of(tapped(4, ["moon"], [5]), [b, a]) is b
    assert _lineage_tab.trace_of(tapped(4, ["cow"], [6]), [b, a]) is None  # wrong sender
    assert _lineage_tab.trace_of(tapped(1, ["the cow jumped"], [3]), [b, a]) is a  # spout
    assert _lineage_tab.trace_of(tapped(3, ["cow"], [6], stream="other"), [a]) is None
    follows = _lineage_tab.traced_taps([tapped(3, ["cow"], [6]), tapped(3, ["the"], [5]),
                                        tapped(4, ["moon"], [5])], [a, b])
    assert [key for _, key in follows] == ["'a'", "'b'"]  # each tree once


def test_the_tap_table_shows_root_and_edge_ids_and_the_tree():
    html = _lists.tap_html({"component": "split", "stream": "default", "tuples": [
        {**tapped(3, ["cow"], [6], ids={0x80000000001234AB: 0x55}), "trace": "'a'"},
        tapped(3, ["moon"], [6])]})
    assert "…1234ab → …000055" in html and f'data-roots="{0x80000000001234AB}"' in html
    assert html.count('class="tf-traced"') == 1 and "tree of &#x27;a&#x27;" in html


# -- the acker panel --------------------------------------------------------------------------
ACKER = [{"task": 7, "container": 0, "pending": 5,
          "ages": [{"youngest_s": 0.0, "oldest_s": 1.2, "count": 1},
                   {"youngest_s": 1.2, "oldest_s": 16.2, "count": 4},
                   {"youngest_s": 16.2, "oldest_s": 31.2, "count": 0}],
          "oldest": [{"root": 0xABC, "spout": "sentences", "spout_task": 1, "msg_id": "m-9",
                      "age_s": 12.25, "slot": 1},
                     {"root": 0xABD, "spout": None, "spout_task": 2, "msg_id": None,
                      "age_s": None, "slot": 1}]}]


def test_the_acker_panel_draws_a_bar_per_slot_and_the_oldest_roots():
    html = _lineage_tab.acker_html({"acker": ACKER})
    root = ET.fromstring(html)
    bars = [d for d in root.iter("div") if d.get("class") == "tf-age"]
    assert [b.get("data-count") for b in bars] == ["1", "4", "0"]
    widths = [float(r.get("width")) for r in root.iter("rect")]
    assert widths == [pytest.approx(65.0), pytest.approx(260.0), 0.0]  # 4 is the longest
    rows = [[td.text for td in tr.iter("td")] for tr in root.iter("tr")][1:]
    assert rows == [["0xabc", "sentences:1", "m-9", "12.2 s"], ["0xabd", "?:2", "?", "1-16 s"]]
    assert "5 pending" in html


def test_the_acker_panel_without_ackers():
    assert "ackers=0" in _lineage_tab.acker_html({"acker": []})
    assert _lineage_tab.acker_html({}) == "<small>no acker state yet</small>"


def test_the_static_picture_keeps_the_lineage_and_the_acker():
    html = _panels.render({"state": "killed", "traces": [sentence()], "trace": sentence(),
                           "acker": ACKER})
    assert 'class="tupleflow-lineage"' in html and 'class="tupleflow-ackers"' in html


# -- the dashboard's controls, on a stand-in handle -------------------------------------------
class Handle:
    """What the dashboard asks of a running topology, answered from fixed data."""

    name, killed, alive, exit_code = "demo", False, True, None

    def __init__(self, traces):
        self._traces, self.rates, self.asked = traces, [], 0
        self.plan = types.SimpleNamespace(
            config={}, streams={("sentences", "default"): ["sentence"],
                                ("split", "default"): ["word"]},
            component_tasks=lambda: {"sentences": (1,), "split": (3,), "count": (5, 6)})

    def status(self):
        return {"state": "running"}

    def metrics(self, window):
        return {"window": window, "components": {}}

    def statistics(self):
        return []

    def events(self):
        return []

    def exceptions(self):
        return []

    def sample(self, component, stream, n):
        return [tapped(3, ["cow"], [6])]

    def traces(self, status=None, limit=100):
        self.asked += 1
        return [t for t in self._traces if status in (None, t.status)][:limit]

    def lineage(self, msg_id):
        return next((t for t in self._traces if t.msg_id == msg_id), None)

    def acker_state(self):
        return ACKER

    def set_trace(self, rate):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"trace rate must be within [0, 1], not {rate}")
        self.rates.append(rate)


@pytest.fixture
def board():
    traces = [sentence("timed_out", held_by=("count", 6), msg_id="b"), sentence(msg_id="a")]
    board = _dashboard.Dashboard(Handle(traces), start=False)
    yield board
    board.close()


def test_the_lineage_tab_lists_filters_and_draws_the_chosen_tree(board):
    parts = board._parts
    parts.show_tab("lineage")
    board.refresh()
    assert [k for _, k in parts.trace_pick.options] == ["", "'b'", "'a'"]
    assert "<svg" not in parts.lineage.value and "ackers" not in parts.lineage.value
    parts.trace_pick.value = "'b'"  # what a click in the dropdown does
    assert board.chosen.msg_id == "b" and "held here" in parts.lineage.value
    parts.status_filter.value = "acked"
    board.refresh()
    assert [k for _, k in parts.trace_pick.options] == ["", "'a'", "'b'"]  # chosen kept
    assert parts.trace_pick.value == "'b'" and "held here" in parts.lineage.value
    assert "5 pending" in parts.acker.value


def test_following_a_traced_tapped_tuple_opens_its_tree(board):
    parts = board._parts
    parts.edge.value = ("out", "split", "default")
    board.refresh()
    # both trees sent "cow" from split:3 to count:6: the newest one is taken
    assert "tree of &#x27;b&#x27;" in parts.tap_table.value
    assert [k for _, k in parts.follow.options] == ["", "'b'"]
    parts.follow.value = "'b'"
    assert board.chosen.msg_id == "b" and "held here" in parts.lineage.value
    assert parts.tabs.selected_index == _parts.TABS.index("lineage")
    assert parts.follow.value == ""  # ready to follow another


def test_the_trace_rate_control_calls_set_trace_and_says_why_not(board):
    board.set_trace(" 0.25 ")
    assert board.running.rates == [0.25] and "trace rate = 0.25" in board._parts.message.value
    board.set_trace("2")
    assert "refused" in board._parts.message.value and board.running.rates == [0.25]
    board.set_trace("lots")
    assert "not a number" in board._parts.message.value


@pytest.mark.parametrize("module", [_lineage, _lineage_tab])
def test_doctests(module):
    import doctest

    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failed == 0


def test_traces_are_asked_every_tick_only_while_a_tab_shows_them(board):
    board._parts.show_tab("events")
    for _ in range(_dashboard.SLOW_EVERY - 1):
        board.refresh()
    assert board.running.asked == 1  # the slow tick only (the first)
    assert board.snapshot["traces"]  # ...and what it found stays on the screen
    board._parts.show_tab("acker")
    board.refresh()  # not a slow tick
    assert board.running.asked == 2
