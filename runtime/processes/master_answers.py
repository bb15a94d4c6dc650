"""The topology master's answers to its clients: the replies to questions (each refusal a
ValueError the client raises again), the saving of what a replacing master must know, the
status, taps, and the end of an instance's log relayed from its container. A part of
:class:`~runtime.processes.master.TopologyMaster`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from runtime import wire
from runtime.model.constants import LOG_TAIL, LOG_WAIT

__all__ = ["ClientAnswers", "Handler"]

log = logging.getLogger("tupleflow.tmaster")

Handler = Callable[[bytes, Any], None]


class ClientAnswers:
    """Needs the master's ``send``, ``clock``, ``plan``, ``carry``, ``boot``, ``dropped``,
    ``rebalancing``, ``export``/``export_error``, ``gate``, its parts (``supervision``,
    ``observation``, ``settings``, ``traces``) and ``log_requests``/``_log_ids``."""

    # -- answers to the client ------------------------------------------------------------
    def _replying(self, answer: Callable[[Any], Any]) -> Handler:
        """A handler that replies with what ``answer`` returns, or with why it refused
        (a ValueError)."""
        def handler(ident: bytes, msg: wire.Question) -> None:
            try:
                value = answer(msg)
            except ValueError as exc:
                return self.send(ident, wire.Reply(id=msg.id, ok=False, value=str(exc)))
            self.send(ident, wire.Reply(id=msg.id, ok=True, value=value))
        return handler

    def _saving(self, answer: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``answer``, then the settings saved for a master that may replace this one."""
        def saving(msg: wire.Question) -> Any:
            value = answer(msg)
            # the client's pause, not a rebalance's (a new master must not keep that one)
            paused = (self.rebalancing.was_paused if self.rebalancing is not None
                      else self.supervision.paused)
            self.carry.save_settings(self.settings, paused, self.observation.taps,
                                     self.clock())
            return value
        return saving

    def answer_status(self, msg: wire.AskStatus) -> dict:
        status = {**self.supervision.status(), **self.observation.status(),
                  **self.traces.counts(),
                  "dropped": self.dropped, "rebalancing": self.rebalancing is not None,
                  "master_restarts": self.boot.get("master_restarts", 0),
                  # the plan it runs: a new master's may be newer than the handle's (a
                  # rebalance cut short after a container switched)
                  "epoch": self.plan.epoch, "plan": self.plan.to_data(),
                  "settings": self.settings.status(),
                  "metrics_url": self.export.url if self.export is not None else None}
        if self.export_error:
            status["metrics_error"] = self.export_error
        if self.remote:  # and the connections the gatekeepers refused
            status.update(self.supervision.remote_status(), refusals={
                "master": dict(self.gate.refusals.counts), **self.observation.refusals()})
        return status

    def answer_sample(self, msg: wire.AskSample) -> list[dict]:
        """The newest ``n`` tuples the instances of a component sent on a stream, newest
        last. Each request (re)starts the tap for ``keep`` seconds; the first after a
        while finds nothing yet, since instances report their samples with their stats."""
        tap, tasks = self.observation.tap(msg)
        self.supervision.tell_ready(tap, tasks)
        return self.observation.sampled(msg, tap.n)

    # -- instance logs, from their containers ---------------------------------------------
    def relay_logs(self, ident: bytes, msg: wire.AskLogs) -> None:
        """Ask the container running ``msg.task`` for the end of that instance's log (a
        remote container's log stays on its executor's host); ``on_logs_reply`` passes
        the answer on, or ``expire_log_requests`` says the container did not give one."""
        try:
            info = self.plan.task(msg.task)
        except (KeyError, TypeError, ValueError, IndexError):
            info = None
        if info is None or info.component != msg.component:
            return self.send(ident, wire.Reply(
                id=msg.id, ok=False, value=f"no task {msg.task!r} of {msg.component!r}"))
        sm = self.supervision.sms.get(info.container)
        if sm is None:
            return self.send(ident, wire.Reply(
                id=msg.id, ok=False, value=f"container {info.container} has not said hello yet"))
        self._log_ids += 1
        self.log_requests[self._log_ids] = (ident, msg.id, info.container,
                                            self.clock() + LOG_WAIT)
        self.send(sm["ident"], wire.Logs(request=self._log_ids, component=info.component,
                                         task=msg.task, limit=LOG_TAIL))

    def on_logs_reply(self, ident: bytes, msg: wire.LogsReply) -> None:
        waiting = self.log_requests.get(msg.request)
        if waiting is None:
            return  # answered too late: the client was told already
        client, req, container, _ = waiting
        sm = self.supervision.sms.get(container)
        if sm is None or sm["ident"] != ident:
            log.warning("a log for container %s came from %r, not from it", container, ident)
            return
        del self.log_requests[msg.request]
        self.send(client, wire.Reply(id=req, ok=msg.ok, value=msg.value))

    def expire_log_requests(self, now: float) -> None:
        for rid, (client, req, container, deadline) in list(self.log_requests.items()):
            if now > deadline:
                del self.log_requests[rid]
                self.send(client, wire.Reply(
                    id=req, ok=False,
                    value=f"container {container} did not send the log in {LOG_WAIT} s"))
