"""A windowed component's open windows dealt over a new number of tasks at a rebalance
under checkpoints (issue 21; ``runtime/windows/_split.py``, docs/internals/window-rebalance.md):
every held tuple in exactly one new snapshot, the one its key's task is now; the window
clock as documented; and, through the pure window managers, every window's last
emission across a split equal to a batch computation."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from runtime import Count, Duration, Topology, Window, wire
from runtime.groupings import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    PartialKeyGrouping,
    ShuffleGrouping,
    field_hash,
    key_task,
)
from runtime.model.api import Tuple, TupleSource
from runtime.model.topology import Subscription
from runtime.state import fixed_windows, repartition
from runtime.state._store import MemoryStore
from runtime.testing import ListSpout
from runtime.windows import WindowManager, split_windows, unsplittable
from runtime.windows._saved import Incoming, Outgoing

from .test_window_checkpoints import Holder, time_windows

FIELDS = ["id", "k", "ts", "v"]
S = ("events", "default")
SOURCE = TupleSource.of("events", 1, "default", FIELDS)
KEYS = [f"k{i}" for i in range(12)]
GROUPS = 128
BY_KEY = [["events", "default", "fields", [1]]]  # the deal rules of a fields grouping on k


def tup(row: list) -> Tuple:
    return Tuple(list(row), SOURCE)


def saved_of(m: WindowManager, deal=BY_KEY) -> dict:
    """What a task saves (``snapshot_windows`` plus its deal rules), through msgpack."""
    out = Outgoing()
    windows = m.snapshot(out.encode)
    return wire.unpack(wire.pack({"sources": out.sources, "windows": windows, "deal": deal}))


def restored(window: Window, saved: dict) -> WindowManager:
    saved = wire.unpack(wire.pack(saved))
    return WindowManager.restored(window, [S], saved["windows"],
                                  Incoming(saved["sources"]).decode)


def held_ids(saved: dict) -> list[int]:
    return [item[1][0] for _, _, item in saved["windows"]["queue"]]


def sliding() -> Window:
    return Window.sliding(Duration(2), Duration(1), timestamp_field="ts")


def fed_managers(n: int, rows: list[list], window: Window, ticks: list[int]) -> list:
    """``n`` tasks fed by key (a fields grouping on k through the key groups), each
    ticked after the row indexes in ``ticks`` (task ``i`` after ``ticks[i]``)."""
    ms = [WindowManager(window, [S]) for _ in range(n)]
    for i, row in enumerate(rows):
        ms[key_task(field_hash(row[1]), n, GROUPS)].add(tup(row), S, row[2], 0)
        for task, at in enumerate(ticks[:n]):
            if at == i:
                ms[task].tick(0)
    return ms


ROWS = [[i, KEYS[(i * 5) % 12], i * 100, i % 7] for i in range(80)]


# -- the deal --------------------------------------------------------------------------------

@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (1, 4), (4, 1), (3, 3)])
def test_every_held_tuple_is_in_exactly_one_new_snapshot_the_one_its_key_goes_to(before,
                                                                                  after):
    ms = fed_managers(before, ROWS, sliding(), [50, 62, 71, 40])
    old = [saved_of(m) for m in ms]
    parts, moved = split_windows(old, after, GROUPS)
    assert len(parts) == after
    got = sorted(i for p in parts for i in held_ids(p))
    assert got == sorted(i for s in old for i in held_ids(s))
    router = FieldsGrouping(["k"], fields_of_stream=FIELDS)  # the real router, keyed
    router.keyed, router.key_groups = True, GROUPS
    router.prepare(None, "default", list(range(after)))
    for j, p in enumerate(parts):
        for i in held_ids(p):
            assert router.pick(ROWS[i]) == j
    before_index = {i: t for t, s in enumerate(old) for i in held_ids(s)}
    assert moved == sum(before_index[i] != j for j, p in enumerate(parts) for i in held_ids(p))


def test_the_split_deals_through_the_components_own_number_of_key_groups():
    ms = fed_managers(2, ROWS, sliding(), [50, 62])
    parts, _ = split_windows([saved_of(m) for m in ms], 5, 6)
    for j, p in enumerate(parts):
        assert {key_task(field_hash(ROWS[i][1]), 5, 6) for i in held_ids(p)} <= {j}


def test_the_new_window_clock_is_as_documented():
    """Latest timestamps: the highest; watermark and next window end: the lowest; late
    and evaluated counters summed onto task 0; each held tuple marked with its old task's
    watermark; the last window shown: the latest-ending."""
    ms = fed_managers(2, ROWS, sliding(), [30, 70])
    ms[0].late, ms[1].late = 2, 3
    old = [saved_of(m) for m in ms]
    parts, _ = split_windows(old, 3, GROUPS)
    ws = [p["windows"] for p in parts]
    marks = [s["windows"]["watermark"] for s in old]
    assert marks[0] < marks[1]
    assert all(w["watermark"] == min(marks) for w in ws)
    assert all(w["next_end"] == min(s["windows"]["next_end"] for s in old) for w in ws)
    highest = max(max(ts for _, ts in s["windows"]["latest"]) for s in old)
    assert all(w["latest"] == [[list(S), highest]] for w in ws)
    assert [w["late"] for w in ws] == [5, 0, 0]
    assert [w["evaluated"] for w in ws] == [ms[0].evaluated + ms[1].evaluated, 0, 0]
    assert all(w["last"] == max((s["windows"]["last"] for s in old), key=lambda x: x[1])
               for w in ws)
    owner = {i: t for t, s in enumerate(old) for i in held_ids(s)}
    for w in ws:
        done = dict(map(tuple, w["done"]))
        assert [done[seq] for _, seq, _ in w["queue"]] == [
            marks[owner[item[1][0]]] for _, _, item in w["queue"]]
        assert [seq for _, seq, _ in w["queue"]] == list(range(len(w["queue"])))
        assert [ts for ts, _, _ in w["queue"]] == sorted(ts for ts, _, _ in w["queue"])


def test_an_old_task_that_evaluated_nothing_yet_leaves_the_next_window_end_open():
    ms = fed_managers(2, ROWS, sliding(), [30])  # task 1 never ticked
    parts, _ = split_windows([saved_of(m) for m in ms], 2, GROUPS)
    assert {p["windows"]["next_end"] for p in parts} == {None}
    assert {p["windows"]["watermark"] for p in parts} == {ms[0].watermark}


@pytest.mark.parametrize(("rule", "grouping"), [("any", ShuffleGrouping()),
                                                ("first", GlobalGrouping()),
                                                ("every", AllGrouping())])
def test_held_tuples_of_a_keyless_input_are_dealt_by_its_rule(rule, grouping):
    deal = [["events", "default", rule, []]]
    window = Window.tumbling(Duration(5), timestamp_field="ts")
    everyone = rule == "every"
    ms = [WindowManager(window, [S]) for _ in range(2)]
    for i, row in enumerate(ROWS[:30]):
        for j in (0, 1) if everyone else (i % 2,):
            ms[j].add(tup(row), S, row[2], 0)
    parts, _ = split_windows([saved_of(m, deal) for m in ms], 3, GROUPS)
    sizes = [len(held_ids(p)) for p in parts]
    if rule == "any":
        assert sorted(i for p in parts for i in held_ids(p)) == list(range(30))
        assert sizes == [10, 10, 10]
    elif rule == "first":
        assert sizes == [30, 0, 0]
    else:  # every new task holds one copy of each, not one per old task
        assert all(sorted(held_ids(p)) == list(range(30)) for p in parts)
    assert unsplittable(window, [Subscription("events", "default", grouping)]) is None


def test_a_split_of_a_split_deals_again():
    """The new snapshots carry the deal rules: a second rebalance before the next
    checkpoint commits can split them again."""
    ms = fed_managers(2, ROWS, sliding(), [50, 62])
    parts, _ = split_windows([saved_of(m) for m in ms], 3, GROUPS)
    again, _ = split_windows(wire.unpack(wire.pack(parts)), 2, GROUPS)
    assert sorted(i for p in again for i in held_ids(p)) == sorted(
        i for m in ms for i in (t[2]["id"] for t in m._queue))
    for j, p in enumerate(again):
        assert {key_task(field_hash(ROWS[i][1]), 2, GROUPS) for i in held_ids(p)} <= {j}


# -- the window managers across a split, against the batch ------------------------------------

FLUSH = 10_000_000  # a last row per key this far ahead moves every watermark past every window


def record(out: dict, views) -> None:
    """The emissions of ``views`` per key, the last one of each window winning."""
    for v in views:
        ids: dict = {}
        for t in v.tuples:
            ids.setdefault(t["k"], []).append(t["id"])
        for k, got in ids.items():
            out[(v.start, v.end, k)] = got


def run_split(rows: list[list], window: Window, before: int, after: int, cut: int,
              rng: random.Random, again: int | None = None) -> dict:
    """Rows fed by key to ``before`` tasks, each ticked at random moments (so their
    watermarks differ), split at row ``cut`` into ``after`` tasks fed by key from then on;
    the last emission of every window. With ``again``, the new tasks are split once more
    into ``again`` tasks before any of them ticks (a second rebalance whose checkpoint the
    new tasks saved before their first tick, or the split's own checkpoint)."""
    out: dict = {}

    def feed(ms: list, part: list[list]) -> None:
        for row in part:
            record(out, ms[key_task(field_hash(row[1]), len(ms), GROUPS)].add(
                tup(row), S, row[2], 0))
            if rng.random() < 0.15:
                record(out, rng.choice(ms).tick(0))

    ms = [WindowManager(window, [S]) for _ in range(before)]
    feed(ms, rows[:cut])
    parts, _ = split_windows([saved_of(m) for m in ms], after, GROUPS)
    ms = [restored(window, p) for p in parts]
    if again is not None:
        parts, _ = split_windows([saved_of(m) for m in ms], again, GROUPS)
        ms = [restored(window, p) for p in parts]
    feed(ms, rows[cut:] + [[len(rows) + j, k, FLUSH, 0] for j, k in enumerate(KEYS)])
    for m in ms:
        record(out, m.tick(0))
    return {w: ids for w, ids in out.items() if w[1] < FLUSH}


WINDOWS = {"tumbling": (Window.tumbling(Duration(1), timestamp_field="ts"), 1_000, 1_000),
           "sliding": (Window.sliding(Duration(3), Duration(1), timestamp_field="ts"),
                       3_000, 1_000)}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", sorted(WINDOWS))
@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 2), (1, 3), (3, 1)])
def test_every_window_across_a_split_equals_the_batch(kind, before, after, seed):
    """Without the old tasks' watermarks on their tuples, a sliding window one old task had
    evaluated would be emitted again by its new task with only the tuples still held."""
    rng = random.Random(seed)
    window, length, slide = WINDOWS[kind]
    rows = [[i, rng.choice(KEYS), i * 37, 0] for i in range(400)]
    got = run_split(rows, window, before, after, rng.randrange(50, 350), rng)
    assert got == time_windows(rows, length, slide)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", sorted(WINDOWS))
