"""Issue 19, part 3: the bottleneck finder's rules, as the pure functions they are. Each
case feeds the master's metrics store (``runtime/observe/series.py``) the reports the
instances of a topology would send over ten seconds, and asks ``diagnose`` what is wrong."""

from __future__ import annotations

import pytest

from runtime.diagnosis import KINDS, Finding, diagnose
from runtime.observe.series import MetricsStore

SPAN = 10.0  # seconds between the two reports of every task


def answer(*tasks: tuple[str, str, dict], t0: float = 100.0) -> dict:
    """The metrics answer for tasks ``(component, kind, record)``; each record holds the
    counters its task reached after :data:`SPAN` seconds (they all started at 0)."""
    store, info = MetricsStore(), {}
    for task, (component, kind, record) in enumerate(tasks, start=1):
        base = {"component": component, "kind": kind}
        store.add(task, 0, base, now=t0)
        store.add(task, 0, {**base, **record}, now=t0 + SPAN)
        info[task] = {**base, "state": "running", "restarts": 0}
    return store.answer(info, "1m", now=t0 + SPAN)


def bolt(component: str, busy: float, executed: int = 1000, **more) -> tuple:
    """A bolt task busy ``busy`` of the span."""
    return (component, "bolt", {"busy_seconds": busy * SPAN, "executed": executed, **more})


def spout(component: str = "src", **more) -> tuple:
    return (component, "spout", {"emitted": 1000, "acked": 1000, **more})


def kinds(findings: list[Finding]) -> list[tuple]:
    return [(f.kind, f.component) for f in findings]


def test_a_slow_bolt_among_fast_ones_is_named_with_its_task():
    m = answer(spout(), bolt("parse", 0.1), bolt("enrich", 0.97), bolt("sink", 0.05))
    (top,) = diagnose(m)
    assert (top.kind, top.component, top.task) == ("slow_bolt", "enrich", 3)
    assert top.evidence["capacity"] == pytest.approx(0.97)
    assert "parallelism" in top.advice


def test_a_healthy_topology_has_no_findings():
    assert diagnose(answer(spout(), bolt("a", 0.3), bolt("b", 0.2)), cores=8) == []


def test_a_hot_key_is_skew_on_its_task_not_a_slow_bolt():
    hot = {"total": 900, "top": [["the", 600], ["a", 50]]}
    m = answer(spout(), bolt("count", 0.95, 2000, hot_keys=hot),
               bolt("count", 0.2, 400, hot_keys={"total": 200, "top": [["b", 9]]}),
               bolt("count", 0.2, 400))
    (top,) = diagnose(m, groupings={"count": ["fields(word)"]})
    assert (top.kind, top.component, top.task) == ("skew", "count", 2)
    assert top.evidence["hot_key"] == "the" and top.evidence["hot_key_share"] > 0.5
    assert "partial_key_grouping" in top.advice and "fields(word)" in top.advice


def test_uneven_tasks_without_a_hot_key_are_skew_with_other_advice():
    m = answer(spout(), bolt("count", 0.9), bolt("count", 0.1), bolt("count", 0.1))
    (top,) = diagnose(m)
    assert top.kind == "skew" and "hot_key" not in top.evidence
    assert "partial_key" not in top.advice


def test_an_evenly_busy_component_of_several_tasks_is_a_slow_bolt():
    m = answer(spout(), bolt("count", 0.9), bolt("count", 0.85), bolt("count", 0.88))
    assert kinds(diagnose(m)) == [("slow_bolt", "count")]


def test_the_acker_at_capacity():
    m = answer(spout(), bolt("split", 0.3), bolt("sink", 0.4), bolt("__acker", 0.9))
    top = diagnose(m)[0]
    assert (top.kind, top.component) == ("acker", "__acker") and "ackers" in top.advice


def test_a_full_in_flight_limit_with_nothing_busy():
    m = answer(spout(pending=2, max_spout_pending=2), bolt("a", 0.05), bolt("b", 0.03))
    (top,) = diagnose(m)
    assert (top.kind, top.component, top.task) == ("max_spout_pending", "src", None)
    assert top.evidence["max_spout_pending"] == 2


