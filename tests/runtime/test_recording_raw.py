"""Raw recording segments: the format, the locks that keep readers off a live writer's
file, converting leftovers, and real kills (of the recording process, and of its
converter) that lose nothing that was flushed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading

import psutil
import pyarrow.parquet as pq
import pytest

from runtime import wire
from runtime.recording import _raw as _recording_raw
from runtime.recording import read_table, segments
from runtime.recording._convert import BACKLOG
from runtime.recording._parquet import open_recorder
from runtime.recording._raw import (
    BARE,
    TRACKED,
    UNTRACKED,
    BadSegment,
    RawAppender,
    batch_entries,
    batch_entry,
    chunks_of,
    columns_of,
    convert_file,
    leftovers,
    raw_name,
)
from runtime.recording._sink import SegmentSink, recording_dir
from runtime.testing import FakeClock, wait_for


def test_records_keep_every_complete_record_and_skip_a_truncated_tail():
    data = batch_entry(UNTRACKED, b"abc", 1.5) + batch_entry(TRACKED, b"de", 2.5)
    assert list(batch_entries(data)) == [(UNTRACKED, b"abc", 1.5), (TRACKED, b"de", 2.5)]
    assert list(batch_entries(data[:-1])) == [(UNTRACKED, b"abc", 1.5)]
    assert list(batch_entries(data[:5])) == []


def test_columns_of_untracked_and_tracked_records_with_runs_of_flush_times():
    data = (batch_entry(UNTRACKED, wire.encode_batch([["a", 1], ["b", 2]]), 10.0)
            + batch_entry(TRACKED, wire.pack([[["c", 3]], [-5]]), 10.0)  # the same flush
            + batch_entry(UNTRACKED, wire.encode_batch([["d", 4]]), 11.0))
    columns, roots, stamps = columns_of(data, 2)
    assert columns == [["a", "b", "c", "d"], [1, 2, 3, 4]]
    assert roots == [None, None, -5, None]
    assert stamps == ([3, 4], [10.0, 11.0])


def test_a_one_field_streams_bare_records_are_its_column(tmp_path, ways):
    data = (batch_entry(BARE, wire.encode_batch(["a", "b"]), 10.0)
            + batch_entry(TRACKED, wire.pack([[["c"]], [-5]]), 10.0))
    assert columns_of(data, 1) == ([["a", "b", "c"]], [None, None, -5], ([3], [10.0]))
    sink = SegmentSink(str(tmp_path), 1, ["word"], {})
    path = tmp_path / raw_name("part-00001-1-000000.parquet")
    path.write_bytes(data)
    assert [r["word"] for r in table_of(convert_file(str(path), sink))] == ["a", "b", "c"]
    assert ways == [False]  # the quick way took it
    lists = SegmentSink(str(tmp_path / "lists"), 1, ["xs"], {})
    path.write_bytes(batch_entry(BARE, wire.encode_batch([["a", "b"], []]), 10.0))
    assert [r["xs"] for r in table_of(convert_file(str(path), lists))] == [["a", "b"], []]


def test_bare_records_in_a_segment_of_several_fields_are_refused(tmp_path):
    path = tmp_path / raw_name("part-00001-1-000000.parquet")
    path.write_bytes(batch_entry(BARE, wire.encode_batch(["a", "b"]), 1.0))
    with pytest.raises(BadSegment, match="bare values in a segment of 2 fields"):
        convert_file(str(path), SegmentSink(str(tmp_path), 1, ["word", "n"], {}))
    assert path.exists()


# -- the quick decoding (strings left as UTF-8 bytes for Arrow to check) --------------------
FLAT_ROWS = [["naïve ☃", 1, 2.5, True, b"\x00\xff"], [None, -(2**63), None, False, None],
             ["", 2**63 - 1, -0.0, None, b""]]
FLAT_FIELDS = ["s", "i", "f", "b", "raw"]
FLAT_HINTS = {"s": "str", "i": "int", "f": "float", "b": "bool", "raw": "bytes"}


def convert_rows(tmp_path, name: str, batch: list, sink: SegmentSink) -> str:
    path = tmp_path / raw_name(name)
    path.write_bytes(batch_entry(UNTRACKED, wire.encode_batch(batch), 7.0))
    return convert_file(str(path), sink)


def table_of(path: str) -> list[dict]:
    return pq.read_table(path).to_pylist()


@pytest.fixture
def ways(monkeypatch) -> list[bool]:
    """The decodings of raw segments, in order: False for the quick way, True for text."""
    seen: list[bool] = []
    exact, quick = _recording_raw.columns_of, _recording_raw.chunks_of

    def spy_exact(*args, **kwargs):
        seen.append(True)
        return exact(*args, **kwargs)

    def spy_quick(*args, text=True, **kwargs):
        if not text:  # columns_of calls it too, for the exact way
            seen.append(text)
        return quick(*args, text=text, **kwargs)

    monkeypatch.setattr(_recording_raw, "columns_of", spy_exact)
    monkeypatch.setattr(_recording_raw, "chunks_of", spy_quick)
    return seen


def test_flat_columns_decoded_the_quick_way_equal_the_exact_way(tmp_path, ways):
    quick = SegmentSink(str(tmp_path), 1, FLAT_FIELDS, FLAT_HINTS)
    exact = SegmentSink(str(tmp_path / "exact"), 1, FLAT_FIELDS, FLAT_HINTS)
    written = convert_rows(tmp_path, "part-00001-1-000000.parquet", FLAT_ROWS, quick)
    assert ways == [False]  # one decoding, the quick one
    exact.write(*columns_of(batch_entry(UNTRACKED, wire.encode_batch(FLAT_ROWS), 7.0), 5),
                name="part-00001-1-000000.parquet")
    assert table_of(written) == table_of(exact.files[0])
    assert [r["s"] for r in table_of(written)] == ["naïve ☃", None, ""]
    assert quick.schema == exact.schema and quick.written == 3 and quick.rejected == 0


def test_unhinted_columns_are_inferred_from_quickly_decoded_text(tmp_path, ways):
    sink = SegmentSink(str(tmp_path), 1, ["word", "n", "x"], {})
    written = convert_rows(tmp_path, "part-00001-1-000000.parquet",
                           [["é", 1, None], ["b", 2.5, None]], sink)
    assert ways == [False]
    assert [str(t) for t in sink.schema.types[:3]] == ["string", "double", "string"]
    assert [(r["word"], r["n"]) for r in table_of(written)] == [("é", 1.0), ("b", 2.5)]


def test_chunks_hold_whole_records_and_their_own_runs_of_flush_times():
    data = b"".join(batch_entry(UNTRACKED, wire.encode_batch([[f"w{i}", i], [f"v{i}", -i]]), t)
                    for i, t in enumerate([1.0, 1.0, 2.0, 3.0, 3.0]))
    parts = list(chunks_of(data, 2, rows=3))
    assert [len(roots) for _, roots, _ in parts] == [4, 4, 2]
    assert [stamps for _, _, stamps in parts] == [([4], [1.0]), ([2, 4], [2.0, 3.0]),
                                                  ([2], [3.0])]
    whole, _, _ = columns_of(data, 2)
    assert [sum((cols[i] for cols, _, _ in parts), []) for i in range(2)] == whole
    assert list(chunks_of(b"", 2)) == [([[], []], [], ([], []))]


def test_chunks_that_show_different_types_are_judged_the_exact_way(tmp_path, ways, monkeypatch):
    monkeypatch.setattr(_recording_raw, "CHUNK_ROWS", 1)
    sink = SegmentSink(str(tmp_path), 1, ["n"], {})
    data = batch_entry(UNTRACKED, wire.encode_batch([[1]]), 1.0) + batch_entry(
        UNTRACKED, wire.encode_batch([[2.5]]), 2.0)
    (tmp_path / raw_name("part-00001-1-000000.parquet")).write_bytes(data)
    written = convert_file(str(tmp_path / raw_name("part-00001-1-000000.parquet")), sink)
    assert ways == [False, True]  # an int64 chunk, then a double one: the exact way decides
    assert [r["n"] for r in table_of(written)] == [1.0, 2.5]


def test_a_bytes_value_in_an_unhinted_column_is_inferred_the_exact_way(tmp_path, ways):
    sink = SegmentSink(str(tmp_path), 1, ["word"], {})
    convert_rows(tmp_path, "part-00001-1-000000.parquet", [["text"], [b"bytes"]], sink)
    assert ways == [False, True]  # the quick way saw a bin marker and stopped
    assert str(sink.schema.types[0]) == "binary"  # as pyarrow infers text mixed with bytes


def test_nested_columns_are_decoded_the_exact_way(tmp_path, ways):
    sink = SegmentSink(str(tmp_path), 1, ["tags"], {})
    convert_rows(tmp_path, "part-00001-1-000000.parquet", [[["a", "b"]]], sink)
    assert sink.quick_types() is None  # a list column: its strings must not become bytes
    second = convert_rows(tmp_path, "part-00001-1-000001.parquet", [[["c"]]], sink)
    assert ways == [False, True, True]
    assert table_of(second)[0]["tags"] == ["c"]


@pytest.mark.parametrize("bad", [["ok", "text in an int column"], [b"\xff not utf-8", 1],
                                 [3, 1], ["ok", 1.5], ["ok", 2.0]],
                         ids=["text-as-int", "bad-utf8", "int-as-text", "fraction", "float"])
def test_a_value_the_quick_way_refuses_is_judged_the_exact_way(tmp_path, bad):
    sink = SegmentSink(str(tmp_path), 1, ["word", "n"], {"word": "str", "n": "int"})
    convert_rows(tmp_path, "part-00001-1-000000.parquet", [["fine", 0], bad], sink)
    assert sink.rejected == 2 and sink.written == 0  # the whole segment, as text
    rejected = table_of(sink.files[0])
    assert os.path.basename(os.path.dirname(sink.files[0])) == "_rejected"
    assert [r["word"] for r in rejected] == ["'fine'", repr(bad[0])]


def test_bytes_in_a_text_column_and_text_in_a_bytes_column_fit_either_way(tmp_path):
    sink = SegmentSink(str(tmp_path), 1, ["s", "raw"], {"s": "str", "raw": "bytes"})
    written = convert_rows(tmp_path, "part-00001-1-000000.parquet", [[b"ok", "é"]], sink)
    assert table_of(written)[0]["s"] == "ok" and table_of(written)[0]["raw"] == "é".encode()


def test_a_file_that_is_not_a_raw_segment_is_refused_and_kept(tmp_path):
    path = tmp_path / raw_name("part-00001-1-000000.parquet")
    path.write_bytes(batch_entry(UNTRACKED, wire.encode_batch([["only one value"]]), 1.0))
    sink = SegmentSink(str(tmp_path), 1, ["word", "n"], {})
    with pytest.raises(BadSegment, match="not a list of 2 values"):
        convert_file(str(path), sink)
    path.write_bytes(batch_entry(7, b"\x90", 1.0))
    with pytest.raises(BadSegment, match="unknown entry kind 7"):
        convert_file(str(path), sink)
    assert path.exists()  # nothing is lost


# -- one schema per folder, whichever writer comes first ---------------------------------
def test_every_task_takes_the_column_types_the_first_segment_fixed(tmp_path):
    first = SegmentSink(str(tmp_path), 1, ["x"], {})
    first.write([[None]], [None], ([1], [1.0]))  # null only: a text column
    second = SegmentSink(str(tmp_path), 2, ["x"], {})
    second.write([[7]], [None], ([1], [2.0]))
    assert second.schema.equals(first.schema) and second.rejected == 1
    assert "do not fit" in second.errors[0]
    assert pq.read_table(str(tmp_path)).column("x").to_pylist() == [None]  # one schema


@pytest.mark.parametrize("way", ["exact", "quick"])
def test_a_writer_that_loses_the_race_for_the_schema_takes_the_winners(tmp_path, monkeypatch,
                                                                        way):
    from runtime.recording import _sink as _recording

    winner = SegmentSink(str(tmp_path), 1, ["x"], {})
    winner.write([[1.5]], [None], ([1], [1.0]))
    real, looks = _recording.read_schema, []

    def before_the_winner_wrote(folder):  # the loser's first look found nothing
        looks.append(folder)
        return None if len(looks) == 1 else real(folder)

    monkeypatch.setattr(_recording, "read_schema", before_the_winner_wrote)
    loser = SegmentSink(str(tmp_path), 2, ["x"], {})
    if way == "exact":
        loser.write([[2]], [None], ([1], [2.0]))
    else:
        convert_rows(tmp_path, "part-00002-1-000000.parquet", [[2]], loser)
    assert str(loser.schema.field("x").type) == "double"
    assert loser.written == 1 and loser.rejected == 0  # an int fits a double column
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


def test_a_reader_never_converts_the_segment_a_live_recorder_is_writing(tmp_path):
    clock = FakeClock(100.0)
    rec = open_recorder(str(tmp_path), "w", "default", 2, ["word"], {}, segment_seconds=60.0,
                        clock=clock)
    rec.flushed([["a", "b"]])  # one field: bare values, as its batches hold
    folder = recording_dir(str(tmp_path), "w", "default")
    assert len(leftovers(folder)) == 1
    with open(leftovers(folder)[0], "rb") as f:
        assert [kind for kind, _, _ in batch_entries(f.read())] == [BARE]
    assert segments(tmp_path, "w") == []  # locked by its writer: left alone
    assert len(leftovers(folder)) == 1
    rec.close()
    assert leftovers(folder) == []
    assert read_table(tmp_path, "w").column("word").to_pylist() == ["a", "b"]


def test_the_leftovers_of_a_dead_writer_are_converted_by_the_reader(tmp_path):
    folder = recording_dir(str(tmp_path), "w", "default")
    sink = SegmentSink(folder, 4, ["word", "n"], {"n": "int"})
    sink.write([["x"], [0]], [None], ([1], [99.0]))  # the folder's schema, already fixed
    raw = RawAppender(folder, "part-00004-5")
    raw.append(batch_entry(UNTRACKED, wire.encode_batch([["a", 1], ["b", 2]]), 100.0))
    raw.seal()  # its writer and its converter died here: nobody holds the file
    rows = read_table(tmp_path, "w").to_pylist()
    assert sorted((r["word"], r["n"], r["_task"]) for r in rows) == [
        ("a", 1, 4), ("b", 2, 4), ("x", 0, 4)]
    assert leftovers(folder) == []


# -- real kills ------------------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import sys, time
    from runtime.recording._parquet import open_recorder
    rec = open_recorder(sys.argv[1], "w", "default", 3, ["word", "n"], {"n": "int"},
                        segment_seconds=600.0)
    for start in range(0, 3000, 500):
        rec.flushed([[[f"w{i % 7}", i] for i in range(start, start + 500)]])
    print(rec.converter.proc.pid, flush=True)
    sys.stdin.read()  # until the test kills it
""")


