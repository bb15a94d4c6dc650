"""Declared output fields: a plain name, ``"name: type"`` or ``(name, type)``.

The topology checks them when a component is declared (``runtime/model/topology.py``);
recordings use their type hints as column types (``runtime/recording/``).
"""

from __future__ import annotations

from typing import Any

from .constants import DEFAULT_STREAM

TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", bytes: "bytes"}
HINTS = frozenset(TYPE_NAMES.values())


class FieldError(ValueError):
    """A declared output field that is neither a name nor a name with a known type."""


def split_field(field: Any) -> tuple[str, str | None]:
    """A declared output field as ``(name, type name or None)``.

    Fields are plain names, ``"name: type"`` or ``(name, type)``, the type one of
    str, int, float, bool, bytes (the class or its name).

    >>> split_field("word"), split_field("count: int"), split_field(("score", float))
    (('word', None), ('count', 'int'), ('score', 'float'))
    """
    if isinstance(field, str):
        name, sep, hint = field.partition(":")
        return (field, None) if not sep else (name.strip(), _hint(field, hint.strip()))
    if isinstance(field, tuple) and len(field) == 2 and isinstance(field[0], str):
        return field[0], _hint(field, TYPE_NAMES.get(field[1], field[1]))
    raise FieldError(f"field {field!r} is not a name, 'name: type' or (name, type)")


def _hint(field: Any, hint: Any) -> str:
    if hint not in HINTS:
        raise FieldError(f"field {field!r}: unknown type {hint!r}; use one of "
                         f"{', '.join(sorted(HINTS))}")
    return hint


def declared_types(impl: Any, stream: str) -> dict[str, str]:
    """The type hints of ``stream``'s fields, as declared on the component's ``outputs``."""
    outputs = getattr(impl, "outputs", [])
    fields = outputs.get(stream, ()) if isinstance(outputs, dict) else (
        outputs if stream == DEFAULT_STREAM else ())
    hinted = (split_field(f) for f in fields)
    return {name: hint for name, hint in hinted if hint is not None}