def test_a_full_limit_behind_a_busy_bolt_is_the_bolts_fault():
    m = answer(spout(pending=2, max_spout_pending=2), bolt("a", 0.95))
    assert kinds(diagnose(m)) == [("slow_bolt", "a")]


def test_a_limit_with_room_left_is_no_finding():
    m = answer(spout(pending=10, max_spout_pending=1000), bolt("a", 0.05))
    assert diagnose(m) == []


def test_timeouts_come_before_the_slow_bolt_that_causes_them():
    m = answer(spout(timed_out=300, failed=300), bolt("slow", 0.99))
    found = diagnose(m, config={"message_timeout": 1.0})
    assert kinds(found) == [("timeouts", "src"), ("slow_bolt", "slow")]
    assert found[0].evidence["timed_out"] == 300
    assert found[0].evidence["message_timeout_s"] == 1.0


def test_a_timeout_now_and_then_is_no_finding():
    assert diagnose(answer(spout(timed_out=2, acked=1000), bolt("a", 0.1))) == []


def test_more_busy_processes_than_cores():
    tasks = [bolt(f"b{i}", 0.7, cpu_seconds=0.9 * SPAN) for i in range(4)]
    found = diagnose(answer(spout(), *tasks), cores=2)
    assert found[0].kind == "cpu" and found[0].evidence["busy_processes"] == 4
    assert found[0].evidence["cores"] == 2
    assert diagnose(answer(spout(), *tasks), cores=8)[0].kind == "slow_bolt"


def test_the_cpu_of_a_start_up_is_not_taken_for_the_topology_s_demand():
    """Three processes that burned a core each while importing and preparing, measured
    over their first two seconds of work: the sleeping bolt is the finding, not cpu."""
    store, info = MetricsStore(), {}
    records = [("src", "spout", {"emitted": 200, "acked": 200, "cpu_seconds": 1.8}),
               ("slow", "bolt", {"busy_seconds": 2.0, "executed": 200, "cpu_seconds": 1.8}),
               ("sink", "bolt", {"busy_seconds": 0.01, "executed": 200, "cpu_seconds": 1.8})]
    for task, (component, kind, record) in enumerate(records, start=1):
        base = {"component": component, "kind": kind}
        store.add(task, 0, base, now=100.0)
        store.add(task, 0, {**base, **record}, now=102.0)
        info[task] = {**base, "state": "running", "restarts": 0}
    found = diagnose(store.answer(info, "1m", now=102.0), cores=2)
    assert kinds(found)[0] == ("slow_bolt", "slow"), kinds(found)


def test_the_backpressure_cause_wins_a_near_tie():
    m = answer(spout(), bolt("a", 0.92), bolt("b", 0.9))
    assert diagnose(m)[0].component == "a"
    assert diagnose(m, backpressure=["b"])[0].component == "b"


def test_a_finding_reads_as_a_sentence_and_as_data():
    (top,) = diagnose(answer(spout(), bolt("slow", 0.97)))
    assert str(top).startswith("slow_bolt at slow[2]: capacity 0.97")
    data = top.as_dict()
    assert set(data) == {"component", "task", "kind", "evidence", "advice", "score"}
    assert data["kind"] in KINDS


def test_the_metrics_carry_time_accounting_and_skew():
    m = answer(spout(), bolt("count", 0.6, 3000, held_seconds=0.2 * SPAN),
               bolt("count", 0.2, 1000))
    task = m["instances"][2]
    assert (task["busy_ms_per_s"], task["held_ms_per_s"], task["idle_ms_per_s"]) == \
        (600.0, 200.0, 200.0)
    c = m["components"]["count"]
    assert c["skew"] == {"executed": 1.5, "busy": 1.5}
    assert c["busy_ms_per_s"] == 400.0


def test_the_acker_as_the_busiest_task_while_the_spouts_wait_on_it():
    full = spout(pending=5000, max_spout_pending=5000, busy_seconds=0.3 * SPAN)
    m = answer(full, bolt("gather", 0.2), bolt("gather", 0.2), bolt("__acker", 0.37))
    assert kinds(diagnose(m))[0] == ("acker", "__acker")
    idle = spout(pending=10, max_spout_pending=5000)  # nothing waits: no finding
    assert diagnose(answer(idle, bolt("gather", 0.2), bolt("__acker", 0.37))) == []


