"""``running.profile`` on real processes: py-spy samples an instance's Python stacks
without stopping it, in user code and in ``prepare``; the magic shows the same. The
checks are on which frames were seen, on a CPU or waiting, never on timings."""

from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from runtime import Bolt, Topology
from runtime.testing import PacedSpout, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FAST = {"stats_interval": 0.05}


def spin_in_prepare() -> None:
    """Never returns, never waits: all of it on a CPU."""
    n = 0
    while True:
        n += 1


def nap() -> None:
    time.sleep(0.02)


class StuckInPrepare(Bolt):
    def prepare(self, config, context):
        spin_in_prepare()


class Sleepy(Bolt):
    def process(self, tup):
        nap()


def frames(table: dict[str, int], name: str) -> int:
    """Samples of stacks that pass through a frame of function ``name``."""
    return sum(n for stack, n in table.items()
               if any(f.split(" (")[0].endswith(name) for f in stack.split(";")))


def started(running, component: str):
    """The component's statistics once each task has said hello (its pid is known)."""
    stats = [s for s in running.statistics() if s.component == component]
    return stats if stats and all(s.pid for s in stats) else None


def test_a_task_stuck_in_prepare_is_sampled_on_its_cpu():
    topo = Topology("stuck", **FAST)
    topo.spout("numbers", PacedSpout(rate=50))
    topo.bolt("stuck", StuckInPrepare).shuffle_grouping("numbers")
    with topo.submit() as running:
        wait_for(lambda: started(running, "stuck"), timeout=30, what="the stuck task's pid")
        p = wait_for(lambda: _seen(running.profile("stuck", seconds=1), "spin_in_prepare"),
                     timeout=30, what="spin_in_prepare sampled")
    assert frames(p.cpu, "StuckInPrepare.prepare") >= frames(p.cpu, "spin_in_prepare") > 0
    assert frames(p.waiting, "spin_in_prepare") < frames(p.cpu, "spin_in_prepare")
    assert p.tasks == (running.plan.component_tasks()["stuck"][0],) and p.rate == 100


def _seen(p, name: str):
    return p if frames(p.cpu, name) else None


def test_a_sleeping_bolt_shows_waiting_per_task_and_the_magic_draws_it():
    topo = Topology("sleepy", **FAST)
    topo.spout("numbers", PacedSpout(rate=100))
    topo.bolt("sleepy", Sleepy, parallelism=2).shuffle_grouping("numbers")
    shell = _shell()
    shell.user_ns["sleepy"] = topo
    shell.run_line_magic("topology", "submit sleepy --no-dashboard")
    running = shell.user_ns["sleepy_running"]
    try:
        running.wait_active(timeout=30)
        wait_for(lambda: all(s.executed for s in started(running, "sleepy") or [None]),
                 timeout=30, what="both sleepy tasks executing")
        tasks = running.plan.component_tasks()["sleepy"]
        p = wait_for(lambda: _waited(running.profile("sleepy", seconds=1), "nap"),
                     timeout=30, what="nap sampled waiting")
        one = shell.run_line_magic("topology", f"profile sleepy sleepy 1 task={tasks[1]}")
        with pytest.raises(UsageError, match="no component 'nope'"):
            shell.run_line_magic("topology", "profile sleepy nope")
        with pytest.raises(UsageError, match="usage: %topology profile"):
            shell.run_line_magic("topology", "profile sleepy sleepy soon")
        with pytest.raises(ValueError, match="not a task of 'sleepy'"):
            running.profile("sleepy", task=999)
        with pytest.raises(ValueError, match="seconds must be"):
            running.profile("sleepy", seconds=0)
    finally:
        running.kill()
        shell.run_line_magic("unload_ext", "kernel_ext")
    assert p.tasks == tasks
    assert {stack.split(";")[0] for stack in p.folded.splitlines()} == {
        f"task {t}" for t in tasks}  # several tasks: each stack starts at its task
    assert one.tasks == (tasks[1],) and "<svg" in one._repr_svg_()
    assert not any(stack.startswith("task ") for stack in one.folded.splitlines())


def _waited(p, name: str):
    return p if frames(p.waiting, name) else None


def _shell() -> InteractiveShell:
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    shell.run_line_magic("load_ext", "kernel_ext")
    return shell
