"""Chaos with figures: what each fault costs an at-least-once topology (issue 23).

Each scenario runs ``--messages`` messages (100,000 by default) from a replayable source
through ``src (2 tasks) -> relay (2, fields grouping on the key) -> sink (2)`` in two
containers with two ackers, while a fault is injected, and prints one line::

    RESULT name=chaos scenario=bolt-kill messages=100000 faults=4 emitted=... acked=...
           failed=... replayed=... lost=0 duplicates=... bound=... late=...
           recovery_s=... unrecovered=0 peak_rss_mb=... seconds=...

Every message is ``{"k": key, "s": seq}``: each of ``KEYS`` keys gets the values 0, 1, 2 ...
in order, and the sink's records go through the per-key sequence checker
(``runtime.testing.SequenceChecker``): ``lost`` is the values that never arrived (a run with
losses also prints the keys and ranges), ``duplicates`` the records that arrived twice,
``late`` the first arrivals overtaken by a later value of their key (replays). ``emitted``,
``acked`` and ``failed`` are the spouts' counts over all incarnations; ``replayed`` is
``emitted - messages`` (emits of a message after its first). ``bound`` is the most
duplicates the faults may cost: the tuples in flight at each fault (``(max_spout_pending +
batch_size - 1) x spout tasks``: every source here emits up to ``batch_size`` records a
call, and the call that finds room under the cap emits its whole batch), plus the
uncommitted window (``max_uncommitted x partitions``) when a spout restarts from its
committed offsets, or the opened-but-unacked items for Redis.
``recovery_s`` is the longest time from a fault to the first second the sink is back at 90%
of its rate before the first fault (0 when the fault did not dent the rate);
``unrecovered`` counts faults after which it never got back before the run ended. The
source is paced (``--rate`` messages a second in all) so that a rate is defined.
``peak_rss_mb`` is the highest sum of the resident memory of the master and every process
under it, sampled every half second.

Scenarios (``--scenario``, repeatable; default: all local ones):

- ``bolt-kill``: SIGKILL a random relay or sink instance every ``--every`` seconds (5).
- ``acker-kill``: SIGKILL one ``__acker`` instance.
- ``log-spout-kill``: SIGKILL a spout reading the embedded log (it resumes from its
  checkpoint).
- ``kafka-spout-kill``: the same with a KafkaSpout on librdkafka's mock cluster
  (``test.mock.num.brokers``), run in this process.
- ``redis-spout-kill``: SIGKILL a RedisQueueSpout holding opened items, on a real
  ``redis-server`` started for the run.
- ``stmgr-kill``: SIGKILL container 1's stream manager (its instances die with it; the
  master restarts the container).
- ``stall``: SIGSTOP one relay instance for 35 s, then SIGCONT (its tuples time out and are
  replayed; the master may take it for hung and restart it first, heartbeat_timeout=10 s).
- ``slow-consumer``: no fault; the relay takes 2 ms a tuple, well under the offered rate, so
  backpressure holds the spouts.
- ``master-kill``: SIGKILL the topology master (``running.master_pid``). The stream
  managers and instances run on without it; the handle starts a new master that adopts
  them (docs/reliability.md, "A master that may die"). The new master's metrics count
  from the adoption on, so ``emitted``/``acked``/``failed`` are read from the spouts'
  statistics (each incarnation's last report, counts since it started). A ``#``
  line after its RESULT gives ``master_s``: from the kill to the new master's
  ``master_restarted`` event (containers adopted), and ``adoption_s``: of that, from the
  new master's first look for its containers to that event.

- ``spark-container-kill``: the topology on Spark (``scheduler="spark"``, master
  ``$TUPLEFLOW_CHAOS_SPARK`` or ``local[2]``), SIGKILL container 1's stream manager inside
  its Spark task (the task's supervision restarts it; see docs/internals/remote.md).
- ``spark-master-kill``: the same topology on Spark, SIGKILL its master (beside this
  process); the stream managers run on in their Spark tasks and a new master adopts them
  (docs/remote.md, "A master that may die"); ``master_s`` and ``adoption_s`` as above.

Run: ``python benchmarks/chaos.py --scenario bolt-kill --messages 20000``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import shutil
import signal
import statistics as stats_
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import cloudpickle
import psutil

from runtime import BasicBolt, Topology
from runtime.sources import EmbeddedLog, KafkaSpout, LogSpout, RedisQueueSpout
from runtime.testing import ListSink, SequenceChecker, read_sink

if __name__ != "__main__":  # imported (soak.py, a test): ship our classes by value too
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

KEYS = 100  # keys; message i is key i % KEYS, value i // KEYS
FIELDS = ("k", "s")  # a record {"k": key, "s": seq} is the tuple [key, seq]
PARTITIONS = 4  # of the log/Kafka topic; each spout task reads two
SPOUTS, RELAYS, SINKS = 2, 2, 2
MAX_SPOUT_PENDING = 200  # per spout task
BATCH = 50  # records a spout call emits at most (each source's batch_size)
MAX_UNCOMMITTED = 500  # per partition: what a restarted log/Kafka spout may read again
ACK_BATCH = 100  # Redis acks a spout may hold before sending them
OPTIONS = {"ackers": 2, "message_timeout": 5.0, "max_spout_pending": MAX_SPOUT_PENDING,
           "stats_interval": 0.5}
FULL = 0.9  # "full rate": this share of the rate before the first fault
STALL_SECONDS = 35.0


# -- components -------------------------------------------------------------------------------

class Paced:
    """Mixin for a batching spout: at most ``rate`` records a second from its first
    ``next_tuple`` (each call emits at most ``batch_size``), replays included."""

    def open(self, config, context):
        super().open(config, context)
        self._t0, self._calls = None, 0

    def next_tuple(self):
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        if self._calls * self.batch_size > (now - self._t0) * self.rate:
            return
        self._calls += 1
        super().next_tuple()


class PacedLogSpout(Paced, LogSpout):
    pass


class PacedKafkaSpout(Paced, KafkaSpout):
    pass


class PacedRedisSpout(Paced, RedisQueueSpout):
    pass


class Relay(BasicBolt):
    """Passes ``(k, s)`` on, anchored; sleeps ``delay`` seconds a tuple first (slow)."""

    outputs = ["k", "s"]

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def process(self, tup):
        if self.delay:
            time.sleep(self.delay)  # the work a slow consumer does
        self.emit([tup["k"], tup["s"]])


def record(i: int) -> bytes:
    return json.dumps({"k": i % KEYS, "s": i // KEYS}, separators=(",", ":")).encode()


def expected_counts(messages: int) -> dict[int, int]:
    return {k: (messages - k + KEYS - 1) // KEYS for k in range(KEYS) if k < messages}


def by_partition(messages: int) -> dict[int, list[bytes]]:
    """Each key's records in one partition, in order (so each key arrives in order)."""
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(messages):
        out[(i % KEYS) % PARTITIONS].append(record(i))
    return out


