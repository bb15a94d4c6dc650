"""A rebalance in place, one task at a time (issue 22; the processes:
test_mp_rebalance.py): an executor switched to the next plan sends what it had batched on
the old routing, then every tuple to the new plan's tasks, the fields grouping into keyed
state still putting each key on exactly one task."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from runtime import StatefulBolt, Topology, wire
from runtime.engine.executor import Executor
from runtime.groupings import field_hash, key_task
from runtime.model.constants import CHECKPOINTER
from runtime.testing import InMemoryCluster, ListSpout, PassOn

from .test_checkpoints import INTERVAL, WORDS, drain, fill_log, word_count


class Count(StatefulBolt):
    def process(self, tup):
        pass


def topology() -> Topology:
    topo = Topology("retarget")
    topo.spout("s", ListSpout([["a"]], fields=["word"]))
    topo.bolt("mid", PassOn).shuffle_grouping("s")
    topo.bolt("count", Count, parallelism=2).fields_grouping("mid", ["word"])
    return topo


def sent_words(sent: list) -> dict[int, set]:
    """Task -> the words of the DATA frames sent to it."""
    out: dict[int, set] = defaultdict(set)
    for header, body in sent:
        h = wire.parse_header(header)
        if h.kind == wire.DATA:
            out[h.dest] |= set(wire.decode_batch(body))
    return dict(out)


def test_a_retargeted_executor_flushes_on_the_old_routing_then_sends_on_the_new():
    topo = topology()
    plan = topo.physical_plan()
    (mid,) = plan.component_tasks()["mid"]
    sent: list = []
    ex = Executor(plan, topo.components, mid, lambda h, b: sent.append((h, b)))
    ex.start()
    words = [f"w{i}" for i in range(300)]
    for w in words[:100]:
        ex.user.emit([w])  # batched, not sent yet
    grown = plan.rebalanced({"count": 5})
    ex.retarget(grown)
    before = sent_words(sent)
    assert set(before) == set(plan.component_tasks()["count"])
    assert set().union(*before.values()) == set(words[:100])
    sent.clear()
    for w in words:
        ex.user.emit([w])
    ex.flush()
    after = sent_words(sent)
    assert set(after) == set(grown.component_tasks()["count"])
    assert sum(map(len, after.values())) == len(words)  # each key on exactly one task
    assert ex.context.component_tasks["count"] == grown.component_tasks()["count"]
    assert ex.context.parallelism == 1  # mid's own, unchanged


def test_a_key_moves_only_with_its_key_group():
    """Growing 2 -> 4 tasks by key groups: every key of a new task's groups came from one
    old task (contiguous ranges split), so a StatefulBolt's state can follow its keys."""
    topo = topology()
    plan = topo.physical_plan()
    (mid,) = plan.component_tasks()["mid"]
    owners: list[dict] = []
    for p in (plan, plan.rebalanced({"count": 4})):
        sent: list = []
        ex = Executor(p, topo.components, mid, lambda h, b, sent=sent: sent.append((h, b)))
        ex.start()
        for i in range(400):
            ex.user.emit([f"k{i}"])
        ex.flush()
        index = {t: i for i, t in enumerate(p.component_tasks()["count"])}
        owners.append({w: index[t] for t, ws in sent_words(sent).items() for w in ws})
    old, new = owners
    assert {(old[w], new[w] // 2) for w in old} == {(0, 0), (1, 1)}


def test_repartition_splits_by_the_components_own_key_groups(tmp_path):
    """``max_parallelism=6``: the committed pairs are dealt as six key groups are (the
    same choice the keyed grouping makes), not as the default 128."""
    from runtime import state as _state
    from runtime.groupings import field_hash, key_task

    store = _state.open_store("sqlite", str(tmp_path))
    pairs = [[f"k{i}", i] for i in range(500)]
    old = store.next("checkpoint")
    store.save(old, "state/c/0", pairs[:250])
    store.save(old, "state/c/1", pairs[250:])
    store.commit(old, {"epoch": 1})
    _state.repartition(store, {"c": 5}, {"c": 6})
    parts = store.load_prefix(store.committed()[0], "state/c/")
    store.close()
    held = {k: int(name.rsplit("/", 1)[1]) for name, ps in parts.items() for k, _ in ps}
    assert sorted(held) == sorted(k for k, _ in pairs)
    assert all(key_task(field_hash(k), 5, 6) == i for k, i in held.items())
    assert any(key_task(field_hash(k), 5) != i for k, i in held.items())  # 6 groups, not 128


# -- checkpoints between the switch and the split -----------------------------------------------

def switched_but_not_split(c, parallelism: dict) -> tuple[object, int]:
    """Rebalance the in-memory cluster ``c`` in place up to the switch: every task but the
    checkpoint task runs on the grown plan (the added ones started), as when the master
    dies before it tells the checkpoint task to split (adoption.cut_short). Returns the
    new plan and the checkpoint task."""
    grown = c.plan.rebalanced(parallelism)
    added = sorted(set(grown.task_containers()) - set(c.plan.task_containers()))
    c.plan = grown
    for task in added:
        c.restarts[task] = 0
        c.executors[task] = c._start(task)
    (checkpointer,) = grown.component_tasks()[CHECKPOINTER]
    for task, ex in sorted(c.executors.items()):
        if task != checkpointer and task not in added:
            ex.retarget(grown)
    return grown, checkpointer


def run(c, rounds: int) -> None:
    """``rounds`` rounds of two spout calls, each followed by a checkpoint interval."""
    for _ in range(rounds):
        c.step(2)
        c.advance(INTERVAL)


def split_and_drain(c, grown, checkpointer: int, counts: dict) -> None:
    """What the master's last step tells the checkpoint task (``Switch(plan, counts)``),
    then run to the end of the log."""
    ex = c.executors[checkpointer]
    ex.retarget(grown)
    ex.rebalance(counts)
    c.deliver()
    drain(c)


def test_no_checkpoint_commits_between_the_switch_and_the_split(tmp_path):
    """Once the tasks switched, a kept counter task gets the keys that move to it while
    their old owner still holds them, and an added one holds nothing yet. A checkpoint
    committed then (the checkpoint task runs on, on the old tasks, until it is told to
    split) holds a moved key under two tasks, of which the split keeps one: words were
    lost under load when a master died there (docs/internals/adoption.md). A switched
    task takes part in no checkpoint until the split's rollback, so the split starts
    from the last checkpoint before the switch, and the counts are exact."""
    fill_log(tmp_path)
    with InMemoryCluster(word_count(tmp_path), checkpoint_interval=INTERVAL,
                         state_store="memory") as c:
        run(c, 15)
        assert c.state("count")  # committed before the switch
        grown, checkpointer = switched_but_not_split(c, {"count": 3})
        run(c, 15)  # words flow on the new routing; checkpoints are due
        split_and_drain(c, grown, checkpointer, {"count": 3})
        assert c.state("count") == dict(Counter(WORDS))


# -- a task restarted between the switch and the split ------------------------------------------

def held_by_index(c, component: str) -> dict[int, list]:
    """Task index -> the keys the committed checkpoint holds for it."""
    from runtime.model.constants import STATE_STORE
    from runtime.state import _protocol, open_store

    store = open_store(str(c.plan.config[STATE_STORE]), c.run_dir)
    cid, _ = store.committed()
    prefix = _protocol.state_key(component, 0)[:-1]
    saved = store.load_prefix(cid, prefix)
    return {int(k[len(prefix):]): [key for key, _ in pairs or []] for k, pairs in saved.items()}


@pytest.mark.parametrize("victim", ["kept counter", "added counter", "spout", "pass-on",
                                    "checkpoint task"])
def test_a_task_restarted_between_the_switch_and_the_split_gets_the_split(tmp_path, victim):
    """A task that restarts after the switch boots on the new plan and says ``NEW``; a
    plain rollback then would restore the old split of the keyed state onto the new
    routing (a moved key counted at its old owner, the added counter empty) and let
    checkpoints commit that layout before the split. The checkpoint task answers such a
    ``NEW`` with nothing until the split, whose rollback takes every task back anyway:
    the counts are exact and every key is held by the task its key group goes to. A
    checkpoint task that restarts there starts on the new plan, newer than the committed
    checkpoint's, and waits for the split too instead of rolling back."""
    fill_log(tmp_path)
    with InMemoryCluster(word_count(tmp_path), checkpoint_interval=INTERVAL,
                         state_store="memory") as c:
        run(c, 15)
        assert c.state("count")  # committed before the switch
        old = c.plan.component_tasks()
        grown, checkpointer = switched_but_not_split(c, {"count": 3})
        new = grown.component_tasks()
        task = {"kept counter": old["count"][1], "added counter": new["count"][2],
                "spout": old["words"][0], "pass-on": old["upper"][1],
                "checkpoint task": checkpointer}[victim]
        run(c, 5)
        c.kill(task)  # boots on the new plan: the switch has begun
        run(c, 15)  # words flow on the new routing; checkpoints are due
        split_and_drain(c, grown, checkpointer, {"count": 3})
        assert c.state("count") == dict(Counter(WORDS))
        held = held_by_index(c, "count")
        assert sorted(held) == [0, 1, 2]
        assert all(key_task(field_hash(k), 3) == i for i, keys in held.items() for k in keys)


def test_a_checkpoint_task_restarted_before_the_split_and_never_told_splits_by_itself(
        tmp_path):
    """The master tells the checkpoint task to split only when it is ready; one that
    restarted and was never told (the master's bounds passed) waits ``SPLIT_WAIT``, then
    splits over the plan it runs: checkpoints resume, the counts exact."""
    from runtime.state._spout import SPLIT_WAIT

    fill_log(tmp_path)
    with InMemoryCluster(word_count(tmp_path), checkpoint_interval=INTERVAL,
                         state_store="memory") as c:
        run(c, 15)
        before = c.state("count")
        _, checkpointer = switched_but_not_split(c, {"count": 3})
        c.kill(checkpointer)
        run(c, 10)
        assert c.state("count") == before  # nothing committed while it waits
        c.advance(SPLIT_WAIT)
        drain(c)
        assert c.state("count") == dict(Counter(WORDS))
        assert sorted(held_by_index(c, "count")) == [0, 1, 2]


def test_a_new_waiting_for_a_split_that_never_comes_is_a_rollback_after_split_wait(
        tmp_path):
    """A ``NEW`` from a newer plan makes the checkpoint task wait for the split; if the
    rebalance never tells it, it rolls back after ``SPLIT_WAIT`` as it did before, so
    that checkpoints do not stop for good."""
    from runtime.state._spout import SPLIT_WAIT

    fill_log(tmp_path)
    with InMemoryCluster(word_count(tmp_path), checkpoint_interval=INTERVAL,
                         state_store="memory") as c:
        run(c, 5)
        old = c.plan.component_tasks()
        _, checkpointer = switched_but_not_split(c, {"count": 3})
        c.kill(old["count"][0])
        run(c, 3)
        ex = c.executors[checkpointer]
        assert ex.awaiting_split and ex.current is None
        rollbacks = ex.rollbacks
        c.advance(SPLIT_WAIT)
        assert not ex.awaiting_split and ex.rollbacks == rollbacks + 1


# -- the master's split step -------------------------------------------------------------------

def checkpointed_master(tmp_path):
    """A master of ``topology()`` under checkpoints, its socket closed, on a fake clock,
    recording what it sends, every task ready (told nothing: no process runs)."""
    from runtime.processes.master import TopologyMaster
    from runtime.testing import FakeClock

    plan = topology().physical_plan(1, checkpoint_interval=0.3)
    tm = TopologyMaster({"secret": b"s" * 32, "run_dir": str(tmp_path), "bundle": b"",
                         "plan": plan.to_data()})
    tm.sock.close(linger=0)
    tm.zctx.term()
    tm.clock = FakeClock(1000.0)
    tm.sent = []
    tm.send = lambda ident, msg: tm.sent.append((ident, msg.KIND, msg.fields()))
    tm.supervision.state = "running"
    for t in plan.tasks:
        kind = {"s": "spout", CHECKPOINTER: "checkpoint"}.get(t.component, "bolt")
        make_ready(tm, t.task, 0, kind=kind)
    return tm


def make_ready(tm, task: int, incarnation: int, **record) -> None:
    tm.tasks.welcomed(task, incarnation, 4000 + task)
    tm.tasks.made_ready(task)
    tm.tasks[task].update(record)
    tm.supervision.idents[task] = b"i%d.%d" % (task, incarnation)


def test_the_master_tells_a_restarted_checkpoint_task_to_split(tmp_path):
    """A checkpoint task restarting when every other task has switched is not ready to
    be told to split: the master waits for it (before, it resumed without the split, and
    the new checkpoint task rolled back to the old split on the new routing); one that
    restarts again before it answered is told again."""
    tm = checkpointed_master(tmp_path)
    (checkpointer,) = tm.plan.component_tasks()[CHECKPOINTER]
    tm.handle(b"client", wire.AskRebalance(id=7, parallelism={"count": 3}, containers=None))
    rb = tm.rebalancing
    for t in rb.added:
        make_ready(tm, t, 0, kind="bolt")

    def splits() -> list[bytes]:
        return [ident for ident, kind, f in tm.sent if kind == "switch" and f["counts"]]

    rb.tick(tm.clock())  # the added tasks are ready: pause
    rb.tick(tm.clock())  # checkpoints: no drain, switch
    switched = [i for i, kind, f in tm.sent if kind == "switch"]
    assert b"i%d.0" % checkpointer not in switched
    tm.tasks.restarted(checkpointer, 1)  # it dies now
    for t in rb.awaiting.copy():
        tm.handle(b"i%d.0" % t, wire.Switched(task=t, incarnation=0, epoch=rb.plan.epoch,
                                              moved=None))
    for _ in range(5):
        tm.clock.advance(1.0)
        assert not rb.tick(tm.clock())
    assert splits() == []
    make_ready(tm, checkpointer, 1, kind="checkpoint")
    rb.tick(tm.clock())
    assert splits() == [b"i%d.1" % checkpointer]
    tm.tasks.restarted(checkpointer, 2)  # dies again before it answered
    make_ready(tm, checkpointer, 2, kind="checkpoint")
    rb.tick(tm.clock())
    rb.tick(tm.clock())
    assert splits() == [b"i%d.1" % checkpointer, b"i%d.2" % checkpointer]
    tm.handle(b"i%d.2" % checkpointer, wire.Switched(task=checkpointer, incarnation=2,
                                                     epoch=rb.plan.epoch, moved={"count": 1}))
    assert rb.tick(tm.clock())
    assert [f["ok"] for i, kind, f in tm.sent if kind == "reply"] == [True]
