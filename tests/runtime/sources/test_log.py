"""The embedded log: round trips, partitioning, segments, recovery, crashes and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import runtime.sources as sources
from runtime.sources import (
    CorruptLogError,
    EmbeddedLog,
    LogBusyError,
    OffsetOutOfRange,
    TopicError,
    partition_for,
)
from runtime.sources._records import encode

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def log(tmp_path):
    with EmbeddedLog(tmp_path / "log") as opened:
        yield opened


def segments(root: Path, topic: str, partition: int) -> list[Path]:
    return sorted((root / topic / f"partition-{partition}").glob("*.seg"))


def test_public_api_is_curated():
    assert sources.__all__ == sorted(sources.__all__)
    assert [n for n in sources.__all__ if not hasattr(sources, n)] == []
    public = {n for n in vars(sources) if not n.startswith("_")} - {"annotations", "generators"}
    assert public <= set(sources.__all__)


def test_append_read_round_trip(log):
    log.create_topic("t", 1)
    assert log.append("t", b"a") == (0, 0)
    assert log.append("t", b"") == (0, 1)
    assert log.append("t", bytes(range(256))) == (0, 2)
    assert log.read("t", 0, 0) == [(0, b"a"), (1, b""), (2, bytes(range(256)))]
    assert log.read("t", 0, 1, max_records=1) == [(1, b"")]
    assert log.read("t", 0, 3) == []
    assert log.end_offset("t", 0) == 3


def test_offsets_contiguous_per_partition_round_robin(log):
    log.create_topic("t", 3)
    acks = [log.append("t", str(i).encode()) for i in range(30)]
    for p in range(3):
        offsets = [o for q, o in acks if q == p]
        assert offsets == list(range(10))
        assert [o for o, _ in log.read("t", p, 0)] == offsets
    assert log.append_many("t", [b"x", b"y"], partition=2) == [(2, 10), (2, 11)]


def test_key_always_goes_to_the_same_partition(log):
    log.create_topic("t", 8)
    for key in ["user-1", "user-2", b"raw", 42, ["a", 1]]:
        chosen = {log.append("t", b"v", key=key)[0] for _ in range(5)}
        assert chosen == {partition_for(key, 8)}
    p, o = log.append_json("t", {"user": "u9", "n": 1}, key="u9")
    assert p == partition_for("u9", 8)
    assert log.read_json("t", p, o) == [(o, {"user": "u9", "n": 1})]


def test_create_topic_is_idempotent_and_validated(log):
    log.create_topic("clicks", 2)
    log.create_topic("clicks", 2)
    with pytest.raises(TopicError, match="already exists with 2"):
        log.create_topic("clicks", 3)
    for bad in ["", "a/b", "..", "x" * 201, "sp ace"]:
        with pytest.raises(TopicError, match="bad topic name"):
            log.create_topic(bad, 1)
    with pytest.raises(TopicError, match="no topic"):
        log.append("missing", b"x")
    assert log.topics() == ["clicks"] and log.partitions("clicks") == 2


def test_bad_arguments(log):
    log.create_topic("t", 2)
    with pytest.raises(TypeError, match="append_json"):
        log.append("t", "text")
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 2, 0)
    with pytest.raises(OffsetOutOfRange):
        log.read("t", 0, 1)
    with pytest.raises(ValueError, match="fsync"):
        EmbeddedLog(log.root, fsync="sometimes")


def test_segments_roll_and_reads_cross_them(tmp_path):
    root = tmp_path / "log"
    with EmbeddedLog(root, segment_bytes=100) as log:
        log.create_topic("t", 1)
        for i in range(20):
            log.append("t", b"%02d-padding-padding" % i)
        log.append_many("t", [b"%02d-batch" % i for i in range(20, 40)])
        files = segments(root, "t", 0)
        assert len(files) > 5
        assert files[0].name == "00000000000000000000.seg"
        bases = [int(f.stem) for f in files]
        assert bases == sorted(bases)
        got = log.read("t", 0, 0, max_records=100)
        assert [o for o, _ in got] == list(range(40))
        assert log.read("t", 0, 17, max_records=5) == got[17:22]
    with EmbeddedLog(root, segment_bytes=100) as again:
        assert again.read("t", 0, 0, max_records=100) == got
        assert again.append("t", b"more") == (0, 40)


def test_reopen_after_close(tmp_path):
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("a", 2)
        log.append("a", b"x", partition=1)
    with EmbeddedLog(tmp_path) as log:
        assert log.topics() == ["a"]
        assert [log.end_offset("a", p) for p in (0, 1)] == [0, 1]
        assert log.append("a", b"y", partition=1) == (1, 1)
        assert log.read("a", 1, 0) == [(0, b"x"), (1, b"y")]


@pytest.mark.parametrize("tail", [encode(b"torn-record")[:-3], encode(b"z")[:5],
                                  encode(b"bad")[:-1] + b"!", bytes(40)])
def test_torn_tail_is_truncated_on_reopen(tmp_path, caplog, tail):
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("t", 1)
        log.append_many("t", [b"one", b"two"])
    seg = segments(tmp_path, "t", 0)[-1]
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(tail)
    with EmbeddedLog(tmp_path) as log:
        assert "truncated" in caplog.text and str(seg) in caplog.text
        assert seg.stat().st_size == good
        assert log.end_offset("t", 0) == 2
        assert log.append("t", b"three") == (0, 2)
        assert log.read("t", 0, 0) == [(0, b"one"), (1, b"two"), (2, b"three")]


def test_corruption_in_the_middle_raises(tmp_path):
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("t", 1)
        log.append_many("t", [b"alpha", b"bravo", b"charlie"])
    seg = segments(tmp_path, "t", 0)[-1]
    data = bytearray(seg.read_bytes())
    data[len(encode(b"alpha")) + 9] ^= 0xFF  # a payload byte of offset 1
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match=r"offset 1 ") as err:
        EmbeddedLog(tmp_path)
    assert err.value.path == seg and str(seg) in str(err.value)


def test_corruption_in_a_sealed_segment_raises_on_read(tmp_path):
    with EmbeddedLog(tmp_path, segment_bytes=30) as log:
        log.create_topic("t", 1)
        log.append_many("t", [b"record-%d" % i for i in range(6)])
    first = segments(tmp_path, "t", 0)[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with EmbeddedLog(tmp_path) as log, pytest.raises(CorruptLogError, match=first.name):
        log.read("t", 0, 0)


def test_one_writer_per_topic_and_readers_follow(tmp_path):
    with EmbeddedLog(tmp_path) as writer, EmbeddedLog(tmp_path, lock_timeout=0) as other:
        writer.create_topic("t", 1)
        writer.append("t", b"first")
        assert other.read("t", 0, 0) == [(0, b"first")]
        with pytest.raises(LogBusyError, match=f"pid {os.getpid()}"):
            other.append("t", b"second")
        writer.append("t", b"second")
        assert other.end_offset("t", 0) == 2
        assert other.read("t", 0, 1) == [(1, b"second")]


CHILD = textwrap.dedent("""
    import sys
    from runtime.sources import EmbeddedLog
    log = EmbeddedLog(sys.argv[1], segment_bytes=2000)
    log.create_topic("t", 3)
    for i in range(1_000_000):
        p, o = log.append("t", b"rec-%d" % i, key=i % 7)
        print(i, p, o, flush=True)
