"""The topology master: one process per topology, the only one the notebook talks to.

This module is the process: its socket, its loop, and the one table that hands each
control message to its handler; its answers to clients are in :mod:`~runtime.processes.
master_answers`. The work is done by three parts, each owning its state:
:class:`~runtime.processes.supervision.Supervision` (the containers and instances, their
incarnations, readiness, restarts, heartbeats, activation), :class:`~runtime.processes.
observation.Observation` (statistics, metrics, exceptions, events, backpressure, taps)
and :class:`~runtime.processes.settings.LiveSettings` (what a restarted instance must be
told again). It never runs tuple code and never unpickles anything.

Every statistics report is also a heartbeat: an instance that has been ready and then
stays silent for longer than ``heartbeat_timeout`` (stopped, or frozen) is presumed hung,
and its stream manager is told to kill and restart it.

When its stdin reaches end-of-file (the submitting process is gone) it kills the
topology, unless the topology was submitted detached.

It may die: its stream managers outlive it, and a master started with ``adopt`` in its
boot binds the same address and adopts them (:mod:`~runtime.processes.adoption`).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time

import zmq

from runtime import _procs, wire
from runtime.model.constants import METRICS_PORT
from runtime.model.plan import PhysicalPlan

from . import adoption as _adoption
from . import carry as _carry
from . import curve as _curve
from . import detached as _detached
from .export import MetricsServer
from .faults import Faults
from .master_answers import ClientAnswers, Handler
from .observation import Observation
from .outbox import Outbox
from .rebalance import Rebalance
from .settings import LiveSettings
from .spark_adoption import SparkAdoption
from .supervision import Supervision
from .tasks import TaskTable
from .tracing import MasterTraces

log = logging.getLogger("tupleflow.tmaster")

TICK_MS = 100  # how often the master looks at its containers when nothing arrives


class TopologyMaster(ClientAnswers):
    """The master process. Owns its socket (and, remote, its gatekeeper), the count of
    control messages it dropped, the client's pending kill requests and relayed log
    requests, and whether it is stopping; everything else is owned by its parts."""

    def __init__(self, boot: dict) -> None:
        self.secret: bytes = boot["secret"]
        self.boot, self.boot_run_dir = boot, boot["run_dir"]
        self.faults = Faults(bool(boot.get("adopt")))  # tests only (faults.py)
        self.rebalancing: Rebalance | None = None  # at most one at a time
        # a rebalance the master before died in, its checkpoint task still to be told
        self.splitting: _adoption.Splitting | None = None
        self.kinds: dict[str, str] = {}  # component -> "spout"/"bolt", as its tasks reported
        # spout (or windowed bolt) component -> why its parallelism is fixed (None: it may
        # change), as said
        self.fixed: dict[str, str | None] = {}
        # what a master that replaces this one must know (runtime/processes/carry.py)
        self.carry = _carry.Carry(self.boot_run_dir)
        # adopting: the plan the containers were last started on (a rebalance to a new
        # number of containers makes the boot's stale), else the boot's
        saved = self.carry.plan() if boot.get("adopt") else None
        self.plan = PhysicalPlan.from_data(saved or boot["plan"])
        self.detached: bool = boot.get("detached", False)
        # remote (the Spark scheduler): CURVE on an address of the submitter's choosing,
        # and the containers are started by Spark, not here (docs/remote.md)
        self.remote: dict | None = boot.get("remote")
        self._bind()
        self.clock = time.monotonic  # when a message arrived (tests replace it)
        self.dropped = 0  # control messages refused: malformed, unexpected or failing
        self.stopping = False
        self.kill_requests: list[tuple[bytes, int]] = []  # answered once all is down
        # relayed log requests: our request id -> (client, its id, container, deadline)
        self.log_requests: dict[int, tuple[bytes, int, int, float]] = {}
        self._log_ids = 0
        self._parts(boot)
        if boot.get("adopt"):  # what the masters before this one kept
            _carry.restore(self, self.carry)
        self.handlers = self._handlers()
        # held while a message or a tick changes the task records, and while the exporter
        # (its own thread) copies them
        self.lock = threading.Lock()
        self.export, self.export_error = self._serve_metrics()
        # a master replacing one that died has an Adoption (``done`` once it has adopted
        # the containers); a first master has None
        adoption = SparkAdoption if self.remote else _adoption.Adoption
        self.adoption = (adoption(self, boot.get("master_restarts", 1), self.clock())
                         if boot.get("adopt") else None)

    def _bind(self) -> None:
        """The ROUTER every process and client talks to: on loopback, or (remote) a CURVE
        server on ``bind_host`` advertised as ``advertise_host``."""
        self.zctx = zmq.Context()
        self.sock = self.zctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        # after a rebalance, new instances reuse task ids (and incarnation 0): each takes
        # its identity from the dead one it replaces (every message is still sealed)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.outbox = Outbox(self.sock)  # a peer not (yet) connected: its messages wait
        keys = _curve.keys_of(self.remote or {})
        self.gate = _curve.Gatekeeper(self.zctx, keys) if keys is not None else None
        _curve.serve(self.sock, keys, self.gate, "master")
        if self.boot.get("adopt"):  # where the dead master listened: everyone reconnects
            self.endpoint = _adoption.read_endpoint(self.boot["run_dir"])
            self.sock.bind(self.endpoint)
            return
        host = self.remote["bind_host"] if self.remote else "127.0.0.1"
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{self.remote['advertise_host'] if self.remote else host}:{port}"
        _adoption.write_endpoint(self.boot["run_dir"], self.endpoint)

    def _parts(self, boot: dict) -> None:
        """Supervision, observation and live settings, over one task table; their sends
        and clock readings go through this object (tests replace ``send`` and ``clock``)."""
        self.tasks = TaskTable(self.plan)
        self.component_tasks = self.plan.component_tasks()
        self.observation = Observation(self.plan, self.tasks, lambda: self.clock())
        self.supervision = Supervision(
            self.plan, boot, self.endpoint, self.tasks, lambda i, m: self.send(i, m),
            self.observation.event, lambda: self.clock(), self.observation.forget)
        self.settings = LiveSettings(self.plan, self.tasks, self.supervision.tell_ready,
                                     self.observation.event)
        self.traces = MasterTraces(self.plan, self.tasks)
        self.observation.journal = self.carry

    def take_plan(self, data: dict) -> None:
        """Adopting: the plan the stream managers run (a rebalance may have changed it
        since submit) replaces the boot's, and the parts start again from it."""
        if wire.unpack(wire.pack(self.plan.to_data())) == data:
            return
        log.info("adopting: the containers run a plan other than the submitted one")
        self.plan = PhysicalPlan.from_data(data)
        self.carry.save_plan(data)
        self._parts(self.boot)
        _carry.restore(self, self.carry)
        self.handlers = self._handlers()

    def _serve_metrics(self) -> tuple[MetricsServer | None, str | None]:
        """The Prometheus endpoint, if ``metrics_port`` was given; a port that cannot be
        bound is an error the status shows, not a reason to stop the topology."""
        port = self.plan.config.get(METRICS_PORT)
        if port is None:
            return None, None
        try:
            return MetricsServer(self.plan.topology, port, self.snapshot), None
        except (OSError, ImportError) as exc:
            log.error("cannot serve metrics on 127.0.0.1:%s: %s", port, exc)
            return None, f"cannot serve metrics on 127.0.0.1:{port}: {exc}"

    def snapshot(self) -> list[dict]:
        """Copies of the task records (the exporter's thread reads these, not the live
        ones)."""
        with self.lock:
            return [dict(r) for r in self.tasks.values()]

    def _handlers(self) -> dict[type, Handler]:
        """Control message record -> its handler, the one way messages are dispatched."""
        sup, obs, settings = self.supervision, self.observation, self.settings
        # answers that change what a new master must know: saved before the reply
        changes = {wire.AskSample: self.answer_sample,
                   wire.AskPause: lambda _: sup.pause(), wire.AskResume: lambda _: sup.resume(),
                   wire.AskSetMaxSpoutPending: settings.answer_set_max_spout_pending,
                   wire.AskRecord: settings.answer_record,
                   wire.AskSetTrace: settings.answer_set_trace}
        answers = {wire.AskStatistics: obs.answer_statistics, wire.AskStatus: self.answer_status,
                   wire.AskMetrics: obs.answer_metrics, wire.AskEvents: obs.answer_events,
                   wire.AskExceptions: obs.answer_exceptions,
                   wire.AskAckerState: obs.answer_acker_state,
                   wire.AskTraces: self.traces.answer,
                   **{kind: self._saving(answer) for kind, answer in changes.items()}}
        return {wire.Hello: self.on_hello, wire.Ready: self.on_ready,
                wire.Stats: self.on_stats, wire.Samples: self.on_samples,
                wire.Restarted: self.on_restarted, wire.ExceptionReport: obs.on_exception,
                wire.TraceReport: self.traces.on_report,
                wire.BackpressureChange: obs.on_backpressure, wire.SmStats: obs.on_sm_stats,
                wire.Bye: self.on_bye, wire.AskKill: self.on_kill, wire.AskLogs: self.relay_logs,
                wire.AskRebalance: self.on_rebalance, wire.Switched: self.on_switched,
                wire.LogsReply: self.on_logs_reply, wire.Running: self.on_running,
                **{kind: self._replying(answer) for kind, answer in answers.items()}}

    # -- messages -----------------------------------------------------------------------
    def send(self, ident: bytes, msg: wire.Control) -> None:
        if self.faults.withheld(msg):
            return
        self.outbox.send(ident, wire.seal(self.secret, msg), self.clock())

    def receive(self) -> None:
        while self.sock.poll(0):
            got = self._next()
            if got is not None:
                with self.lock:
                    self.handle(*got)

    def settle(self) -> None:
        """Handle what is queued now, the lock already held: a rebalance does, once the old
        containers are down and before it replans, so that their last reports reach the
        old task table, not a new task of the same id."""
        while self.sock.poll(0):
            got = self._next()
            if got is not None:
                self.handle(*got)

    def _next(self) -> tuple[bytes, wire.Control] | None:
        ident, *frames = self.sock.recv_multipart()
        try:
            return ident, wire.unseal(self.secret, frames)
        except wire.WireError as exc:
            self.dropped += 1
            log.warning("dropped a control message from %r: %s", ident, exc)
            return None

    def handle(self, ident: bytes, msg: wire.Control) -> None:
        """Hand one message to its handler; drop (and count) one this process does not
        take, or one whose handling fails: it must not end the topology."""
        handler = self.handlers.get(type(msg))
        if handler is None:
            self.dropped += 1
            log.warning("unexpected %r message from %r", msg.KIND, ident)
            return
        try:
            handler(ident, msg)
        except Exception:
            self.dropped += 1
            log.exception("could not handle a %r message from %r", msg.KIND, ident)

    def on_hello(self, ident: bytes, msg: wire.Hello) -> None:
        if msg.role == "sm":
            self.supervision.on_sm_hello(ident, msg)
        elif msg.role == "instance":
            if msg.incarnation > 0:  # it may overtake its stream manager's word
                self.traces.restarted(msg.id)
            if self.adoption is None or not self.adoption.hold_hello(ident, msg):
                self.supervision.on_instance_hello(ident, msg)

    def on_restarted(self, ident: bytes, msg: wire.Restarted) -> None:
        self.traces.restarted(msg.task)  # copies in transit to it died with it
        self.supervision.on_restarted(ident, msg)

    def on_ready(self, ident: bytes, msg: wire.Ready) -> None:
        """A ready instance is told the live settings (a restarted one gets them again),
        then activated as supervision decides."""
        task = self.supervision.on_ready(msg)
        if task is None:
            return
        if msg.task_kind is not None:  # a rebalance's guard needs to know the spouts
            self.kinds[task["component"]] = msg.task_kind
        if msg.task_kind == "spout" or msg.fixed is not None:  # a windowed bolt's, too
            self.fixed[task["component"]] = msg.fixed
        for told in self.settings.for_new(task["component"]):
            self.send(ident, told)
        self.supervision.activate(ident)
        if self.splitting is not None:  # a cut-short rebalance's split, still unanswered
            self.splitting.on_ready(self, msg.task)

    def on_stats(self, ident: bytes, msg: wire.Stats) -> None:
        if self.adoption is not None and not self.adoption.counts(msg.task):
            return
        if self.supervision.current(msg.task, msg.incarnation) is not None:
            self.observation.on_stats(msg)
            self.supervision.heartbeat(msg.task)
            if self.adoption is not None:  # live settings the dead master never delivered
                for told in self.adoption.agree(msg.task, msg.record):
                    self.supervision.tell_ready(told, [msg.task])

    def on_samples(self, ident: bytes, msg: wire.Samples) -> None:
        if self.supervision.current(msg.task, msg.incarnation) is not None:
            self.observation.on_samples(msg)

    def on_running(self, ident: bytes, msg: wire.Running) -> None:
        """A container's report, taken while adopting; dropped (and counted) otherwise,
        or when it makes no sense."""
        if self.adoption is None or not self.adoption.on_running(ident, msg):
            self.dropped += 1
            log.warning("dropped a running report from %r", ident)

    def on_bye(self, ident: bytes, msg: wire.Bye) -> None:
        log.info("%s %s said bye", msg.role, msg.id)
        if self.rebalancing is not None:  # a remote container it stopped
            self.rebalancing.on_bye(msg)

    def on_kill(self, ident: bytes, msg: wire.AskKill) -> None:
        """Stop the topology; the client hears back once it is down (see shutdown)."""
        self.kill_requests.append((ident, msg.id))
        self.stopping = True

    # -- rebalance (issue 22; runtime/processes/rebalance.py) --------------------------------
    def on_rebalance(self, ident: bytes, msg: wire.AskRebalance) -> None:
        """Start a rebalance, answered when it is over; refused (at once) while another
        runs, before the topology runs, or for a request that cannot be done."""
        try:
            if self.rebalancing is not None or self.splitting is not None:
                raise ValueError(f"rebalance of {self.plan.topology!r}: another rebalance is "
                                 "running; one at a time")
            if self.supervision.state != "running":
                raise ValueError(f"rebalance of {self.plan.topology!r}: the topology is "
                                 f"{self.supervision.state}, not running")
            # marks itself in the carry before its first step is told (a new master must
            # know it was cut short)
            self.rebalancing = Rebalance(self, ident, msg)
        except ValueError as exc:
            if self.rebalancing is None and self.splitting is None:  # (the mark of one
                self.carry.rebalancing(None)  # that runs, or was cut short, stays)
            self.send(ident, wire.Reply(id=msg.id, ok=False, value=str(exc)))

    def on_switched(self, ident: bytes, msg: wire.Switched) -> None:
        if self.rebalancing is not None:
            self.rebalancing.on_switched(msg)
        elif self.splitting is not None:
            self.splitting.on_switched(msg, self.plan.epoch)

    def replan(self, plan: PhysicalPlan) -> None:
        """Run on ``plan`` from now on (the containers stopped): new parts over a new task
        table, keeping the events, the exceptions, the live settings, and the containers'
        generations (a new stream manager must not take an old one's identity)."""
        obs, sup, settings = self.observation, self.supervision, self.settings
        self.plan = plan
        self.carry.save_plan(plan.to_data())  # before any container starts on it
        self._parts(self.boot)
        self.observation.events, self.observation.exceptions = obs.events, obs.exceptions
        self.supervision.generations = sup.generations
        for name in ("spout_pending", "recordings", "trace"):
            setattr(self.settings, name, getattr(settings, name))
        self.handlers = self._handlers()

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        if self.adoption is None:
            self.supervision.start_containers()
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
            with self.lock:
                self.tick(self.clock())
        self.shutdown()

    def tick(self, now: float) -> None:
        """What the master does on time: restart dead containers, condemn hung instances,
        answer log requests that waited too long. Nothing once it is stopping."""
        if self.stopping:
            return
        self.outbox.retry(now)
        if self.adoption is not None:
            self.adoption.tick(now)
            if not self.adoption.done:
                return  # its containers are not known yet
        if self.splitting is not None and self.splitting.tick(self, now):
            self.splitting = None
        if self.rebalancing is not None and self.rebalancing.tick(now):
            self.rebalancing = None
            self.carry.rebalancing(None)
        self.supervision.watch_containers(now)
        self.supervision.watch_heartbeats(now)
        self.expire_log_requests(now)
        self.traces.keep(self.carry, now)  # for a master that may replace this one

    def submitter_gone(self) -> None:
        if self.detached:
            log.info("the submitting process has gone; the topology is detached and runs on")
            return
        log.info("the submitting process has gone: killing the topology")
        self.stopping = True

    def shutdown(self) -> None:
        self.supervision.stop()
        # a clean end: neither a stream manager nor an attached handle replaces this master
        _detached.write_master(self.boot_run_dir, os.getpid(),
                               self.boot.get("master_restarts", 0), stopped=True)
        for ident, req in self.kill_requests:
            self.send(ident, wire.Reply(id=req, ok=True, value=None))
        self.sock.close(linger=1000)
        if self.export is not None:
            self.export.stop()
        if self.gate is not None:
            self.gate.stop()
        self.zctx.term()


