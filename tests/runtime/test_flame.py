"""The flame-graph renderer (``runtime/observe/flame.py``), pure: a fixed folded input
drawn to an SVG document whose boxes, widths, colours and labels are checked; and the
real sampler's error for a process that is gone."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from runtime.observe.flame import (
    MARGIN,
    WIDTH,
    Profile,
    build_tree,
    colour,
    fold,
    parse_folded,
    render_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
CPU = parse_folded("""\
<module> (job.py:9);main (job.py:5);parse (job.py:2) 30
<module> (job.py:9);main (job.py:5);count (job.py:3) 10
""")
WAITING = parse_folded("<module> (job.py:9);main (job.py:5);poll (zmq.py:1) 60\n")


def boxes(svg: str) -> dict[str, tuple[float, str, str]]:
    """frame name -> (box width, fill, tooltip), from the drawn document."""
    out = {}
    for g in ET.fromstring(svg).iter(SVG + "g"):
        rect, tip = g.find(SVG + "rect"), g.find(SVG + "title").text
        out[tip.split(": ")[0]] = (float(rect.get("width")), rect.get("fill"), tip)
    return out


def test_the_tree_adds_up_cpu_and_waiting_per_frame():
    tree = build_tree(CPU, WAITING)
    (module,) = tree.children
    (main,) = module.children
    assert (tree.total, module.cpu, module.waiting) == (100, 40, 60)
    assert [(c.name, c.cpu, c.waiting) for c in main.children] == [
        ("count (job.py:3)", 10, 0), ("parse (job.py:2)", 30, 0), ("poll (zmq.py:1)", 0, 60)]
    assert tree.depth() == 4  # all, <module>, main, the leaves


def test_box_widths_are_proportional_and_colours_tell_cpu_from_waiting():
    drawn = boxes(render_svg(CPU, WAITING, "job"))
    assert drawn["all"][0] == pytest.approx(WIDTH - 0.5)
    assert drawn["parse (job.py:2)"][0] == pytest.approx(WIDTH * 0.3 - 0.5)
    assert drawn["poll (zmq.py:1)"][0] == pytest.approx(WIDTH * 0.6 - 0.5)
    assert drawn["parse (job.py:2)"][1] == colour(1.0)  # all on a CPU: warm
    assert drawn["poll (zmq.py:1)"][1] == colour(0.0)  # all waiting: blue
    assert drawn["main (job.py:5)"][1] == colour(0.4)
    assert "60 samples (60.0%), 0% on CPU" in drawn["poll (zmq.py:1)"][2]


def test_the_document_is_offline_and_escapes_frame_names():
    svg = render_svg(CPU, WAITING, "a <b> & c")
    root = ET.fromstring(svg)  # well-formed although frames are called <module>
    texts = [t.text for t in root.iter(SVG + "text")]
    assert any(t and t.startswith("<module>") for t in texts)
    assert "a <b> & c" in texts[0]
    assert "href" not in svg and svg.count("http") == 1  # the xmlns, nothing fetched
    assert float(root.get("width")) == WIDTH + 2 * MARGIN


def test_narrow_frames_are_drawn_without_labels_and_empty_profiles_say_so():
    wide = {"a": 1000, "a;tiny": 1}
    labels = [t.text for t in ET.fromstring(render_svg(wide, {})).iter(SVG + "text")]
    assert "tiny" not in labels and "a" in labels
    assert "no samples" in render_svg({}, {})


def test_folded_text_round_trips_and_ignores_broken_lines():
    assert parse_folded(fold(CPU)) == CPU
    assert parse_folded("a;b 2\nhalf a line\na;b 3") == {"a;b": 5}


def test_a_profile_shows_as_svg_and_keeps_its_stacks_as_data():
    p = Profile("split", (3,), 2.0, 100, CPU, WAITING)
    assert p.samples == 100
    assert p._repr_svg_() == p.svg() and "split (task 3), 2 s at 100 Hz" in p.svg()
    assert p.top(1) == [("parse (job.py:2)", 30)]
    assert p.top(1, on_cpu=False) == [("poll (zmq.py:1)", 60)]
    assert parse_folded(p.folded) == {**CPU, **WAITING}


def test_a_process_that_is_gone_is_a_clear_error_from_the_real_sampler():
    import subprocess
    import sys

    from runtime.processes import profiling

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    with pytest.raises(RuntimeError, match=f"could not sample task 7 \\(pid {child.pid}\\)"):
        profiling.profile("c", {7: child.pid}, 0.2, 100)
    with pytest.raises(ValueError, match="rate must be"):
        profiling.profile("c", {7: child.pid}, 1, 0)
