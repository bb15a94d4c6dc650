"""Groupings, tested as the pure classes they are (issue 2, item 2), plus the executor's
batch splitter (``runtime.engine.outbound``), which must make the same choices."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import runtime
from runtime import wire
from runtime.engine.outbound import Outlet, StreamOut
from runtime.groupings import (
    AllGrouping,
    DirectGrouping,
    FieldsGrouping,
    GlobalGrouping,
    Grouping,
    LocalOrShuffleGrouping,
    ShuffleGrouping,
    field_hash,
    stable_hash,
)
from runtime.model.api import Context

TASKS = [4, 5, 6]
WORDS = [f"w{i}" for i in range(300)]


def prepared(grouping, tasks=TASKS, context=None):
    grouping.prepare(context, "default", tasks)
    return grouping


def by_word() -> FieldsGrouping:
    return prepared(FieldsGrouping(["word"], fields_of_stream=["word", "n"]))


# -- stable_hash ----------------------------------------------------------------------------

SAMPLES = ["storm", "", "é", 42, -7, 2**70, 3.5, None, True, b"raw", ["a", 1], {"k": [1, 2]}]
HASH_PROBE = ("from runtime.groupings import stable_hash\n"
              f"print([stable_hash(v) for v in {SAMPLES!r}], hash('storm'))")


def hashes_in_a_process(seed: str) -> tuple[str, str]:
    root = str(Path(runtime.__file__).parent.parent)
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", HASH_PROBE], env=env, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    stable, _, salted = out.rpartition(" ")
    return stable, salted


def test_stable_hash_is_the_same_in_every_process():
    (stable1, salted1), (stable2, salted2) = hashes_in_a_process("1"), hashes_in_a_process("2")
    assert salted1 != salted2  # the seeds really differ: hash() would split keys
    assert stable1 == stable2 == str([stable_hash(v) for v in SAMPLES])


@pytest.mark.parametrize("a, b", [
    (1, 1.0), (1, True), (0, False), (0, -0.0), (2**70, float(2**70)),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([1.0, {"x": True}], [1, {"x": 1}]),
])
def test_equal_values_hash_equal(a, b):
    assert a == b and stable_hash(a) == stable_hash(b)


@pytest.mark.parametrize("a, b", [((1, "a"), [1, "a"]), ([[1], (2,)], ((1,), [2])),
                                  ({"k": (1, 2)}, {"k": [1, 2]})])
def test_tuples_hash_as_lists(a, b):
    """Both travel as msgpack arrays, and arrive as lists."""
    assert stable_hash(a) == stable_hash(b)


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_subclasses_hash_as_their_values():
    """msgpack sends a StrEnum as its str: a re-emitting bolt must pick the same task."""
    assert stable_hash(Colour.RED) == stable_hash("red")
    assert stable_hash(Level.HIGH) == stable_hash(3)
    assert stable_hash(bytearray(b"ab")) == stable_hash(b"ab")


@given(st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.binary(),
                 st.sampled_from([Colour.RED, Level.HIGH])), st.integers(1, 7))
def test_the_fields_pick_of_one_field_is_field_hash_of_its_key(key, n):
    """``pick`` writes out a string's hash (one call less a tuple); every other path calls
    ``field_hash``: the two must agree on every key, a str subclass included."""
    grouping = FieldsGrouping(["word"], fields_of_stream=["n", "word"])
    grouping.prepare(None, "default", list(range(10, 10 + n)))
    assert grouping.pick([0, key]) == field_hash(key) % n == stable_hash(key) % n


@given(st.text(), st.integers(1, 7))
def test_str_key_offers_where_a_str_key_is_hashed_as_pick_does(key, n):
    """``str_key``: the key's place and the number of tasks, for a caller that hashes a
    str key itself (the BasicBolt's written-out emit); none with several fields or key
    groups, whose pick is another function."""
    grouping = FieldsGrouping(["word"], fields_of_stream=["n", "word"])
    grouping.prepare(None, "default", list(range(10, 10 + n)))
    at, tasks = grouping.str_key()
    assert (at, tasks) == (1, n)
    assert zlib.crc32(key.encode()) % tasks == grouping.pick([0, key])
    two = FieldsGrouping(["n", "word"], fields_of_stream=["n", "word"])
    two.prepare(None, "default", [1, 2])
    keyed = FieldsGrouping(["word"], fields_of_stream=["word"])
    keyed.keyed = True
    keyed.prepare(None, "default", [1, 2])
    assert two.str_key() is None and keyed.str_key() is None


def test_different_values_usually_differ():
    assert len({stable_hash(v) for v in WORDS}) == len(WORDS)
    assert stable_hash([1, 2]) != stable_hash([2, 1])
    assert stable_hash(["a", "b"]) != stable_hash(["ab"])


@pytest.mark.parametrize("value, name", [(object(), "object"), ({1, 2}, "set"),
                                         (["ok", object()], "object")])
def test_values_that_cannot_travel_cannot_be_grouped_on(value, name):
    with pytest.raises(TypeError, match=f"cannot group on a value of type {name}"):
        stable_hash(value)


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary()
    | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@given(msgpack_values)
def test_a_value_and_its_decoded_copy_hash_equal(value):
    """What a bolt receives (lists for tuples, ...) groups like what the spout sent."""
    (received,) = wire.decode_batch(wire.encode_batch([value]))
    assert stable_hash(received) == stable_hash(value)


# -- fields ---------------------------------------------------------------------------------

def test_fields_same_key_same_task_from_every_sender():
    one, two = by_word(), by_word()
    for w in WORDS:
        assert one.choose_tasks([w, 1]) == two.choose_tasks([w, 99])


def test_fields_spreads_keys_over_all_tasks():
    load = Counter(by_word().choose_tasks([w, 0])[0] for w in WORDS)
    assert set(load) == set(TASKS) and min(load.values()) > len(WORDS) // 6


def test_fields_on_two_fields():
    g = prepared(FieldsGrouping(["a", "b"], fields_of_stream=["b", "x", "a"]))
    assert g.choose_tasks([1, "x", 2]) == g.choose_tasks([1, "y", 2])
    assert g.indexes == (2, 0) and g.describe() == "fields(a, b)"


def splits(grouping, tasks, batch: list) -> dict[int, list]:
    """Run ``batch`` through the executor's outbound path; return task -> values received."""
    got: dict[int, list] = {}
    out = StreamOut("default", 2, lambda h, b: got.setdefault(wire.parse_header(h).dest, [])
                    .extend(wire.decode_batch(b)), on_bad=None)
    out.outlets.append(Outlet(grouping, tasks, stream_id=1, src=1))
    out.items.extend(batch)
    out.flush()
    return got


keys = (st.text() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.none()
        | st.booleans() | st.binary() | st.lists(st.integers(-9, 9), max_size=3))


@given(st.lists(keys, min_size=1, max_size=30), st.integers(2, 7))
def test_outbound_field_split_matches_fields_grouping(batch_keys, n):
    tasks = list(range(10, 10 + n))
    g = prepared(FieldsGrouping(["k"], fields_of_stream=["k", "i"]), tasks)
    batch = [[k, i] for i, k in enumerate(batch_keys)]
    for task, received in splits(g, tasks, batch).items():
        for values in received:
            assert g.choose_tasks(values) == [task]
    assert sum(map(len, splits(g, tasks, batch).values())) == len(batch)


def bare_splits(grouping, tasks, values: list) -> dict[int, list]:
    """:func:`splits` for a one-field stream, whose batches hold bare values."""
    got: dict[int, list] = {}
    out = StreamOut("default", 1, lambda h, b: got.setdefault(wire.parse_header(h).dest, [])
                    .extend(wire.decode_batch(b)), on_bad=None)
    out.outlets.append(Outlet(grouping, tasks, stream_id=1, src=1, bare=out.bare))
    out.items.extend(values)
    out.flush()
    return got


@given(st.lists(keys, min_size=1, max_size=30), st.integers(2, 7))
def test_a_one_field_streams_bare_values_split_as_fields_grouping_picks(batch_keys, n):
    """The same task for a value whether it goes untracked (split by value from a batch
    of bare values) or tracked (picked at emit from its list of values)."""
    tasks = list(range(10, 10 + n))
    g = prepared(FieldsGrouping(["k"], fields_of_stream=["k"]), tasks)
    got = bare_splits(g, tasks, batch_keys)
    for task, received in got.items():
        for value in received:
            assert g.choose_tasks([value]) == [task]
    assert sum(map(len, got.values())) == len(batch_keys)


def test_groupings_that_read_values_are_given_lists_on_a_one_field_stream():
    seen = []

    class Recording(Grouping):
        def choose_tasks(self, values):
            seen.append(values)
            return [self.target_tasks[values[0] % 2]]

    class OddShuffle(ShuffleGrouping):  # a subclass's pick may read the values
        def prepare(self, context, stream, target_tasks):
            super().prepare(context, stream, target_tasks)
            self.pick = lambda values: seen.append(values) or values[0] % 2

    assert bare_splits(prepared(Recording()), TASKS, [0, 1, 2]) == {4: [0, 2], 5: [1]}
    assert bare_splits(prepared(OddShuffle()), TASKS, [3]) == {5: [3]}
    assert seen == [[0], [1], [2], [3]]


def test_value_blind_groupings_split_a_one_field_streams_bare_values():
    got = bare_splits(prepared(ShuffleGrouping()), TASKS, list(range(9)))
    assert sorted(v for part in got.values() for v in part) == list(range(9))
    assert {len(part) for part in got.values()} == {3}
    assert bare_splits(prepared(GlobalGrouping(), tasks=[7, 3, 5]), [7, 3, 5],
                       ["a", "b"]) == {3: ["a", "b"]}


# -- shuffle, global, all, local-or-shuffle, direct -----------------------------------------

def test_shuffle_is_exactly_balanced():
    g = prepared(ShuffleGrouping())
    load = Counter(g.choose_tasks([i])[0] for i in range(7 * len(TASKS)))
    assert load == {t: 7 for t in TASKS}


def test_shuffle_starts_at_a_random_task():
    firsts = {prepared(ShuffleGrouping()).choose_tasks(["x"])[0] for _ in range(60)}
    assert firsts == set(TASKS)


def test_global_goes_to_the_lowest_task():
    g = prepared(GlobalGrouping(), tasks=[7, 3, 5])
    assert {g.choose_tasks([i])[0] for i in range(20)} == {3}


def test_all_replicates():
    assert prepared(AllGrouping()).choose_tasks(["x"]) == TASKS


def context(container: int) -> Context:
    return Context("t", "src", 1, 0, 1, {}, container, "", {},
                   task_containers={1: 0, 4: 0, 5: 1, 6: 1})


def test_local_or_shuffle_prefers_the_senders_container():
    g = prepared(LocalOrShuffleGrouping(), context=context(1))
    assert Counter(g.choose_tasks([i])[0] for i in range(10)) == {5: 5, 6: 5}


@pytest.mark.parametrize("ctx", [context(2), None])
def test_local_or_shuffle_falls_back_to_all(ctx):
    g = prepared(LocalOrShuffleGrouping(), context=ctx)
    assert Counter(g.choose_tasks([i])[0] for i in range(9)) == {4: 3, 5: 3, 6: 3}


def test_direct_emits_nothing_by_itself():
    assert prepared(DirectGrouping()).choose_tasks(["x"]) == []


# -- custom ---------------------------------------------------------------------------------

class ByParity(Grouping):
    def choose_tasks(self, values):
        return [self.target_tasks[values[0] % 2]]


class EveryOther:
    """A duck-typed grouping: only ``choose_tasks``, no Grouping base class."""

    def choose_tasks(self, values):
        return [5] if values[0] % 2 else [4, 6]


def test_custom_grouping_subclass():
    got = splits(prepared(ByParity()), TASKS, [[i, 0] for i in range(6)])
    assert got == {4: [[0, 0], [2, 0], [4, 0]], 5: [[1, 0], [3, 0], [5, 0]]}


def test_duck_typed_custom_grouping():
    got = splits(EveryOther(), TASKS, [[i, 0] for i in range(3)])
    assert got == {4: [[0, 0], [2, 0]], 5: [[1, 0]], 6: [[0, 0], [2, 0]]}


def test_custom_grouping_choosing_a_foreign_task_is_an_error():
    class Wrong(Grouping):
        def choose_tasks(self, values):
            return [99]

    with pytest.raises(ValueError, match=r"chose task 99, which is not one of the "
                                         r"subscriber's tasks \[4, 5, 6\]"):
        splits(prepared(Wrong()), TASKS, [["x", 0]])


def test_base_grouping_must_be_overridden():
    with pytest.raises(NotImplementedError, match="Grouping must define choose_tasks"):
        prepared(Grouping()).choose_tasks(["x"])


# -- partial key grouping (issue 19): the power of both choices ---------------------------------
def partial(n: int, fields=("word",), stream=("word",)) -> runtime.groupings.PartialKeyGrouping:
    g = runtime.groupings.PartialKeyGrouping(list(fields), fields_of_stream=list(stream))
    g.prepare(None, "default", list(range(10, 10 + n)))
    return g


def test_partial_key_sends_a_key_to_at_most_two_tasks_the_first_being_the_fields_choice():
    fields = FieldsGrouping(["word"], fields_of_stream=["word"])
    fields.prepare(None, "default", list(range(10, 16)))
    for key in [f"k{i}" for i in range(200)]:
        g = partial(6)
        chosen = {g.choose_tasks([key])[0] for _ in range(20)}
        assert len(chosen) <= 2 and fields.choose_tasks([key])[0] in chosen


def test_partial_key_halves_a_hot_key_where_fields_grouping_swamps_one_task():
    rng = __import__("random").Random(3)
    stream = ["hot" if rng.random() < 0.6 else f"cold{rng.randrange(500)}" for _ in range(20_000)]
    g, fields = partial(4), FieldsGrouping(["word"], fields_of_stream=["word"])
    fields.prepare(None, "default", list(range(10, 14)))
    by_partial = Counter(g.choose_tasks([w])[0] for w in stream)
    by_fields = Counter(fields.choose_tasks([w])[0] for w in stream)
    assert max(by_fields.values()) / len(stream) > 0.6  # the hot key's task, and more
    assert max(by_partial.values()) / len(stream) < 0.4  # shared by two tasks
    assert sum(by_partial.values()) == len(stream)


def test_partial_key_on_several_fields_and_the_declarer_checks_them():
    g = partial(5, fields=("a", "b"), stream=("a", "b", "c"))
    assert len({g.choose_tasks([1, 2, i])[0] for i in range(50)}) <= 2
    topo = runtime.Topology("pk")
    from runtime.testing import ListSink, ListSpout

    topo.spout("s", ListSpout([[1]], fields=["a"]))
    with pytest.raises(runtime.TopologyError, match="partial key grouping on \\['b'\\]"):
        topo.bolt("b", ListSink).partial_key_grouping("s", ["b"])
    topo.bolt("ok", ListSink, parallelism=2).partial_key_grouping("s", "a")
    assert [s.grouping.describe() for s in topo.components["ok"].inputs] == ["partial_key(a)"]


@pytest.mark.parametrize("acking", [0, 1])
def test_partial_key_through_the_twin_spreads_a_hot_key_and_delivers_each_tuple_once(acking):
    from runtime.testing import InMemoryCluster, ListSink, ListSpout

    words = ["hot"] * 300 + [f"w{i}" for i in range(100)]
    topo = runtime.Topology("pk", ackers=acking)
    topo.spout("words", ListSpout([[w] for w in words], fields=["word"]))  # bare values
    topo.bolt("count", ListSink, parallelism=4).partial_key_grouping("words", ["word"])
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
        got = cluster.sink("count", with_source=True)
    assert sorted(values[0] for values, *_ in got) == sorted(words)
    hot_tasks = Counter(task for values, *_, task in got if values[0] == "hot")
    assert len(hot_tasks) == 2 and min(hot_tasks.values()) >= 100, hot_tasks


# -- key groups (issue 22) ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 8, 128])
def test_key_groups_go_to_tasks_in_contiguous_ranges_and_the_grouping_follows_them(n):
    from runtime.groupings import key_group, key_slots, key_task
    from runtime.state._rebalance import split

    slots = key_slots(n)
    assert slots == sorted(slots) and set(slots) == set(range(n))
    assert max(Counter(slots).values()) - min(Counter(slots).values()) <= 1
    fields = FieldsGrouping(["word"], fields_of_stream=["word"])
    fields.keyed = True  # into a StatefulBolt: the engine sets it (test_wiring_keys_...)
    fields.prepare(None, "default", list(range(100, 100 + n)))
    words = [f"w{i}" for i in range(300)]
    parts = split([[w, 1] for w in words], n)
    for index, part in enumerate(parts):  # state lands where the tuples of its keys go
        assert all(fields.choose_tasks([w])[0] == 100 + index for w, _ in part)
    assert all(key_task(stable_hash(w), n) == slots[key_group(stable_hash(w))] for w in words)


def test_a_stateless_fields_grouping_keeps_the_modulo_of_the_hash():
    """Key groups cost the split ~1.5x (benchmarks/rebalance.py --split): only keyed state
    pays it."""
    from runtime.groupings import field_hash

    fields = FieldsGrouping(["word"], fields_of_stream=["word"])
    fields.prepare(None, "default", [7, 8, 9])
    assert all(fields.choose_tasks([f"w{i}"]) == [7 + field_hash(f"w{i}") % 3]
               for i in range(300))


def test_wiring_keys_fields_groupings_into_stateful_bolts_only():
    from runtime import StatefulBolt, Topology
    from runtime.engine.wiring import build_streams, task_context
    from runtime.testing import ListSink, ListSpout

    class Count(StatefulBolt):
        def process(self, tup):
            pass

    topo = Topology("keyed")
    topo.spout("s", ListSpout([["a"]], fields=["word"]))
    topo.bolt("plain", ListSink, parallelism=2).fields_grouping("s", ["word"])
    topo.bolt("stateful", Count, parallelism=2).fields_grouping("s", ["word"])
    plan, specs = topo.physical_plan(), topo.components
    context = task_context(plan, specs["s"], 1, "")
    streams = build_streams(plan, specs, specs["s"], context, lambda h, b: None,
                            lambda *a: None)
    from runtime.groupings import field_hash, key_task

    plain, stateful = streams["default"].outlets
    assert plain.tasks == [2, 3] and stateful.tasks == [4, 5]
    words = [f"w{i}" for i in range(200)]
    assert all(plain.pick([w]) == field_hash(w) % 2 for w in words)
    assert all(stateful.pick([w]) == key_task(field_hash(w), 2) for w in words)
    assert any(field_hash(w) % 2 != key_task(field_hash(w), 2) for w in words)


def test_keys_that_differ_in_their_last_digit_spread_over_the_key_groups():
    """CRC-32 is linear: its low bits alone put "w1x0" .. "w1x9" on one task of two."""
    from runtime.groupings import key_task

    for i in range(20):
        assert len({key_task(stable_hash(f"w{i}x{k}"), 2) for k in range(10)}) == 2


def test_above_the_key_groups_the_grouping_still_reaches_every_task():
    fields = FieldsGrouping(["word"], fields_of_stream=["word"])
    fields.prepare(None, "default", list(range(200)))
    assert len({fields.choose_tasks([f"w{i}"])[0] for i in range(20_000)}) == 200


# -- a component's own number of key groups: its max_parallelism (issue 22) --------------------
@given(st.integers(0, 2**32 - 1))
def test_128_key_groups_are_the_top_7_bits_as_before(h):
    """The scaled form (product * groups >> 32) keeps every key where it was for 128."""
    from runtime.groupings import key_group

    assert key_group(h) == key_group(h, 128) == ((h * 0x9E3779B1) & 0xFFFFFFFF) >> 25


def keyed(groups: int, tasks: list[int], fields=("word",)) -> FieldsGrouping:
    grouping = FieldsGrouping(["word"], fields_of_stream=list(fields))
    grouping.keyed, grouping.key_groups = True, groups  # as the engine wires it
    return prepared(grouping, tasks)


@pytest.mark.parametrize(("groups", "n"), [(6, 1), (6, 2), (6, 4), (6, 6), (1000, 7), (3, 3)])
def test_a_non_default_maximum_deals_its_own_key_groups_to_the_tasks(groups, n):
    from runtime.groupings import key_group, key_slots, key_task
    from runtime.state._rebalance import split

    slots = key_slots(n, groups)
    assert len(slots) == groups and slots == sorted(slots) and set(slots) == set(range(n))
    assert max(Counter(slots).values()) - min(Counter(slots).values()) <= 1
    words = [f"w{i}" for i in range(600)]
    hashes = [stable_hash(w) for w in words]
    used = {key_group(h, groups) for h in hashes}
    assert used <= set(range(groups)) and (groups > 100 or len(used) == groups)
    fields = keyed(groups, list(range(100, 100 + n)))
    for index, part in enumerate(split([[w, 1] for w in words], n, groups)):
        assert all(fields.choose_tasks([w]) == [100 + index] for w, _ in part)  # state follows
    assert all(fields.pick([w]) == key_task(h, n, groups) == slots[key_group(h, groups)]
               for w, h in zip(words, hashes, strict=True))


@given(st.lists(keys, min_size=1, max_size=30), st.integers(1, 6), st.booleans(),
       st.sampled_from([6, 8, 128, 1000]))
def test_outbound_split_through_key_groups_matches_the_pick(batch_keys, n, bare, groups):
    """The split (a shift for a power of two groups, scaled otherwise) and the pick agree,
    and both are key_task's choice."""
    from runtime.groupings import key_task

    tasks = list(range(10, 10 + n))
    grouping = keyed(groups, tasks, ("word",) if bare else ("word", "i"))
    if bare:
        got = bare_splits(grouping, tasks, batch_keys)
        sent = [(task, [value]) for task, values in got.items() for value in values]
    else:
        got = splits(grouping, tasks, [[k, i] for i, k in enumerate(batch_keys)])
        sent = [(task, values) for task, rows in got.items() for values in rows]
    assert all(grouping.choose_tasks(values) == [task] for task, values in sent)
    assert all(task == 10 + key_task(stable_hash(values[0]), n, groups)
               for task, values in sent)
    assert len(sent) == len(batch_keys)


def test_a_key_group_moves_whole_when_a_non_default_maximum_component_grows():
    """Six key groups over 2, then 3 tasks: keys of one group always share a task."""
    from runtime.groupings import key_group

    words = [f"w{i}" for i in range(600)]
    for n in (2, 3, 6):
        grouping = keyed(6, list(range(n)))
        owner: dict[int, set] = {}
        for w in words:
            owner.setdefault(key_group(stable_hash(w), 6), set()).add(grouping.pick([w]))
        assert all(len(tasks) == 1 for tasks in owner.values()) and len(owner) == 6


def test_wiring_gives_a_stateful_bolt_its_max_parallelism_as_key_groups():
    from runtime import StatefulBolt, Topology
    from runtime.engine.wiring import build_streams, task_context
    from runtime.groupings import field_hash, key_task
    from runtime.testing import ListSpout

    topo = Topology("keyed")
    topo.spout("s", ListSpout([["a"]], fields=["word"]))
    for name, maximum in (("six", 6), ("default", None)):
        topo.bolt(name, StatefulBolt, parallelism=4, max_parallelism=maximum
                  ).fields_grouping("s", ["word"])
    plan, specs = topo.physical_plan(), topo.components
    six, default = build_streams(plan, specs, specs["s"], task_context(plan, specs["s"], 1, ""),
                                 lambda h, b: None, lambda *a: None)["default"].outlets
    words = [f"w{i}" for i in range(400)]
    assert all(six.pick([w]) == key_task(field_hash(w), 4, 6) for w in words)
    assert all(default.pick([w]) == key_task(field_hash(w), 4) for w in words)
    assert any(six.pick([w]) != default.pick([w]) for w in words)
