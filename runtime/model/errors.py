"""The error of a topology that cannot run, in a module of its own: the logical plan
(``topology.py``) and the physical one (``plan.py``) both raise it, and neither imports
the other for it."""


class TopologyError(ValueError):
    """A topology that cannot run, reported when it is defined."""
