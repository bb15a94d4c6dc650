"""The dashboard's health verdict: healthy, degraded or failing, the reason in words, and
the component that causes it. A pure function of a snapshot (``workbench._dashboard.collect``):
it reads only signals the master already measures, so a recorded metrics dict gives the
same verdict as the live topology.

The signals, worst first:

- the master crashed or does not answer (failing / degraded);
- a spout's tuples fail (timed-out ones included): failing when none completes any more,
  degraded otherwise; the cause is the component the tuples wait on (below);
- a spout's p99 complete latency near ``message_timeout`` (from :data:`LATE` of it): its
  tuples are about to time out and be replayed;
- backpressure: a bolt's queue is so long that the spouts are held;
- a bolt at capacity (:data:`BUSY` or more): it spends nearly all its time in ``process``
  and cannot take more. Its capacity is the larger of the window's and the last few
  seconds' (``snapshot["recent"]``, from the dashboard's history): the window's counts the
  start-up too, so a bolt that cannot keep up would show it only after a minute;
- instances restarted (user code crashes) in the last minute (the events say when).

"The component that causes it", for a spout's failures or latency, is the backpressure
root cause if there is one, else the top finding of the bottleneck finder
(:func:`findings`, ``runtime.diagnosis``: a slow bolt, a skewed one, the acker), else the
busiest bolt when it is busy, else a bolt that restarts or raises: where a person should
look first. A finding the checks above do not cover (skew, the acker, a full in-flight
limit, too few cores) degrades the verdict itself.

>>> snap = {"state": "running", "config": {"message_timeout": 30.0}, "metrics": {
...     "components": {"src": {"kind": "spout", "acked": 0, "failed": 4000},
...                    "count": {"kind": "bolt", "capacity": 0.98}}}}
>>> verdict(snap)  # doctest: +NORMALIZE_WHITESPACE
{'level': 'failing', 'component': 'count',
 'reason': 'spout src: 4k failed, none acked; count is at capacity (0.98): it cannot keep up'}
>>> verdict({"state": "running", "metrics": {"components": {"a": {"kind": "bolt"}}}})["level"]
'healthy'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.diagnosis import Finding, diagnose

from . import _format

LEVELS = ("healthy", "degraded", "failing")  # worst last
BUSY = 0.8  # a bolt's capacity from which it is called "at capacity" (Storm's UI: red at 0.8)
LATE = 0.5  # complete latency, as a share of message_timeout, from which tuples risk timing out
RESTARTS_WITHIN = 60.0  # seconds: a restart older than this no longer degrades the verdict
DEFAULT_TIMEOUT = 30.0  # seconds: runtime's default message_timeout, when the config lacks it


def verdict(snapshot: Mapping[str, Any]) -> dict:
    """``{"level", "reason", "component"}`` for a snapshot (see the module docstring)."""
    state = snapshot.get("state")
    if state == "dead":
        return _say("failing", "the topology master crashed", None)
    if state == "not answering":
        return _say("degraded", "the topology master does not answer", None)
    components = _components(snapshot)
    if not components or state not in ("running", "paused"):
        return _say("healthy", "", None) if state in ("running", "paused") else \
            _say(None, "", None)
    findings = [f for check in CHECKS for f in check(snapshot, components)]
    if not findings:
        return _say("healthy", "every spout tuple completes; no bolt is at capacity", None)
    findings.sort(key=lambda f: -LEVELS.index(f[0]))
    level, reason, component = findings[0]
    return _say(level, reason, component)


def _say(level: str | None, reason: str, component: str | None) -> dict:
    return {"level": level, "component": component, "reason": reason}


def _num(m: Mapping[str, Any], key: str) -> float:
    return _format.number(m.get(key)) or 0


def _components(snapshot: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The user components' metrics, each bolt's capacity the larger of the window's and
    the recent one (module docstring)."""
    found = (snapshot.get("metrics") or {}).get("components") or {}
    recent = snapshot.get("recent") or {}
    out = {}
    for c, m in found.items():
        if not isinstance(m, Mapping) or c.startswith("__"):
            continue
        lately = _format.number((recent.get(c) or {}).get("capacity"))
        busy = max(_num(m, "capacity"), lately or 0)
        out[c] = {**m, "capacity": busy} if m.get("kind") == "bolt" and busy else m
    return out


def findings(snapshot: Mapping[str, Any]) -> list[Finding]:
    """The bottleneck finder's findings for a snapshot, most important first: its metrics,
    each bolt's capacity the larger of the window's and the recent one (as the checks
    read it), the backpressure causes, and the cores the snapshot was taken on."""
    metrics = snapshot.get("metrics")
    if not isinstance(metrics, Mapping) or snapshot.get("state") not in ("running", "paused"):
        return []
    recent = {**metrics, "components": {**(metrics.get("components") or {}),
                                        **_components(snapshot)}}
    causes = [c.get("component") for c in held_by(snapshot) if c.get("component")]
    cores = _format.number(snapshot.get("cores"))
    return diagnose(recent, config=snapshot.get("config") or {}, backpressure=causes,
                    cores=int(cores) if cores else None)


