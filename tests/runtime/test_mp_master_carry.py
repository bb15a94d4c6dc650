"""What a new master carries over (issue 23): the live settings, the taps, the events and
the exceptions of the master it replaces, with real processes. Each setting is checked
in the instances' own behaviour after the replacement: a spout restarted under the new
master applies the cap and the recording the notebook asked of the old one.

Waits poll the handle with deadlines; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import cloudpickle
import pytest

from runtime import Bolt, Topology
from runtime.testing import ListSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

# tuples in flight to the bolt when it raised time out (and are replayed) in 2 s
OPTIONS = {"ackers": 1, "max_spout_pending": 200, "stats_interval": 0.1, "spout_wait": 0.005,
           "message_timeout": 2.0}


class RaisesOnce(Bolt):
    """Raises on its 50th tuple, once in the topology's life (a file in the run directory
    remembers), and acks every other tuple."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.path, self.seen = os.path.join(context.run_dir, "raised"), 0

    def process(self, tup):
        self.seen += 1
        if self.seen == 50 and not os.path.exists(self.path):
            open(self.path, "w").close()
            raise ValueError("raised once, before the master died")
        self.ack(tup)


def numbers(name: str) -> Topology:
    topo = Topology(name, **OPTIONS)
    topo.spout("numbers", ListSpout([[i] for i in range(200_000)], ["n"], replay=True, rate=300),
               parallelism=2)
    topo.bolt("check", RaisesOnce).shuffle_grouping("numbers")
    return topo


def spouts(stats):
    return [s for s in stats if s.component == "numbers"]


def ask_what_a_new_master_must_carry(running, keep: float) -> tuple[dict, list, list, int]:
    """Ask the master for a cap, a recording, a trace rate and a tap on for ``keep``
    seconds (which caught something); returns what the notebook sees then (settings,
    events, exceptions) and the master's pid."""
    running.set_max_spout_pending(7, "numbers")
    running.record("numbers")
    running.set_trace(0.25)
    assert running.sample("numbers", keep=keep, wait=True, timeout=60) != []
    return (running.status()["settings"], running.events(), running.exceptions(),
            running.master_pid)


def replace_the_master(running, old: int, timeout: float) -> list:
    """SIGKILL the master ``old``; wait for a new one, and until every instance has
    reported to it since (its taps too: samples come with its statistics)."""
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: running.master_pid != old, timeout, "a new master")
    running.wait_active(timeout=timeout)
    adopted = time.time()
    return running.wait_until(lambda s: all((x.reported or 0) > adopted for x in s),
                              timeout=timeout)


def check_carried(running, settings: dict, events: list, exceptions: list, old: int) -> None:
    """What the notebook saw before the master ``old`` died is the new master's: the
    settings, the events (marked as the old master's) and the exceptions."""
    assert running.status()["settings"] == settings == {
        "max_spout_pending": {"numbers": 7}, "trace": 0.25, "recordings": [["numbers",
                                                                            "default"]]}
    carried = running.events()[:len(events)]
    assert [(e["kind"], e["time"]) for e in carried] == [(e["kind"], e["time"]) for e in events]
    assert {e["from_master"] for e in carried} == {old}
    assert [e["kind"] for e in running.events()].count("master_restarted") == 1
    assert [(x["error"], x["count"]) for x in running.exceptions()] == \
        [(x["error"], x["count"]) for x in exceptions]


def check_a_restarted_spout_is_told(running, timeout: float) -> None:
    """A spout killed under the new master is restarted and told what the notebook asked
    the old one, the cap (7) and the recording, before it is activated: none of its own
    reports shows a tuple emitted under another cap, nor more than 7 in flight.

    Its own reports are those sent after the kill: between its ready and its first
    report, the master's record of the task shows the new incarnation, running, with the
    dead one's last report (the likely cause of CI's one failure here: a spout killed
    while its pending was above 7, draining under the lowered cap, read as ``(1, 1, 7,
    9)`` by the old check in a scratch run; the master now drops that report, and this
    check does not rely on it). The other spout holds the cap, and its
    pending comes down to it: a cap lowered (or told again by the new master, when the old
    one died before it went) leaves what is in flight to be acked or to time out."""
    victim = spouts(running.statistics())[0]
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.time()  # a SIGKILLed process sends nothing once kill() has returned
    own: list = []  # the restarted spout's own reports, as seen

    def told(stats) -> bool:
        own.extend(x for x in spouts(stats) if x.task == victim.task
                   and x.incarnation > victim.incarnation and (x.reported or 0) > killed)
        return (bool(own) and own[-1].max_spout_pending == 7
                and own[-1].recording == ["default"] and capped(spouts(stats)))

    try:
        running.wait_until(told, timeout=timeout, interval=0.1)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; caps {caps(spouts(running.statistics()))}; the "
                             f"restarted spout's own reports {caps(own[-3:])}") from None
    assert all(x.emitted == 0 if x.max_spout_pending != 7 else x.pending <= 7
               for x in own), caps(own)


def capped(stats) -> bool:
    return all(s.max_spout_pending == 7 and s.pending <= 7 for s in stats)


def caps(stats) -> list[tuple]:
    """What a failure shows of each spout report: task, incarnation, cap, emitted,
    pending, recording."""
    return [(s.task, s.incarnation, s.max_spout_pending, s.emitted, s.pending, s.recording)
            for s in stats]


def test_settings_taps_events_and_exceptions_outlive_the_master(tupleflow_processes):
    running = numbers("carried").submit(containers=2)
    running.wait_until(lambda s: running.exceptions() and all(
        x.acked > 20 for x in spouts(s)), timeout=90, interval=0.1)
    # a tap on for two minutes
    settings, events, exceptions, old = ask_what_a_new_master_must_carry(running, 120)
    replace_the_master(running, old, 90)
    check_carried(running, settings, events, exceptions, old)
    # the tap asked of the old master is still on: the new one kept what it caught (a
    # master that did not know of it would have dropped those, and answer [] at first)
    assert running.status()["paused"] is False
    assert running.sample("numbers", n=5) != []
    check_a_restarted_spout_is_told(running, 90)
    running.kill()
    assert tupleflow_processes() == []