# -- sources ----------------------------------------------------------------------------------

class LogSource:
    """The embedded log, in a folder of the run; a restarted spout resumes at its checkpoint."""

    window = MAX_UNCOMMITTED * PARTITIONS // SPOUTS  # a restarted task may read this again

    def __init__(self, messages: int, rate: float, folder: str) -> None:
        self.root, self.ck = os.path.join(folder, "log"), os.path.join(folder, "ck")
        with EmbeddedLog(self.root) as log:
            log.create_topic("chaos", PARTITIONS)
            for p, payloads in by_partition(messages).items():
                log.append_many("chaos", payloads, partition=p)
        self.rate = rate

    def spout(self):
        spout = PacedLogSpout("chaos", self.root, checkpoint_dir=self.ck, batch_size=BATCH,
                              fields=FIELDS,
                              max_uncommitted=MAX_UNCOMMITTED, commit_interval=0.5)
        spout.rate = self.rate / SPOUTS
        return spout

    def close(self) -> None:
        pass


class KafkaSource(LogSource):
    """librdkafka's mock cluster, alive in this process as long as its producer is."""

    def __init__(self, messages: int, rate: float, folder: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"test.mock.num.brokers": 1})
        brokers = self.producer.list_topics(timeout=10).brokers.values()
        self.brokers = ",".join(f"{b.host}:{b.port}" for b in brokers)
        for p, payloads in by_partition(messages).items():
            for payload in payloads:
                self.producer.produce("chaos", payload, partition=p)
                self.producer.poll(0)
        if self.producer.flush(30) != 0:
            raise RuntimeError("the mock cluster did not take every record")
        self.rate = rate

    def spout(self):
        spout = PacedKafkaSpout("chaos", self.brokers, group_id="chaos", batch_size=BATCH,
                                fields=FIELDS,
                                max_uncommitted=MAX_UNCOMMITTED, commit_interval=0.5)
        spout.rate = self.rate / SPOUTS
        return spout

    def close(self) -> None:
        self.producer.flush(5)


