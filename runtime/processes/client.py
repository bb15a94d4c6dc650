"""The handle a submitter holds on a running topology: a client of its topology master."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from runtime import state as _state
from runtime import wire
from runtime.model import controls as _controls
from runtime.model.constants import RECORD_DIR, STATE_STORE, TAP_SECONDS
from runtime.model.controls import check_keep, check_tap
from runtime.model.plan import PhysicalPlan
from runtime.observe import diagnosis as _diagnosis
from runtime.observe import series as _series
from runtime.observe.flame import Profile
from runtime.observe.stats import InstanceStats
from runtime.observe.traces import TRACE_STATUSES, Trace
from runtime.observe.tracestore import trace_from_plain

from . import profiling as _profiling
from .master_link import MasterLink, TopologyDead

__all__ = ["RunningTopology", "TopologyDead"]  # TopologyDead: raised by MasterLink



class RunningTopology:
    """A running topology. Ask it questions; leaving a ``with`` block kills it.

    The submitting process only ever talks to the topology master, over a loopback
    socket whose every message is signed with the topology's secret
    (:class:`~runtime.processes.master_link.MasterLink` owns that end).
    """

    def __init__(self, name: str, plan: PhysicalPlan, run_dir: str, secret: bytes,
                 endpoint: str, process: subprocess.Popen, submitted: float,
                 relaunch: Callable[[int], subprocess.Popen] | None = None) -> None:
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

    # -- profiling (runtime/processes/profiling.py) ----------------------------------------
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

    # -- traces (issue 20; docs/internals/tracing.md) ---------------------------------------
    def set_trace(self, rate: float | str) -> list[int]:
        """Trace this fraction (0.0..1.0) of spout tuples from now on, in every spout; 0.0
        turns tracing off. Text is read as ``%topology trace`` reads it. A restarted spout
        traces at it too. Records a ``trace`` event and returns the tasks told; ValueError
        for a rate outside 0.0..1.0."""
        rate = _controls.check_trace(rate)
        return self._ask(wire.AskSetTrace, value=rate)

    def traces(self, status: str | None = None, limit: int = 100) -> list[Trace]:
        """The newest traced trees, newest first: :class:`~runtime.observe.traces.Trace`
        records (``.msg_id``, ``.status``, ``.complete_ms``, ``.hops``, ``.held_by``), of
        ``status`` ("acked", "failed", "timed_out", "pending") if given, at most
        ``limit``. Instances report with their statistics, so a tree shows up, and
        grows, every ``stats_interval``."""
        if status is not None and status not in TRACE_STATUSES:
            raise ValueError(f"status must be one of {TRACE_STATUSES} or None, not {status!r}")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"limit must be an int >= 1, not {limit!r}")
        return [trace_from_plain(t)
                for t in self._ask(wire.AskTraces, status=status, limit=limit)]

    def lineage(self, msg_id: Any) -> Trace | None:
        """The trace of the spout tuple ``msg_id`` (the newest, if it was replayed), or
        None if it was not traced (or was dropped from the store, oldest first)."""
        found = self._ask(wire.AskTraces, msg_id=msg_id, by_msg=True)
        return None if found is None else trace_from_plain(found)

    def traces_frame(self, status: str | None = None, limit: int = 100, spark=None):
        """:meth:`traces` as a Spark DataFrame, one row per hop
        (``runtime.recording.frames.traces_frame``)."""
        from runtime.recording import frames

        return frames.traces_frame(self, status, limit, spark=spark)

    def sample(self, component: str, stream: str = "default", n: int = 100, *,
               wait: bool = False, timeout: float = 2.0,
               keep: float = TAP_SECONDS) -> list[dict]:
        """The newest ``n`` tuples the instances of ``component`` sent on ``stream``,
        newest last: a tap on that edge.

        Each is ``{"values", "fields", "task" (the sending task), "stream", "ids" ({root id:
        edge id} of a tracked tuple, else None), "to" (the tasks it was sent to),
        "time" (wall clock, when its batch was sent)}``. A tuple sent to two subscribers
        appears once for each.

        A stream is tapped only while someone asks: each call keeps the tap on for
        ``keep`` seconds (10 by default; a live view refreshing faster keeps it on), and
        the instances report what they saw with their statistics (every
        ``stats_interval``). So the first call usually returns ``[]``; with ``wait=True``
        it asks again until some tuple arrives or ``timeout`` seconds pass. Sampling
        costs the instances nothing once the tap is off. ValueError for an unknown
        component or stream (naming the closest), an ``n`` outside 1..10000, or a
        ``keep`` outside (0, 600].
        """
        check_tap(self.plan.streams, component, stream, n)
        check_keep(keep)
        deadline = time.monotonic() + timeout
        while True:
            found = self._ask(wire.AskSample, component=component, stream=stream, n=n, keep=keep)
            if found or not wait or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    # -- recordings (runtime/recording/) and the Spark bridge (runtime/recording/frames.py) ----
    def record(self, component: str, stream: str = "default") -> list[int]:
        """Start recording ``component``'s ``stream`` to Parquet segments under
        ``run_dir/recordings/<component>/<stream>/``: values under the declared field
        names, plus ``_root_id``, ``_task`` and ``_emit_ts``. A restarted instance keeps
        recording. Returns the tasks told (an instance not ready yet is told when it is);
        ValueError for an unknown component or stream."""
        return self._set_recording(component, stream, True)

    def stop_recording(self, component: str, stream: str = "default") -> list[int]:
        """Stop recording ``component``'s ``stream``; the instances write what they hold."""
        return self._set_recording(component, stream, False)

    def _set_recording(self, component: str, stream: str, on: bool) -> list[int]:
        from runtime.recording._parquet import check_stream

        check_stream(self.plan.streams, component, stream)
        return self._ask(wire.AskRecord, component=component, stream=stream, on=on)

    @property
    def record_base(self) -> str:
        """Where recordings go: this run's own folder in the ``record_dir`` option, when
        given (a folder the containers and this machine share), else the run directory."""
        return self.plan.config.get(RECORD_DIR) or self.run_dir

    def recording_dir(self, component: str, stream: str = "default") -> str:
        """The folder a stream's Parquet segments are written to (it may not exist yet)."""
        from runtime.recording._parquet import recording_dir

        return recording_dir(self.record_base, component, stream)

    def to_spark(self, component: str, stream: str = "default", spark=None):
        """What was recorded of ``component``'s ``stream``, as a ``pyspark.sql.DataFrame``
        (see ``runtime.recording.frames.to_spark``; the SparkSession starts on first use)."""
        from runtime.recording import frames  # here, with the bridge: few runs use Spark

        return frames.to_spark(self, component, stream, spark=spark)

    def spark_stream(self, component: str, stream: str = "default", spark=None,
                     timeout: float = 30.0):
        """A streaming DataFrame (Structured Streaming file source) over the growing
        recording of ``component``'s ``stream`` (see ``runtime.recording.frames.spark_stream``)."""
        from runtime.recording import frames

        return frames.spark_stream(self, component, stream, spark=spark, timeout=timeout)

    # -- checkpointed state (runtime/state/, docs/internals/checkpoints.md) -----------------
    def state(self, component: str) -> dict:
        """The last committed state of the StatefulBolt ``component``, merged over its
        tasks (each holds its own keys); empty before the first checkpoint commits."""
        with contextlib.closing(self._state_store()) as store:
            return _state.committed_state(store, component)[1]

    def checkpoint(self) -> dict | None:
        """The last committed checkpoint: ``{"id", "epoch", "duration", "time"}`` (seconds,
        and the wall time of the commit), or None before the first."""
        with contextlib.closing(self._state_store()) as store:
            committed = store.committed()
        return None if committed is None else {"id": committed[0], **committed[1]}

    def _state_store(self):
        if not _state.checkpointing(self.plan.config):
            raise ValueError(f"topology {self.name!r} was not submitted with "
                             "checkpoint_interval: it keeps no checkpointed state")
        return _state.open_store(str(self.plan.config[STATE_STORE]), self.run_dir)

    def state_frame(self, component: str, spark=None):
        """:meth:`state` as a Spark DataFrame of rows ``(key, value)``."""
        from runtime.recording import frames

        return frames.state_frame(self.state(component), spark=spark)

    def metrics_frame(self, window: str = "10m", spark=None):
        """The per-component rate series of :meth:`metrics` as a Spark DataFrame."""
        from runtime.recording import frames

        return frames.metrics_frame(self, window, spark=spark)

    def events_frame(self, spark=None):
        """The topology's :meth:`events` as a Spark DataFrame."""
        from runtime.recording import frames

        return frames.events_frame(self, spark=spark)

    # -- why is it slow (runtime/observe/diagnosis.py) -------------------------------------
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
        while True:
            stats = self.statistics()
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"topology {self.name!r}: condition not met in {timeout} s; "
                                   f"last statistics: {_summary(stats)}")
            time.sleep(interval)

    def wait_active(self, timeout: float = 30.0) -> None:
        """Wait until every instance is ready and the spouts have been activated."""
        deadline = time.monotonic() + timeout
        while self.status()["state"] != "running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"topology {self.name!r} did not start in {timeout} s")
            time.sleep(0.01)

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
                     f"executed={s.executed}" for s in stats)
