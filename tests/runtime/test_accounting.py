"""Issue 19, parts 1 and 2: counts that move in the middle of a batch, execute latency
timed per tuple on a sample (so one slow tuple among fast ones reaches p99), and the
sampled hot keys of a fields-grouped bolt. In one thread, on the twin's fake clock: a
bolt "takes" time by moving that clock."""

from __future__ import annotations

import random

from runtime import Bolt, Spout, Topology
from runtime.observe.hotkeys import merge_reports
from runtime.testing import FakeClock, InMemoryCluster

WATCH: dict = {}  # the test's cluster and clock, for the bolts below (same process)


class Burst(Spout):
    """Emits ``[i, key]`` for its whole list in one ``next_tuple``: one big frame."""

    outputs = ["n", "key"]

    def __init__(self, keys: list) -> None:
        self.keys = keys

    def open(self, config, context):
        self.done = False

    def next_tuple(self):
        if not self.done:
            self.done = True
            for i, key in enumerate(self.keys):
                self.emit([i, key])


class Watching(Bolt):
    """Takes 10 ms a tuple, and notes what its own statistics said as each began."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.task, self.seen = context.task_id, []

    def process(self, tup):
        mine = [s for s in WATCH["cluster"].statistics() if s.task == self.task][0]
        self.seen.append((len(self.seen), mine.executed, mine.busy_seconds))
        WATCH["clock"].advance(0.010)


class Uneven(Bolt):
    """0.05 ms a tuple, but 50 ms for the tuples the test marked slow (``n`` in SLOW)."""

    outputs: list[str] = []

    def process(self, tup):
        WATCH["clock"].advance(0.05 if tup[0] in WATCH["slow"] else 0.00005)


def run(topo: Topology, **config) -> InMemoryCluster:
    clock = FakeClock(1000.0)
    cluster = InMemoryCluster(topo, clock=clock, **config)
    WATCH.update(cluster=cluster, clock=clock)
    cluster.step(1)  # the spout's one call: one frame of every tuple
    cluster.run_until_idle()
    return cluster


def bolt_stats(cluster: InMemoryCluster, component: str) -> list:
    return [s for s in cluster.statistics() if s.component == component]


def test_a_slow_bolt_reports_its_progress_in_the_middle_of_a_batch():
    topo = Topology("progress")
    topo.spout("burst", Burst(["k"] * 300))
    topo.bolt("slow", Watching).shuffle_grouping("burst")
    with run(topo) as cluster:
        (bolt,) = [cluster.user_object(t) for t in cluster.plan.component_tasks()["slow"]]
        (final,) = bolt_stats(cluster, "slow")
    assert final.executed == 300 and len(bolt.seen) == 300  # one frame, 3 s of work
    # as tuple i begins, the statistics already count the i before it, and their time
    assert [executed for _, executed, _ in bolt.seen] == list(range(300))
    assert all(abs(busy - 0.010 * i) < 1e-6 for i, _, busy in bolt.seen)
    assert abs(final.busy_seconds - 3.0) < 1e-6


def test_with_metrics_off_the_counts_move_per_batch():
    topo = Topology("progress-off", metrics=False)
    topo.spout("burst", Burst(["k"] * 50))
    topo.bolt("slow", Watching).shuffle_grouping("burst")
    with run(topo) as cluster:
        (bolt,) = [cluster.user_object(t) for t in cluster.plan.component_tasks()["slow"]]
        (final,) = bolt_stats(cluster, "slow")
    assert {executed for _, executed, _ in bolt.seen} == {0}  # nothing until the batch ends
    assert final.executed == 50 and final.latency_ms is None


def test_one_slow_tuple_in_fifty_reaches_p99_and_every_tuple_is_counted():
    rng = random.Random(19)
    n = 20_000
    WATCH["slow"] = set(rng.sample(range(n), n // 50))  # 2 %: above the 99th percentile
    topo = Topology("p99")
    topo.spout("burst", Burst(["k"] * n))
    topo.bolt("uneven", Uneven).shuffle_grouping("burst")
    with run(topo) as cluster:
        (final,) = bolt_stats(cluster, "uneven")
    execute = final.latency_ms["execute"]
    assert execute["count"] == n == final.executed
    assert 40 < execute["p99"] < 60  # the 50 ms tuples, not a batch's mean (~1 ms)
    assert execute["p50"] < 0.1
    # the mean is an estimate from the samples: within 30 % of the true one (1.049 ms)
    assert abs(execute["mean"] - 1.049) < 0.3


def test_the_hot_key_of_a_fields_grouping_is_sampled_with_its_share():
    rng = random.Random(7)
    keys = ["hot" if rng.random() < 0.5 else f"cold{rng.randrange(200)}" for _ in range(20_000)]
    topo = Topology("keys")
    topo.spout("burst", Burst(keys))
    topo.bolt("uneven", Uneven, parallelism=3).fields_grouping("burst", ["key"])
    WATCH["slow"] = set()
    with run(topo) as cluster:
        reports = [s.hot_keys for s in bolt_stats(cluster, "uneven")]
    hot = merge_reports(reports)
    top = hot["top"][0]
    assert top["key"] == "hot" and 0.4 < top["share"] < 0.6, hot
    assert all(k["share"] < 0.05 for k in hot["top"][1:])


def test_a_shuffled_input_has_no_hot_keys():
    topo = Topology("nokeys")
    topo.spout("burst", Burst(["hot"] * 100))
    topo.bolt("uneven", Uneven, parallelism=2).shuffle_grouping("burst")
    WATCH["slow"] = set()
    with run(topo) as cluster:
        assert [s.hot_keys for s in bolt_stats(cluster, "uneven")] == [None, None]