def _sibling(name: str):
    """A module of benchmarks/ by its file name, whether this file runs as a script
    (``python benchmarks/chaos.py``: its folder is on the path) or as a module
    (``python -m benchmarks.chaos``, as docs/reliability.md says: it is not)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)


class RedisSource:
    """A real redis-server of the run's own (benchmarks/redis_queue.py starts it)."""

    window = MAX_SPOUT_PENDING + ACK_BATCH  # opened items and unsent acks of one task

    def __init__(self, messages: int, rate: float, folder: str) -> None:
        from runtime.sources import RedisQueue

        self._server = _sibling("redis_queue").redis_server()
        self.url = self._server.__enter__()
        with RedisQueue("chaos", self.url) as q:
            for start in range(0, messages, 5000):
                q.put_many([record(i) for i in range(start, min(messages, start + 5000))])
        self.rate = rate

    def spout(self):
        spout = PacedRedisSpout("chaos", self.url, batch_size=BATCH, ack_batch=ACK_BATCH,
                                fields=FIELDS,
                                open_timeout=30.0)
        spout.rate = self.rate / SPOUTS
        return spout

    def close(self) -> None:
        self._server.__exit__(None, None, None)


def topology(name: str, source, delay: float = 0.0) -> Topology:
    topo = Topology(name, **OPTIONS)
    topo.spout("src", source.spout(), parallelism=SPOUTS)
    topo.bolt("relay", Relay(delay), parallelism=RELAYS).fields_grouping("src", ["k"])
    topo.bolt("sink", ListSink, parallelism=SINKS).fields_grouping("relay", ["k"])  # in order
    return topo


# -- faults -------------------------------------------------------------------------------------

@dataclass
class Run:
    """One submitted topology and what happened to it."""

    running: object
    rng: random.Random
    faults: list[float] = field(default_factory=list)  # wall-clock times
    restarts_spouts: int = 0  # faults that restart a spout from its committed offsets
    later: list[tuple[float, Callable[[], None]]] = field(default_factory=list)

    def instances(self, component: str) -> list:
        return [s for s in self.running.statistics() if s.component == component
                and s.state == "running" and s.pid]

    def kill_one(self, component: str) -> None:
        chosen = self.rng.choice(self.instances(component))
        self.hit(chosen.pid, signal.SIGKILL)

    def hit(self, pid: int, sig: int) -> None:
        self.faults.append(time.time())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_bolt(run: Run) -> None:
    run.kill_one(run.rng.choice(["relay", "sink"]))


def kill_acker(run: Run) -> None:
    run.kill_one("__acker")


def kill_spout(run: Run) -> None:
    run.kill_one("src")
    run.restarts_spouts += 1


def kill_stmgr(run: Run) -> None:
    run.hit(run.running.status()["containers"][1], signal.SIGKILL)
    run.restarts_spouts += 1  # container 1 holds a spout task: it restarts with it


def stall_relay(run: Run) -> None:
    pid = run.rng.choice(run.instances("relay")).pid
    run.hit(pid, signal.SIGSTOP)
    run.later.append((time.monotonic() + STALL_SECONDS,
                      lambda: _signal_quietly(pid, signal.SIGCONT)))


def _signal_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def kill_master(run: Run) -> None:
    run.hit(run.running.master_pid, signal.SIGKILL)  # the spouts run on: none restarts


