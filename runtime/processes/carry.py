"""What a master leaves in the run directory for the master that may replace it
(docs/internals/adoption.md, "What carries over").

The stream managers and instances know what they run, not what the notebook asked for,
nor what happened before: so every master keeps, in ``run_dir/master/``,

- ``settings.json``: the live settings in force (``max_spout_pending`` per spout
  component, the streams recorded, the trace rate, whether the client paused the spouts)
  and the taps that are on (until when, wall clock), rewritten whole after each change and
  before the client hears it is done;
- ``events.jsonl`` and ``exceptions.jsonl``: each event and exception report, appended as
  it happens, each line naming the master that wrote it (``master_pid``);
- ``rebalance.json`` while a rebalance runs (written before its first step is told):
  a new master that finds it knows the rebalance was cut short, and which components'
  parallelism it changed (their keyed state may have to be split again);
- ``plan.msgpack``: the plan the containers were last started on (``TopologyMaster.replan``,
  ``take_plan``): after a rebalance to a new number of containers the boot's plan is not
  the one that runs;
- ``traces.msgpack``: the newest finished traces (at most ``tracing.KEEP``), as the
  master's store filed them (``TraceStore.kept``: the records, not assembled traces),
  rewritten whole every ``tracing.SAVE_EVERY`` seconds while new trace records come,
  msgpack through :mod:`runtime.wire`.

A new master reads them before it adopts anyone: a restarted instance is told the same
settings, ``running.events()`` and ``exceptions()`` go on from where they were (events
written by an earlier master carry ``from_master``, its pid), the tuner turns already
recorded are not recorded again, ``running.traces()`` answers the saved traces after its
own. Files are JSON, written by
this process only; nothing here comes from a peer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

from runtime import wire

log = logging.getLogger("tupleflow.carry")

FOLDER = "master"
SETTINGS = "settings.json"
EVENTS = "events.jsonl"
EXCEPTIONS = "exceptions.jsonl"
REBALANCE = "rebalance.json"  # a rebalance is running (from the epoch it started on)
PLAN = "plan.msgpack"  # the plan the containers were last started on
TRACES = "traces.msgpack"  # the newest finished trees as filed (tracing.KEEP at most), newest first


class Carry:
    """Owns a master's files in ``run_dir/master/``: where they are, and this master's
    pid (written on every line, so that a later master can tell whose lines they are)."""

    def __init__(self, run_dir: str) -> None:
        self.folder = os.path.join(run_dir, FOLDER)
        os.makedirs(self.folder, exist_ok=True)
        self.pid = os.getpid()

    # -- settings ---------------------------------------------------------------------------
    def save_settings(self, settings: Any, paused: bool, taps: dict, now: float) -> None:
        """``settings`` a LiveSettings; ``taps`` (component, stream) -> on until, on the
        master's clock ``now`` (stored as wall-clock time: a new master's clock differs)."""
        data = {"max_spout_pending": settings.spout_pending, "trace": settings.trace,
                "recordings": [[c, s, on] for (c, s), on in settings.recordings.items()],
                "paused": paused,
                "taps": [[c, s, time.time() + until - now] for (c, s), until in taps.items()
                         if until > now]}
        _dump(os.path.join(self.folder, SETTINGS), data)

    def settings(self) -> dict | None:
        """What the last master saved, or None (none saved, or unreadable: logged)."""
        try:
            with open(os.path.join(self.folder, SETTINGS)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("the live settings of the master before cannot be read: %s", exc)
            return None

    # -- a rebalance --------------------------------------------------------------------------
    def rebalancing(self, epoch: int | None, counts: dict[str, int] | None = None) -> None:
        """A rebalance starts from the plan of ``epoch`` (None: none runs any more),
        changing the parallelism of ``counts``' components."""
        path = os.path.join(self.folder, REBALANCE)
        if epoch is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            return
        _dump(path, {"from_epoch": epoch, "counts": dict(counts or {})})

    def cut_short(self) -> int | None:
        """The epoch a rebalance the master before died in started from, or None."""
        return self._rebalance().get("from_epoch")

    def cut_short_counts(self) -> dict[str, int]:
        """The components whose parallelism that rebalance changed (empty if none)."""
        counts = self._rebalance().get("counts")
        return counts if isinstance(counts, dict) else {}

    def _rebalance(self) -> dict:
        try:
            with open(os.path.join(self.folder, REBALANCE)) as f:
                data = json.load(f)
            return {**data, "from_epoch": int(data["from_epoch"])}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    # -- the plan -----------------------------------------------------------------------------
    def save_plan(self, data: dict) -> None:
        """The plan (``PhysicalPlan.to_data``: its config may hold what JSON cannot, so
        msgpack through :mod:`runtime.wire`) the containers are started on from now."""
        self._save_packed(PLAN, data, "plan")

    def plan(self) -> dict | None:
        """The plan the last master started the containers on, or None (never saved:
        the boot's plan still runs, or unreadable: logged)."""
        data = self._load_packed(PLAN, "plan")
        return data if isinstance(data, dict) else None

    def _save_packed(self, name: str, data: Any, what: str) -> None:
        path = os.path.join(self.folder, name)
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(wire.pack(data))
            os.replace(path + ".tmp", path)
        except OSError as exc:  # a full disk must not stop the master
            log.warning("could not keep the %s for a later master: %s", what, exc)

    def _load_packed(self, name: str, what: str) -> Any:
        try:
            with open(os.path.join(self.folder, name), "rb") as f:
                return wire.unpack(f.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("the %s of the master before cannot be read: %s", what, exc)
            return None

    # -- traces -------------------------------------------------------------------------------
    def save_traces(self, traces: list[list]) -> None:
        """The newest finished trees as the store filed them (``TraceStore.kept``),
        msgpack through :mod:`runtime.wire` (never pickle), rewritten whole."""
        self._save_packed(TRACES, traces, "traces")

    def traces(self) -> list[list]:
        """What the last master saved ([] if nothing, or unreadable: logged); each
        entry is checked as it is filed again (``TraceStore.refile``)."""
        data = self._load_packed(TRACES, "traces")
        return data if isinstance(data, list) else []

    # -- journals ---------------------------------------------------------------------------
    def event(self, record: dict) -> None:
        self._append(EVENTS, record)

    def exception(self, report: dict) -> None:
        self._append(EXCEPTIONS, report)

    def _append(self, name: str, record: dict) -> None:
        line = json.dumps({**record, "master_pid": self.pid}, default=str)
        try:
            with open(os.path.join(self.folder, name), "a") as f:
                f.write(line + "\n")  # one write of a whole line: a reader skips a torn end
        except OSError as exc:  # a full disk must not stop the master
            log.warning("could not keep a record for a later master: %s", exc)

    def events(self) -> list[dict]:
        """Every event kept, oldest first; one an earlier master wrote has ``from_master``."""
        return [_whose(r, self.pid) for r in self._read(EVENTS)]

    def exceptions(self) -> list[dict]:
        """Every exception report kept, oldest first (as the master received them)."""
        return [{k: v for k, v in r.items() if k != "master_pid"} for r in self._read(EXCEPTIONS)]

    def _read(self, name: str) -> list[dict]:
        records = []
        with contextlib.suppress(FileNotFoundError), \
                open(os.path.join(self.folder, name)) as f:
            for line in f:
                with contextlib.suppress(ValueError):  # the torn end of a killed writer
                    records.append(json.loads(line))
        return [r for r in records if isinstance(r, dict)]


def _whose(record: dict, pid: int) -> dict:
    writer = record.pop("master_pid", None)
    if writer != pid:
        record["from_master"] = writer
    return record


def tuner_turns(events: list[dict]) -> dict[int, int]:
    """Spout task -> the tuner turns its last ``tuner`` event counted, unless a
    ``restarted`` event came after it (a new incarnation's tuner counts from 0).

    >>> tuner_turns([{"kind": "tuner", "task": 1, "turns": 4},
    ...              {"kind": "tuner", "task": 2, "turns": 9},
    ...              {"kind": "restarted", "task": 2}])
    {1: 4}
    """
    seen: dict[int, int] = {}
    for e in events:
        task = e.get("task")
        if e.get("kind") == "tuner" and type(task) is int and type(e.get("turns")) is int:
            seen[task] = e["turns"]
        elif e.get("kind") == "restarted":
            seen.pop(task, None)
    return seen


def restore(master: Any, carry: Carry) -> None:
    """Give a new master's parts what the masters before it kept (``master`` a
    TopologyMaster whose parts were just made)."""
    obs, settings = master.observation, master.settings
    events = carry.events()
    for record in events:
        obs.events.append(record)
    # the turns already recorded are not recorded again at the first report
    obs.tuner_turns.update(tuner_turns(events))
    master.traces.carry_over(carry.traces())
    for report in carry.exceptions():
        obs.exceptions.add(report)
    saved = carry.settings()
    if saved is None:
        return
    settings.spout_pending = {c: v for c, v in saved.get("max_spout_pending", {}).items()
                              if c in settings.component_tasks}
    settings.trace = saved.get("trace")
    settings.recordings = {(c, s): bool(on) for c, s, on in saved.get("recordings", [])
                           if c in settings.component_tasks}
    master.supervision.paused = bool(saved.get("paused", master.supervision.paused))
    now, wall = master.clock(), time.time()
    obs.taps.update({(c, s): now + until - wall for c, s, until in saved.get("taps", [])
                     if c in settings.component_tasks})


def _dump(path: str, data: Any) -> None:
    """Write JSON whole or not at all: a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)
