"""Fault points for tests only: each is named by an environment variable, and does nothing
unless that variable is set. Never set them in use. Only a first master reads them (one
started with ``adopt`` never injects: it inherits the environment of the process that
replaces a dead master, which is the test's).

- :data:`HOLD_SWITCH` (a path): during a rebalance in place, the master tells the
  first stream manager ``Replan`` "switch", writes that path, and then waits to be killed,
  so that a test can SIGKILL it when one container has switched and the others have not
  (``tests/runtime/test_mp_master_switch_death.py``).
- :data:`HOLD_SPLIT` (a path): the same, during a rebalance in place under checkpoints,
  once every stream manager was told to switch and before the checkpoint task is told to
  split the keyed state (``tests/runtime/test_mp_master_split_death.py``).
- :data:`HOLD_RESTART` (a path): the same, during a rebalance to a new number of
  containers, once they have all stopped and the keyed state was split for the new plan,
  before the master runs on it and starts them (the same test file).
- :data:`WITHHOLD` (comma-separated): control messages the master never sends, as if they
  had been lost with it: a ``Setting`` by its key (``max_spout_pending``, ``trace``), any
  other by its kind (``record``: a ``Recording``). The client is answered as usual
  (``tests/runtime/test_mp_master_carry.py``).
"""

from __future__ import annotations

import logging
import os
import threading

from runtime import wire

log = logging.getLogger("tupleflow.faults")

HOLD_SWITCH = "TUPLEFLOW_TEST_HOLD_SWITCH"
HOLD_SPLIT = "TUPLEFLOW_TEST_HOLD_SPLIT"
HOLD_RESTART = "TUPLEFLOW_TEST_HOLD_RESTART"
WITHHOLD = "TUPLEFLOW_TEST_WITHHOLD"


class Faults:
    """The fault points a master injects (none for an adopting master)."""

    def __init__(self, adopting: bool) -> None:
        env = {} if adopting else os.environ
        self.hold_switch: str | None = env.get(HOLD_SWITCH) or None
        self.holds = {step: env[name] for step, name in (("split", HOLD_SPLIT),
                                                          ("restart", HOLD_RESTART))
                      if env.get(name)}
        self.withhold = frozenset(k for k in env.get(WITHHOLD, "").split(",") if k)

    def withheld(self, msg: wire.Control) -> bool:
        if not self.withhold:
            return False
        key = msg.key if isinstance(msg, wire.Setting) else msg.KIND
        if key in self.withhold:
            log.warning("test fault: %r not sent (%s)", key, WITHHOLD)
            return True
        return False

    def after_first_switch(self) -> None:
        """Told the first stream manager to switch: with HOLD_SWITCH, say so and wait to
        be killed (the lock stays held: nothing else happens in this master)."""
        if self.hold_switch is not None:
            _hold("after the first switch", self.hold_switch)

    def hold(self, step: str) -> None:
        """At a rebalance's ``step`` ("split", "restart"): with its variable set, say so
        and wait to be killed."""
        if step in self.holds:
            _hold(f"before the {step}", self.holds[step])


def _hold(where: str, path: str) -> None:
    """Write our pid to ``path`` and wait to be killed (the master's lock stays held:
    nothing else happens in it)."""
    log.warning("test fault: holding %s (%s)", where, path)
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    threading.Event().wait()
