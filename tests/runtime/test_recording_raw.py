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
import pytest

from runtime import wire
from runtime._recording import BACKLOG, SegmentSink, open_recorder, recording_dir
from runtime._recording_raw import (
    TRACKED,
    UNTRACKED,
    BadSegment,
    RawAppender,
    columns_of,
    convert_file,
    leftovers,
    raw_name,
    record,
    records,
)
from runtime.recording import read_table, segments
from runtime.testing import FakeClock, wait_for


def test_records_keep_every_complete_record_and_skip_a_truncated_tail():
    data = record(UNTRACKED, b"abc", 1.5) + record(TRACKED, b"de", 2.5)
    assert list(records(data)) == [(UNTRACKED, b"abc", 1.5), (TRACKED, b"de", 2.5)]
    assert list(records(data[:-1])) == [(UNTRACKED, b"abc", 1.5)]
    assert list(records(data[:5])) == []


def test_columns_of_untracked_and_tracked_records_with_runs_of_flush_times():
    data = (record(UNTRACKED, wire.encode_batch([["a", 1], ["b", 2]]), 10.0)
            + record(TRACKED, wire.pack([[["c", 3]], [-5]]), 10.0)  # the same flush
            + record(UNTRACKED, wire.encode_batch([["d", 4]]), 11.0))
    columns, roots, stamps = columns_of(data, 2)
    assert columns == [["a", "b", "c", "d"], [1, 2, 3, 4]]
    assert roots == [None, None, -5, None]
    assert stamps == ([3, 4], [10.0, 11.0])


def test_a_file_that_is_not_a_raw_segment_is_refused_and_kept(tmp_path):
    path = tmp_path / raw_name("part-00001-1-000000.parquet")
    path.write_bytes(record(UNTRACKED, wire.encode_batch([["only one value"]]), 1.0))
    sink = SegmentSink(str(tmp_path), 1, ["word", "n"], {})
    with pytest.raises(BadSegment, match="not a list of 2 values"):
        convert_file(str(path), sink)
    path.write_bytes(record(7, b"\x90", 1.0))
    with pytest.raises(BadSegment, match="unknown record kind 7"):
        convert_file(str(path), sink)
    assert path.exists()  # nothing is lost


def test_a_reader_never_converts_the_segment_a_live_recorder_is_writing(tmp_path):
    clock = FakeClock(100.0)
    rec = open_recorder(str(tmp_path), "w", "default", 2, ["word"], {}, segment_seconds=60.0,
                        clock=clock)
    rec.flushed([[["a"], ["b"]]])
    folder = recording_dir(str(tmp_path), "w", "default")
    assert len(leftovers(folder)) == 1
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
    raw.append(record(UNTRACKED, wire.encode_batch([["a", 1], ["b", 2]]), 100.0))
    raw.seal()  # its writer and its converter died here: nobody holds the file
    rows = read_table(tmp_path, "w").to_pylist()
    assert sorted((r["word"], r["n"], r["_task"]) for r in rows) == [
        ("a", 1, 4), ("b", 2, 4), ("x", 0, 4)]
    assert leftovers(folder) == []


# -- real kills ------------------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import sys, time
    from runtime._recording import open_recorder
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
            rec.flushed([[[n]]])
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
