"""The IPython extension: ``%load_ext kernel_ext`` adds ``%%topology`` and ``%topology``.

Thin on purpose: it reads the magic's line and calls :mod:`workbench` and :mod:`runtime`.
See docs/notebook.md.
"""

from __future__ import annotations

from runtime import RunningTopology

from ._magics import TopologyMagics

__all__ = ["TopologyMagics", "load_ipython_extension", "unload_ipython_extension"]

_loaded: dict[int, TopologyMagics] = {}  # id(shell) -> its magics, for unloading


def load_ipython_extension(shell) -> None:
    """Register the ``topology`` magics on ``shell``."""
    magics = TopologyMagics(shell)
    shell.register_magics(magics)
    _loaded[id(shell)] = magics
    # a handle shown as a cell's result is redrawn when its topology stops
    _handle_formatter(shell).for_type(RunningTopology, magics.handles.show)


def unload_ipython_extension(shell) -> None:
    """Kill the topologies submitted from this shell (detached ones run on); drop the magics."""
    magics = _loaded.pop(id(shell), None)
    if magics is None:
        return
    magics.registry.close()
    _handle_formatter(shell).pop(RunningTopology, None)
    shell.magics_manager.registry.pop(type(magics).__name__, None)
    for kind in ("line", "cell"):
        shell.magics_manager.magics[kind].pop("topology", None)


def _handle_formatter(shell):
    """IPython's formatter that displays an object itself (``_ipython_display_``-like)."""
    return shell.display_formatter.ipython_display_formatter