""")


def test_acknowledged_appends_survive_sigkill(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    acked = []
    try:
        while len(acked) < 300:
            line = child.stdout.readline()
            assert line, "the child stopped early"
            acked.append(tuple(map(int, line.split())))
        child.send_signal(signal.SIGKILL)
        # the kill may cut the last line short: only whole lines can be checked
        acked += [tuple(map(int, line.split())) for line in child.stdout if line.endswith("\n")]
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    with EmbeddedLog(tmp_path) as log:
        for i, p, o in acked:
            assert log.read("t", p, o, max_records=1) == [(o, b"rec-%d" % i)]
        assert log.append("t", b"after", partition=0)[1] == log.end_offset("t", 0) - 1


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "runtime.sources", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_cli_produce_then_tail(tmp_path):
    lines = [json.dumps({"user": f"u{i % 3}", "n": i}) for i in range(6)]
    lines.insert(3, "{not json")
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    root = str(tmp_path / "log")
    done = run_cli("produce", "events", "events.jsonl", "--root", root, "--partitions", "2",
                   "--key", "user", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "events.jsonl:4: skipped malformed" in done.stderr
    assert "appended 6 records" in done.stdout and "skipped 1 malformed" in done.stdout
    with EmbeddedLog(root) as log:
        for i in range(6):
            p = partition_for(f"u{i % 3}", 2)
            found = [obj for _, obj in log.read_json("events", p, 0)]
            assert {"user": f"u{i % 3}", "n": i} in found
    shown = run_cli("tail", "events", "--root", root, "-n", "100", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split("\t") for line in shown.stdout.splitlines()]
    assert sorted(json.loads(r[2])["n"] for r in rows) == list(range(6))
    one = run_cli("tail", "events", "--root", root, "--partition", rows[0][0], "--from", "1",
                  "-n", "1", cwd=tmp_path)
    assert one.stdout.split("\t")[:2] == [rows[0][0], "1"]


def test_cli_default_root_and_unknown_topic(tmp_path):
    (tmp_path / "one.jsonl").write_text('{"a": 1}\n')
    assert run_cli("produce", "x", "one.jsonl", cwd=tmp_path).returncode == 0
    assert segments(tmp_path / ".tupleflow" / "log", "x", 0)
    missing = run_cli("tail", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no topic 'nope'" in missing.stderr


def test_a_reader_follows_the_writer_across_segment_rolls(tmp_path):
    with EmbeddedLog(tmp_path, segment_bytes=40) as writer, EmbeddedLog(tmp_path) as reader:
        writer.create_topic("t", 1)
        seen = []
        for i in range(12):
            writer.append("t", b"record-%02d" % i)
            seen += reader.read("t", 0, len(seen))
        assert seen == [(i, b"record-%02d" % i) for i in range(12)]
        assert len(segments(tmp_path, "t", 0)) > 3


def test_sequential_and_random_reads_agree_across_segments(tmp_path):
    """A segment remembers where its last read stopped (a sequential reader skips the index
    walk); reads from anywhere else, and reads as the log grows, still return the records."""
    payloads = [f"record-{i}".encode() * (1 + i % 5) for i in range(3000)]
    with EmbeddedLog(tmp_path / "log", segment_bytes=8192) as log:
        log.create_topic("t", 1)
        log.append_many("t", payloads[:2000])
        got, offset = [], 0
        while batch := log.read("t", 0, offset, 37):
            got += batch
            offset = batch[-1][0] + 1
        assert got == list(enumerate(payloads[:2000]))
        log.append_many("t", payloads[2000:])  # the last segment grew past the cursor
        assert log.read("t", 0, offset, 5000) == list(enumerate(payloads))[2000:]
        for start in (1999, 0, 1234, 2999, 7):
            assert log.read("t", 0, start, 3) == list(enumerate(payloads))[start : start + 3]
        assert len(segments(tmp_path / "log", "t", 0)) > 3


def test_a_record_damaged_after_its_segment_was_checked_is_named_by_its_offset(tmp_path):
    with EmbeddedLog(tmp_path, segment_bytes=100) as log:
        log.create_topic("t", 1)
        log.append_many("t", [b"record-%d" % i for i in range(8)])
    with EmbeddedLog(tmp_path) as log:
        assert len(log.read("t", 0, 0, 8)) == 8  # every segment scanned and checked
        first = segments(tmp_path, "t", 0)[0]
        data = bytearray(first.read_bytes())
        data[3 * len(encode(b"record-0")) + 9] ^= 0xFF  # a payload byte of offset 3
        first.write_bytes(bytes(data))
        assert log.read("t", 0, 1, 2) == [(1, b"record-1"), (2, b"record-2")]
        with pytest.raises(CorruptLogError, match=r"bad checksum in a checked region at offset 3 "):
            log.read("t", 0, 1, 5)
