"""The handle a submitter holds on a running topology: a client of its topology master."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from runtime import wire
from runtime.model import controls as _controls
from runtime.model.plan import PhysicalPlan
from runtime.observe import series as _series
from runtime.observe.stats import InstanceStats

from .handle_data import DataQuestions
from .handle_slowness import SlownessQuestions
from .handle_traces import TraceQuestions
from .master_link import MasterLink, MasterReplaced, TopologyDead

# raised by MasterLink: TopologyDead, and MasterReplaced (a rebalance the master died in)
__all__ = ["MasterReplaced", "RunningTopology", "TopologyDead"]


class RunningTopology(TraceQuestions, DataQuestions, SlownessQuestions):
    """A running topology. Ask it questions; leaving a ``with`` block kills it.

    The submitting process only ever talks to the topology master, over a loopback
    socket whose every message is signed with the topology's secret
    (:class:`~runtime.processes.master_link.MasterLink` owns that end). Here: its life,
    its statistics and metrics, the live controls and waiting; the questions of one
    concern each are in their own parts: traces and taps (``handle_traces``), recordings,
    state and DataFrames (``handle_data``), profiles and diagnosis (``handle_slowness``).
    """

    def __init__(self, name: str, plan: PhysicalPlan, run_dir: str, secret: bytes,
                 endpoint: str, process: subprocess.Popen, submitted: float,
                 relaunch: Callable[[int], subprocess.Popen] | None = None) -> None:
        # where each task runs now (``running.plan()`` or ``running.plan``), replaced by
        # rebalance
        self.name, self.plan, self.run_dir = name, plan, run_dir
        self.topology = None  # the Topology submitted (set by the scheduler)
        self.endpoint, self.submitted = endpoint, submitted
        self._secret = secret
        self._metrics_url: str | None = None  # asked once: "" when nothing is served
        self.paused_here = False  # paused through this handle: a new master is told
        # relaunch(n): the n-th master that replaces a dead one (local scheduler)
        self._link = MasterLink(name, endpoint, secret, process, self._secure, relaunch)

    @staticmethod
    def _secure(sock):
        """A loopback client: its messages are size-limited like every receiver's."""
        from .curve import limit  # (imports zmq: not at the top of this module)

        return limit(sock)

    def _ask(self, question: type[wire.Question], timeout: float = 5.0, **fields: Any) -> Any:
        """Ask the master one question and return the value of its reply."""
        return self._link.ask(question, timeout, **fields)

    @property
    def alive(self) -> bool:
        """Whether the topology runs: its master does, or a master that died (not a clean
        stop) is being replaced."""
        return self._link.alive

    @property
    def master_pid(self) -> int:
        """The process id of the current topology master: a master that dies is replaced
        by one that adopts the running processes (docs/reliability.md, "A master that may
        die"), and this changes."""
        return self._link.process.pid

    @property
    def master_restarts(self) -> int:
        """How many times a dead master was replaced."""
        return self._link.restarts

    @property
    def killed(self) -> bool:
        """Whether :meth:`kill` was called on this handle."""
        return self._link.closed

    @property
    def exit_code(self) -> int | None:
        """The topology master's exit code, None while it runs: 0 is a clean stop (a kill
        from anywhere), anything else a crash."""
        return self._link.process.poll()

    def statistics(self) -> list[InstanceStats]:
        """One record per instance (task), as last reported to the master."""
        return [InstanceStats.from_record(r) for r in self._ask(wire.AskStatistics)]

    def status(self) -> dict:
        """The master's state (``starting``, ``running``), pids, counters, and whether
        the spouts are ``paused``."""
        return self._ask(wire.AskStatus)

    def metrics(self, window: str = "1m") -> dict:
        """Metrics per component and per instance over a window, as Heron's UI shows
        them: ``"1m"``, ``"10m"``, ``"1h"``, ``"3h"`` (to the minute) or ``"all"`` (since
        the first report); ValueError for any other window.

        Returns ``{"window", "components": {component: {...}}, "instances": {task: {...}},
        "series": {component: [(t, executed_per_s, emitted_per_s), ...]}}``. Each
        instance has ``emitted``, ``executed``, ``acked``, ``failed``, ``timed_out``
        (counts in the window, summed over incarnations), ``<count>_per_s`` for the
        first four, ``busy_seconds``, ``capacity`` (share of the window spent in
        ``process``, or in ``next_tuple`` for a spout), ``execute_latency_ms`` (busy
        time per executed tuple), ``cpu_seconds`` and ``cpu_percent``, ``rss_bytes``,
        ``restarts``, ``state``, ``seconds`` (the span the rates are over), and for
        spouts the latest ``pending``, ``max_spout_pending`` and ``complete_latency_ms``
        (count, mean, p50, p95, p99 since the incarnation started). A component sums
        its instances, except ``capacity`` (the busiest instance's) and the complete
        latency percentiles (the slowest instance's). ``series`` has one point per
        second (per minute for windows over 10 minutes, the last 3 hours at most),
        ``t`` in wall-clock seconds. A windowed bolt's instances and component also
        have ``window``: its latest watermark, open windows, held and late tuples
        (docs/windows.md, "Seeing windows live"; a component's watermark is its slowest
        task's).
        """
        _series.window_seconds(window)  # refuse an unknown window before asking
        answer = self._ask(wire.AskMetrics, window=window)
        answer["series"] = {c: [tuple(p) for p in points]
                            for c, points in answer["series"].items()}
        return answer

    @property
    def metrics_url(self) -> str | None:
        """Where the master serves its metrics in Prometheus's text format
        (``http://127.0.0.1:PORT/metrics``), when submitted with ``metrics_port`` (0: a
        free port); None otherwise. RuntimeError if the port could not be bound. Names
        and labels: ``docs/internals/metrics.md``, "Prometheus export"."""
        if self._metrics_url is None:
            status = self.status()
            if status.get("metrics_error"):
                raise RuntimeError(status["metrics_error"])
            self._metrics_url = status.get("metrics_url") or ""
        return self._metrics_url or None

    def exceptions(self) -> list[dict]:
        """Exceptions raised by user code, one record per distinct error (same component,
        same type and message, same innermost frame), the most recently seen last.

        Each record has ``component``, ``error``, ``traceback``, ``fatal`` (whether any
        occurrence ended its instance), ``count``, ``first`` and ``last`` (wall-clock
        times), ``tasks`` (every task it happened in), and the latest occurrence's
        ``task``, ``incarnation`` and ``time``.
        """
        return self._ask(wire.AskExceptions)

    def events(self) -> list[dict]:
        """Restarts, activation and other events, oldest first."""
        return self._ask(wire.AskEvents)

    def acker_state(self) -> list[dict]:
        """The acker, live: per acker task (as of its last report, every
        ``stats_interval``), ``pending`` roots, ``ages`` (the ledger's rotation slots,
        newest first, each ``{"youngest_s", "oldest_s", "count"}``: a root's age is known
        to within one slot, ``message_timeout / 2`` wide) and ``oldest``, up to 10 roots
        oldest first, each ``{"root", "spout", "spout_task", "msg_id", "age_s", "slot"}``:
        the msg_id and exact age come from the spout task's own report of its oldest roots
        in flight (None when that root is not among them). ``[]`` without ackers, or
        before their first report. See :mod:`runtime.observe.ackers`."""
        return self._ask(wire.AskAckerState)

    # -- live controls ------------------------------------------------------------------
    def pause(self) -> bool:
        """Pause every spout (Storm's *deactivate*): each calls ``Spout.deactivate()``
        and then no ``next_tuple``, while tuples in flight are still processed, acked and
        failed. A spout restarted while paused starts paused. Records a ``paused`` event;
        returns False if the topology was already paused.
        """
        paused = self._ask(wire.AskPause)
        self.paused_here = True
        return paused

    def resume(self) -> bool:
        """Undo :meth:`pause`: each spout calls ``Spout.activate()`` and emits again.
        Records a ``resumed`` event; returns False if the topology was not paused."""
        resumed = self._ask(wire.AskResume)
        self.paused_here = False
        return resumed

    def set_max_spout_pending(self, value: int | str | None,
                              component: str | None = None) -> list[int]:
        """Change ``max_spout_pending`` of the running spouts of ``component`` (of every
        spout if None): an int >= 1, None (no limit) or ``"auto"`` (the tuner decides);
        text is read as ``%topology tune`` reads it (``" 50 "``, ``"none"``, ``"Auto"``).

        It applies to spouts that track their tuples (acking on). A restarted spout gets
        the new value too; statistics show it once the spouts next report. Records a
        ``max_spout_pending`` event and returns the tasks told; ValueError for a bad value
        or a component that is not a spout of this topology.
        """
        value = _controls.check_max_spout_pending(value)
        if component is not None and component not in self.plan.component_tasks():
            raise ValueError(f"no component {component!r} in topology {self.name!r}")
        try:
            return self._ask(wire.AskSetMaxSpoutPending, value=value, component=component)
        except TopologyDead:
            raise
        except RuntimeError as exc:  # refused by the master (a bolt, say): say so plainly
            raise ValueError(str(exc)) from None

    # -- rebalance (issue 22; docs/internals/rebalance.md) -----------------------------------
    def rebalance(self, parallelism: dict[str, int], containers: int | None = None,
                  timeout: float = 120.0) -> dict:
        """Change the parallelism of bolts while the topology runs (``{"count": 4}``);
        returns when it runs on the new plan, with the ``rebalanced`` event (``seconds``,
        ``paused_seconds``, ``start_seconds``, ``drain_seconds``, ``switch_seconds``,
        ``in_place``, ``epoch``, ``drained``, ``parallelism``, ``containers``,
        ``tasks_added``, ``tasks_removed``, ``keys_moved``). With the same containers it
        switches in place (only the added and removed tasks start or stop; the spouts
        pause for the drain and the switch); ``containers`` different from now restarts
        the containers. A StatefulBolt's committed state is split over its new tasks by
        key group. ValueError, naming the component, for an unknown or system component,
        a spout, a parallelism outside 1..its ``max_parallelism`` (128 by default), or
        while another rebalance runs (docs/internals/rebalance.md). :class:`MasterReplaced`
        if the master died during it: the new master runs the topology on one plan, the
        new one if a container had switched to it, else the one from before (a rebalance
        in place that had not switched is rolled back); ``wait_active()`` then updates
        ``plan``; ask again if it is the old one. It
        asks on a link of its own: other threads' questions to this handle are answered
        meanwhile."""
        side = self._side_link()  # this handle answers other threads meanwhile
        try:
            answer = side.ask(wire.AskRebalance, timeout, parallelism=dict(parallelism),
                              containers=containers)
        except TopologyDead:
            if self.alive:  # its master died, and this handle's own link replaces it
                raise MasterReplaced(
                    f"topology {self.name!r}: the master died during the rebalance; a new "
                    "one runs the topology on the plan the containers report (the one from "
                    "before, unless the rebalance had switched: see the "
                    "'rebalance_cut_short' event); not asked again") from None
            raise
        except RuntimeError as exc:  # refused by the master: say so plainly
            raise ValueError(str(exc)) from None
        finally:
            side.drop()
        self.plan = PhysicalPlan.from_data(answer["plan"])
        return answer["event"]

    def _side_link(self) -> MasterLink:
        """A second link to the master, for one question that lasts (a rebalance: seconds)
        while this handle's link stays free: the dashboard's refresh thread, or a second
        rebalance (refused by the master's guard at once), ask meanwhile. No watcher:
        the handle's own link replaces a master that dies."""
        return MasterLink(self.name, self.endpoint, self._secret, self._link.process,
                          self._secure)

    def logs(self, component: str, task: int) -> str:
        """The log file of one instance (its prints, warnings and tracebacks)."""
        path = os.path.join(self.run_dir, "logs", f"{component}-{task}.log")
        with open(path, errors="replace") as f:
            return f.read()

    # -- waiting ------------------------------------------------------------------------
    def wait_until(self, predicate: Callable[[list[InstanceStats]], bool],
                   timeout: float = 30.0, interval: float = 0.02) -> list[InstanceStats]:
        """Poll statistics until ``predicate(stats)`` is true; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        stats: list[InstanceStats] = []
        while True:
            answer = self._polled(self.statistics)
            if answer is not None:
                stats = answer
                if predicate(stats):
                    return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"topology {self.name!r}: condition not met in {timeout} s; "
                                   f"last statistics: {_summary(stats)}")
            time.sleep(interval)

    def wait_active(self, timeout: float = 30.0) -> None:
        """Wait until every instance is ready and the spouts have been activated; then
        ``plan`` is the one the master runs (after a master that died during a rebalance,
        it may be the new one: docs/reliability.md)."""
        deadline = time.monotonic() + timeout
        while (status := self._polled(self.status) or {}).get("state") != "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"topology {self.name!r} did not start in {timeout} s")
            time.sleep(0.01)
        if status.get("epoch", self.plan.epoch) != self.plan.epoch:
            self.plan = PhysicalPlan.from_data(status["plan"])

    @staticmethod
    def _polled(ask: Callable[[], Any]) -> Any:
        """``ask()``, or None when the master left the question unanswered for its 5 s: a
        wait asks again while its own bound lasts (the late answer is read past). A
        master starved on a loaded machine answers late: the chaos test, waiting up to
        60 s for its first acks, failed at 5 s on one unanswered question."""
        try:
            return ask()
        except TimeoutError:
            return None

    # -- killing ------------------------------------------------------------------------
    def kill(self, timeout: float = 2.0) -> None:
        """Stop every process of the topology; idempotent. Logs stay in ``run_dir``.

        Safe to call while another thread asks questions (a live view polling
        statistics): the socket is closed under the lock, and that thread's next
        question raises :class:`TopologyDead`.
        """
        with contextlib.suppress(TopologyDead, TimeoutError, self._link.zmq.ZMQError):
            self._ask(wire.AskKill, timeout=timeout)
        self._link.close(timeout)

    def __enter__(self) -> RunningTopology:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def __repr__(self) -> str:
        code = self.exit_code  # None while the master runs; 0: stopped by a kill
        state = "killed" if self.killed or code == 0 else (
            "running" if code is None else f"crashed (exit code {code})")
        return f"<RunningTopology {self.name!r} {state} run_dir={self.run_dir!r}>"


def _summary(stats: list[InstanceStats]) -> str:
    return ", ".join(f"{s.component}[{s.task}] {s.state} emitted={s.emitted} "
                     + (f"acked={s.acked} failed={s.failed} pending={s.pending}"
                        if s.kind == "spout" else f"executed={s.executed}") for s in stats)
