"""The bolt's data strides (``bolt_side._untracked`` and ``_tracked``) and their C twins
(``_hot.Stride``), held to the same rules one by one: a Tuple reused until the user keeps
it, a one-field stream's bare values, the ids and ``ack_val`` of tracked rows, output
waiting looked at after every ``process``, the rows left where a stop or a raise leaves
them, and the user's exception as it came (docs/internals/performance-log.md, "Issue 17,
thirteenth pass")."""

from __future__ import annotations

import sys
from itertools import count, tee

import pytest

from runtime.engine import bolt_side, hot
from runtime.model.api import FailedException, OneFieldTuple, Tuple, TupleSource

ONE = TupleSource.of("words", 3, "default", ["word"])
TWO = TupleSource.of("pairs", 4, "default", ["a", "b"])
ROOT = 1 << 63 | 5


@pytest.fixture
def strides(closures):
    """(untracked, tracked, run), made as a BoltSide makes them: the Python strides, or
    their C twins (conftest's ``closures``: a C run is skipped only where
    TUPLEFLOW_PURE_PYTHON says so, and fails where the C was not built)."""
    made = bolt_side._strides()
    kinds = {"python": ["function"] * 3, "c": ["Stride"] * 3}[closures]
    assert [type(s).__name__ for s in made] == kinds
    return made


class Seen:
    """A ``process`` that notes each Tuple as it was given, keeps the ones ``keep`` says,
    and raises ``raises`` at the entry ``at``."""

    def __init__(self, keep=lambda tup: False, at=None, raises=None) -> None:
        self.keep, self.at, self.raises = keep, at, raises
        self.seen, self.kept, self.objects, self.lists = [], [], [], []

    def __call__(self, tup) -> None:
        if self.at is not None and tup.values[0] == self.at:
            raise self.raises
        self.seen.append((type(tup), tup.values, tup.ids, tup.ack_val, tup.source))
        self.objects.append(id(tup))
        self.lists.append(tup.values)  # the values list itself, kept (not the Tuple)
        if self.keep(tup):
            self.kept.append(tup)


def test_a_tuple_is_reused_until_the_user_keeps_it_then_made_anew(strides):
    untracked, *_ = strides
    process = Seen(keep=lambda tup: tup.values[0] % 4 == 2)
    assert untracked(iter(range(10)), 10, process, OneFieldTuple, ONE, []) is True
    assert [values for _, values, _, _, _ in process.seen] == [[n] for n in range(10)]
    assert [t.values for t in process.kept] == [[2], [6]]  # unchanged since kept
    # one object until 2 was kept, a new one for 3..6, and another from 7 on
    runs = [process.objects[0:3], process.objects[3:7], process.objects[7:]]
    assert [len(set(run)) for run in runs] == [1, 1, 1]
    assert len(set(process.objects)) == 3


def test_a_one_field_streams_values_are_a_fresh_list_of_the_bare_value(strides):
    untracked, *_ = strides
    process = Seen()
    words = ["storm", "heron", "flink"]
    untracked(iter(words), 3, process, OneFieldTuple, ONE, [])
    assert all(kind is OneFieldTuple for kind, *_ in process.seen)
    assert process.lists == [["storm"], ["heron"], ["flink"]]  # none changed in place
    assert len({id(values) for values in process.lists}) == 3


def test_a_many_field_streams_values_are_the_entry_itself(strides):
    untracked, *_ = strides
    process, entries = Seen(), [[1, "a"], [2, "b"]]
    untracked(iter(entries), 2, process, Tuple, TWO, [])
    assert [kind for kind, *_ in process.seen] == [Tuple, Tuple]
    assert all(got is given for got, given in zip(process.lists, entries))
    assert all(source is TWO for *_, source in process.seen)


