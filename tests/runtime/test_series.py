"""The metrics store, fed reports by hand with ``now`` as a plain number; and the
master answering ``metrics`` from the reports it was sent (no process started)."""

from __future__ import annotations

import pytest

from runtime import Topology, wire
from runtime.observe.series import MINUTES_KEPT, SECONDS_KEPT, MetricsStore
from runtime.testing import ListSink, ListSpout

BOLT = {"component": "sink", "kind": "bolt", "restarts": 0}


def steady(store, task=1, seconds=1200, every=1.0, per_second=10, busy=0.25, start=0.0,
           incarnation=0, kind="bolt"):
    """Reports of a task that executes ``per_second`` tuples and is busy ``busy`` of
    each second, every ``every`` seconds from ``start`` + ``every`` to ``start`` +
    ``seconds``; returns the last report time."""
    n = int(seconds / every)
    for i in range(1, n + 1):
        elapsed = i * every
        store.add(task, incarnation, {"component": "sink", "kind": kind,
                                      "executed": int(per_second * elapsed),
                                      "emitted": int(2 * per_second * elapsed),
                                      "busy_seconds": busy * elapsed,
                                      "cpu_seconds": 0.5 * elapsed,
                                      "rss_bytes": 50_000_000}, now=start + elapsed)
    return start + n * every


def test_counts_and_rates_over_the_last_minute_ten_minutes_and_since_start():
    store = MetricsStore()
    now = steady(store, seconds=1200)  # 20 minutes, a report a second
    one, ten, all_ = (store.instance(1, w, now, BOLT) for w in ("1m", "10m", "all"))
    assert (one["executed"], ten["executed"], all_["executed"]) == (600, 6000, 12_000)
    assert one["seconds"] == 60 and ten["seconds"] == 600 and all_["seconds"] == 1199
    assert one["executed_per_s"] == 10.0 and ten["emitted_per_s"] == 20.0
    assert all_["executed_per_s"] == pytest.approx(12_000 / 1199, abs=1e-3)


def test_hours_are_counted_per_minute_and_a_short_run_over_its_length():
    store = MetricsStore()
    now = steady(store, seconds=4 * 3600, every=10.0)
    hour, three = store.instance(1, "1h", now, BOLT), store.instance(1, "3h", now, BOLT)
    assert hour["executed"] == 36_000 and hour["executed_per_s"] == 10.0
    assert three["executed"] == 108_000 and three["seconds"] == 10_800
    short = MetricsStore()
    now = steady(short, seconds=30)  # a 30 s run asked for its last hour
    m = short.instance(1, "1h", now, BOLT)
    assert m["executed"] == 300 and m["seconds"] == 29


def test_capacity_execute_latency_and_cpu_come_from_busy_and_cpu_seconds():
    store = MetricsStore()
    now = steady(store, seconds=300, per_second=10, busy=0.25)
    m = store.instance(1, "1m", now, BOLT)
    assert m["capacity"] == 0.25
    assert m["execute_latency_ms"] == 25.0  # 0.25 s busy for 10 tuples a second
    assert m["cpu_percent"] == 50.0 and m["rss_bytes"] == 50_000_000
    idle = MetricsStore()
    idle.add(1, 0, {"kind": "bolt", "busy_seconds": 0.0}, now=1.0)
    idle.add(1, 0, {"kind": "bolt", "busy_seconds": 0.0}, now=2.0)
    assert idle.instance(1, "1m", 2.0)["execute_latency_ms"] is None


def test_capacity_is_never_over_one():
    store = MetricsStore()
    store.add(1, 0, {"kind": "bolt", "busy_seconds": 0.0}, now=100.0)
    store.add(1, 0, {"kind": "bolt", "busy_seconds": 5.0}, now=101.0)  # a late report
    assert store.instance(1, "1m", 101.0)["capacity"] == 1.0


