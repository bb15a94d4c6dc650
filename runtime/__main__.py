"""Run a topology from the command line, outside a notebook.

    python -m runtime run FILE.py:ATTR [--seconds N] [--containers N] [--set KEY=VALUE ...]

``ATTR`` names a :class:`~runtime.Topology` in the file, or a function returning one.
Classes defined in the file reach the instances by value, as a notebook's do. A status
line per second shows what each component emitted and executed; Ctrl-C (or the end of
``--seconds``) kills the topology and prints a summary.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import time
from collections.abc import Sequence

import cloudpickle

from runtime.model.topology import Topology, TopologyError
from runtime.observe.stats import InstanceStats


def load_topology(target: str) -> Topology:
    """``FILE.py:ATTR`` -> the Topology it names (calling ATTR if it is a function)."""
    path, sep, attr = target.rpartition(":")
    if not sep or not path or not attr:
        raise SystemExit(f"expected FILE.py:ATTR, got {target!r}")
    module = _load_file(path)
    if not hasattr(module, attr):
        raise SystemExit(f"{path} defines no {attr!r}")
    topo = getattr(module, attr)
    topo = topo() if callable(topo) and not isinstance(topo, Topology) else topo
    if not isinstance(topo, Topology):
        raise SystemExit(f"{path}:{attr} is a {type(topo).__name__}, not a Topology")
    return topo


def _load_file(path: str):
    if not os.path.isfile(path):
        raise SystemExit(f"no such file: {path}")
    name = "tupleflow_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)  # instances cannot import it by name
    return module


def parse_setting(text: str) -> tuple[str, object]:
    """``KEY=VALUE``; the value is read as a Python literal when it is one."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw


def status_line(elapsed: float, stats: Sequence[InstanceStats],
                before: dict[str, tuple[int, int]], interval: float) -> str:
    parts = []
    for comp, (emitted, executed) in per_component(stats).items():
        prev_e, prev_x = before.get(comp, (0, 0))
        if executed or stats_kind(stats, comp) == "bolt":
            parts.append(f"{comp}: executed {executed:,} ({(executed - prev_x) / interval:,.0f}/s)")
        else:
            parts.append(f"{comp}: emitted {emitted:,} ({(emitted - prev_e) / interval:,.0f}/s)")
    return f"[{elapsed:5.1f}s] " + " | ".join(parts)


def per_component(stats: Sequence[InstanceStats]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for s in stats:
        e, x = out.get(s.component, (0, 0))
        out[s.component] = (e + s.emitted, x + s.executed)
    return out


def stats_kind(stats: Sequence[InstanceStats], comp: str) -> str:
    return next(s.kind for s in stats if s.component == comp)


def summary(stats: Sequence[InstanceStats], exceptions: list[dict]) -> str:
    lines = [f"{'component':<16} {'task':>4} {'emitted':>12} {'executed':>12} "
             f"{'restarts':>8} {'errors':>6}"]
    for s in stats:
        lines.append(f"{s.component:<16} {s.task:>4} {s.emitted:>12,} {s.executed:>12,} "
                     f"{s.restarts:>8} {s.errors:>6}")
    if exceptions:
        last = exceptions[-1]
        times = sum(e.get("count", 1) for e in exceptions)
        lines.append(f"{times} exception(s), {len(exceptions)} distinct; the last, from "
                     f"{last['component']}[{last['task']}]: {last['error']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    topo = load_topology(args.target)
    config = dict(args.set or [])
    try:
        running = topo.submit(scheduler="local", containers=args.containers, config=config)
    except TopologyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"submitted {topo.name!r}: {running.plan}\nrun directory (logs): {running.run_dir}")
    with running:
        try:
            stats = watch(running, args.seconds)
        except KeyboardInterrupt:
            stats = running.statistics()
        exceptions = running.exceptions()
    print("killed.\n" + summary(stats, exceptions))
    return 0


def watch(running, seconds: float | None) -> list[InstanceStats]:
    """Print a status line every second until ``seconds`` have passed."""
    start = last = time.monotonic()
    before: dict[str, tuple[int, int]] = {}
    stats = running.statistics()
    while seconds is None or time.monotonic() - start < seconds:
        time.sleep(max(0.0, last + 1.0 - time.monotonic()))  # the pace of the status lines
        now = time.monotonic()
        stats = running.statistics()
        print(status_line(now - start, stats, before, now - last), flush=True)
        before, last = per_component(stats), now
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run a topology from a file")
    run_p.add_argument("target", metavar="FILE.py:ATTR")
    run_p.add_argument("--seconds", type=float, help="kill after this long (default: Ctrl-C)")
    run_p.add_argument("--containers", type=int, default=1)
    run_p.add_argument("--set", type=parse_setting, action="append", metavar="KEY=VALUE",
                       help="a topology option, e.g. --set batch_size=500")
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
