"""Memory under backpressure: a 10 ms bolt behind a fast spout (issue 5's target: "peak
RSS of every process stays within 2x its idle RSS over a 60 s run").

Workload
    A spout emits ``[n, payload]`` (1 KB of payload) as fast as it is let, with a
    ``msg_id`` (acking on, one acker, no max_spout_pending: only backpressure holds it);
    a bolt spends 10 ms of CPU on each tuple (``runtime.testing.SlowBolt``) and acks it.
    The spout is ~1000x faster than the bolt, so the topology spends the run in
    backpressure: that is the point.

Measurement
    The topology is submitted paused; once every instance is ready, every process
    (master, stream manager, instances) is sampled for a second at rest: its *idle* RSS
    is the largest of those samples. Then the spouts are resumed for ``--seconds``
    (default 60) while every process's RSS is sampled every 0.1 s (psutil, from this
    process: nothing in the topology measures itself). The peak is the largest sample.

Reading the output
    One line per process, then one summary line, e.g. (wrapped here)::

        RESULT name=rss-slow-bolt role=instance component=slow task=2 pid=123
               idle_mb=30.1 peak_mb=31.0 ratio=1.03 seconds=60.0
        RESULT name=rss-slow-bolt-max ratio=1.21 role=stmgr target=2.0 ok=yes
               executed=5711 acked=5700 failed=0 bp_seconds=59.6

    ``ratio = peak / idle``. ``executed``/``acked``/``failed`` say the run did work, and
    ``bp_seconds`` is the time the stream manager held its spouts.

    python benchmarks/rss_slow_bolt.py --seconds 60
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import psutil

from runtime import Spout, Topology
from runtime.testing import SlowBolt, wait_for

MB = 1024 * 1024
SAMPLE_EVERY = 0.1  # seconds between two RSS samples of every process
TARGET = 2.0  # the target: peak RSS within 2x idle


class RssWatch:
    """Samples the resident memory of a topology master and all its descendants every
    ``every`` seconds from a thread: each process's baseline (at :meth:`start`) and peak.
    Shared by the memory tests of ``tests/runtime`` and this benchmark."""

    def __init__(self, master_pid: int, every: float = 0.05) -> None:
        self.master = psutil.Process(master_pid)
        self.every = every
        self.base: dict[int, int] = {}
        self.peak: dict[int, int] = {}
        self.role: dict[int, str] = {}
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> dict[int, int]:
        """``{pid: rss}`` of the master and its descendants now (those that vanish
        between the listing and the reading are left out)."""
        found = {}
        try:
            procs = [self.master, *self.master.children(recursive=True)]
        except psutil.Error:
            return found
        for proc in procs:
            try:
                found[proc.pid] = proc.memory_info().rss
                if proc.pid not in self.role:
                    self.role[proc.pid] = _role(proc.cmdline())
            except psutil.Error:
                continue
        return found

    def start(self, base: dict[int, int] | None = None) -> RssWatch:
        """Take the baseline (now, unless given), then sample until :meth:`stop`."""
        self.base = dict(base) if base is not None else self.sample()
        self.peak = dict(self.base)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.halt.wait(self.every):
            for pid, rss in self.sample().items():
                self.peak[pid] = max(rss, self.peak.get(pid, 0))

    def stop(self) -> dict[int, tuple[str, int, int]]:
        """``{pid: (role, baseline, peak)}`` for the processes of the baseline."""
        self.halt.set()
        self.thread.join()
        return {pid: (self.role.get(pid, "?"), b, self.peak[pid]) for pid, b in self.base.items()}


def _role(cmdline: list[str]) -> str:
    line = " ".join(cmdline)
    for module, role in (("processes.master", "tmaster"), ("processes.stmgr", "stmgr"),
                         ("processes.instance", "instance")):
        if module in line:
            return role
    return "other"


def started_paused(topology: Topology, **options):
    """Submit, pause before the spouts are activated, and wait until every instance is
    ready: the processes are then idle, for an RSS baseline."""
    running = topology.submit(**options)
    running.pause()
    wait_for(lambda: running.status()["state"] == "running", timeout=60, what="ready")
    return running


def idle_rss(watch: RssWatch, seconds: float = 1.0) -> dict[int, int]:
    """Each process's largest RSS over ``seconds`` at rest."""
    idle: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid, rss in watch.sample().items():
            idle[pid] = max(rss, idle.get(pid, 0))
        time.sleep(SAMPLE_EVERY)  # a sampling period, not a synchronisation
    return idle


class FastSpout(Spout):
    """Emits ``[n, payload]`` with ``msg_id=n`` at every call, for ever."""

    outputs = ["n", "payload"]

    def open(self, config, context):
        self.n, self.payload = 0, "x" * 1024

    def next_tuple(self):
        self.n += 1
        self.emit([self.n, self.payload], msg_id=self.n)


def build_topology(bolt_seconds: float) -> Topology:
    topo = Topology("rss-slow-bolt", ackers=1, message_timeout=600.0, stats_interval=0.5)
    topo.spout("fast", FastSpout)
    topo.bolt("slow", SlowBolt(bolt_seconds, fields=["n", "payload"])).shuffle_grouping("fast")
    return topo


def labels(running) -> dict[int, str]:
    """``{pid: "role=... component=... task=..."}`` for every process of the topology."""
    status = running.status()
    out = {status["pid"]: "role=tmaster"}
    out.update({pid: f"role=stmgr container={c}" for c, pid in status["containers"].items()})
    out.update({s.pid: f"role=instance component={s.component} task={s.task}"
                for s in running.statistics() if s.pid})
    return out


def run(seconds: float, bolt_seconds: float) -> int:
    running = started_paused(build_topology(bolt_seconds), containers=1)
    with running:
        names = labels(running)
        watch = RssWatch(running.status()["pid"], every=SAMPLE_EVERY)
        watch.start(base=idle_rss(watch))
        running.resume()
        time.sleep(seconds)  # the run's length (sampling goes on in the watch's thread)
        rss = watch.stop()
        m = running.metrics("all")
    worst = (0.0, "")
    for pid, (role, idle, peak) in sorted(rss.items()):
        ratio = peak / idle
        worst = max(worst, (ratio, role))
        print(f"RESULT name=rss-slow-bolt {names.get(pid, 'role=' + role)} pid={pid} "
              f"idle_mb={idle / MB:.1f} peak_mb={peak / MB:.1f} ratio={ratio:.2f} "
              f"seconds={seconds:.1f}", flush=True)
    c = m["components"]
    bp = sum(x["backpressure_seconds"] for x in m["containers"].values())
    print(f"RESULT name=rss-slow-bolt-max ratio={worst[0]:.2f} role={worst[1]} "
          f"target={TARGET} ok={'yes' if worst[0] <= TARGET else 'no'} "
          f"executed={c['slow']['executed']} acked={c['fast']['acked']} "
          f"failed={c['fast']['failed']} bp_seconds={bp:.1f}", flush=True)
    return 0 if worst[0] <= TARGET and c["slow"]["executed"] > 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the run")
    parser.add_argument("--bolt-ms", type=float, default=10.0, help="CPU ms per tuple")
    args = parser.parse_args(argv)
    return run(args.seconds, args.bolt_ms / 1000)


if __name__ == "__main__":
    sys.exit(main())
