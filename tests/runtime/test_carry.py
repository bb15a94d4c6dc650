"""What a master keeps for the next one (runtime/processes/carry.py), and who starts a
detached topology's next master (runtime/processes/detached.py), in one process: masters
are made in-process and handed messages; no topology process is started. The same
behaviour with real processes: test_mp_master_carry.py, test_mp_detached_master.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime import Topology, wire
from runtime.observe.tracestore import TraceStore
from runtime.processes import adoption, carry, detached
from runtime.processes.master import TopologyMaster
from runtime.testing import ListSink, ListSpout


@pytest.fixture
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def boot(run_dir) -> dict:
    topo = Topology("kept")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    return {"secret": b"s" * 32, "run_dir": str(run_dir),
            "plan": topo.physical_plan(1).to_data(), "bundle": b""}


def closed(tm: TopologyMaster) -> TopologyMaster:
    tm.sock.close(linger=0)
    tm.zctx.term()
    return tm


def test_lines_are_tagged_with_their_master_and_a_torn_end_is_skipped(tmp_path):
    first = carry.Carry(str(tmp_path))
    first.event({"kind": "paused", "time": 1.0})
    first.exception({"component": "sink", "error": "E"})
    with open(os.path.join(first.folder, carry.EVENTS), "a") as f:
        f.write('{"kind": "torn", "ti')  # a master killed in the middle of a line
    later = carry.Carry(str(tmp_path))
    later.pid = first.pid + 1  # another process
    assert later.events() == [{"kind": "paused", "time": 1.0, "from_master": first.pid}]
    assert first.events() == [{"kind": "paused", "time": 1.0}]  # its own: not marked
    assert later.exceptions() == [{"component": "sink", "error": "E"}]
    assert carry.Carry(str(tmp_path / "none")).settings() is None
    first.rebalancing(4)  # a rebalance from epoch 4 started...
    assert later.cut_short() == 4
    first.rebalancing(None)  # ...and ended
    assert later.cut_short() is None


def test_a_new_master_takes_the_settings_pause_tap_and_events_of_the_one_before(tmp_path):
    first = TopologyMaster(boot(tmp_path))
    first.send = lambda ident, msg: None
    for question in (wire.AskRecord(id=1, component="numbers", stream="default", on=True),
                     wire.AskPause(id=2),
                     wire.AskSample(id=3, component="sink", stream="default", n=5,
                                    keep=300.0)):
        first.handle(b"c", question)
    closed(first)
    tm = closed(TopologyMaster({**boot(tmp_path), "adopt": True, "master_restarts": 1}))
    assert tm.settings.recordings == {("numbers", "default"): True}
    assert tm.settings.status()["recordings"] == [["numbers", "default"]]
    assert tm.supervision.paused is True
    assert tm.observation.taps[("sink", "default")] > tm.clock() + 200  # about 300 s left
    assert [e["kind"] for e in tm.observation.events] == ["recording_started", "paused"]


def traced(first: TopologyMaster, trace: int, msg_id, *, done: str | None) -> None:
    """A spout's trace records of one tracked tree, filed by ``first``, done or not."""
    spout, sink = first.plan.component_tasks()["numbers"][0], first.plan.component_tasks()[
        "sink"][0]
    records = [("start", trace, msg_id, 100.0, True),
               ("sent", trace, 1, 0, sink, "default", wire.encode_batch([msg_id]), True, 100.0,
                wire.DATA)]
    if done is not None:
        records.append(["done", trace, done, 4.0])
    first.handle(b"i", wire.TraceReport(task=spout, incarnation=0, records=records))