@pytest.mark.parametrize(("before", "after", "again"), [(2, 3, 2), (3, 2, 3), (2, 1, 2)])
def test_every_window_across_two_splits_in_a_row_equals_the_batch(kind, before, after,
                                                                  again, seed):
    """A task restored from a split holds marks above its own watermark until its first
    tick; a second split from what it saved then must keep them (a sliding window an old
    task had evaluated would else be emitted again with only the tuples still held)."""
    rng = random.Random(seed)
    window, length, slide = WINDOWS[kind]
    rows = [[i, rng.choice(KEYS), i * 37, 0] for i in range(400)]
    got = run_split(rows, window, before, after, rng.randrange(50, 350), rng, again)
    assert got == time_windows(rows, length, slide)


def test_a_window_an_old_task_evaluated_is_not_evaluated_again_with_its_tuples():
    """Task a evaluated the window ending at 3 s with [5, 0], then evicted 5; task b had
    not. Merged, the window at 3 s holds b's tuples only: without a's watermark on its
    tuple 0, it would be emitted again for key a as [0] (5 is gone), overwriting [5, 0]."""
    window = sliding()
    a, b = WindowManager(window, [S]), WindowManager(window, [S])
    for row in ([5, "a", 1_500, 0], [0, "a", 2_500, 0], [1, "a", 3_100, 0]):
        a.add(tup(row), S, row[2], 0)
    assert [(v.end, [t["id"] for t in v.tuples]) for v in a.tick(0)] == [
        (2_000, [5]), (3_000, [5, 0])]  # watermark 3.1 s
    for row in ([4, "b", 1_800, 0], [2, "b", 2_600, 0]):
        b.add(tup(row), S, row[2], 0)
    assert [v.end for v in b.tick(0)] == [2_000]  # watermark 2.6 s
    deal = [["events", "default", "first", []]]  # all to one new task
    (part,), _ = split_windows([saved_of(a, deal), saved_of(b, deal)], 1, GROUPS)
    m = restored(window, part)
    assert m.watermark == 2_600
    m.add(tup([3, "b", 5_000, 0]), S, 5_000, 0)
    views = {v.end: [t["id"] for t in v.tuples] for v in m.tick(0)}
    assert views == {3_000: [4, 2], 4_000: [0, 2, 1], 5_000: [1, 3]}
    assert m._done == {}  # no window needs the marks any more