SYMPTOMS = ("timeouts", "max_spout_pending", "cpu")  # findings that name no culprit bolt


def culprit(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> str | None:
    """Where a person should look when spout tuples are slow or lost (module docstring)."""
    held = [c.get("component") for c in held_by(snapshot)]
    if held:
        return held[0]
    named = [f.component for f in findings(snapshot) if f.kind not in SYMPTOMS]
    if named:
        return named[0]
    bolts = {c: m for c, m in components.items() if m.get("kind") != "spout"}
    busy = max(bolts, key=lambda c: _num(bolts[c], "capacity"), default=None)
    if busy is not None and _num(bolts[busy], "capacity") >= BUSY:
        return busy
    crashing = [c for c, m in bolts.items() if _num(m, "restarts")]
    return crashing[0] if crashing else None


def held_by(snapshot: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The backpressure root causes the master reports (``status()["backpressure"]``)."""
    found = (snapshot.get("status") or {}).get("backpressure") or []
    return [c for c in found if isinstance(c, Mapping)]


def _because(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> tuple:
    """(the culprit, a clause saying why it is one) for a spout's trouble."""
    cause = culprit(snapshot, components)
    if cause is None:
        return None, ""
    m = components.get(cause) or {}
    if cause in {c.get("component") for c in held_by(snapshot)}:
        return cause, f"; {cause} holds the spouts (backpressure)"
    if _num(m, "capacity") >= BUSY:
        return cause, f"; {cause} is at capacity ({_format.share(m.get('capacity'))}): " \
                      "it cannot keep up"
    return cause, f"; {cause} restarted {_times(int(_num(m, 'restarts')))}"


def _failures(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    out = []
    for name, m in components.items():
        lost = _num(m, "failed")  # timed-out tuples are counted as failed too
        if m.get("kind") != "spout" or not lost:
            continue
        acked, late = _num(m, "acked"), _num(m, "timed_out")
        cause, why = _because(snapshot, components)
        level = "failing" if not acked else "degraded"
        done = "none acked" if not acked else f"{_format.count(acked)} acked"
        late = f" ({_format.count(late)} timed out)" if late else ""
        out.append((level, f"spout {name}: {_format.count(lost)} failed{late}, {done}{why}",
                    cause or name))
    return out


def _latency(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    timeout = _format.number((snapshot.get("config") or {}).get("message_timeout"))
    timeout = timeout if timeout and timeout > 0 else DEFAULT_TIMEOUT
    out = []
    for name, m in components.items():
        p99 = _format.number((m.get("complete_latency_ms") or {}).get("p99")) \
            if isinstance(m.get("complete_latency_ms"), Mapping) else None
        if m.get("kind") != "spout" or p99 is None or p99 < LATE * timeout * 1000:
            continue
        cause, why = _because(snapshot, components)
        out.append(("degraded", f"spout {name}: p99 complete latency {_format.millis(p99)}, "
                                f"near the {timeout:g} s message timeout{why}", cause or name))
    return out


def _backpressure(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    return [("degraded", f"backpressure: {c.get('component')} cannot keep up and holds "
                         "the spouts", c.get("component")) for c in held_by(snapshot)[:1]]


def _capacity(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    busy = [(c, m) for c, m in components.items()
            if m.get("kind") != "spout" and _num(m, "capacity") >= BUSY]
    return [("degraded", f"{c} is at capacity ({_format.share(m.get('capacity'))}): it "
                         "spends nearly all its time in process and cannot keep up", c)
            for c, m in sorted(busy, key=lambda cm: -_num(cm[1], "capacity"))[:1]]


def _restarts(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    """Instances restarted in the last :data:`RESTARTS_WITHIN` seconds (the events say
    when; the metrics count every restart since the start, which one old crash would
    keep "degraded" for ever)."""
    now = _format.number(snapshot.get("time")) or 0
    recent: dict[str, int] = {}
    for e in snapshot.get("events") or []:
        when = _format.number(e.get("time")) or 0
        if e.get("kind") == "restarted" and e.get("component") in components and \
                now - when <= RESTARTS_WITHIN:
            recent[e["component"]] = recent.get(e["component"], 0) + 1
    return [("degraded", f"{c} restarted {_times(n)} in the last {RESTARTS_WITHIN:g} s "
                         "(its code raised: see exceptions)", c)
            for c, n in sorted(recent.items(), key=lambda cn: -cn[1])[:1]]


def _bottleneck(snapshot: Mapping[str, Any], components: Mapping[str, Mapping]) -> list:
    """The top finding the other checks do not already say (a slow bolt is
    :func:`_capacity`'s, timeouts are :func:`_failures`')."""
    found = [f for f in findings(snapshot) if f.kind not in ("slow_bolt", "timeouts")]
    return [("degraded", f"{f.kind.replace('_', ' ')} at {f.component}: {f.advice}",
             f.component) for f in found[:1]]


def _times(n: int) -> str:
    return "once" if n == 1 else f"{_format.whole(n)} times"


CHECKS = (_failures, _latency, _backpressure, _capacity, _bottleneck, _restarts)