@pytest.fixture
def recording_process(tmp_path):
    """A process recording 3000 rows into a 600 s segment: (its Popen, its converter)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    converter = psutil.Process(int(proc.stdout.readline()))
    yield proc, converter
    for p in (converter, proc):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait(10)


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def written(tmp_path) -> list[str]:
    """The Parquet segments in the folder, listed without converting anything."""
    folder = recording_dir(str(tmp_path), "w", "default")
    return sorted(n for n in os.listdir(folder) if n.startswith("part-"))


def expect_all_3000(tmp_path) -> None:
    rows = read_table(tmp_path, "w").to_pylist()
    assert sorted((r["n"], r["word"], r["_task"]) for r in rows) == [
        (i, f"w{i % 7}", 3) for i in range(3000)]


@pytest.mark.slow
def test_a_sigkilled_recorder_loses_nothing_its_converter_finishes_the_segment(
        tmp_path, recording_process):
    proc, converter = recording_process
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    converter.wait(30)  # end of file on its stdin: it converts the open segment, exits
    assert len(written(tmp_path)) == 1
    expect_all_3000(tmp_path)


@pytest.mark.slow
def test_when_the_converter_dies_too_the_reader_converts_the_leftovers(
        tmp_path, recording_process):
    proc, converter = recording_process
    converter.kill()  # first, so that it cannot see its input end and convert
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: gone(converter), 10, "the converter to die")
    folder = recording_dir(str(tmp_path), "w", "default")
    assert written(tmp_path) == [] and len(leftovers(folder)) == 1
    expect_all_3000(tmp_path)
    assert leftovers(folder) == [] and len(written(tmp_path)) == 1


def test_a_closed_recorder_leaves_no_converter_running(tmp_path):
    rec = open_recorder(str(tmp_path), "w", "default", 1, ["word"], {})
    rec.flushed([[["a"]]])
    rec.close()
    wait_for(lambda: rec.converter.proc.poll() is not None, 10, "the converter to exit")
    assert rec.converter.proc.returncode == 0


@pytest.mark.slow
def test_a_full_backlog_holds_the_tuple_path_until_the_converter_dies_and_nothing_is_lost(
        tmp_path):
    reported = []
    rec = open_recorder(str(tmp_path), "w", "default", 1, ["n"], {"n": "int"}, segment_rows=1,
                        report=reported.append)
    rec.converter.proc.send_signal(signal.SIGSTOP)  # a converter far behind
    done = []

    def emit_all():
        for n in range(BACKLOG + 2):  # one segment per flush
            rec.flushed([[n]])
            done.append(n)

    thread = threading.Thread(target=emit_all, daemon=True)
    thread.start()
    wait_for(lambda: len(done) == BACKLOG, 30, "the backlog to fill")
    assert thread.is_alive()  # the next flush waits for a place in the backlog
    rec.converter.proc.kill()  # the converter dies instead: the tuple path goes on
    thread.join(30)
    assert done == list(range(BACKLOG + 2))
    rec.close()
    assert any("converter" in message for message in reported)
    ns = read_table(tmp_path, "w").column("n").to_pylist()  # the reader converts them all
    assert sorted(ns) == list(range(BACKLOG + 2))
