"""Stream groupings: which task(s) of a subscribing bolt receive each tuple.

Each grouping is a small class with one question to answer, ``choose_tasks(values)``.
The sending instance prepares its own copy with the target tasks, so the choice is
made once, by the sender, and the stream manager only forwards frames.

Single-target groupings also implement ``pick(values) -> int``, the *index* into
``target_tasks``; the executor's hot path calls that and skips building a list.

>>> g = FieldsGrouping(["word"], fields_of_stream=["word", "n"])
>>> g.prepare(None, "default", [4, 5, 6])
>>> g.choose_tasks(["storm", 1]) == g.choose_tasks(["storm", 99])
True
"""

from __future__ import annotations

import itertools
import random
import struct
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = ["AllGrouping", "DirectGrouping", "FieldsGrouping", "GlobalGrouping", "Grouping",
           "KEY_GROUPS", "LocalOrShuffleGrouping", "PartialKeyGrouping", "ShuffleGrouping",
           "field_hash", "key_group", "key_slots", "key_task", "keyed_picker", "label",
           "stable_hash"]

# A key's hash picks one of a component's key groups, and the groups are dealt to the tasks
# in contiguous ranges, so that a rebalance moves whole groups (and a StatefulBolt's state
# can follow them: runtime/state/_rebalance.py). The number of key groups is the
# component's maximum parallelism (``max_parallelism=`` on ``topo.bolt``; KEY_GROUPS by
# default): above it some tasks would get no group at all.
KEY_GROUPS = 128
_GOLDEN = 0x9E3779B1  # Knuth's multiplicative hash: the top bits of h * it depend on all of h


def key_group(h: int, groups: int = KEY_GROUPS) -> int:
    """The key group, among ``groups``, of a 32-bit key hash. CRC-32 is linear, so its low
    bits alone are poorly spread (keys that differ only in their last digit share bit 6);
    the top bits of a multiplication by the golden ratio mix every bit in. The product's
    32 bits, read as a fraction of 2**32, scaled to ``groups`` (Lemire's range reduction):
    for 128 groups, its top 7 bits.

    >>> key_group(0xDEADBEEF) == ((0xDEADBEEF * _GOLDEN) & 0xFFFFFFFF) >> 25
    True
    """
    return ((h * _GOLDEN) & 0xFFFFFFFF) * groups >> 32


