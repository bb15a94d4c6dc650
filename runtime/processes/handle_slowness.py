"""The running topology's questions about why it is slow: a flame graph of a component's
instances (runtime/processes/profiling.py) and the diagnosis (runtime/observe/diagnosis.py).
A part of :class:`~runtime.processes.client.RunningTopology`."""

from __future__ import annotations

import os

from runtime.observe import diagnosis as _diagnosis
from runtime.observe.flame import Profile

from . import profiling as _profiling

__all__ = ["SlownessQuestions"]


class SlownessQuestions:
    """Profiles and findings; needs the handle's ``name``, ``plan``, ``statistics``,
    ``metrics`` and ``status``."""

    def profile(self, component: str, seconds: float = 2.0, task: int | None = None, *,
                rate: int = 100) -> Profile:
        """Sample the Python stacks of ``component``'s instances (of one ``task`` if
        given) for ``seconds`` at ``rate`` samples per second, without stopping them, and
        return a :class:`~runtime.observe.flame.Profile`: shown in a notebook as a flame
        graph (warm: on a CPU, blue: waiting), with the folded stacks as data (``cpu``,
        ``waiting``, ``folded``, ``top()``). It works for an instance stuck in user code
        or in ``open``/``prepare``. Needs py-spy and ptrace permission
        (``docs/internals/profiling.md``); ValueError for an unknown component or task,
        or a task not started yet."""
        tasks = self._profiled_tasks(component, task)
        known = {s.task: s.pid for s in self.statistics() if s.task in tasks}
        missing = [t for t in tasks if not known.get(t)]
        if missing:
            raise ValueError(f"task(s) {missing} of {component!r} have not started yet")
        return _profiling.profile(component, {t: known[t] for t in tasks}, seconds, rate)

    def _profiled_tasks(self, component: str, task: int | None) -> tuple[int, ...]:
        tasks = self.plan.component_tasks().get(component)
        if tasks is None:
            raise ValueError(f"no component {component!r} in topology {self.name!r}")
        if task is None:
            return tasks
        if task not in tasks:
            raise ValueError(f"task {task!r} is not a task of {component!r} (its tasks: "
                             f"{list(tasks)})")
        return (task,)

    def explain(self, window: str = "1m") -> list:
        """Why the topology is slow: :class:`~runtime.observe.diagnosis.Finding` records
        (``.component``, ``.task`` or None, ``.kind``, ``.evidence``, ``.advice``), most
        important first; empty when nothing stands out. Read from ``metrics(window)``,
        the backpressure causes and this machine's cores (docs/internals/diagnosis.md)."""
        metrics = self.metrics(window)
        causes = [c.get("component") for c in self.status().get("backpressure") or ()]
        return _diagnosis.diagnose(metrics, config=self.plan.config, cores=os.cpu_count(),
                                   backpressure=[c for c in causes if c])

    def explain_frame(self, window: str = "1m", spark=None):
        """:meth:`explain` as a Spark DataFrame, one row per finding (see
        ``runtime.recording.frames.explain_frame``)."""
        from runtime.recording import frames

        return frames.explain_frame(self, window, spark=spark)
