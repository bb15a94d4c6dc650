"""A rebalance in place, one task at a time (issue 22; the processes:
test_mp_rebalance.py): an executor switched to the next plan sends what it had batched on
the old routing, then every tuple to the new plan's tasks, the fields grouping into keyed
state still putting each key on exactly one task."""

from __future__ import annotations

from collections import Counter, defaultdict

from runtime import StatefulBolt, Topology, wire
from runtime.engine.executor import Executor
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
        for _ in range(15):
            c.step(2)
            c.advance(INTERVAL)
        assert c.state("count")  # committed before the switch
        grown, checkpointer = switched_but_not_split(c, {"count": 3})
        for _ in range(15):  # words flow on the new routing; checkpoints are due
            c.step(2)
            c.advance(INTERVAL)
        ex = c.executors[checkpointer]
        ex.retarget(grown)
        ex.rebalance({"count": 3})
        c.deliver()
        drain(c)
        assert c.state("count") == dict(Counter(WORDS))