def test_a_new_incarnation_counts_from_zero_and_totals_span_incarnations():
    store = MetricsStore()
    store.add(1, 0, {"kind": "bolt", "executed": 500}, now=1.0)
    store.add(1, 1, {"kind": "bolt", "executed": 20}, now=2.0)  # restarted: 20, not -480
    store.add(1, 1, {"kind": "bolt", "executed": 70}, now=3.0)
    store.add(1, 0, {"kind": "bolt", "executed": 900}, now=4.0)  # never negative either
    m = store.instance(1, "all", 4.0, {**BOLT, "restarts": 1})
    assert m["executed"] == 500 + 20 + 50 + 900 and m["restarts"] == 1
    assert all(row[1] >= 0 for _, row in store.tasks[1].seconds.buckets)


def test_a_counter_that_goes_down_is_taken_as_restarted():
    store = MetricsStore()
    store.add(1, 0, {"kind": "bolt", "executed": 500}, now=1.0)
    store.add(1, 0, {"kind": "bolt", "executed": 10}, now=2.0)
    assert store.instance(1, "all", 2.0)["executed"] == 510


def test_the_rings_are_bounded():
    store = MetricsStore()
    steady(store, seconds=5 * 3600, every=1.0)
    series = store.tasks[1]
    assert len(series.seconds.buckets) == SECONDS_KEPT
    assert len(series.minutes.buckets) == MINUTES_KEPT
    assert store.instance(1, "all", 5 * 3600.0)["executed"] == 10 * 5 * 3600


def test_components_sum_instances_and_take_the_busiest_capacity():
    store = MetricsStore()
    steady(store, task=1, seconds=120, per_second=10, busy=0.1)
    now = steady(store, task=2, seconds=120, per_second=30, busy=0.6)
    answer = store.answer({1: BOLT, 2: BOLT, 3: BOLT}, "1m", now)
    sink = answer["components"]["sink"]
    assert sink["instances"] == 3 and sink["executed"] == 2400
    assert sink["executed_per_s"] == 40.0 and sink["capacity"] == 0.6
    assert sink["execute_latency_ms"] == pytest.approx((0.1 + 0.6) / 40 * 1000)
    assert answer["instances"][3]["executed"] == 0  # planned, not reported yet
    assert answer["window"] == "1m"


def test_spouts_show_pending_and_complete_latency_of_their_latest_reports():
    store = MetricsStore()
    spout = {"component": "numbers", "kind": "spout", "restarts": 0}
    for task, p99, pending in ((1, 40.0, 30), (2, 90.0, 12)):
        latency = {"count": 100 * task, "mean": p99 / 2, "p50": p99 / 4, "p95": p99 / 2,
                   "p99": p99}
        store.add(task, 0, {"kind": "spout", "emitted": 100, "pending": pending,
                            "max_spout_pending": 50, "complete_latency_ms": latency}, now=5.0)
    answer = store.answer({1: spout, 2: spout}, "all", 5.0)
    assert answer["instances"][2]["pending"] == 12
    assert answer["instances"][1]["max_spout_pending"] == 50
    numbers = answer["components"]["numbers"]
    assert numbers["pending"] == 42 and numbers["max_spout_pending"] == 100
    assert numbers["complete_latency_ms"]["p99"] == 90.0
    assert numbers["complete_latency_ms"]["count"] == 300
    assert numbers["complete_latency_ms"]["mean"] == pytest.approx((100 * 20 + 200 * 45) / 300)
    assert "pending" not in store.instance(3, "1m", 5.0, BOLT)


def test_the_series_has_a_point_a_second_summed_over_instances():
    store = MetricsStore()
    steady(store, task=1, seconds=100, per_second=10)
    now = steady(store, task=2, seconds=100, per_second=5)
    points = store.answer({1: BOLT, 2: BOLT}, "1m", now, wall=1e9 + now)["series"]["sink"]
    assert len(points) == 60
    assert points[-1] == (1e9 + 99.0, 15.0, 30.0)  # the second up to the last report
    assert [t for t, _, _ in points] == [1e9 + s for s in range(40, 100)]
    assert store.series([1, 2], "1h", now) == [(0.0, 15.0, 30.0), (60.0, 10.0, 20.0)]


@pytest.mark.parametrize("window", ["5m", "", None, "ALL"])
def test_an_unknown_window_is_refused_with_the_valid_names(window):
    with pytest.raises(ValueError, match="the windows are 1m, 10m, 1h, 3h, all"):
        MetricsStore().answer({1: BOLT}, window, 0.0)