def key_slots(n: int, groups: int = KEY_GROUPS) -> list[int]:
    """Key group -> the index of its task among ``n``: contiguous ranges, as even as they
    can be (group ``g`` goes to ``g * n // groups``).

    >>> key_slots(2)[:2], key_slots(2)[64], key_slots(1) == [0] * KEY_GROUPS
    ([0, 0], 1, True)
    >>> key_slots(3, groups=6)
    [0, 0, 1, 1, 2, 2]
    """
    return [g * n // groups for g in range(groups)]


def key_task(h: int, n: int, groups: int = KEY_GROUPS) -> int:
    """The index of the task, among ``n``, that a key of hash ``h`` goes to: through its
    key group, up to ``groups`` tasks; above that (the definition and the rebalance guard
    never let it happen) ``h % n``. Hot paths use the same arithmetic through
    :func:`key_slots`."""
    return h % n if n > groups else key_group(h, groups) * n // groups


class Grouping:
    """Base class for groupings, built in or custom.

    A custom grouping overrides ``choose_tasks(values) -> list[int]`` and may use
    ``self.target_tasks`` (task ids of the subscribing component, set by ``prepare``).
    """

    single = False  # True when exactly one target is chosen per tuple (pick() exists)
    name = "custom"

    def prepare(self, context: Any, stream: str, target_tasks: Sequence[int]) -> None:
        """Called once in the sending instance, before the first tuple."""
        self.target_tasks = list(target_tasks)

    def choose_tasks(self, values: list) -> list[int]:
        raise NotImplementedError(f"{type(self).__name__} must define choose_tasks(values)")

    def describe(self) -> str:
        return self.name


class _SingleTarget(Grouping):
    single = True

    def pick(self, values: list) -> int:
        raise NotImplementedError

    def choose_tasks(self, values: list) -> list[int]:
        return [self.target_tasks[self.pick(values)]]


class ShuffleGrouping(_SingleTarget):
    """Round-robin over the targets from a random start: balanced, and cheap."""

    name = "shuffle"

    def prepare(self, context, stream, target_tasks):
        super().prepare(context, stream, target_tasks)
        order = list(range(len(self.target_tasks)))
        random.shuffle(order)
        self.pick = _cycler(order)


def _cycler(order: list[int]):
    step = itertools.cycle(order).__next__
    return lambda values: step()


class _Keyed(_SingleTarget):
    """A grouping on the values of some fields (the key): ``fields`` and their
    ``indexes`` in the stream's tuples."""

    def __init__(self, fields: Sequence[str], fields_of_stream: Sequence[str]) -> None:
        self.fields = tuple(fields)
        self.indexes = tuple(list(fields_of_stream).index(f) for f in self.fields)

    def describe(self) -> str:
        return f"{self.name}({', '.join(self.fields)})"


class FieldsGrouping(_Keyed):
    """Tuples with equal values in ``fields`` go to the same task, from every sender.

    Uses :func:`stable_hash`, never Python's per-process salted ``hash()``.
    """

    name = "fields"
    # set by the engine when the subscriber keeps keyed state (a StatefulBolt): its keys
    # go through key groups, which a rebalance can move with their state (issue 22); as
    # many groups as the subscriber's maximum parallelism
    keyed = False
    key_groups = KEY_GROUPS

    def prepare(self, context, stream, target_tasks):
        super().prepare(context, stream, target_tasks)
        self.pick = _fields_picker(self.indexes, len(self.target_tasks), self.keyed,
                                   self.key_groups)

    def str_key(self) -> tuple[int, int] | None:
        """``(index, n)`` when ``pick`` is the key's :func:`field_hash` modulo ``n``
        tasks, the key at ``index`` (one field, no key groups; after ``prepare``), else
        None. A hot path may then hash a str key itself, ``crc32`` of its UTF-8 as
        ``pick`` does, a call less a tuple, and call ``pick`` for any other key
        (``runtime.engine.wiring``; ``tests/runtime/test_groupings.py`` pins the two
        equal)."""
        n = len(self.target_tasks)
        if len(self.indexes) != 1 or (self.keyed and n <= self.key_groups):
            return None
        return self.indexes[0], n


def _fields_picker(indexes: tuple[int, ...], n: int, keyed: bool = False,
                   groups: int = KEY_GROUPS):
    """``pick(values)`` of a fields grouping: the key's hash modulo ``n``, or for keyed
    state through ``groups`` key groups (see :func:`key_group`), two multiplications, a
    mask, a shift and a lookup dearer. Each is one closure: this runs once per tuple."""
    if keyed and n <= groups:
        return _key_group_picker(indexes, n, groups)
    if len(indexes) == 1:
        (i,) = indexes
        key, crc, text = field_hash, zlib.crc32, str

        def pick(values):
            value = values[i]  # a string, the commonest key, hashed here: one call less
            return (crc(value.encode()) if type(value) is text else key(value)) % n

        return pick
    return lambda values: stable_hash([values[i] for i in indexes]) % n


def keyed_picker(indexes: Sequence[int], n: int, groups: int = KEY_GROUPS):
    """``pick(values)``: the index, among ``n`` tasks, of the task a fields grouping on the
    fields at ``indexes`` sends ``values`` to when its subscriber keeps keyed state (through
    ``groups`` key groups): the router's own function, for whatever must follow its keys
    (held window tuples at a rebalance, runtime/windows/_split.py)."""
    return _fields_picker(tuple(indexes), n, True, groups)


def _key_group_picker(indexes: tuple[int, ...], n: int, groups: int):
    """key_task, inlined: for a power-of-two number of groups (the default, 128) the
    product's top bits, a shift; for any other, the product scaled (a multiplication
    more, ~13 % a tuple: benchmarks/rebalance.py --split)."""
    slots, gold = key_slots(n, groups), _GOLDEN
    if len(indexes) == 1:
        (i,) = indexes
        key = field_hash
        if groups & (groups - 1) == 0:
            shift = 33 - groups.bit_length()
            return lambda values: slots[(key(values[i]) * gold & 0xFFFFFFFF) >> shift]
        return lambda values: slots[(key(values[i]) * gold & 0xFFFFFFFF) * groups >> 32]
    return lambda values: slots[key_group(stable_hash([values[i] for i in indexes]), groups)]


class PartialKeyGrouping(_Keyed):
    """Storm's partial key grouping, "the power of both choices": each key has two
    candidate tasks, and each tuple goes to the one this sender has sent fewer tuples
    to so far. A hot key is spread over two tasks instead of swamping one, so the bolt
    must merge the two partial results of a key downstream (e.g. a second, fields-
    grouped bolt that adds the partial counts).

    The first candidate is the fields grouping's task (the same :func:`field_hash`);
    the second comes from the same 32-bit hash through a bit mixer, so the two are
    independent for different keys. The load counts are this sender's own (as in Storm):
    no coordination between senders.

    >>> g = PartialKeyGrouping(["word"], fields_of_stream=["word"])
    >>> g.prepare(None, "default", [4, 5, 6, 7])
    >>> sorted(set(g.choose_tasks(["hot"])[0] for _ in range(100)))  # two tasks share it
    [6, 7]
    >>> g.load
    [0, 0, 50, 50]

    A key whose two candidates are the same task (one key in ``n``) stays on that task.
    """

    name = "partial_key"

    def prepare(self, context, stream, target_tasks):
        super().prepare(context, stream, target_tasks)
        self.load = [0] * len(self.target_tasks)  # tuples this sender sent each task
        self.pick = _two_choices(self.indexes, self.load)


def _two_choices(indexes: tuple[int, ...], load: list[int]):
    n = len(load)
    if len(indexes) == 1:
        (i,) = indexes

        def hashed(values):
            return field_hash(values[i])
    else:
        def hashed(values):
            return stable_hash([values[i] for i in indexes])

    def pick(values):
        h = hashed(values)
        first, second = h % n, _mix(h) % n
        chosen = second if load[first] > load[second] else first
        load[chosen] += 1
        return chosen

    return pick


def _mix(h: int) -> int:
    """MurmurHash3's 32-bit finaliser: every bit of ``h`` moves every bit of the result."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


class AllGrouping(Grouping):
    """Every target task receives a copy."""

    name = "all"

    def choose_tasks(self, values: list) -> list[int]:
        return self.target_tasks


class GlobalGrouping(_SingleTarget):
    """Everything goes to the target task with the lowest id."""

    name = "global"

    def prepare(self, context, stream, target_tasks):
        super().prepare(context, stream, target_tasks)
        lowest = self.target_tasks.index(min(self.target_tasks))
        self.pick = lambda values: lowest


class LocalOrShuffleGrouping(_SingleTarget):
    """Shuffle among the targets in the sender's own container, if there are any;
    otherwise among all of them."""

    name = "local_or_shuffle"

    def prepare(self, context, stream, target_tasks):
        super().prepare(context, stream, target_tasks)
        order = list(range(len(self.target_tasks)))
        if context is not None:
            here = context.task_containers
            local = [i for i in order if here[self.target_tasks[i]] == context.container]
            order = local or order
        random.shuffle(order)
        self.pick = _cycler(order)


def label(grouping: Any) -> str:
    """How a grouping is shown; a duck-typed custom grouping may lack ``describe``."""
    describe = getattr(grouping, "describe", None)
    return describe() if callable(describe) else Grouping.name


class DirectGrouping(Grouping):
    """The sender names the task with ``emit_direct``; plain ``emit`` sends nothing here."""

    name = "direct"

    def choose_tasks(self, values: list) -> list[int]:
        return []


_NONE = b"\xc0"
_INT = struct.Struct("<q")


def stable_hash(value: Any) -> int:
    """A 32-bit hash of a msgpack-able value that is the same in every process and run.

    Values that compare equal hash equal (``1 == 1.0 == True``; a tuple and a list with
    the same items; a ``StrEnum`` member and its string), so a fields grouping is
    consistent whatever the sender saw first.

    >>> stable_hash("storm") == stable_hash("storm"), stable_hash(1) == stable_hash(True)
    (True, True)
    """
    return zlib.crc32(_canonical(value))


def field_hash(value: Any, _crc=zlib.crc32, _str=str) -> int:
    """The fields grouping's hash of one key: :func:`stable_hash`, with a string's (the
    commonest key) computed without a call. Every path that groups on one field calls
    this one function (``FieldsGrouping.pick``, and the batch splits of
    ``runtime.engine.outbound``), so tracked and untracked tuples of one key, bare or
    in a list, go to the same task. (``FieldsGrouping.pick`` writes out the string's
    case, ``crc32`` of its UTF-8, to save a call a tuple: ``tests/runtime/test_groupings.py``
    pins the two equal.)

    >>> field_hash("storm") == stable_hash("storm"), field_hash(7) == stable_hash(7.0)
    (True, True)
    """
    return _crc(value.encode()) if type(value) is _str else stable_hash(value)


def _canonical(value: Any) -> bytes:
    t = type(value)
    if t is str:
        return value.encode()
    if t is bytes:
        return value
    if t is int or t is bool:
        return _int_bytes(int(value))
    if t is float:
        return _int_bytes(int(value)) if value.is_integer() else repr(value).encode()
    if value is None:
        return _NONE
    if t is list or t is tuple:
        return b"\x91".join(_canonical(v) for v in value) + b"\x90"
    if t is dict:
        return _dict_bytes(value)
    for base, convert in _BASES:  # a subclass travels, and so hashes, as its base value
        if isinstance(value, base):
            return _canonical(convert(value))
    raise TypeError(f"cannot group on a value of type {t.__name__}: {value!r}")


_BASES = ((str, str.__str__), (int, int.__int__), (float, float.__float__),
          ((bytes, bytearray, memoryview), bytes), ((list, tuple), list), (dict, dict))


def _int_bytes(i: int) -> bytes:
    return _INT.pack(i) if -(2**63) <= i < 2**63 else str(i).encode()


def _dict_bytes(value: dict) -> bytes:
    pairs = sorted(zlib.crc32(_canonical(k) + b"\x92" + _canonical(v)) for k, v in value.items())
    return b"\x93" + b"".join(_INT.pack(p) for p in pairs)
