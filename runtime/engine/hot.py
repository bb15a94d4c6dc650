"""The choice between the engine's C closures and loops (``runtime.engine._hot``, built
by setup.py from ``_hot*.c``) and their Python specs, made in one place.

The C module is optional: where it was not built, or ``TUPLEFLOW_PURE_PYTHON`` asks for
Python, :func:`c_module` is None and the engine runs the Python closures
(``wiring.py``) and the bolt's Python data loop (``bolt_side.py``). Each C type does
exactly its Python spec's work on its fast path and hands it every other call
(docs/internals/performance.md, "The acking closures in C").
"""

from __future__ import annotations

import os

try:  # (setup.py builds it; optional)
    from . import _hot
except ImportError:
    _hot = None
else:  # its emits' own edge-id generator, seeded as runtime.acking._ids's is: from
    _hot.seed(os.urandom(32))  # os.urandom, and again in every forked child
    os.register_at_fork(after_in_child=lambda: _hot.seed(os.urandom(32)))

# The C emits draw edge ids from their own generator (True), or call the one new_id
# draws from (False: the same ids as the Python closures under the same seed, for tests)
C_EDGE_IDS = True


def pure_python() -> bool:
    """Whether ``TUPLEFLOW_PURE_PYTHON`` (set, and not "0") asks for the Python closures:
    an environment with no C compiler says so, and the tests then expect no C."""
    return os.environ.get("TUPLEFLOW_PURE_PYTHON", "") not in ("", "0")


def c_module():
    """The C closures (``runtime.engine._hot``), or None: not built, or
    :func:`pure_python`. Read at wiring time, so a test may set the variable before it
    builds a cluster (docs/internals/performance-log.md, "Issue 17, twelfth pass")."""
    return None if pure_python() else _hot


def c_bits(bits):
    """What the C emits draw edge ids with: None, their own generator (xoshiro256**,
    ~460 instructions a child less than a call of ``bits``; performance-log.md, "Issue
    17, twelfth pass"), unless a test asks for ``bits`` itself."""
    return None if C_EDGE_IDS else bits
