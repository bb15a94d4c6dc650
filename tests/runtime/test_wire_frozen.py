"""The frozen records the control messages are made of (runtime/wire/frozen.py): they
behave as the frozen, slotted dataclasses they replace, and the wire's registration reads
their annotations as typing.get_type_hints did."""

from __future__ import annotations

import copy
import pickle
import re
from dataclasses import FrozenInstanceError
from typing import Any, ClassVar

import pytest

from runtime import wire
from runtime.wire.frozen import Record
from runtime.wire.messages import _field_types


class Base(Record):
    KIND: ClassVar[str] = "base"  # a class variable, not a field
    id: int


class Point(Base):
    x: float
    label: str | None = None
    extra: Any = None


def test_fields_come_from_the_bases_then_the_class_in_order():
    assert Point._fields == ("id", "x", "label", "extra")
    assert Point._defaults == {"label": None, "extra": None}
    assert Point.__match_args__ == Point._fields
    assert Point(1, 2.0).KIND == "base"


def test_positional_and_keyword_construction_agree():
    assert Point(1, 2.0, "a") == Point(id=1, x=2.0, label="a") == Point(1, x=2.0, label="a")
    assert repr(Point(1, 2.0)) == "Point(id=1, x=2.0, label=None, extra=None)"


@pytest.mark.parametrize("args, kwargs, problem", [
    ((1,), {}, "Point() missing required arguments ['x']"),
    ((1, 2.0), {"colour": 1}, "Point() got an unexpected keyword argument 'colour'"),
    ((1, 2.0), {"id": 3}, "Point() got multiple values for argument 'id'"),
    ((1, 2.0, "a", None, 5), {}, "Point() takes 4 positional arguments but 5 were given"),
])
def test_bad_arguments_are_a_type_error(args, kwargs, problem):
    with pytest.raises(TypeError, match=re.escape(problem)):
        Point(*args, **kwargs)


def test_a_record_is_frozen_and_slotted():
    p = Point(1, 2.0)
    assert not hasattr(p, "__dict__")
    with pytest.raises(FrozenInstanceError):
        p.x = 3.0
    with pytest.raises(FrozenInstanceError):
        del p.x
    with pytest.raises(AttributeError):
        p.colour = 1  # no such slot, and frozen anyway


def test_equality_and_hash_go_by_type_and_values():
    class Other(Base):
        x: float
        label: str | None = None
        extra: Any = None

    assert Point(1, 2.0) != Other(1, 2.0)
    assert Point(1, 2.0) != (1, 2.0, None, None)
    assert hash(Point(1, 2.0)) == hash(Point(1, 2.0))
    assert len({Point(1, 2.0), Point(1, 2.0), Point(2, 2.0)}) == 2


def test_pickle_and_copy_give_an_equal_record():
    p = Point(1, 2.0, "a", {"k": [1]})
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p and copy.copy(p) == p


def test_a_required_field_after_a_defaulted_one_is_refused_at_definition():
    with pytest.raises(TypeError, match="field 'y' without a default follows 'extra'"):
        class Bad(Point):  # noqa: F841 (the definition is the test)
            y: int


def test_every_registered_message_reads_its_types_as_get_type_hints_did():
    """The registration parses annotations' text; get_type_hints evaluates them: both
    must give the types the wire checks (None: anything)."""
    import typing
    from types import UnionType

    for cls in wire.MESSAGES.values():
        hints = typing.get_type_hints(cls)
        for name, types in wire._FIELDS[cls].items():
            hint = hints[name]
            expected = None if hint is Any else tuple(
                type(None) if t is None else t
                for t in (typing.get_args(hint) if isinstance(hint, UnionType) else (hint,)))
            assert types == expected, (cls.__name__, name)


def test_an_annotation_the_wire_cannot_check_is_refused_at_import():
    class Odd(wire.Control):
        when: set[int]

    with pytest.raises(TypeError, match="field 'when' is annotated 'set\\[int\\]'"):
        _field_types(Odd, "when")
