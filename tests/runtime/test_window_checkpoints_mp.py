"""A windowed bolt's open windows in the checkpointed state, with real processes (issue
21): the windowed tasks and the checkpoint spout SIGKILLed in turn mid-stream, a
checkpoint every 0.5 s; the last emission of every window equals a batch computation over
the log (the topology and the batch are in ``test_window_checkpoints.py``).

Waits poll the sink and the master's statistics with deadlines; the only sleeps pace the
chaos (``kill_in_turn``)."""

from __future__ import annotations

import contextlib
import random
import sys

import cloudpickle
import pytest

from runtime.testing import PacedLogSpout, read_sink, wait_for

from .test_checkpoints_mp import GO, go, kill_in_turn
from .test_window_checkpoints import (
    FIELDS,
    batch,
    fill_log,
    last_emissions,
    records,
    windows_topology,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

RATE = 200  # records a second until the kills are over: 30 s of log, hit several times
INTERVAL = 0.5  # seconds between checkpoints


def emitted(running) -> dict:
    return last_emissions(read_sink(running.run_dir, "sink", with_source=True))


def test_sigkilled_windowed_tasks_and_checkpoint_spout_keep_every_window_exact(
        tmp_path, tupleflow_processes):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    rows = records(6000)
    fill_log(tmp_path, rows)
    expected = batch(rows)
    spout = PacedLogSpout("events", root=str(tmp_path), fields=FIELDS, batch_size=50,
                          rate=RATE, rate_until=GO)
    victims = ["tumble", "__checkpoint", "slide", "count", "tumble", "__checkpoint"]
    seen: list[int] = []  # the window outputs in the sink before each kill
    with windows_topology("win-ckpt-mp", spout).submit(checkpoint_interval=INTERVAL) as running:
        killed = kill_in_turn(running, victims, rng, tupleflow_processes, pause=0.4,
                              before_kill=lambda: seen.append(
                                  sum(len(w) for w in emitted(running).values())))
        go(running)  # the rest of the log, unpaced
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: emitted(running) == expected, 120, "every window, exact")
        got = emitted(running)
        stats = running.statistics()
    total = sum(len(w) for w in expected.values())
    print(f"\n[window checkpoints] seed {seed}; killed {killed}; outputs before each kill "
          f"{seen} of {total}")
    assert len(killed) == len(victims)
    assert sum(n < total for n in seen) >= 4  # most kills came mid-stream
    assert sum(s.restarts for s in stats if s.component in ("tumble", "slide", "count")) >= 4
    for component in expected:
        assert got.get(component) == expected[component], f"{component}, seed {seed}"
