"""What a window costs per tuple: the windowed bolt's pure logic, and a windowed bolt
against a plain one in the in-memory twin, measured in CPU time in the same run.

Why
    A windowed bolt pays, per tuple, an insertion into a queue kept in timestamp order,
    and per window a slice, a set of the window's sequence numbers (for ``window.new``)
    and the acks of what leaves. This puts numbers on it, and on the whole path
    (executor, acking, anchoring to every tuple of the window) next to a bolt that
    only counts, so that the ratio, not the absolute figure, is what to read on this
    noisy shared machine.

Reading the output (one line each, wrapped here)::

    RESULT name=window-manager window=event-sliding-20s-10s tuples=200000 windows=...
           ns_per_tuple=...
    RESULT name=window-bolt window=event-tumbling-10s tuples=50000 windowed_ns=...
           plain_ns=... ratio=...
    RESULT name=window-report held=10000 us_per_report=... ns_per_held_tuple=...
           core_share_at_0.25s=...

    python benchmarks/windows.py --tuples 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import BenchmarkError

from runtime import Bolt, Count, Duration, Topology, Window, WindowedBolt
from runtime.testing import InMemoryCluster, ListSpout
from runtime.windows import WindowManager

STREAM = ("events", "default")
SPACING_MS = 10  # event time between two tuples: 100 a second of event time
WINDOWS = {
    "event-sliding-20s-10s": Window.sliding(Duration(20), Duration(10), timestamp_field="ts",
                                            lag=Duration(1)),
    "event-tumbling-10s": Window.tumbling(Duration(10), timestamp_field="ts"),
    "count-sliding-1000-100": Window.sliding(Count(1000), Count(100)),
    "processing-tumbling-1s": Window.tumbling(Duration(1)),
}
BOLT_SPACING_MS = 100  # in the bolt runs: a 10 s window every 100 tuples
TICK_EVERY = 100  # tuples between two ticks of the pure run (a watermark interval)


def manager_round(window: Window, tuples: int) -> tuple[float, int]:
    """CPU seconds to add ``tuples`` in event-time order with a tick every TICK_EVERY,
    acking nothing (the expired are taken, as the bolt does); and the windows made."""
    m, made = WindowManager(window, inputs=[STREAM]), 0
    start = time.process_time()
    for i in range(tuples):
        ts = i * SPACING_MS
        made += len(m.add(i, STREAM, ts, ts))
        if i % TICK_EVERY == TICK_EVERY - 1:
            made += len(m.tick(ts))
            m.take_expired()
    return time.process_time() - start, made


class Sum(WindowedBolt):
    outputs = ["total"]

    def process_window(self, window):
        self.emit([sum(t["v"] for t in window.tuples)])


class Plain(Bolt):
    """Counts, anchors and acks each tuple: what a bolt with no window does."""

    outputs = ["total"]

    def prepare(self, config, context):
        self.total = 0

    def process(self, tup):
        self.total += tup["v"]
        self.emit([self.total], anchors=[tup])
        self.ack(tup)


class Drop(Bolt):
    outputs: list[str] = []

    def process(self, tup):
        self.ack(tup)


def bolt_round(tuples: int, windowed: bool) -> float:
    """CPU seconds for the in-memory twin to run ``tuples`` through one bolt, acking on
    (event-time tumbling 10 s windows, or a plain bolt), ticks included. No in-flight
    limit: a window holds its tuples, and the twin's clock does not move by itself."""
    topo = Topology("bench", ackers=1, message_timeout=600, target_latency=None)
    spout = ListSpout([[i, i * BOLT_SPACING_MS] for i in range(tuples)], fields=["v", "ts"])
    topo.spout("events", spout)
    if windowed:
        topo.bolt("b", Sum, window=WINDOWS["event-tumbling-10s"]).shuffle_grouping("events")
    else:
        topo.bolt("b", Plain).shuffle_grouping("events")
    topo.bolt("out", Drop).shuffle_grouping("b")
    with InMemoryCluster(topo) as cluster:
        start = time.process_time()
        cluster.run_until_idle()
        cluster.advance(1.0)  # the watermark that closes every window but the last
        spent = time.process_time() - start
        (task,) = cluster.plan.component_tasks()["events"]
        acked = len(cluster.user_object(task).acked)
    mark = (tuples - 1) * BOLT_SPACING_MS  # the watermark: windows ending after it wait
    expected = tuples if not windowed else sum(
        1 for i in range(tuples) if -(-i * BOLT_SPACING_MS // 10_000) * 10_000 <= mark)
    if acked != expected:
        raise BenchmarkError(f"{acked} tuples acked, expected {expected}")
    return spent


def report_round(held: int, reports: int) -> float:
    """CPU seconds for ``reports`` window reports (what a windowed task adds to each
    statistics report) of a task holding ``held`` tuples in open windows (event-time
    sliding 20 s by 10 s, no watermark yet: every tuple is held)."""
    window = WINDOWS["event-sliding-20s-10s"]
    m = WindowManager(window, inputs=[STREAM])
    for i in range(held):
        m.add(i, STREAM, i * SPACING_MS, 0)
    # ends 0, 10 s, ...: every multiple of the slide within 20 s at or after a held tuple
    expected = ((held - 1) * SPACING_MS + window.length.ms - 1) // window.slide.ms + 1
    start = time.process_time()
    for _ in range(reports):
        count, _oldest = m.open_windows()
    spent = time.process_time() - start
    if count != expected:
        raise BenchmarkError(f"{count} open windows, expected {expected}")
    return spent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuples", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for name, window in WINDOWS.items():
        runs = [manager_round(window, args.tuples) for _ in range(args.rounds)]
        ns = statistics.median(s for s, _ in runs) / args.tuples * 1e9
        print(f"RESULT name=window-manager window={name} tuples={args.tuples} "
              f"windows={runs[0][1]} ns_per_tuple={ns:.0f}", flush=True)
    n = max(1, args.tuples // 4)  # the whole path is slower: fewer tuples
    windowed, plain = [], []
    for _ in range(args.rounds):  # alternate, so that both see the same machine
        windowed.append(bolt_round(n, True))
        plain.append(bolt_round(n, False))
    w_ns = statistics.median(windowed) / n * 1e9
    p_ns = statistics.median(plain) / n * 1e9
    print(f"RESULT name=window-bolt window=event-tumbling-10s tuples={n} "
          f"windowed_ns={w_ns:.0f} plain_ns={p_ns:.0f} ratio={w_ns / p_ns:.2f}", flush=True)
    held, reports = max(1, args.tuples // 20), 100
    spent = statistics.median(report_round(held, reports) for _ in range(args.rounds))
    per_report = spent / reports
    # a report goes every stats_interval (0.25 s by default): the share of a core it takes
    print(f"RESULT name=window-report held={held} us_per_report={per_report * 1e6:.0f} "
          f"ns_per_held_tuple={per_report / held * 1e9:.0f} "
          f"core_share_at_0.25s={per_report / 0.25:.5f}", flush=True)


if __name__ == "__main__":
    main()
