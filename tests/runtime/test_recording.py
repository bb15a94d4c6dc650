"""Recording streams to Parquet: the pure recorder with a fake clock, the declaration
API, and a recorded topology in memory. Multiprocess runs are in test_recording_mp.py."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from runtime import Topology, TopologyError
from runtime.model.fields import FieldError, split_field
from runtime.recording import read_table, segments
from runtime.recording._parquet import open_recorder, signed64
from runtime.recording._sink import SegmentSink, read_fields, recording_dir
from runtime.testing import FakeClock, InMemoryCluster, ListSink, ListSpout


# -- declaring ---------------------------------------------------------------------------
def test_fields_take_optional_type_hints_and_plain_names_still_work():
    assert split_field("word") == ("word", None)
    assert split_field("count: int") == ("count", "int")
    assert split_field(("score", float)) == ("score", "float")
    assert split_field(("raw", "bytes")) == ("raw", "bytes")
    with pytest.raises(FieldError, match="unknown type 'decimal'"):
        split_field("price: decimal")
    with pytest.raises(FieldError, match="not a name"):
        split_field(3)


def test_hinted_outputs_declare_plain_field_names():
    topo = Topology("hints")
    topo.spout("s", ListSpout([["a", 1]], fields=["word: str", ("n", int)]))
    assert topo.components["s"].streams["default"] == ("word", "n")
    with pytest.raises(TopologyError, match="component 'bad'.*unknown type"):
        topo.spout("bad", ListSpout([[1]], fields=["n: integer"]))


def test_record_checks_the_stream_when_declared():
    topo = Topology("rec")
    declarer = topo.spout("s", ListSpout([[1]], fields=["n"]))
    assert declarer.record() is declarer
    assert topo.components["s"].config["record"] == ["default"]
    with pytest.raises(TopologyError, match="cannot record stream 'defualt'.*did you mean"):
        declarer.record("defualt")
    with pytest.raises(TopologyError, match="record must be a list of stream ids"):
        topo.spout("t", ListSpout([[1]], fields=["n"]), record="default")


# -- the recorder, alone -------------------------------------------------------------------
def test_segments_roll_by_rows_and_by_seconds_and_are_complete_files(tmp_path):
    clock = FakeClock(100.0)
    rec = open_recorder(str(tmp_path), "words", "default", 3, ["word", "n"], {"n": "int"},
                        segment_rows=4, segment_seconds=10.0, clock=clock)
    rec.flushed([[["a", 1], ["b", 2]]])
    assert segments(tmp_path, "words") == []  # 2 rows, young: still buffered
    rec.tracked(["c", 3], 2**64 - 5)
    rec.flushed([[["d", 4]]])  # 4 rows: rolled
    clock.advance(11.0)
    rec.flushed([[["e", 5]]])  # a new segment, stamped now and already 0 s old
    clock.advance(10.0)
    rec.flushed([])  # nothing new, but the open segment is 10 s old: rolled
    rec.close()
    files = segments(tmp_path, "words")
    assert len(files) == 2
    assert not [n for n in os.listdir(recording_dir(str(tmp_path), "words", "default"))
                if n.endswith(".tmp")]
    table = read_table(tmp_path, "words")
    assert table.schema.field("n").type == pa.int64()
    rows = sorted(table.to_pylist(), key=lambda r: r["n"])
    assert [(r["word"], r["n"], r["_task"]) for r in rows] == [
        ("a", 1, 3), ("b", 2, 3), ("c", 3, 3), ("d", 4, 3), ("e", 5, 3)]
    assert [r["_root_id"] for r in rows] == [None, None, -5, None, None]
    assert [r["_emit_ts"].timestamp() for r in rows] == [100.0] * 4 + [111.0]
    assert read_fields(recording_dir(str(tmp_path), "words", "default")) == (
        ["word", "n"], {"n": "int"})


def test_rows_that_do_not_fit_the_columns_are_kept_as_text_and_reported(tmp_path):
    reported = []
    rec = open_recorder(str(tmp_path), "c", "default", 1, ["n"], {}, segment_rows=2,
                        report=reported.append)
    rec.flushed([[1, 2]])  # the first segment makes "n" an int64 column (one field: bare)
    rec.flushed([["three", 4]])
    rec.close()
    assert sorted(read_table(tmp_path, "c").column("n").to_pylist()) == [1, 2]
    rejected = read_table(tmp_path, "c", rejected=True)
    assert sorted(rejected.column("n").to_pylist()) == ["'three'", "4"]
    assert len(reported) == 1 and "do not fit" in reported[0]


def test_a_null_only_first_segment_gives_a_text_column(tmp_path):
    writer = SegmentSink(str(tmp_path), 1, ["x"], {})
    writer.write([[None]], [None], ([1], [1.0]))  # one column of one row, stamped once
    writer.write([["later"]], [None], ([1], [2.0]))
    assert writer.schema.field("x").type == pa.string()
    assert writer.rejected == 0 and writer.written == 2


def test_signed64_keeps_the_bits():
    for root in (1, 2**63 - 1, 2**63, 2**64 - 1):
        assert signed64(root) % 2**64 == root


# -- a recorded topology, in memory ------------------------------------------------------------
def test_in_memory_recording_holds_exactly_what_the_spout_emitted():
    values = [[f"w{i % 7}", i] for i in range(500)]
    topo = Topology("rec-mem")
    topo.spout("words", ListSpout(values, fields=["word: str", "n: int"]),
               parallelism=2).record()
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("words")
    with InMemoryCluster(topo, ackers=1) as cluster:
        cluster.run_until_idle()
        for task in cluster.plan.component_tasks()["words"]:
            cluster.executors[task].close_recordings()
        table = read_table(cluster.run_dir, "words")
        tasks = cluster.plan.component_tasks()["words"]
    rows = table.to_pylist()
    assert Counter((r["word"], r["n"]) for r in rows) == Counter(map(tuple, values))
    assert all(r["_task"] == tasks[r["n"] % 2] for r in rows)  # ListSpout: i -> index i % 2
    assert all(r["_root_id"] is not None for r in rows)  # acking on: every tuple tracked
    assert len({r["_root_id"] for r in rows}) == len(rows)