@dataclass(frozen=True)
class Scenario:
    name: str
    source: type
    fault: Callable[[Run], None] | None
    repeat: bool = False  # every --every seconds, else once at 30% of the run
    delay: float = 0.0  # the relay's seconds per tuple
    spark: bool = False  # containers as Spark barrier tasks (scheduler="spark")


SCENARIOS = {s.name: s for s in [
    Scenario("bolt-kill", LogSource, kill_bolt, repeat=True),
    Scenario("acker-kill", LogSource, kill_acker),
    Scenario("log-spout-kill", LogSource, kill_spout),
    Scenario("kafka-spout-kill", KafkaSource, kill_spout),
    Scenario("redis-spout-kill", RedisSource, kill_spout),
    Scenario("stmgr-kill", LogSource, kill_stmgr),
    Scenario("stall", LogSource, stall_relay),
    Scenario("slow-consumer", LogSource, None, delay=0.002),
    Scenario("master-kill", LogSource, kill_master),
    Scenario("spark-container-kill", LogSource, kill_stmgr, spark=True),
    Scenario("spark-master-kill", LogSource, kill_master, spark=True),
]}
SPARK_MASTER = os.environ.get("TUPLEFLOW_CHAOS_SPARK", "local[2]")  # 2 slots: 2 containers


# -- measuring ----------------------------------------------------------------------------------

def tree_rss(*pids: int) -> int:
    """Bytes resident in ``pids`` and every process under them, each counted once (the
    stream managers are under the master that started them, not under one that adopted
    them); a process gone counts 0."""
    procs = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            procs.update((p.pid, p) for p in [root, *root.children(recursive=True)])
    total = 0
    for p in procs.values():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total


def distinct_at_sink(run_dirs: list[str]) -> int:
    return len({tuple(v) for d in run_dirs for v in read_sink(d, "sink")})


def recovery(series: list[tuple], faults: list[float]) -> tuple[float, int]:
    """(longest seconds from a fault to the sink back at full rate, faults never recovered).

    ``series`` is the sink's ``(t, executed_per_s, ...)`` per second; full rate is FULL x the
    median rate before the first fault (after the first two seconds of ramp-up)."""
    if not faults or not series:
        return 0.0, 0
    before = [r for t, r, *_ in series[2:] if t < faults[0]] or [r for _, r, *_ in series]
    full = FULL * stats_.median(before)
    worst, never = 0.0, 0
    for fault in faults:
        after = [(t, r) for t, r, *_ in series if t > fault]
        dip = next((t for t, r in after[:3] if r < full), None)
        if dip is None:
            continue
        back = next((t for t, r in after if t > dip and r >= full), None)
        if back is None:
            never += 1
        else:
            worst = max(worst, back - fault)
    return round(worst, 1), never


@dataclass
class Totals:
    """The spouts' counts and the sink's rate per second, over every submitted run: the
    last answer of each run's master (a dead master answers nothing more). When a master
    was replaced, the new one's metrics count from its adoption on, so the counts come
    from the spouts' own statistics instead: each incarnation's last report, summed."""

    last: dict = field(default_factory=dict)  # run dir -> its master's last metrics("all")
    rates: dict = field(default_factory=dict)  # wall-clock second -> the sink's tuples/s
    # (run dir, task, incarnation) -> that spout incarnation's highest counts reported
    spouts: dict = field(default_factory=dict)
    replaced: bool = False  # a master was replaced (running.master_restarts > 0)

    def sample(self, running) -> None:
        """Ask each second: the last minute's series is per second ("all" is per minute)."""
        with contextlib.suppress(Exception):  # a master that just died
            self.last[running.run_dir] = running.metrics("all")
            for t, rate, *_ in running.metrics("1m")["series"].get("sink", []):
                self.rates[round(t)] = rate  # one point a second (t jitters by ns)
            for s in running.statistics():
                if s.component == "src":  # (a master adopting reports zeros meanwhile)
                    seen = self.spouts.setdefault((running.run_dir, s.task, s.incarnation), {})
                    for key in ("emitted", "acked", "failed"):
                        seen[key] = max(seen.get(key, 0), getattr(s, key))
            self.replaced = self.replaced or running.master_restarts > 0

    def spout(self, key: str) -> int:
        if self.replaced:
            return sum(seen[key] for seen in self.spouts.values())
        return sum(m["components"].get("src", {}).get(key, 0) for m in self.last.values())

    def series(self) -> list:
        return sorted(self.rates.items())