def test_the_newest_finished_traces_outlive_the_master(tmp_path):
    first = TopologyMaster(boot(tmp_path))
    for n in range(3):
        traced(first, 10 + n, n, done="acked")
    traced(first, 13, 3, done=None)  # pending: not kept
    traced(first, 14, [4, "x"], done="failed")  # a msg_id that msgpack makes a list
    first.tick(first.clock())
    saved = first.carry.traces()  # the trees as filed, read again as a new master does
    kept = TraceStore(first.traces.store.components)
    assert kept.refile(saved) == 4
    assert [(t.msg_id, t.status) for t in kept.traces(now=0.0)] == [
        ([4, "x"], "failed"), (2, "acked"), (1, "acked"), (0, "acked")]
    assert kept.traces(now=0.0)[0].hops[0].task == first.plan.component_tasks()["sink"][0]
    assert kept.traces(now=0.0) == first.traces.store.finished(5, now=0.0)  # the same
    with open(os.path.join(first.carry.folder, carry.TRACES), "rb") as f:
        assert wire.unpack(f.read()) == saved  # msgpack, never pickle
    closed(first)
    tm = closed(TopologyMaster({**boot(tmp_path), "adopt": True, "master_restarts": 1}))
    traced(tm, 20, 9, done="acked")  # the new master's own come first
    ask = wire.AskTraces(id=1, status=None, limit=10)
    assert [t["msg_id"] for t in tm.traces.answer(ask)] == [9, [4, "x"], 2, 1, 0]
    failed = wire.AskTraces(id=2, status="failed", limit=10)
    assert [t["msg_id"] for t in tm.traces.answer(failed)] == [[4, "x"]]
    lineage = tm.traces.answer(wire.AskTraces(id=3, msg_id=(4, "x"), by_msg=True))
    assert lineage["status"] == "failed"
    assert tm.answer_status(wire.AskStatus(id=4))["traces_carried"] == 4
    # and the next master still has them, behind the second one's
    tm.traces.keep(tm.carry, tm.clock() + 10)
    assert [start[0] for start, *_ in tm.carry.traces()] == [9, [4, "x"], 2, 1, 0]


def test_a_save_assembles_no_trace_and_the_next_master_names_the_same_holders(
        tmp_path, monkeypatch):
    # the master keeps its trees as filed (no trace assembled at each save); who held a
    # carried tree is decided with the restarts the master before knew, not later ones
    first = TopologyMaster(boot(tmp_path))
    spout, sink = (first.plan.component_tasks()[c][0] for c in ("numbers", "sink"))
    first.traces.wall = lambda: 50.0
    first.traces.restarted(sink)  # at 50.0: a copy sent at 40.0 died with it
    for trace, emitted in ((1, 40.0), (2, 100.0)):
        first.handle(b"i", wire.TraceReport(task=spout, incarnation=0, records=[
            ("start", trace, trace, emitted, True),
            ("sent", trace, 10 * trace, 0, sink, "default", wire.encode_batch([trace]),
             True, emitted, wire.DATA),
            ["done", trace, "timed_out", 30_000.0]]))
    held = {t.msg_id: t.held_by for t in first.traces.store.traces(now=200.0)}
    assert held == {1: ("<transit>", None), 2: ("sink", sink)}
    with monkeypatch.context() as m:
        m.setattr(TraceStore, "_assemble", lambda *a: pytest.fail("assembled to be kept"))
        first.tick(first.clock())
    closed(first)
    tm = closed(TopologyMaster({**boot(tmp_path), "adopt": True, "master_restarts": 1}))
    tm.traces.wall = lambda: 200.0
    tm.traces.restarted(sink)  # at 200.0: after both copies were sent
    answered = tm.traces.answer(wire.AskTraces(id=1, status=None, limit=10))
    assert {t["msg_id"]: t["held_by"] for t in answered} == held
    tm.handle(b"i", wire.TraceReport(task=spout, incarnation=0, records=[
        ("start", 3, 3, 250.0, True, [3]), ["done", 3, "acked", 1.0]]))
    with monkeypatch.context() as m:  # and saved again by this master, as filed
        m.setattr(TraceStore, "_assemble", lambda *a: pytest.fail("assembled to be kept"))
        tm.traces.keep(tm.carry, tm.clock() + 10)
    again = TraceStore({})
    assert again.refile(tm.carry.traces()) == 3
    assert [(t.msg_id, t.held_by) for t in again.traces(now=300.0)] == [
        (3, None), (2, ("?", sink)), (1, ("<transit>", None))]


def test_a_torn_traces_file_is_read_as_none(tmp_path):
    kept = carry.Carry(str(tmp_path))
    with open(os.path.join(kept.folder, carry.TRACES), "wb") as f:
        f.write(wire.pack([{"msg_id": 1}])[:-3])
    assert kept.traces() == []