def test_a_window_left_empty_by_the_marks_is_no_gap_to_jump_over():
    """Task a evaluated the window ending at 3 s with [0, 1]; both are in the next one
    too. Merged with a task that evaluated nothing (so the new task starts from the
    earliest held tuple), the window at 3 s is empty by the marks, not a gap: the next
    window, at 4 s, must still be evaluated with them, not skipped to the next tuple's."""
    window = sliding()
    a, b = WindowManager(window, [S]), WindowManager(window, [S])
    for row in ([0, "a", 2_500, 0], [1, "a", 3_000, 0]):
        a.add(tup(row), S, row[2], 0)
    assert [v.end for v in a.tick(0)] == [3_000]
    deal = [["events", "default", "first", []]]
    (part,), _ = split_windows([saved_of(a, deal), saved_of(b, deal)], 1, GROUPS)
    m = restored(window, part)
    assert (m.watermark, m._next_end) == (3_000, None)
    m.add(tup([2, "a", 7_500, 0]), S, 7_500, 0)
    views = {v.end: [t["id"] for t in v.tuples] for v in m.tick(0)}
    assert views == {4_000: [0, 1]}  # then a gap to 8 s, past the watermark


# -- what is refused, and the guard ------------------------------------------------------------

def test_count_windows_and_keyless_unknown_groupings_are_refused_naming_why():
    fields = [Subscription("events", "default", FieldsGrouping(["k"], FIELDS))]
    assert unsplittable(sliding(), fields) is None
    assert "count window" in unsplittable(Window.tumbling(Count(5)), fields)
    assert "count window" in unsplittable(
        Window.sliding(Duration(2), Count(3), timestamp_field="ts"), fields)
    for grouping in (DirectGrouping(), PartialKeyGrouping(["k"], FIELDS)):
        why = unsplittable(sliding(), [Subscription("events", "default", grouping)])
        assert why.startswith(f"its input 'events' (stream 'default') is {grouping.name}")