# -- one scenario -------------------------------------------------------------------------------

def run_scenario(name: str, messages: int, rate: float, every: float, seed: int) -> dict:
    scenario = SCENARIOS[name]
    folder = tempfile.mkdtemp(prefix=f"tupleflow-chaos-{name}-")
    source = scenario.source(messages, rate, folder)
    try:
        return _run(scenario, source, messages, rate, every, random.Random(seed))
    finally:
        source.close()
        shutil.rmtree(folder, ignore_errors=True)


def _run(scenario: Scenario, source, messages: int, rate: float, every: float,
         rng: random.Random) -> dict:
    running = submit(scenario, source)
    wait_flowing(running)
    started = time.monotonic()
    duration = messages / rate
    deadline = started + max(120.0, 6 * duration + (STALL_SECONDS if scenario.name == "stall"
                                                    else 0))
    first = max(2.0, min(5.0, 0.3 * duration))
    next_fault = started + first
    totals, run_dirs, peak = Totals(), [], 0
    run = Run(running, rng)
    run_dirs += sink_dirs(running)
    roots = topology_roots(running)
    last_check, done = 0.0, False
    while not done:
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"chaos {scenario.name}: not done after {now - started:.0f} s "
                               f"({distinct_at_sink(run_dirs)} of {messages} at the sink)")
        if scenario.fault and now >= next_fault:
            scenario.fault(run)
            more = scenario.repeat and now + every < started + 0.7 * duration
            next_fault = now + every if more else float("inf")
        for when, action in [x for x in run.later if x[0] <= now]:
            action()
            run.later.remove((when, action))
        if not running.alive:  # the master died (master-kill): submit again, as a person would
            running = resubmit(scenario, source, run)
            run_dirs += sink_dirs(running)
        peak = max(peak, tree_rss(*roots))
        if now - last_check >= 1.0:
            last_check = now
            totals.sample(running)
            with contextlib.suppress(Exception):  # a master that just died
                roots = topology_roots(running)
            done = distinct_at_sink(run_dirs) >= messages
        time.sleep(0.5)  # the sampling period (RSS, faults, the sink): pacing, not a sync
    settle(running)
    totals.sample(running)
    master_s = master_restart_seconds(running, run.faults)
    running.kill()
    for _when, action in run.later:  # a stalled process still stopped: let it go
        action()
    result = report(scenario, messages, run, totals, run_dirs, peak, time.monotonic() - started)
    return {**result, "master_s": master_s}


def settle(running) -> None:
    """Before the last count: a master replaced near the end has adopted the containers,
    and every spout has reported to it since (at most 30 s)."""
    if not running.master_restarts:
        return
    with contextlib.suppress(Exception):
        running.wait_active(timeout=30)
        since = time.time()
        running.wait_until(lambda stats: all((s.reported or 0) > since for s in stats
                                             if s.component == "src"),
                           timeout=30, interval=0.2)


def topology_roots(running) -> list[int]:
    """The master and the stream managers: every process of the topology is one of them
    or under one of them."""
    return [running.master_pid, *running.status()["containers"].values()]


def master_restart_seconds(running, faults: list[float]) -> list[tuple[float, float]]:
    """Per fault: seconds from it to the next ``master_restarted`` event (a new master
    that has adopted the containers), and of those the adoption's own (from the new
    master's start of it); empty when no master was replaced."""
    with contextlib.suppress(Exception):
        adopted = sorted((e["time"], e["seconds"]) for e in running.events()
                         if e["kind"] == "master_restarted")
        after = [next(((t, s) for t, s in adopted if t > f), None) for f in faults]
        return [(round(a[0] - f, 2), a[1]) for f, a in zip(faults, after) if a]
    return []


def submit(scenario: Scenario, source):
    topo = topology(f"chaos-{scenario.name}", source, scenario.delay)
    if scenario.spark:
        return topo.submit(scheduler="spark", master=SPARK_MASTER, containers=2)
    return topo.submit(containers=2)


