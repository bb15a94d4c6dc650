"""What one dashboard refresh costs the process that runs it (the kernel, in a notebook).

A 5-component topology (2 containers, a paced spout) runs; a ``workbench.Dashboard`` with no
thread of its own is refreshed ``--refreshes`` times in a row. Each refresh asks the master
(status, metrics, statistics; events and exceptions every fifth) and redraws every panel.

    RESULT name=dashboard-refresh components=5 refreshes=30 wall_ms=9.4 cpu_ms=2.1
           collect_wall_ms=5.5 collect_cpu_ms=0.9 draw_cpu_ms=1.3 html_bytes=17242

``wall_ms``/``cpu_ms``: per refresh (CPU of this process only, not the master's);
``collect_*``: the five requests alone; ``draw_cpu_ms``: rendering every panel from the
last snapshot; ``html_bytes``: graph + metrics + plan HTML, what a refresh sends when all
changed. Run with the repository importable::

    PYTHONPATH=. python benchmarks/dashboard_refresh.py --refreshes 30
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# benchmarks/workbench.py is named like the package measured here: take this folder off
# sys.path so that `import workbench` finds the package.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != HERE]

from runtime import Topology  # noqa: E402
from runtime.testing import Doubler, ListSink, PacedSpout, wait_for  # noqa: E402


def topology() -> Topology:
    topo = Topology("refresh")
    topo.spout("nums", PacedSpout(500))
    topo.bolt("double", Doubler, parallelism=2).shuffle_grouping("nums")
    topo.bolt("twice", Doubler).fields_grouping("double", ["n"])
    topo.bolt("evens", Doubler).all_grouping("nums")
    topo.bolt("sink", ListSink).global_grouping("twice").shuffle_grouping("evens")
    return topo


def timed(fn, n: int) -> tuple[float, float]:
    """Mean wall and CPU milliseconds of ``fn()`` over ``n`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return ((time.perf_counter() - wall) * 1000 / n, (time.process_time() - cpu) * 1000 / n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refreshes", type=int, default=30)
    args = parser.parse_args(argv)
    from workbench import Dashboard, _dashboard

    topo = topology()
    with topo.submit(containers=2) as running:
        running.wait_active()
        board = Dashboard(running, topology=topo, start=False)
        wait_for(lambda: board.refresh().get("metrics"), 30, "a first refresh")
        wall, cpu = timed(board.refresh, args.refreshes)
        if board.snapshot.get("state") != "running":
            print(f"FAILED dashboard-refresh: state {board.snapshot.get('state')}",
                  file=sys.stderr)
            return 1
        c_wall, c_cpu = timed(lambda: _dashboard.collect(running), args.refreshes)
        _, d_cpu = timed(lambda: board._draw(board.snapshot), args.refreshes)
        parts = board._parts
        size = sum(len(w.value) for w in (parts.graph, parts.metrics, parts.plan))
        board.close()
    print(f"RESULT name=dashboard-refresh components=5 refreshes={args.refreshes} "
          f"wall_ms={wall:.1f} cpu_ms={cpu:.1f} collect_wall_ms={c_wall:.1f} "
          f"collect_cpu_ms={c_cpu:.1f} draw_cpu_ms={d_cpu:.1f} html_bytes={size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
