"""The topology master: one process per topology, the only one the notebook talks to.

It starts the containers (and restarts one whose stream manager dies, with a growing
back-off), hands every process the plan (and instances the user code) over the sealed
control channel, activates the spouts once every instance is ready, keeps the latest
statistics of each instance's current incarnation, records exceptions and events, and
answers the client's questions. It never runs tuple code and never unpickles anything.

Every statistics report is also a heartbeat: an instance that has been ready and then
stays silent for longer than ``heartbeat_timeout`` (stopped, or frozen) is
presumed hung, and its stream manager is told to kill and restart it. Spout reports are
watched for the replay-storm trap and for tuner actions. The decisions are the pure
functions of :mod:`runtime.observe.health`; this module only acts on them.

When its stdin reaches end-of-file (the submitting process is gone) it kills the
topology, unless the topology was submitted detached.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Any

import zmq

from runtime import _procs, wire
from runtime.engine.outbound import TAP_SECONDS
from runtime.model import controls as _controls
from runtime.model.constants import (
    HEARTBEAT_TIMEOUT,
    LOG_TAIL,
    LOG_WAIT,
    MAX_SPOUT_PENDING,
    MESSAGE_TIMEOUT,
    RESTART_BACKOFF_MAX,
)
from runtime.model.controls import check_keep, check_tap
from runtime.model.plan import PhysicalPlan
from runtime.observe import health as _health
from runtime.observe import series as _series
from runtime.observe.exceptions import ExceptionLog
from runtime.recording._parquet import check_stream

from . import curve as _curve
from .stmgr import STABLE_AFTER

log = logging.getLogger("tupleflow.tmaster")

TICK_MS = 100  # how often the master looks at its containers when nothing arrives
MAX_EXCEPTIONS = 1000  # distinct exceptions kept (the one seen longest ago is dropped)
MAX_EVENTS = 1000  # events kept
FIRST_BACKOFF = 0.1  # seconds before a dead container is restarted; doubles while it keeps dying


class TopologyMaster:
    def __init__(self, boot: dict) -> None:
        self.secret: bytes = boot["secret"]
        self.run_dir: str = boot["run_dir"]
        self.plan = PhysicalPlan.from_data(boot["plan"])
        self.bundle: bytes = boot["bundle"]  # pickled user code: opaque here, never loaded
        self.detached: bool = boot.get("detached", False)
        self.sys_path: list[str] = boot.get("sys_path", [])
        self.state = "starting"
        self.started = time.time()
        self.zctx = zmq.Context()
        self.sock = self.zctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        # remote (the Spark scheduler): CURVE on an address of the submitter's choosing,
        # and the containers are started by Spark, not here (docs/remote.md)
        self.remote: dict | None = boot.get("remote")
        keys = _curve.keys_of(self.remote or {})
        self.gate = _curve.Gatekeeper(self.zctx, keys) if keys is not None else None
        _curve.serve(self.sock, keys, self.gate, "master")
        host = self.remote["bind_host"] if self.remote else "127.0.0.1"
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{self.remote['advertise_host'] if self.remote else host}:{port}"
        self.sms: dict[int, dict[str, Any]] = {}
        self.containers: dict[int, subprocess.Popen] = {}
        self.generations: dict[int, int] = {}  # container -> how many times it was started
        self.started_at: dict[int, float] = {}  # container -> when it was last started
        self.streaks: dict[int, int] = {}  # container -> deaths in a row without a stable run
        self.restart_at: dict[int, float] = {}  # dead container -> when to start it again
        self.tasks = {t.task: self._blank(t) for t in self.plan.tasks}
        self.component_tasks = self.plan.component_tasks()
        # None (also for 0 or nonsense): no heartbeat supervision
        self.heartbeat_timeout = _health.seconds(self.plan.config.get(HEARTBEAT_TIMEOUT))
        self.idents: dict[int, bytes] = {}
        self.clock = time.monotonic  # when a message arrived (tests replace it)
        self.heard: dict[int, float] = {}  # watched task -> when it last reported (clock)
        self.condemned: dict[int, int] = {}  # task -> the incarnation the master had killed
        self.tuner_turns: dict[int, int] = {}  # spout task -> tuner turns seen
        self.storms: dict[int, bool] = {}  # spout task -> in a replay-storm episode
        self.exceptions = ExceptionLog(MAX_EXCEPTIONS)  # grouped: one record per error
        self.events: deque[dict] = deque(maxlen=MAX_EVENTS)
        self.metrics = _series.MetricsStore()  # counters over windows, fed by the reports
        self.dropped = 0
        self.backpressure: dict[str, dict] = {}  # causes now over the high water mark
        self.container_stats: dict[int, dict] = {}  # container -> its latest sm_stats
        self.paused = False  # spouts deactivated by the client (pause/resume)
        self.spout_pending: dict[str, Any] = {}  # component -> max_spout_pending set live
        self.taps: dict[tuple[str, str], float] = {}  # (component, stream) -> on until (clock)
        self.recordings: dict[tuple[str, str], bool] = {}  # set live by running.record()
        self.samples: dict[tuple[int, str], list[dict]] = {}  # (task, stream) -> latest
        self.stopping = False
        self.kill_requests: list[tuple[bytes, Any]] = []
        # relayed log requests: our request id -> (client, its id, container, deadline)
        self.log_requests: dict[int, tuple[bytes, Any, int, float]] = {}
        self._log_ids = 0

    @staticmethod
    def _blank(t) -> dict[str, Any]:
        return {"component": t.component, "task": t.task, "container": t.container,
                "kind": None, "state": "starting", "incarnation": 0, "restarts": 0,
                "ready": False}

    # -- containers ---------------------------------------------------------------------
    def start_containers(self) -> None:
        if self.remote:
            return  # each is a task of the Spark job (runtime/processes/spark_scheduler.py)
        for c in range(self.plan.containers):
            self.start_container(c)

    def start_container(self, c: int) -> None:
        """Start (or restart) container ``c``. Its instances start at the incarnation the
        master expects, so that a restarted container's instances are not taken for
        late ones; its generation keeps its control identity unique."""
        generation = self.generations[c] = self.generations.get(c, -1) + 1
        incarnations = {t.task: self.tasks[t.task]["incarnation"]
                        for t in self.plan.tasks_in(c)}
        boot = {"secret": self.secret, "tm": self.endpoint, "container": c,
                "generation": generation, "incarnations": incarnations,
                "run_dir": self.run_dir, "sys_path": self.sys_path}
        path = os.path.join(_procs.log_dir(self.run_dir), f"container-{c}.log")
        self.containers[c] = _procs.spawn("runtime.processes.stmgr", boot, log_path=path)
        self.started_at[c] = time.monotonic()

    def watch_containers(self, now: float) -> None:
        """Reap dead containers, and restart them after a back-off that grows while they
        keep dying (a container that cannot start must not spin the machine)."""
        if self.stopping:
            return
        for c, proc in list(self.containers.items()):
            if proc.poll() is not None:
                self._container_died(c, proc, now)
        for c, due in list(self.restart_at.items()):
            if now >= due:
                del self.restart_at[c]
                self.start_container(c)

    def _container_died(self, c: int, proc: subprocess.Popen, now: float) -> None:
        reason = f"stream manager exited with code {proc.returncode}"
        self.event("container_restarted", container=c, reason=reason)
        _procs.close_pipe(proc)
        del self.containers[c]
        self.sms.pop(c, None)
        for t in self.plan.tasks_in(c):  # its instances died with it
            self._restarted(t.task, self.tasks[t.task]["incarnation"] + 1,
                            f"container {c} restarted ({reason})")
        streak = 0 if now - self.started_at[c] > STABLE_AFTER else self.streaks.get(c, 0)
        self.streaks[c] = streak + 1
        cap = float(self.plan.config[RESTART_BACKOFF_MAX])
        self.restart_at[c] = now + min(cap, FIRST_BACKOFF * 2**streak)

    # -- messages -----------------------------------------------------------------------
    def send(self, ident: bytes, kind: str, **fields) -> None:
        self.sock.send_multipart([ident, *wire.seal(self.secret, wire.control(kind, **fields))])

    def receive(self) -> None:
        while self.sock.poll(0):
            ident, *frames = self.sock.recv_multipart()
            try:
                msg = wire.unseal(self.secret, frames)
            except wire.WireError as exc:
                self.dropped += 1
                log.warning("dropped a control message from %r: %s", ident, exc)
                continue
            handler = getattr(self, f"on_{msg['t']}", None)
            if handler is None:
                self.dropped += 1
                log.warning("unexpected %r message from %r", msg["t"], ident)
                continue
            try:
                handler(ident, msg)
            except Exception:  # a sealed message with bad fields must not end the topology
                self.dropped += 1
                log.exception("could not handle a %r message from %r", msg["t"], ident)

    def on_hello(self, ident: bytes, msg: dict) -> None:
        if msg["role"] == "sm":
            if self.remote and not self._remote_container(ident, msg):
                return
            self.sms[msg["id"]] = {"ident": ident, "inbound": msg["inbound"], "pid": msg["pid"],
                                   "generation": msg.get("incarnation", 0),
                                   "run_dir": msg.get("run_dir")}
            if len(self.sms) == self.plan.containers:
                self._welcome_containers()
        elif msg["role"] == "instance":
            self._welcome_instance(ident, msg)

    def _welcome_containers(self) -> None:
        inbound = {str(c): sm["inbound"] for c, sm in self.sms.items()}
        # remote: a restarted container learns its tasks' incarnations here (a local one
        # from its boot), and running ones learn a moved peer's address
        extra = {"incarnations": {t: info["incarnation"] for t, info in self.tasks.items()}
                 } if self.remote else {}
        for sm in self.sms.values():
            self.send(sm["ident"], "welcome", plan=self.plan.to_data(), inbound=inbound,
                      **extra)

    def _remote_container(self, ident: bytes, msg: dict) -> bool:
        """A remote container's hello: False for a late one from a replaced generation; a
        newer generation means the container was restarted (by its Spark task, or by
        Spark), so its instances died with the old one."""
        old = self.sms.get(msg["id"])
        if old is None or old["ident"] == ident:
            return True
        if msg.get("incarnation", 0) < old["generation"]:
            return False
        reason = f"container {msg['id']} restarted (generation {msg.get('incarnation')})"
        self.event("container_restarted", container=msg["id"], reason=reason)
        self.send(old["ident"], "kill")  # if the old one still runs (Spark retried the task
        # while it lived on), it must not route for its orphaned instances
        for t in self.plan.tasks_in(msg["id"]):
            self._restarted(t.task, self.tasks[t.task]["incarnation"] + 1, reason)
        return True

    def _welcome_instance(self, ident: bytes, msg: dict) -> None:
        task = self.tasks.get(msg["id"])
        if task is None or msg["incarnation"] < task["incarnation"]:
            return  # unknown task, or a late hello from an older incarnation
        if msg["incarnation"] > task["incarnation"]:
            self._forget(msg["id"])
        task.update(incarnation=msg["incarnation"], pid=msg["pid"], ready=False)
        self.idents[msg["id"]] = ident
        self.send(ident, "welcome", plan=self.plan.to_data(), bundle=self.bundle)

    def _current(self, msg: dict) -> dict | None:
        task = self.tasks.get(msg["task"])
        if task is None or msg["incarnation"] != task["incarnation"]:
            return None  # a late message from an incarnation that has been replaced
        if self.condemned.get(msg["task"]) == msg["incarnation"]:
            return None  # one the master has asked to kill: its stream manager is on it
        return task

    def on_ready(self, ident: bytes, msg: dict) -> None:
        task = self._current(msg)
        if task is None:
            return
        task.update(ready=True, state="running")
        self.heard[msg["task"]] = self.clock()
        for (component, stream), on in self.recordings.items():  # so does a recording
            if component == task["component"]:
                self.send(ident, "record", stream=stream, on=on)
        if task["component"] in self.spout_pending:  # set live: a new incarnation gets it too
            self.send(ident, "set", key=MAX_SPOUT_PENDING,
                      value=self.spout_pending[task["component"]])
        if self.state == "running":
            if not self.paused:  # a spout restarted while paused starts paused
                self.send(ident, "activate")
        elif all(t["ready"] for t in self.tasks.values()):
            self.state = "running"
            self.event("activated", seconds=round(time.time() - self.started, 3))
            if not self.paused:
                self._tell_ready("activate")

    def on_stats(self, ident: bytes, msg: dict) -> None:
        task = self._current(msg)
        if task is None:
            return
        record = msg["record"]
        task.update({k: v for k, v in record.items() if k != "restarts"})
        self.metrics.add(msg["task"], msg["incarnation"], record, self.clock())
        if task["ready"]:  # a stats report is the instance's heartbeat
            self.heard[msg["task"]] = self.clock()
        if task["kind"] == "spout":
            self._watch_spout(task, record)

    def _watch_spout(self, task: dict, record: dict) -> None:
        self._watch_storm(task, record)
        turn = _health.tuner_turn(self.tuner_turns.get(task["task"], 0), record)
        if turn is not None:
            self.tuner_turns[task["task"]] = turn["turns"]
            self.event("tuner", task=task["task"], component=task["component"], **turn)

    def _watch_storm(self, task: dict, record: dict) -> None:
        """Warn once per episode of a spout component: from when one of its tasks reaches
        the replay-storm threshold until all of them have fallen well below it."""
        t, component = task["task"], task["component"]
        timeout = self.plan.config.get(MESSAGE_TIMEOUT)
        was = any(self.storms.get(x, False) for x in self.component_tasks[component])
        ratio = _health.replay_ratio(record, timeout)
        self.storms[t] = _health.storming(self.storms.get(t, False), ratio)
        if self.storms[t] and not was:
            self.event("replay_storm_warning", task=t, component=component,
                       ratio=round(ratio, 3), max_spout_pending=record["max_spout_pending"],
                       p99_ms=record["complete_latency_ms"]["p99"], message_timeout=timeout,
                       message=_health.storm_message(component, record, timeout))

    def on_exception(self, ident: bytes, msg: dict) -> None:
        info = self.plan.task(msg["task"])
        self.exceptions.add({"component": info.component, "task": msg["task"],
                             "incarnation": msg["incarnation"], "error": msg["error"],
                             "traceback": msg["traceback"], "time": msg["time"],
                             "fatal": msg.get("fatal", True)})

    def on_restarted(self, ident: bytes, msg: dict) -> None:
        self._restarted(msg["task"], msg["incarnation"], msg["reason"])

    def _restarted(self, task_id: int, incarnation: int, reason: str) -> None:
        """Count a restart. The master keeps the count (a restarted container's stream
        manager starts counting afresh), and never moves an incarnation backwards: the
        new instance's hello may have overtaken its stream manager's message."""
        task = self.tasks[task_id]
        task["restarts"] += 1
        if incarnation > task["incarnation"]:
            task.update(incarnation=incarnation, ready=False, state="restarting")
            self._forget(task_id)
        self.event("restarted", task=task_id, component=task["component"], reason=reason,
                   restarts=task["restarts"])

    def _forget(self, task_id: int) -> None:
        """A new incarnation: not watched until it is ready, and its tuner starts afresh."""
        self.heard.pop(task_id, None)
        self.tuner_turns.pop(task_id, None)

    # -- heartbeats ---------------------------------------------------------------------
    def watch_heartbeats(self, now: float) -> None:
        """Have every instance that stopped heart-beating killed and restarted."""
        timeout = self.heartbeat_timeout
        if self.stopping or timeout is None:
            return
        for task_id, silent in _health.hung(self.heard, now, timeout).items():
            self._restart_hung(task_id, silent, timeout)

    def _restart_hung(self, task_id: int, seconds: float, timeout: float) -> None:
        """Condemn the current incarnation (its late messages are ignored from now on) and
        ask its stream manager to replace it; the restart is counted when it reports."""
        task = self.tasks[task_id]
        self.heard.pop(task_id, None)
        self.condemned[task_id] = task["incarnation"]
        task.update(ready=False, state="restarting")
        self.event("hung", task=task_id, component=task["component"],
                   seconds=round(seconds, 2), incarnation=task["incarnation"])
        reason = f"hung: no heartbeat for {seconds:.1f} s (heartbeat_timeout {timeout:g} s)"
        sm = self.sms.get(task["container"])
        if sm is not None:  # otherwise its container is restarting, and the task with it
            self.send(sm["ident"], "restart", task=task_id, reason=reason,
                      incarnation=task["incarnation"])

    def on_backpressure(self, ident: bytes, msg: dict) -> None:
        """A stream manager's destination crossed a water mark: the root cause, on or off."""
        cause = msg["cause"]
        component = self.plan.task(cause).component if isinstance(cause, int) else None
        if msg["on"]:
            self.backpressure[str(cause)] = {"cause": cause, "component": component,
                                            "container": msg["container"], "since": time.time()}
        else:
            self.backpressure.pop(str(cause), None)
        self.event("backpressure_on" if msg["on"] else "backpressure_off", cause=cause,
                   component=component, container=msg["container"])

    def on_sm_stats(self, ident: bytes, msg: dict) -> None:
        """A stream manager's queues and time in backpressure; each local task gets the
        bytes and frames queued towards it (``sm_queued_bytes``, ``sm_queued_frames``)."""
        record = msg["record"]
        self.container_stats[int(msg["container"])] = record
        for t, nbytes in record["queued_bytes"].items():
            task = self.tasks.get(int(t))
            if task is not None:
                task["sm_queued_bytes"] = nbytes
                task["sm_queued_frames"] = record["queued_frames"].get(t, 0)

    def on_bye(self, ident: bytes, msg: dict) -> None:
        log.info("%s %s said bye", msg["role"], msg["id"])

    def on_request(self, ident: bytes, msg: dict) -> None:
        what = msg["what"]
        if what == "kill":  # answered when the topology is down
            self.kill_requests.append((ident, msg["id"]))
            self.stopping = True
            return
        if what == "logs":  # answered when the container sends the log
            self.relay_logs(ident, msg)
            return
        answer = getattr(self, f"answer_{what}", None)
        if answer is None:
            self.send(ident, "reply", id=msg["id"], ok=False, value=f"unknown request {what!r}")
            return
        try:
            value = answer(msg)
        except ValueError as exc:  # a request the master refuses, saying why
            self.send(ident, "reply", id=msg["id"], ok=False, value=str(exc))
            return
        self.send(ident, "reply", id=msg["id"], ok=True, value=value)

    def event(self, kind: str, **fields) -> None:
        self.events.append({"kind": kind, "time": time.time(), **fields})
        log.info("event %s %s", kind, fields)

    # -- instance logs, from their containers ---------------------------------------------
    def relay_logs(self, ident: bytes, msg: dict) -> None:
        """Ask the container running ``msg["task"]`` for the end of that instance's log
        (a remote container's log stays on its executor's host); ``on_logs_reply`` passes
        the answer on, or ``expire_log_requests`` says the container did not give one."""
        try:
            task = int(msg["task"])
            info = self.plan.task(task)
        except (KeyError, TypeError, ValueError, IndexError):
            info = None
        if info is None or info.component != msg.get("component"):
            self.send(ident, "reply", id=msg["id"], ok=False,
                      value=f"no task {msg.get('task')!r} of {msg.get('component')!r}")
            return
        sm = self.sms.get(info.container)
        if sm is None:
            self.send(ident, "reply", id=msg["id"], ok=False,
                      value=f"container {info.container} has not said hello yet")
            return
        self._log_ids += 1
        self.log_requests[self._log_ids] = (ident, msg["id"], info.container,
                                            self.clock() + LOG_WAIT)
        self.send(sm["ident"], "logs", request=self._log_ids, component=info.component,
                  task=task, limit=LOG_TAIL)

    def on_logs_reply(self, ident: bytes, msg: dict) -> None:
        waiting = self.log_requests.get(msg["request"])
        if waiting is None:
            return  # answered too late: the client was told already
        client, req, container, _ = waiting
        sm = self.sms.get(container)
        if sm is None or sm["ident"] != ident:
            log.warning("a log for container %s came from %r, not from it", container, ident)
            return
        del self.log_requests[msg["request"]]
        self.send(client, "reply", id=req, ok=bool(msg["ok"]), value=msg["value"])

    def expire_log_requests(self, now: float) -> None:
        for rid, (client, req, container, deadline) in list(self.log_requests.items()):
            if now > deadline:
                del self.log_requests[rid]
                self.send(client, "reply", id=req, ok=False,
                          value=f"container {container} did not send the log in {LOG_WAIT} s")

    # -- answers to the client ------------------------------------------------------------
    def answer_statistics(self, msg: dict) -> list[dict]:
        return [{k: v for k, v in t.items() if k != "ready"} for t in self.tasks.values()]

    def answer_status(self, msg: dict) -> dict:
        return {"state": self.state, "started": self.started, "pid": os.getpid(),
                "containers": {c: p.pid for c, p in self.containers.items()},
                "dropped": self.dropped, "backpressure": list(self.backpressure.values()),
                "paused": self.paused, **self._remote_status()}

    def _remote_status(self) -> dict:
        """Remote only: the containers' pids and data endpoints, and the connections the
        gatekeepers refused (the master's, and each container's last report)."""
        if not self.remote:
            return {}
        return {"containers": {c: sm["pid"] for c, sm in self.sms.items()},
                "inbound": {c: sm["inbound"] for c, sm in self.sms.items()},
                "container_dirs": {c: sm["run_dir"] for c, sm in self.sms.items()},
                "refusals": {"master": dict(self.gate.refusals.counts),
                             **{f"container {c}": s.get("refusals", {})
                                for c, s in self.container_stats.items()}}}

    def answer_metrics(self, msg: dict) -> dict:
        """Per component and per instance over ``msg["window"]`` (see
        :meth:`RunningTopology.metrics`); ValueError for an unknown window."""
        return self.metrics.answer(self.tasks, msg.get("window", "1m"), self.clock(),
                                   wall=time.time(), containers=self.container_stats)

    def answer_exceptions(self, msg: dict) -> list[dict]:
        return self.exceptions.records()

    def answer_events(self, msg: dict) -> list[dict]:
        return list(self.events)

    def answer_kill(self, msg: dict) -> None:
        """Handled by the main loop (see on_request)."""

    # -- live controls --------------------------------------------------------------------
    def answer_pause(self, msg: dict) -> bool:
        """Deactivate every spout (Storm's deactivate); False if they already were."""
        if self.paused:
            return False
        self.paused = True
        self.event("paused")
        self._tell_ready("deactivate")
        return True

    def answer_resume(self, msg: dict) -> bool:
        """Activate the spouts again (once the topology is running); False if not paused."""
        if not self.paused:
            return False
        self.paused = False
        self.event("resumed")
        if self.state == "running":
            self._tell_ready("activate")
        return True

    def answer_set_max_spout_pending(self, msg: dict) -> list[int]:
        """Change max_spout_pending of one spout component (or all); remembered, so
        that a restarted instance gets it too. Returns the tasks told now."""
        value = _controls.check_max_spout_pending(msg["value"])
        kinds = {t: info["kind"] for t, info in self.tasks.items()}
        targets = _controls.spout_targets(self.component_tasks, kinds, msg.get("component"))
        tasks = [t for ts in targets.values() for t in ts]
        self.spout_pending.update(dict.fromkeys(targets, value))
        told = self._tell_ready("set", tasks, key=MAX_SPOUT_PENDING, value=value)
        self.event("max_spout_pending", component=msg.get("component"), value=value,
                   tasks=told)
        return told

    # -- recordings (runtime/recording/_parquet.py) ----------------------------------------
    def answer_record(self, msg: dict) -> list[int]:
        """Start (``on``) or stop recording a component's stream in its instances;
        remembered, so that a restarted instance does the same. Returns the tasks told."""
        key = check_stream(self.plan.streams, msg["component"], msg["stream"])
        on = bool(msg["on"])
        self.recordings[key] = on
        told = self._tell_ready("record", self.component_tasks[key[0]], stream=key[1], on=on)
        self.event("recording_started" if on else "recording_stopped", component=key[0],
                   stream=key[1], tasks=told)
        return told

    # -- taps ---------------------------------------------------------------------------------
    def answer_sample(self, msg: dict) -> list[dict]:
        """The newest ``n`` tuples the instances of a component sent on a stream, newest
        last. Each request (re)starts the tap for ``keep`` seconds; the first after a
        while finds nothing yet, since instances report their samples with their stats."""
        component, stream = msg["component"], msg["stream"]
        n = check_tap(self.plan.streams, component, stream, msg["n"])
        keep = check_keep(msg.get("keep", TAP_SECONDS))
        key, now = (component, stream), self.clock()
        tasks = self.component_tasks[component]
        if self.taps.get(key, -1.0) < now:  # off: what was kept is stale
            for t in tasks:
                self.samples.pop((t, stream), None)
        self.taps[key] = now + keep
        self._tell_ready("tap", tasks, stream=stream, n=n, seconds=keep)
        found = [s for t in tasks for s in self.samples.get((t, stream), ())]
        found.sort(key=lambda s: s["time"])
        return found[-n:]

    def on_samples(self, ident: bytes, msg: dict) -> None:
        """An instance's tapped tuples; kept only while the master's tap is on."""
        task = self._current(msg)
        if task is None or self.taps.get((task["component"], msg["stream"]), -1.0) < self.clock():
            return
        self.samples[(msg["task"], msg["stream"])] = msg["samples"]

    def _tell_ready(self, kind: str, tasks=None, **fields) -> list[int]:
        """Send a control message to every ready instance (of ``tasks``, if given); an
        instance not ready yet hears what it needs in :meth:`on_ready`."""
        told = [t for t in (self.tasks if tasks is None else tasks)
                if self.tasks[t]["ready"] and t in self.idents]
        for t in told:
            self.send(self.idents[t], kind, **fields)
        return told

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        self.start_containers()
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        stdin = sys.stdin.buffer.fileno()
        poller.register(stdin, zmq.POLLIN)
        while not self.stopping:
            for sock, _ in poller.poll(TICK_MS):
                if sock is self.sock:
                    self.receive()
                elif not os.read(stdin, 4096):
                    poller.unregister(stdin)
                    self.submitter_gone()
            now = self.clock()
            self.watch_containers(now)
            self.watch_heartbeats(now)
            self.expire_log_requests(now)
        self.shutdown()

    def submitter_gone(self) -> None:
        if self.detached:
            log.info("the submitting process has gone; the topology is detached and runs on")
            return
        log.info("the submitting process has gone: killing the topology")
        self.stopping = True

    def shutdown(self) -> None:
        self.state = "killed"
        for sm in self.sms.values():
            self.send(sm["ident"], "kill")
        hello = {sm["pid"] for sm in self.sms.values()}
        procs = list(self.containers.values())
        for p in procs:  # one that has not said hello yet cannot hear a kill
            if p.pid not in hello:
                _procs.signal_quietly(p, signal.SIGTERM)
        deadline = time.monotonic() + 1.5
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
        _procs.terminate(procs, timeout=0.2)
        for ident, req in self.kill_requests:
            self.send(ident, "reply", id=req, ok=True, value=None)
        self.sock.close(linger=1000)
        if self.gate is not None:
            self.gate.stop()
        self.zctx.term()


def main() -> None:
    boot = _procs.read_boot()
    _procs.setup_logging("")
    tm = TopologyMaster(boot)
    signal.signal(signal.SIGTERM, lambda *_: setattr(tm, "stopping", True))
    sys.stdout.write(f"READY {tm.endpoint}\n")
    sys.stdout.flush()
    tm.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
