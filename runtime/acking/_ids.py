"""The ids of tuple trees: random edge ids, and the self-initialising root ids of a
spout task, which carry the task in their high bits (docs/internals/acker.md,
"Self-initialising roots"). Every process draws from its own generator, reseeded after a
fork, so sibling processes never draw the same ids."""

from __future__ import annotations

import os
import random

# A *self-initialising* root (what the runtime's spouts draw when a tuple goes to exactly
# one task) has bit 63 set and its spout task in the bits below it; the rest is random.
# Its first edge id is the root id itself, so its init would say "xor = root, spout =
# the task in the id": the ledger knows that without being told, and the spout sends no
# init at all (docs/internals/acker.md, "Self-initialising roots").
SELF_INIT = 1 << 63
TASK_BITS = 16  # the width of the spout task field, unless the topology needs fewer

_ids = random.Random(os.urandom(32))


def new_id() -> int:
    """A random, nonzero id of 63 bits for a root or an edge.

    Zero is excluded because XORing zero changes nothing: a zero edge id would make
    its tuple invisible to the ledger. Bit 63 stays clear so that an id drawn here is
    never taken for a self-initialising root (:data:`SELF_INIT`). The generator is a module-level
    ``random.Random`` seeded from ``os.urandom`` and reseeded in every forked child,
    so sibling processes never draw the same ids.

    >>> 0 < new_id() < 2**63
    True
    """
    return _ids.getrandbits(63) or new_id()


def id_bits():
    """``getrandbits`` of the generator :func:`new_id` draws from, for a hot loop that
    draws its own edge ids: ``bits(63) or new_id()`` is :func:`new_id` without a call
    of its own (the generator is reseeded in place in a forked child, so the bound
    method stays right)."""
    return _ids.getrandbits


def task_bits(tasks: int) -> int:
    """The width of the task field that holds task ids up to ``tasks``.

    >>> task_bits(3), task_bits(4), task_bits(1)
    (2, 3, 1)
    """
    return max(1, tasks.bit_length())


def root_task(root: int, bits: int = TASK_BITS) -> int | None:
    """The spout task written in a self-initialising root, or None for any other root.

    >>> root_task(RootIds(task=5, bits=4).new(), bits=4), root_task(12345)
    (5, None)
    """
    if not root & SELF_INIT:
        return None
    shift = 63 - bits
    return (root >> shift) & ((1 << bits) - 1)


class RootIds:
    """The self-initialising root ids of one spout task: ``SELF_INIT | task | random``.

    ``bits`` is the width of the task field (every reader of the ids must use the same:
    the runtime takes :func:`task_bits` of the topology's task count); the remaining
    ``63 - bits`` bits are random and never all zero.
    """

    __slots__ = ("prefix", "random_bits")

    def __init__(self, task: int, bits: int = TASK_BITS) -> None:
        if not 0 <= task < 1 << bits or not 1 <= bits <= 32:
            raise ValueError(f"task {task} does not fit a {bits}-bit task field")
        self.random_bits = 63 - bits
        self.prefix = SELF_INIT | task << self.random_bits

    def new(self) -> int:
        return self.prefix | (_ids.getrandbits(self.random_bits) or 1)

    def run_start(self) -> int:
        """The first root of a run of consecutive roots (the spout's fast path numbers its
        tuples this way: docs/internals/acker.md, "Runs of roots"). It is drawn at random
        in the lower half of the random field, so 2 ** (random_bits - 1) roots fit after
        it before :attr:`run_end`.

        >>> ids = RootIds(task=5, bits=4)
        >>> start = ids.run_start()
        >>> root_task(start, bits=4), root_task(ids.run_end - 1, bits=4)
        (5, 5)
        """
        return self.prefix | (_ids.getrandbits(self.random_bits - 1) + 1)

    @property
    def run_end(self) -> int:
        """The first id past this task's field: a run must start again before it."""
        return self.prefix + (1 << self.random_bits)


def _reseed_ids() -> None:
    _ids.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_ids)