def test_a_kept_tree_that_is_not_one_is_left_out():
    # the file of an older master (assembled traces) or a damaged entry: left out
    store = TraceStore({1: "spout"})
    good = ([7, "numbers", 1, [7], 100.0, True], "acked", 4.0, [], [], {}, {})
    assert store.refile([{"msg_id": 1, "hops": []}, [1, 2], good, [good[0], "lost", *good[2:]],
                         [[{"a": 1}, *good[0][1:]], *good[1:]]]) == 1
    assert [t.msg_id for t in store.traces(now=0.0)] == [7] and len(store) == 1


def test_tuner_turns_already_recorded_are_not_recorded_again(tmp_path):
    first = TopologyMaster(boot(tmp_path))
    spout = first.plan.component_tasks()["numbers"][0]
    record = {"kind": "spout", "state": "running", "tuner_turns": 5, "tuner_action": "increase",
              "max_spout_pending": 120}
    first.handle(b"i", wire.Stats(task=spout, incarnation=0, record=record))
    closed(first)
    tm = closed(TopologyMaster({**boot(tmp_path), "adopt": True, "master_restarts": 1}))
    tm.adoption.done = True  # (adopted: its reports count)
    tm.handle(b"i", wire.Stats(task=spout, incarnation=0, record=record))
    tm.handle(b"i", wire.Stats(task=spout, incarnation=0, record={**record, "tuner_turns": 6}))
    assert [e["turns"] for e in tm.observation.events if e["kind"] == "tuner"] == [5, 6]


def test_a_pause_made_by_a_rebalance_is_not_kept(tmp_path):
    first = TopologyMaster(boot(tmp_path))
    first.send = lambda ident, msg: None
    first.rebalancing = type("Rebalancing", (), {"was_paused": False})()
    first.supervision.paused = True  # deactivated for a rebalance's drain
    first.handle(b"c", wire.AskSetTrace(id=1, value=0.5))
    closed(first)
    tm = closed(TopologyMaster({**boot(tmp_path), "adopt": True, "master_restarts": 1}))
    assert tm.supervision.paused is False and tm.settings.trace == 0.5


def keeper(run_dir, container: int, watcher: int | None) -> detached.MasterKeeper:
    return detached.MasterKeeper(str(run_dir), container, watcher)


def test_only_the_lowest_living_container_replaces_a_dead_master_nobody_watches(
        tmp_path, dead_pid):
    me = os.getpid()
    detached.write_master(str(tmp_path), dead_pid, 0)
    adoption.write_container(str(tmp_path), 0, dead_pid, 0)
    adoption.write_container(str(tmp_path), 1, me, 0)
    assert keeper(tmp_path, 1, dead_pid)._mine()  # container 0 is dead: 1 is the lowest
    assert not keeper(tmp_path, 2, dead_pid)._mine()  # container 1 lives: not 2's turn
    assert not keeper(tmp_path, 1, me)._mine()  # the submitter lives: its handle does it
    detached.write_master(str(tmp_path), me, 0)
    assert not keeper(tmp_path, 1, dead_pid)._mine()  # the master runs
    detached.write_master(str(tmp_path), dead_pid, 0, stopped=True)
    assert not keeper(tmp_path, 1, dead_pid)._mine()  # it was killed: it stays dead


def test_an_attached_master_that_stopped_exits_0_and_one_that_died_minus_1(tmp_path,
                                                                           dead_pid):
    detached.write_master(str(tmp_path), dead_pid, 2)
    assert detached.RecordedMaster(str(tmp_path), dead_pid).poll() == -1
    detached.write_master(str(tmp_path), dead_pid, 2, stopped=True)
    assert detached.RecordedMaster(str(tmp_path), dead_pid).poll() == 0
    assert detached.RecordedMaster(str(tmp_path), os.getpid()).poll() is None


def test_a_refused_rebalance_leaves_the_mark_of_the_one_that_runs(tmp_path):
    tm = closed(TopologyMaster(boot(tmp_path)))
    tm.send = lambda ident, msg: None
    tm.supervision.state = "running"
    tm.rebalancing = object()  # one runs (started by this master, so it left its mark)
    tm.carry.rebalancing(tm.plan.epoch)
    tm.handle(b"c", wire.AskRebalance(id=1, parallelism={"sink": 2}, containers=None))
    assert tm.carry.cut_short() == tm.plan.epoch
    tm.rebalancing = None  # none runs: a refused one leaves no mark
    tm.handle(b"c", wire.AskRebalance(id=2, parallelism={"nothing": 2}, containers=None))
    assert tm.carry.cut_short() is None