def test_a_hot_task_below_capacity_is_skew_when_the_spouts_are_held_back():
    hot = {"total": 900, "top": [["the", 600]]}
    tasks = [bolt("count", 0.4, 2000, hot_keys=hot), bolt("count", 0.1, 400),
             bolt("count", 0.1, 400)]
    found = kinds(diagnose(answer(spout(pending=27, max_spout_pending=27), *tasks)))
    assert found == [("skew", "count"), ("max_spout_pending", "src")]  # cause, then symptom
    assert diagnose(answer(spout(pending=2, max_spout_pending=27), *tasks)) == []


def test_little_s_law_finds_a_full_limit_the_gauge_missed():
    # 140 completions a second of 7 ms each: one in flight on average, the limit is 1
    late = {"complete_latency_ms": None}
    m = answer(spout(acked=1400, pending=0, max_spout_pending=1, **late), bolt("a", 0.05))
    m["components"]["src"]["latency_ms"] = {"complete": {"mean": 7.0, "p99": 9.0}}
    (top,) = diagnose(m)
    assert top.kind == "max_spout_pending" and top.evidence["in_flight"] == pytest.approx(0.98)


def test_a_hot_key_is_named_while_every_task_still_works_through_a_backlog():
    hot = {"total": 1060, "top": [["hot", 1060]]}  # 53 % of the 2000 sampled, one task
    tasks = [bolt("count", 0.99, 500, hot_keys=hot)] + [
        bolt("count", 0.99, 500, hot_keys={"total": 313, "top": [[f"k{i}", 9]]})
        for i in range(3)]
    (top,) = diagnose(answer(spout(), *tasks))
    assert (top.kind, top.component, top.evidence["hot_key"]) == ("skew", "count", "hot")
    cool = {"total": 1000, "top": [["k1", 20]]}  # no hot key: just too few tasks
    tasks = [bolt("count", 0.99, 500, hot_keys=cool) for _ in range(4)]
    assert kinds(diagnose(answer(spout(), *tasks))) == [("slow_bolt", "count")]


def test_a_slow_bolt_the_latency_bound_keeps_below_capacity_is_still_named():
    bounded = spout(pending=32, max_spout_pending=32, latency_bounded=True)
    found = diagnose(answer(bounded, bolt("b0", 0.01), bolt("b1", 0.35), bolt("b2", 0.01)))
    assert kinds(found) == [("slow_bolt", "b1"), ("max_spout_pending", "src")]
    assert "target_latency" in found[1].advice
    # a limit with room left: nobody waits, and a bolt at 35 % is no finding
    assert diagnose(answer(spout(pending=3, max_spout_pending=32), bolt("b1", 0.35))) == []


def test_a_hot_key_split_by_a_partial_key_grouping_is_no_longer_skew():
    def task(tuples: int, busy: float) -> tuple:
        return bolt("count", busy, tuples, hot_keys={"total": 1000, "top": [["hot", tuples]]})

    spread = [task(300, 0.4), task(300, 0.4), bolt("count", 0.3, 400)]  # hot: 60 % on two
    assert diagnose(answer(spout(pending=27, max_spout_pending=27), *spread))[0].kind != "skew"
    swamped = [task(600, 0.9), bolt("count", 0.2, 200), bolt("count", 0.2, 200)]
    assert diagnose(answer(spout(), *swamped))[0].kind == "skew"


def test_a_hot_key_shows_in_the_queues_while_every_task_is_backlogged():
    def task(queued: int, key: str, share: int) -> tuple:
        return bolt("count", 0.99, 500, sm_queued_bytes=queued,
                    hot_keys={"total": 500, "top": [[key, share]]})

    tasks = [task(900_000, "hot", 480), task(200_000, "k1", 9), task(150_000, "k2", 8)]
    (top,) = diagnose(answer(spout(), *tasks))
    assert (top.kind, top.task, top.evidence["hot_key"]) == ("skew", 2, "hot")
    even = [task(300_000, "k0", 9), task(280_000, "k1", 9), task(310_000, "k2", 8)]
    assert kinds(diagnose(answer(spout(), *even))) == [("slow_bolt", "count")]