def test_tracked_rows_set_ids_and_ack_val_and_a_kept_tuple_keeps_its_own(strides):
    _, tracked, _ = strides
    process = Seen(keep=lambda tup: tup.values[0] == 1)
    ids = [{ROOT: 11}, ROOT + 1, ROOT + 2]
    rows = zip([0, 1, 2], ids, [0, ROOT + 1, 77])
    assert tracked(rows, 5, process, OneFieldTuple, ONE, []) is True
    assert [(values, i, v) for _, values, i, v, _ in process.seen] == [
        ([0], {ROOT: 11}, 0), ([1], ROOT + 1, ROOT + 1), ([2], ROOT + 2, 77)]
    (kept,) = process.kept
    assert (kept.values, kept.ids, kept.ack_val) == ([1], ROOT + 1, ROOT + 1)


def test_a_run_frames_ids_are_its_ack_val_itself(strides):
    # a spout tuple's only copy: the bolt's ack tells it by ``ids is ack_val``
    _, tracked, _ = strides
    identical = []
    tracked(zip(range(4), *tee(count(ROOT))), 4,
            lambda tup: identical.append((tup.ids == tup.values[0] + ROOT,
                                          tup.ids is tup.ack_val)), OneFieldTuple, ONE, [])
    assert identical == [(True, True)] * 4


def test_a_run_stride_counts_the_ids_from_its_root_each_its_own_ack_val(strides):
    *_, run = strides
    process, seen, left = Seen(keep=lambda tup: tup.values[0] == "b"), [], iter("abcde")
    waiting = Waiting(after=4)
    process_and_count = lambda tup: (process(tup), waiting.process(tup))  # noqa: E731
    assert run(left, 5, process_and_count, OneFieldTuple, ONE, waiting, ROOT) is False
    seen = [(values, ids, val) for _, values, ids, val, _ in process.seen]
    assert seen == [([w], ROOT + n, ROOT + n) for n, w in enumerate("abcd")]
    (kept,) = process.kept
    assert (kept.values, kept.ids, kept.ack_val) == (["b"], ROOT + 1, ROOT + 1)
    assert kept.ids is kept.ack_val
    assert next(left) == "e"  # the four processed were drawn, no more
    identical = []
    run(iter(range(3)), 3, lambda tup: identical.append(tup.ids is tup.ack_val),
        OneFieldTuple, ONE, [], (1 << 64) - 3)  # the last roots a RUN may carry
    assert identical == [True] * 3


@pytest.mark.parametrize("first", [ROOT, (1 << 60) - 1, (1 << 64) - 12])
def test_a_run_root_the_user_keeps_keeps_its_value(strides, first):
    """The C RUN stride makes a row's root in the last row's int when nothing but the
    reused Tuple holds that int (the ack let go of it: ``_hot.LeafRun``), instead of a new
    int made and the old one freed: every int the user kept (an ``ack_val``, a dict key,
    a kept Tuple's, one not acked) keeps its value, across a change of the int's size
    too (2**60 takes one more digit; docs/internals/performance-log.md, "Issue 17,
    fifteenth pass")."""
    *_, run = strides
    seen, kept, keys, tuples = [], [], {}, []

    def process(tup) -> None:
        n = tup.values[0]
        seen.append((hex(tup.ids), hex(tup.ack_val)))  # (strings: no reference kept)
        if n % 5 == 1:
            kept.append(tup.ack_val)
        elif n % 5 == 2:
            keys[tup.ids] = n
        elif n % 5 == 3:
            tuples.append(tup)
        if n % 5 != 4:  # acked, as an ack does: only the Tuple's ack_val holds it now
            tup.ids = None

    assert run(iter(range(12)), 12, process, OneFieldTuple, ONE, [], first) is True
    assert seen == [(hex(first + n), hex(first + n)) for n in range(12)]
    assert kept == [first + 1, first + 6, first + 11]
    assert keys == {first + 2: 2, first + 7: 7}
    assert [t.ack_val for t in tuples] == [first + 3, first + 8]


