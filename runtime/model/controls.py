"""Live controls of a running topology, checked before anything is sent: pure functions,
one per live setting, each parsing (text included) and validating it, shared by every
entry point: the magic, the dashboard, the client (which checks first, to fail in the
caller's frame) and the master (which checks what arrives)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .constants import ACKER, AUTO, MAX_SAMPLES
from .suggest import did_you_mean as _did_you_mean


def check_max_spout_pending(value: Any) -> int | str | None:
    """The one parser and validator of a live ``max_spout_pending``, from Python or from
    text (the ``%topology tune`` magic, the dashboard's box): an int >= 1, None (no
    limit) or "auto". Text is read without surrounding blanks or case: ``" 50 "`` is 50,
    ``"Auto"`` is "auto", ``"none"`` is None. 0, negatives, ``"0"``, bools and anything
    else are refused, naming the setting and the value.

    >>> check_max_spout_pending(100), check_max_spout_pending(None), check_max_spout_pending("auto")
    (100, None, 'auto')
    >>> [check_max_spout_pending(text) for text in (" 50 ", "None", "AUTO")]
    [50, None, 'auto']
    >>> check_max_spout_pending("0")
    Traceback (most recent call last):
    ...
    ValueError: max_spout_pending must be an int >= 1, None (no limit) or 'auto' (as text: ...
    """
    parsed = _pending_text(value) if type(value) is str else value
    if parsed is None or parsed == AUTO or (type(parsed) is int and parsed >= 1):
        return parsed
    raise ValueError(f"max_spout_pending must be an int >= 1, None (no limit) or {AUTO!r} "
                     f"(as text: auto, none or an integer >= 1), not {value!r}")


def check_trace(value: Any) -> float:
    """The one parser and validator of a live trace rate (``running.set_trace``,
    ``%topology trace NAME RATE``): a number 0.0..1.0, or its text (``" 0.5 "``).

    >>> check_trace(0.01), check_trace(" 1 "), check_trace(0)
    (0.01, 1.0, 0.0)
    >>> check_trace(2)
    Traceback (most recent call last):
    ...
    ValueError: trace must be a fraction 0.0..1.0 of spout tuples (0.0: off), not 2
    """
    parsed = value
    if type(value) is str:
        try:
            parsed = float(value.strip())
        except ValueError:
            parsed = value
    if type(parsed) in (int, float) and 0.0 <= parsed <= 1.0:
        return float(parsed)
    raise ValueError(f"trace must be a fraction 0.0..1.0 of spout tuples (0.0: off), "
                     f"not {value!r}")


def _pending_text(text: str) -> Any:
    """``auto``, ``none`` or digits, as a value; anything else as it came (refused)."""
    word = text.strip().lower()
    if word in (AUTO, "none"):
        return None if word == "none" else AUTO
    return int(word) if word.isascii() and word.isdigit() else text


def spout_targets(component_tasks: Mapping[str, tuple[int, ...]], kinds: Mapping[int, Any],
                  component: str | None) -> dict[str, tuple[int, ...]]:
    """The components (and their tasks) a spout setting goes to: ``component``, or every
    user component when None. ``kinds`` (task -> reported kind) rules out a component
    known to be a bolt; one that has not reported yet is given the benefit of the doubt
    (a bolt ignores spout settings).

    >>> tasks = {"words": (1, 2), "count": (3,), "__acker": (4,)}
    >>> spout_targets(tasks, {3: "bolt"}, None)
    {'words': (1, 2), 'count': (3,)}
    >>> spout_targets(tasks, {3: "bolt"}, "count")
    Traceback (most recent call last):
    ...
    ValueError: component 'count' is a bolt; max_spout_pending applies to spouts (words)
    """
    users = {c: ts for c, ts in component_tasks.items() if c != ACKER}
    if component is None:
        return users
    spouts = ", ".join(c for c, ts in users.items()
                       if not all(kinds.get(t) == "bolt" for t in ts))
    if component not in users:
        raise ValueError(f"no component {component!r} in this topology (spouts: {spouts})")
    if all(kinds.get(t) == "bolt" for t in users[component]):
        raise ValueError(f"component {component!r} is a bolt; max_spout_pending applies "
                         f"to spouts ({spouts})")
    return {component: users[component]}


def check_tap(streams: Sequence[Sequence[str]], component: str, stream: str, n: Any,
              verb: str = "sample") -> int:
    """Validate a sample request against the plan's ``(component, stream)`` pairs; return
    ``n``. ValueError naming what exists (and the closest name) otherwise.

    >>> plan = [("__system", "__tick"), ("words", "default"), ("split", "default")]
    >>> check_tap(plan, "words", "default", 5)
    5
    >>> check_tap(plan, "word", "default", 5)
    Traceback (most recent call last):
    ...
    ValueError: no component 'word' to sample (did you mean 'words'?); components: split, words
    """
    by_component: dict[str, list[str]] = {}
    for comp, name in streams:
        if not comp.startswith("__"):
            by_component.setdefault(comp, []).append(name)
    if component not in by_component:
        hint = _did_you_mean(component, by_component)
        raise ValueError(f"no component {component!r} to {verb}{hint}; "
                         f"components: {', '.join(sorted(by_component))}")
    names = by_component[component]
    if stream not in names:
        raise ValueError(f"component {component!r} has no stream {stream!r}"
                         f"{_did_you_mean(stream, names)}; it declares {', '.join(names)}")
    return check_n(n)


def check_n(n: Any) -> int:
    """How many tuples a tap keeps: an int from 1 to ``MAX_SAMPLES``, or its digits as
    text (``%topology tap ... n=50``).

    >>> check_n(5), check_n(" 50 ")
    (5, 50)
    """
    value = int(n) if type(n) is str and n.strip().isascii() and n.strip().isdigit() else n
    if type(value) is not int or not 1 <= value <= MAX_SAMPLES:
        raise ValueError(f"n must be an int from 1 to {MAX_SAMPLES}, not {n!r}")
    return value


def check_keep(seconds: Any) -> float:
    """How long a tap stays on after a request: a number of seconds in (0, 600].

    >>> check_keep(10), check_keep(0.5)
    (10.0, 0.5)
    """
    if type(seconds) in (int, float) and 0 < seconds <= 600:
        return float(seconds)
    raise ValueError(f"keep must be a number of seconds in (0, 600], not {seconds!r}")