# allocations between two young collections, young collections between two of the middle
# generation, and those between two full ones (CPython's: 700, 10, 10); as an instance's
# (processes/instance.py), for the same reason: records filed all the time
COLLECT_EVERY = (50_000, 20, 100)


def settle_heap() -> None:
    """Leave what start-up made (the imports, the plan, the parts) out of every later
    collection, and collect less often: the master files trace reports all the time and
    keeps up to 10,000 traced trees (``trace_store``), and each full collection the
    store's growth set off traversed the whole start-up heap too (wt-trace5: 12-28 ms
    each, three or four a traced run). The filing of a traced sentence, replayed under
    callgrind: 178 k instructions, 164 k frozen, 157 k with these thresholds too
    (docs/internals/tracing.md, wt-tracemaster). Start-up's garbage is collected first,
    not frozen; the store's tuples of atoms are still let go by the young collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECT_EVERY)


def main() -> None:
    boot = _procs.read_boot()
    _procs.setup_logging("")
    tm = TopologyMaster(boot)
    settle_heap()
    signal.signal(signal.SIGTERM, lambda *_: setattr(tm, "stopping", True))
    _detached.write_master(tm.boot_run_dir, os.getpid(), boot.get("master_restarts", 0))
    sys.stdout.write(f"READY {tm.endpoint}\n")
    sys.stdout.flush()
    tm.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