# -- the master ------------------------------------------------------------------------------

@pytest.fixture
def master(offline_master):
    topo = Topology("metrics")
    topo.spout("numbers", ListSpout([[1]], fields=["n"]), parallelism=2)
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    return offline_master(topo, 2)


def stats(tm, task, incarnation=0, **record):
    tm.handle(b"", wire.control("stats", task=task, incarnation=incarnation,
                                record={"kind": "bolt", "state": "running", **record}))


def test_the_master_answers_metrics_from_the_reports_and_counts_restarts(master):
    a, b = master.component_tasks["sink"]
    for second in range(1, 11):
        master.clock.advance(1.0)
        stats(master, a, executed=100 * second, busy_seconds=0.1 * second, rss_bytes=7)
        stats(master, b, executed=50 * second)
    master.handle(b"", wire.control("restarted", task=b, incarnation=1, restarts=1,
                                    reason="exited with code 70"))
    master.clock.advance(1.0)
    stats(master, b, incarnation=1, executed=30)
    stats(master, a, incarnation=0, executed=1000)  # a late one of an old incarnation...
    master.handle(b"c", wire.control("ask_metrics", id=1, window="all"))
    (_, kind, reply), = master.sent
    assert kind == "reply" and reply["ok"]
    answer = reply["value"]
    assert answer["instances"][b]["executed"] == 530 and answer["instances"][b]["restarts"] == 1
    assert answer["components"]["sink"]["executed"] == 1530
    assert answer["components"]["sink"]["restarts"] == 1
    assert answer["instances"][a]["capacity"] == 0.1 and answer["instances"][a]["rss_bytes"] == 7
    assert answer["components"]["numbers"]["emitted"] == 0  # never reported: zeros


def test_the_master_refuses_an_unknown_window_saying_which_exist(master):
    master.handle(b"c", wire.control("ask_metrics", id=2, window="1d"))
    (_, kind, reply), = master.sent
    assert not reply["ok"] and "1m, 10m, 1h, 3h, all" in reply["value"]


# -- latency histograms, queues and time held (issue 5) ---------------------------------------

def hist(*latencies_s):
    """Cumulative sparse buckets of some latencies, as an instance reports them."""
    from runtime.observe.metrics import LatencyHistogram

    h = LatencyHistogram()
    for s in latencies_s:
        h.record(s)
    return h.sparse()


def test_latency_histograms_are_windowed_from_cumulative_buckets():
    store = MetricsStore()
    slow, fast = (0.1,) * 10, (0.001,) * 30  # 10 tuples at 100 ms early, then 30 at 1 ms
    store.add(1, 0, {**BOLT, "histograms": {"execute": hist(*slow)}}, now=10.0)
    store.add(1, 0, {**BOLT, "histograms": {"execute": hist(*slow, *fast)}}, now=200.0)
    last_minute = store.instance(1, "1m", now=200.0)["latency_ms"]["execute"]
    since_start = store.instance(1, "all", now=200.0)["latency_ms"]["execute"]
    assert last_minute["count"] == 30 and 0.9 < last_minute["p99"] < 1.1
    assert since_start["count"] == 40 and 90 < since_start["p99"] < 110
    assert 90 < store.instance(1, "10m", now=200.0)["latency_ms"]["execute"]["p99"] < 110
    assert store.instance(1, "all", now=200.0)["latency_ms"]["process"] is None


def test_a_new_incarnations_histograms_count_from_zero():
    store = MetricsStore()
    store.add(1, 0, {**BOLT, "histograms": {"process": hist(0.01, 0.01)}}, now=1.0)
    store.add(1, 1, {**BOLT, "histograms": {"process": hist(0.01)}}, now=2.0)
    assert store.instance(1, "all", now=2.0)["latency_ms"]["process"]["count"] == 3


def test_a_components_percentiles_merge_its_instances_buckets():
    store = MetricsStore()
    store.add(1, 0, {**BOLT, "histograms": {"execute": hist(*(0.001,) * 98)}}, now=1.0)
    store.add(2, 0, {**BOLT, "histograms": {"execute": hist(0.1, 0.1)}}, now=1.0)
    tasks = {1: BOLT, 2: BOLT}
    latency = store.answer(tasks, "all", now=1.0)["components"]["sink"]["latency_ms"]["execute"]
    assert latency["count"] == 100
    assert 0.9 < latency["p50"] < 1.1 and 90 < latency["p99"] < 110  # of all 100 tuples


