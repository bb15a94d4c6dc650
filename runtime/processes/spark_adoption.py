"""A new master adopting a Spark topology's containers (docs/remote.md, "A master that
may die").

On the Spark scheduler the master runs beside the notebook and the stream managers run in
Spark executors, as tasks of the barrier job. A master's death touches neither: the job
is the driver's (a thread of the notebook), and a stream manager dies only with its Spark
task. So the exchange is the local one (:class:`~runtime.processes.adoption.Adoption`:
ask every container, adopt what answers) with two differences, both because a stream
manager's pid is on its executor's host, not here:

- a container is *gone* when it never said hello to the master that died, when it says
  hello to this one as a newer generation (its Spark task, or Spark, started it again
  while no master ran), or when it stays silent past ``ADOPT_WAIT``; the master never
  kills or starts one (its Spark task does, and the driver submits the job again);
- a container that came back as a newer generation is welcomed once the adoption is over
  (its hello found no plan to run yet), with the incarnations this master knows.
"""

from __future__ import annotations

import logging
from typing import Any

from .adoption import ADOPT_WAIT, Adoption

log = logging.getLogger("tupleflow.adoption")


class SparkAdoption(Adoption):
    """:class:`Adoption` for containers that are Spark tasks. Owns which silent
    containers it gave up on (each is logged once)."""

    def __init__(self, master: Any, restarts: int, now: float) -> None:
        super().__init__(master, restarts, now)
        self.given_up: set[int] = set()

    def _gone(self, c: int, now: float) -> bool:
        if c not in self.known or self._came_back(c):
            return True
        if now > self.deadline and c not in self.given_up:
            self.given_up.add(c)
            log.warning("container %d did not answer in %.0f s: not adopted; its Spark task "
                        "(or the driver) starts it again", c, ADOPT_WAIT)
        return c in self.given_up

    def _came_back(self, c: int) -> bool:
        """Container ``c`` said hello to this master as a newer generation."""
        sm = self.master.supervision.sms.get(c)
        return sm is not None and sm["generation"] > self.known[c]["generation"]

    def finish(self, gone: list[int], now: float) -> None:
        """Adopt what answered; then welcome the containers that came back (their hellos
        are kept if the reported plan rebuilt supervision)."""
        back = {c: sm for c, sm in self.master.supervision.sms.items() if c in gone}
        super().finish(gone, now)
        sup = self.master.supervision
        for c, sm in back.items():
            sup.sms.setdefault(c, sm)
        if back and len(sup.sms) == self.master.plan.containers:
            sup._welcome_containers()  # (its own method: the welcome every hello waits for)