def test_k_rows_at_most_and_the_rest_left_in_the_iterator(strides):
    untracked, *_ = strides
    process, left = Seen(), iter(range(10))
    assert untracked(left, 4, process, OneFieldTuple, ONE, []) is True
    assert len(process.seen) == 4 and next(left) == 4
    assert untracked(left, 99, process, OneFieldTuple, ONE, []) is True  # ran out
    assert len(process.seen) == 9


class Waiting:
    """Output waiting, as the driver's queue of unsent frames: its truth is asked of
    ``len``; it fills once ``after`` calls of ``process`` were made."""

    def __init__(self, after: int) -> None:
        self.after, self.calls, self.looks = after, 0, []

    def process(self, tup) -> None:
        self.calls += 1

    def __len__(self) -> int:
        self.looks.append(self.calls)
        return int(self.calls >= self.after)


def test_output_waiting_is_looked_at_after_every_call_and_stops_the_stride(strides):
    untracked, tracked, _ = strides
    waiting, left = Waiting(after=3), iter(range(10))
    assert untracked(left, 10, waiting.process, OneFieldTuple, ONE, waiting) is False
    assert waiting.looks == [1, 2, 3]  # once after each call, none before the first
    assert next(left) == 3  # the three processed were drawn, no more
    waiting, entries = Waiting(after=2), iter(range(5))
    tids, tvals = iter(range(100, 105)), iter(range(200, 205))
    rows = zip(entries, tids, tvals)
    assert tracked(rows, 5, waiting.process, OneFieldTuple, ONE, waiting) is False
    assert (next(entries), next(tids), next(tvals)) == (2, 102, 202)


def test_a_list_that_fills_while_processing_stops_the_stride(strides):
    untracked, *_ = strides
    unsent: list = []
    left = iter(range(10))
    assert untracked(left, 10, lambda tup: tup.values[0] == 4 and unsent.append("f"),
                     OneFieldTuple, ONE, unsent) is False
    assert unsent == ["f"] and next(left) == 5
    left = iter(range(10))
    assert untracked(left, 10, lambda tup: unsent.clear() if tup.values[0] == 4 else None,
                     OneFieldTuple, ONE, unsent) is False
    assert next(left) == 1  # waiting from the start: it stopped after the first


def test_the_users_exception_comes_out_as_it_was_raised_with_its_row_drawn(strides):
    untracked, tracked, _ = strides
    error = ValueError("minus one")
    process, left = Seen(at=-1, raises=error), iter([1, 2, -1, 4])
    with pytest.raises(ValueError) as raised:
        untracked(left, 4, process, OneFieldTuple, ONE, [])
    assert raised.value is error and len(process.seen) == 2
    assert next(left) == 4  # the row that raised was drawn: execute_data counts it
    process, entries = Seen(at=-1, raises=error), iter([1, -1, 3])
    with pytest.raises(ValueError) as raised:
        tracked(zip(entries, *tee(count(ROOT))), 3, process, OneFieldTuple, ONE, [])
    assert raised.value is error and next(entries) == 3


@pytest.mark.skipif(hot.pure_python(), reason="TUPLEFLOW_PURE_PYTHON is set: no C strides")
def test_a_c_stride_hands_an_odd_call_to_its_python_spec():
    stride = hot._hot.Stride(spec=bolt_side._untracked, tuple_type=Tuple,
                             one_type=OneFieldTuple, rows="untracked")
    process = Seen()
    # a list, not an iterator: the spec's islice takes it, from its start
    assert stride([5, 6], 2, process, OneFieldTuple, ONE, []) is True
    assert [values for _, values, *_ in process.seen] == [[5], [6]]
    with pytest.raises(TypeError):
        stride(iter([1]), 1, process, OneFieldTuple, ONE, [], "extra")