def test_queue_gauges_held_time_and_containers_are_answered():
    store = MetricsStore()
    store.add(1, 0, {**BOLT, "held_seconds": 1.5, "pending_emits": 2, "queued_tuples": 7},
              now=1.0)
    store.add(1, 0, {**BOLT, "held_seconds": 4.0, "pending_emits": 0, "queued_tuples": 3},
              now=2.0)
    containers = {0: {"backpressure_seconds": 2.5, "queued_bytes": {1: 0}}}
    answer = store.answer({1: {**BOLT, "sm_queued_bytes": 4096}}, "all", now=2.0,
                          containers=containers)
    inst = answer["instances"][1]
    assert (inst["held_seconds"], inst["pending_emits"], inst["queued_tuples"]) == (4.0, 0, 3)
    assert inst["sm_queued_bytes"] == 4096 and answer["components"]["sink"]["held_seconds"] == 4
    assert answer["containers"] == containers


def test_the_master_gives_each_task_what_its_stream_manager_queues(master):
    a, b = master.component_tasks["sink"]
    master.handle(b"", wire.control("sm_stats", container=0, record={
                                    "queued_bytes": {a: 5000, b: 0}, "queued_frames": {a: 3, b: 0},
                                    "backpressure_seconds": 1.25, "backpressure_episodes": 1,
                                    "backpressure_active": True}))
    answer = master.observation.answer_metrics(wire.AskMetrics(id=1, window="all"))
    assert answer["instances"][a]["sm_queued_bytes"] == 5000
    assert answer["instances"][a]["sm_queued_frames"] == 3
    assert answer["containers"][0]["backpressure_seconds"] == 1.25


def test_emits_are_also_counted_per_stream_and_summed_over_instances():
    store = MetricsStore()
    for task, (small, big) in {1: (10, 30), 2: (20, 0)}.items():
        for t in range(1, 11):  # cumulative, a report a second for 10 s
            store.add(task, 0, {"component": "split", "kind": "bolt",
                                "emitted": (small + big) * t,
                                "stream_emitted": {"small": small * t, "big": big * t}},
                      now=float(t))
    store.add(2, 1, {"component": "split", "kind": "bolt", "emitted": 5,  # restarted
                     "stream_emitted": {"small": 5}}, now=10.5)
    tasks = {1: {"component": "split"}, 2: {"component": "split"}}
    answer = store.answer(tasks, "1m", now=10.5)
    assert answer["instances"][1]["stream_emitted_per_s"] == pytest.approx(
        {"big": 300 / 9.5, "small": 100 / 9.5}, abs=1e-3)
    split = answer["components"]["split"]
    assert split["stream_emitted_per_s"] == pytest.approx(
        {"big": 300 / 9.5, "small": 305 / 9.5}, abs=1e-3)
    assert sum(split["stream_emitted_per_s"].values()) == pytest.approx(split["emitted_per_s"])


def test_a_histogram_of_start_times_counts_what_one_of_latencies_would():
    """``record_since(starts, now)`` is ``record_each`` of ``now - start``: the same
    buckets, count and total, for starts in any order and latencies of any size."""
    import random

    from runtime.observe.metrics import LatencyHistogram

    rng = random.Random(3)
    for _ in range(200):
        now = rng.uniform(0.0, 1e5)
        starts = [now - rng.choice([rng.uniform(0, 1e-6), rng.uniform(0, 0.01),
                                    rng.expovariate(50), rng.uniform(0, 100)])
                  for _ in range(rng.randint(0, 300))]
        by_start, by_latency = LatencyHistogram(), LatencyHistogram()
        by_start.record_since(starts, now)
        by_latency.record_each([now - s for s in starts])
        assert by_start.counts == by_latency.counts
        assert by_start.count == by_latency.count == len(starts)
        assert by_start.total == pytest.approx(by_latency.total, rel=1e-9, abs=1e-9)