def sink_dirs(running) -> list[str]:
    """Where the sink's files are: the run directory, and on Spark each container's own
    (an executor's; on this machine with a local master)."""
    return [running.run_dir, *running.status().get("container_dirs", {}).values()]


def wait_flowing(running) -> None:
    """Every instance running and the sink receiving: the clock and the faults start."""
    running.wait_until(lambda stats: all(s.state == "running" for s in stats)
                       and sum(s.executed for s in stats if s.component == "sink") > 0,
                       timeout=120, interval=0.2)


def resubmit(scenario: Scenario, source, run: Run):
    """The master died: wait for its processes to go, then submit the topology again."""
    old = run.running
    with contextlib.suppress(Exception):
        old.kill()
    running = submit(scenario, source)
    run.running = running
    return running


def report(scenario: Scenario, messages: int, run: Run, totals: Totals, run_dirs: list[str],
           peak: int, seconds: float) -> dict:
    checker = SequenceChecker()
    for d in run_dirs:
        for k, s in read_sink(d, "sink"):
            checker.see(k, s)
    seq = checker.report(expected_counts(messages))
    in_flight = in_flight_bound(MAX_SPOUT_PENDING, BATCH, SPOUTS)
    bound = len(run.faults) * in_flight + run.restarts_spouts * source_window(scenario)
    rec, never = recovery(totals.series(), run.faults)
    emitted = totals.spout("emitted")
    return {"scenario": scenario.name, "messages": messages, "faults": len(run.faults),
            "emitted": emitted, "acked": totals.spout("acked"), "failed": totals.spout("failed"),
            "replayed": max(0, emitted - messages), "lost": seq.total_lost,
            "duplicates": seq.duplicates, "bound": bound, "late": seq.late,
            "recovery_s": rec, "unrecovered": never, "peak_rss_mb": round(peak / 2**20),
            "seconds": round(seconds, 1), "sequence": seq}


def in_flight_bound(max_spout_pending: int, batch: int, spouts: int) -> int:
    """The most roots in flight at once: a spout task is called only while fewer than
    ``max_spout_pending`` of its roots are in flight, and that call may emit its whole
    ``batch`` (docs/reliability.md, "What the bounds are").

    >>> in_flight_bound(200, 50, 2), in_flight_bound(200, 1, 2)
    (498, 400)
    """
    return (max_spout_pending + batch - 1) * spouts


def source_window(scenario: Scenario) -> int:
    return scenario.source.window


def line(result: dict) -> str:
    keys = ["scenario", "messages", "faults", "emitted", "acked", "failed", "replayed", "lost",
            "duplicates", "bound", "late", "recovery_s", "unrecovered", "peak_rss_mb",
            "seconds"]
    return "RESULT name=chaos " + " ".join(f"{k}={result[k]}" for k in keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS),
                        help="run this scenario (repeatable; default: every one)")
    parser.add_argument("--messages", type=int, default=100_000, help="messages per scenario")
    parser.add_argument("--rate", type=float, default=4000.0, help="messages a second, in all")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between bolt kills")
    parser.add_argument("--seed", type=int, default=None, help="the faults' random seed")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"# chaos seed={seed}", flush=True)
    failed = 0
    for name in args.scenario or SCENARIOS:
        try:
            result = run_scenario(name, args.messages, args.rate, args.every, seed)
        except Exception as exc:  # a scenario that did not finish: say so, go on
            print(f"RESULT name=chaos scenario={name} messages={args.messages} "
                  f"error={type(exc).__name__}", flush=True)
            print(f"# {name}: {exc}", file=sys.stderr, flush=True)
            failed += 1
            continue
        print(line(result), flush=True)
        if result["master_s"]:
            print(f"# {name}: master_s={','.join(str(m) for m, _ in result['master_s'])} "
                  f"adoption_s={','.join(str(a) for _, a in result['master_s'])}", flush=True)
        if not result["sequence"].ok or result["duplicates"] > result["bound"]:
            print(f"# {name}: {result['sequence']}", file=sys.stderr, flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
