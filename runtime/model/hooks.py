"""What a :class:`~runtime.model.topology.Topology` needs from the layers above the model,
plugged in from there: the model may not import them (``[tool.importlinter]`` in
``pyproject.toml``), yet ``topo.submit()`` and ``topo.persistent_aggregate()`` are its
public methods.

``runtime/__init__.py`` plugs both in. A third, ``picture`` (a topology or its logical
graph -> SVG), is how a :class:`Topology` and ``topo.graph`` show themselves in a notebook:
drawing is the workbench's, so ``import workbench`` plugs it in (through the public
``runtime.set_picture_maker``), and without it they show their text repr.

Every import of a ``runtime.*`` module runs ``runtime/__init__.py`` first, so submit and
persistent_aggregate are in place whatever module a caller imported.

>>> def fake_launch(topology, **how):
...     return ("launched", topology, sorted(how))
>>> saved = plugged("submit")
>>> plug(submit=fake_launch)
>>> call("submit", "topo", scheduler="local")
('launched', 'topo', ['scheduler'])
>>> plug(submit=saved)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# hook name -> the function plugged in for it; "submit" launches a topology (returns a
# RunningTopology), "persistent_aggregate" adds Trident's aggregation bolts.
_HOOKS: dict[str, Callable[..., Any]] = {}


def plug(**hooks: Callable[..., Any]) -> None:
    """Plug in (or replace) the functions of the named hooks."""
    _HOOKS.update(hooks)


def plugged(name: str) -> Callable[..., Any] | None:
    """The function plugged in for ``name``, if any."""
    return _HOOKS.get(name)


def picture(obj: Any) -> str | None:
    """``obj`` drawn by the ``picture`` hook, or None (no maker plugged in, or it failed:
    a notebook then shows the text repr, never an error)."""
    maker = _HOOKS.get("picture")
    if maker is None:
        return None
    try:
        return maker(obj)
    except Exception:  # a picture is a nicety: the repr must still show
        return None


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the function plugged in for ``name``."""
    hook = _HOOKS.get(name)
    if hook is None:
        raise RuntimeError(f"nothing is plugged in for {name!r}: import runtime first")
    return hook(*args, **kwargs)