def test_a_stride_keeps_no_reference_to_what_it_was_given(strides):
    _, tracked, _ = strides
    entry, ids, val, source = object(), object(), object(), TupleSource.of(
        "things", 1, "default", ["thing"])
    process = lambda tup: None  # noqa: E731
    before = [sys.getrefcount(x) for x in (entry, ids, val, source, process)]
    for _ in range(3):
        tracked(zip([entry] * 5, [ids] * 5, [val] * 5), 5, process, OneFieldTuple, source,
                [])
    assert [sys.getrefcount(x) for x in (entry, ids, val, source, process)] == before


def test_a_k_or_a_root_out_of_the_c_range_is_the_python_ways(strides):
    untracked, _, run = strides
    with pytest.raises(ValueError):  # islice's
        untracked(iter([1]), -1, Seen(), OneFieldTuple, ONE, [])
    process = Seen()
    run(iter("ab"), 5, process, OneFieldTuple, ONE, [], -2)  # not a root, but a count
    assert [ids for _, _, ids, _, _ in process.seen] == [-2, -1]
    process = Seen()
    run(iter("ab"), 2, process, OneFieldTuple, ONE, [], (1 << 64) - 1)
    assert [ids for _, _, ids, _, _ in process.seen] == [(1 << 64) - 1, 1 << 64]


# -- a BasicBolt's strides (bolt_side._basic and its C twins) ------------------------------


class Basic:
    """A BasicBolt's side as its strides see it: ``current``, and an ``ack`` and a
    ``fail`` that note what they were given (and what ``current[0]`` and the exception
    being handled were then), keeping the Tuple only when ``keep`` says."""

    def __init__(self, keep: bool = False) -> None:
        self.current: list = [None]
        self.keep, self.settled, self.kept = keep, [], []

    def ack(self, tup) -> None:
        self.note("ack", tup)

    def fail(self, tup) -> None:
        self.note("fail", tup)

    def note(self, how: str, tup) -> None:
        self.settled.append((how, tup.values[0], tup.ids, self.current[0] is tup,
                             type(sys.exc_info()[1]).__name__))
        if self.keep:
            self.kept.append(tup)


@pytest.fixture
def basic(closures):
    """(side, (untracked, tracked, run)): a BasicBolt's strides, made as a BoltSide
    makes them, C or Python (``closures``)."""
    side = Basic()
    made = bolt_side._strides((side.current, side.ack, side.fail))
    kinds = {"python": ["function"] * 3, "c": ["Stride"] * 3}[closures]
    assert [type(s).__name__ for s in made] == kinds
    return side, made


def test_a_basic_input_is_current_while_processed_acked_after_and_none_then(basic):
    side, (untracked, *_) = basic
    during = []
    process = lambda tup: during.append((tup.values[0], side.current[0] is tup))  # noqa: E731
    assert untracked(iter("abc"), 3, process, OneFieldTuple, ONE, []) is True
    assert during == [("a", True), ("b", True), ("c", True)]
    # acked after each return, current still the input then, no exception handled
    assert side.settled == [("ack", w, None, True, "NoneType") for w in "abc"]
    assert side.current == [None]


def test_a_failed_exception_fails_the_input_and_the_stride_goes_on(basic):
    side, (_, tracked, _) = basic
    failed = FailedException("no")
    process = Seen(at="b", raises=failed)
    rows = zip("abc", [ROOT, ROOT + 1, {ROOT: 9}], [ROOT, 3, 0])
    assert tracked(rows, 3, process, OneFieldTuple, ONE, []) is True
    assert [values for _, values, *_ in process.seen] == [["a"], ["c"]]
    # the failed input is failed with its ids, while the FailedException is handled
    assert side.settled == [("ack", "a", ROOT, True, "NoneType"),
                            ("fail", "b", ROOT + 1, True, "FailedException"),
                            ("ack", "c", {ROOT: 9}, True, "NoneType")]
    assert side.current == [None] and sys.exc_info() == (None, None, None)