def test_the_guard_lets_a_splittable_windowed_bolt_change_and_refuses_a_count_window():
    """``fixed_windows`` is what a windowed task says when ready (``Ready.fixed``)."""
    from runtime.model.plan import check_rebalance
    from runtime.processes.rebalance import _fixed

    topo = Topology("windowed")
    topo.spout("events", ListSpout([], fields=FIELDS))
    topo.bolt("avg", Holder, window=sliding()).fields_grouping("events", ["k"])
    topo.bolt("cnt", Holder, window=Window.tumbling(Count(2))).fields_grouping("events",
                                                                             ["k"])
    ckpt = {"checkpoint_interval": 1.0}
    said = {c: fixed_windows(SimpleNamespace(user=Holder(), spec=topo.components[c]), ckpt)
            for c in ("avg", "cnt")}
    assert said["avg"] is None and said["cnt"].startswith("a count window's open windows")
    assert fixed_windows(SimpleNamespace(user=Holder(), spec=topo.components["cnt"]), {}) is None
    refusals = _fixed(SimpleNamespace(fixed=said), frozenset())
    plan = topo.physical_plan()
    check_rebalance(plan, {"avg": 3}, None, refusals)  # no error
    with pytest.raises(ValueError, match="component 'cnt': a count window's open windows"):
        check_rebalance(plan, {"cnt": 3}, None, refusals)


def test_repartition_splits_a_windowed_components_windows_and_keeps_the_others():
    store = MemoryStore()
    cid = store.next("checkpoint")
    ms = fed_managers(2, ROWS, sliding(), [50, 62])
    for index, m in enumerate(ms):
        store.save(cid, f"window/avg/{index}", saved_of(m))
    store.save(cid, "window/other/0", saved_of(ms[0]))
    store.save(cid, "state/count/0", [["a", 1]])
    store.commit(cid, {})
    moved = repartition(store, {"avg": 3, "count": 1}, {"avg": GROUPS})
    new = store.committed()[0]
    saved = store.load_prefix(new, "window/")
    assert sorted(saved) == ["window/avg/0", "window/avg/1", "window/avg/2", "window/other/0"]
    assert sorted(i for j in range(3) for i in held_ids(saved[f"window/avg/{j}"])) == sorted(
        i for m in ms for i in (t[2]["id"] for t in m._queue))
    assert saved["window/other/0"] == saved_of(ms[0])
    assert moved["avg"] > 0 and moved["count"] == 0