def test_a_basic_inputs_other_exception_comes_out_as_raised_current_none(basic):
    side, (untracked, _, run) = basic
    error = ValueError("minus one")
    process, left = Seen(at=-1, raises=error), iter([1, 2, -1, 4])
    with pytest.raises(ValueError) as raised:
        untracked(left, 4, process, OneFieldTuple, ONE, [])
    assert raised.value is error and raised.value.__context__ is None
    assert [(how, n) for how, n, *_ in side.settled] == [("ack", 1), ("ack", 2)]
    assert side.current == [None] and next(left) == 4  # neither acked nor failed
    left = iter("xyz")
    with pytest.raises(FailedException):  # a fail that raises: raised as it comes,
        bolt_side._strides((side.current, side.ack, _raising_fail))[2](  # in the except
            left, 3, Seen(at="y", raises=FailedException("y")), OneFieldTuple, ONE, [],
            ROOT)
    assert side.current == [None] and next(left) == "z"


def _raising_fail(tup) -> None:
    assert isinstance(sys.exc_info()[1], FailedException)
    raise FailedException(f"fail of {tup.values[0]}: {sys.exc_info()[1]}")


def test_a_fail_that_raises_has_the_failed_exception_as_its_context(basic):
    side, _ = basic
    *_, run = bolt_side._strides((side.current, side.ack, _raising_fail))
    cause = FailedException("y")
    with pytest.raises(FailedException) as raised:
        run(iter("xy"), 2, Seen(at="y", raises=cause), OneFieldTuple, ONE, [], ROOT)
    assert str(raised.value) == "fail of y: y" and raised.value.__context__ is cause


def test_a_basic_tuple_is_reused_until_process_or_the_ack_keeps_it(basic):
    side, (untracked, _, run) = basic
    process = Seen(keep=lambda tup: tup.values[0] == 2)
    assert untracked(iter(range(5)), 5, process, OneFieldTuple, ONE, []) is True
    assert len(set(process.objects[:3])) == 1 and len(set(process.objects[3:])) == 1
    assert process.objects[0] != process.objects[3]
    assert [t.values for t in process.kept] == [[2]]
    side.keep, process = True, Seen()  # an ack that keeps its input: a new one each
    assert run(iter("abc"), 3, process, OneFieldTuple, ONE, [], ROOT) is True
    assert len(set(process.objects)) == 3
    assert [(t.values, t.ids) for t in side.kept] == [
        (["a"], ROOT), (["b"], ROOT + 1), (["c"], ROOT + 2)]


def test_a_basic_stride_looks_at_waiting_after_each_input_and_its_ack(basic):
    side, (untracked, _, _) = basic
    waiting, left = Waiting(after=2), iter(range(10))
    assert untracked(left, 10, waiting.process, OneFieldTuple, ONE, waiting) is False
    assert waiting.looks == [1, 2] and next(left) == 2
    assert [how for how, *_ in side.settled] == ["ack", "ack"]  # before the look
    assert side.current == [None]


@pytest.mark.skipif(hot.pure_python(), reason="TUPLEFLOW_PURE_PYTHON is set: no C strides")
def test_a_basic_c_stride_hands_an_odd_call_to_its_python_spec_and_wants_all_four():
    side = Basic()
    spec = bolt_side._basic(bolt_side._untracked, side.current, side.ack, side.fail)
    stride = hot._hot.Stride(spec=spec, tuple_type=Tuple, one_type=OneFieldTuple,
                             rows="untracked", current=side.current, ack=side.ack,
                             fail=side.fail, failed=FailedException)
    # a list, not an iterator: the spec's islice takes it, and acks as the C would
    assert stride([5, 6], 2, Seen(), OneFieldTuple, ONE, []) is True
    assert [(how, n) for how, n, *_ in side.settled] == [("ack", 5), ("ack", 6)]
    with pytest.raises(TypeError, match="all four"):
        hot._hot.Stride(spec=spec, tuple_type=Tuple, one_type=OneFieldTuple,
                        rows="untracked", current=side.current, ack=side.ack)
