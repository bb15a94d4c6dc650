"""Tier 3: topologies scheduled by a real Spark standalone cluster on loopback (issue 8).

One Spark master and worker serve the whole session (the ``spark_cluster`` fixture), and
one SparkSession this module (starting either takes tens of seconds on a loaded machine).
Each container is a Spark barrier task running a stream manager; every TCP socket speaks
CURVE with the topology's keys. The tests check what a user relies on: every sentence
acked; a container killed with SIGKILL comes back with nothing lost; strangers are refused
and counted; and nothing sent to a port is ever unpickled.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pickle
import signal
import socket
import sys
from collections import Counter
from pathlib import Path

import cloudpickle
import psutil
import pytest
import zmq

from runtime import BasicBolt, Topology, wire
from runtime.processes.curve import TopologyKeys, make_client
from runtime.processes.spark_scheduler import CONTAINER_ENV, spark_session
from runtime.testing import ListSink, ListSpout, PacedSpout, WordCount, read_sink, wait_for

from .test_checkpoints_mp import WORDS, run_with_kills
from .test_mp_master_carry import (
    ask_what_a_new_master_must_carry,
    check_a_restarted_spout_is_told,
    check_carried,
    replace_the_master,
)
from .test_mp_master_carry import numbers as carried_numbers
from .test_mp_master_carry import spouts as carried_spouts
from .test_mp_rebalance import WORDS as REBALANCE_WORDS
from .test_mp_rebalance import fill_log
from .test_mp_rebalance import word_count as rebalanced_word_count

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # the first test starts Spark

cloudpickle.register_pickle_by_value(sys.modules[__name__])

QUIET = {"spout_wait": 0.005}
VOCABULARY = [f"w{i}" for i in range(30)]
SENTENCES = [" ".join(VOCABULARY[(i * k) % 30] for k in (1, 7, 11)) for i in range(2000)]


class Split(BasicBolt):
    outputs = ["word"]

    def prepare(self, config, context):
        print(f"split {context.task_id} ready", flush=True)  # a line for its log

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word])


class Mkdir:
    """Unpickling this creates a directory: proof that a payload was loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture(scope="module")
def spark(spark_cluster):
    session = spark_session(spark_cluster.master_url, {"advertise_host": "127.0.0.1",
                                                       "bind_host": "127.0.0.1"})
    yield session
    session.stop()


def word_count(name: str) -> Topology:
    topo = Topology(name, **QUIET)
    topo.spout("sentences", ListSpout([[s] for s in SENTENCES], fields=["sentence"],
                                      replay=True))
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("count", WordCount, parallelism=2).fields_grouping("split", ["word"])
    return topo


def total(stats, component: str, field: str) -> int:
    return sum(getattr(s, field) for s in stats if s.component == component)


def settled(stats) -> bool:
    return total(stats, "sentences", "pending") == 0 and total(stats, "__acker", "pending") == 0


def stream_managers(running) -> dict[int, psutil.Process]:
    """The running topology's stream manager processes, by container, as the master knows
    them: the pid each gave in its hello. (Matching command lines would also find a
    stream manager's child between its fork and its exec, e.g. a warm spare being
    started, which has the stream manager's command line and environment.)"""
    return {int(c): psutil.Process(pid) for c, pid in running.status()["containers"].items()}


def restarted_stream_manager(running, container: int, old: psutil.Process) -> psutil.Process:
    """Wait until the master has heard from a new stream manager for ``container``."""
    def new():
        pid = running.status()["containers"].get(container)
        return pid is not None and pid != old.pid and psutil.Process(pid)
    return wait_for(new, 30, f"a new stream manager for container {container}")


def all_acked(stats) -> bool:
    return total(stats, "sentences", "acked") == len(SENTENCES) and settled(stats)


# -- (a) ---------------------------------------------------------------------------------------

def test_two_containers_on_spark_ack_every_sentence(spark, spark_cluster):
    topo = word_count("spark-wc")
    running = topo.submit(scheduler="spark", master=spark_cluster.master_url, containers=2,
                          ackers=1)
    assert running.topology is topo  # what workbench.reconcile reads the definition from
    with running:
        stats = running.wait_until(all_acked, timeout=90)
        status = running.status()
        log = running.logs("count", running.plan.component_tasks()["count"][0])
        # what a container on another host sends instead (over TCP + CURVE, via the master)
        split_task = running.plan.component_tasks()["split"][0]
        sent = running._ask(wire.AskLogs, component="split", task=split_task)
        assert f"split {split_task} ready" in sent
        assert running.logs("split", split_task).startswith(sent)  # a log only grows
        sms = stream_managers(running)
        parents = {c: " ".join(sm.parent().cmdline()) for c, sm in sms.items()}
        named = {c: sm.environ()[CONTAINER_ENV] for c, sm in sms.items()}
    assert total(stats, "sentences", "failed") == 0
    assert {s.container for s in stats} == {0, 1}
    assert status["spark_job"]["running"] and status["spark_job"]["last_error"] is None
    assert "Traceback" not in log
    assert set(status["inbound"].values()) == {
        ep for ep in status["inbound"].values() if ep.startswith("tcp://127.0.0.1:")}
    assert running.endpoint.startswith("tcp://127.0.0.1:")
    # the containers are Spark's: each stream manager is a child of a pyspark worker
    assert sorted(sms) == [0, 1]
    assert all("pyspark" in parent for parent in parents.values()), parents
    assert named == {0: "0", 1: "1"}  # each started with its container in its environment
    # killing the topology ended the Spark job: each task returned its summary
    assert not running.job.is_alive() and running.job.error is None
    assert sorted(r["container"] for r in running.job.result) == [0, 1]


# -- (b) ---------------------------------------------------------------------------------------

def test_a_killed_container_is_restarted_and_nothing_is_lost(spark):
    topo = word_count("spark-kill")
    with topo.submit(scheduler="spark", master=spark, containers=2, ackers=1,
                     max_spout_pending=20, message_timeout=3.0) as running:
        spout_container = running.plan.task(running.plan.component_tasks()["sentences"][0])
        victim = 1 - spout_container.container
        running.wait_until(lambda s: total(s, "sentences", "acked") >= 200, timeout=90)
        old = stream_managers(running)[victim]
        old.send_signal(signal.SIGKILL)
        new = restarted_stream_manager(running, victim, old)
        stats = running.wait_until(all_acked, timeout=120)
        events = running.events()
    assert new.pid != old.pid
    assert [e["container"] for e in events if e["kind"] == "container_restarted"] == [victim]
    victims = {s.task for s in stats if s.container == victim}
    assert all(s.restarts >= 1 for s in stats if s.task in victims)
    assert total(stats, "sentences", "acked") == len(SENTENCES)  # 0 lost
    # restarted by its Spark task's supervision (Spark did not have to retry the task)
    assert {r["container"]: r["restarts"] for r in running.job.result} == {
        victim: 1, 1 - victim: 0}


# -- (b') a lost Spark task --------------------------------------------------------------------

def test_a_lost_spark_task_makes_the_driver_submit_the_job_again(spark):
    """Spark does not retry a failed barrier result stage: the whole job fails and Spark
    kills the other task. The driver submits the job again; every container restarts (a
    newer generation), the spout replays, and every sentence is acked."""
    topo = word_count("spark-lost-task")
    with topo.submit(scheduler="spark", master=spark, containers=2, ackers=1,
                     max_spout_pending=20, message_timeout=3.0) as running:
        running.wait_until(lambda s: total(s, "sentences", "acked") >= 200, timeout=90)
        worker = stream_managers(running)[1].parent()  # the task's Python worker
        assert "pyspark" in " ".join(worker.cmdline())
        worker.kill()
        stats = running.wait_until(lambda s: all_acked(s) and all(
            x.incarnation >= 1 for x in s), timeout=120)
        job = running.status()["spark_job"]
        events = running.events()
    assert job["rounds"] == 1 and job["running"]
    assert sorted(e["container"] for e in events if e["kind"] == "container_restarted"
                  ) == [0, 1]
    assert total(stats, "sentences", "acked") == len(SENTENCES)
    assert sorted(r["container"] for r in running.job.result) == [0, 1]


# -- (c) and (d) -------------------------------------------------------------------------------

def _stranger(kind: int, endpoint: str, server_key: bytes | None, client=None) -> zmq.Socket:
    ctx = zmq.Context.instance()
    sock = ctx.socket(kind)
    sock.linger = 0
    if server_key is not None:
        sock.curve_serverkey = server_key
        sock.curve_publickey, sock.curve_secretkey = client or zmq.curve_keypair()
    sock.connect(endpoint)
    return sock


def strangers(kind: int, endpoint: str, keys: TopologyKeys, payload: list[bytes]) -> list:
    """A NULL-mechanism client, one that knows the server key but not the client key, and
    one with a wrong server key: each sends ``payload``."""
    wrong = TopologyKeys.generate()
    socks = [_stranger(kind, endpoint, None),
             _stranger(kind, endpoint, keys.server_public),
             _stranger(kind, endpoint, wrong.server_public,
                       (keys.client_public, keys.client_secret))]
    for sock in socks:
        with contextlib.suppress(zmq.Again):
            sock.send_multipart(payload, zmq.NOBLOCK)
    return socks


def refused(status: dict, who: str) -> int:
    return sum(status.get("refusals", {}).get(who, {}).values())


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def send_raw(endpoint: str, blob: bytes) -> None:
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s, \
            contextlib.suppress(OSError):
        s.sendall(blob)


def test_strangers_are_refused_and_logged_and_no_pickle_is_loaded(spark, tmp_path,
                                                                  tupleflow_processes,
                                                                  without_spares):
    marker = str(tmp_path / "unpickled")
    payload = pickle.dumps(Mkdir(marker))
    topo = Topology("spark-hostile", **QUIET)
    topo.spout("numbers", PacedSpout(rate=200))
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
    with topo.submit(scheduler="spark", master=spark, containers=2) as running:
        running.wait_until(lambda s: total(s, "sink", "executed") > 0, timeout=90)
        keys, status = running._keys, running.status()
        procs = without_spares(running, tupleflow_processes())
        assert status["pid"] in [p.pid for p in procs]
        inbound = status["inbound"][1]
        plan = running.plan
        sink = plan.component_tasks()["sink"][0]
        spout = plan.component_tasks()["numbers"][0]
        stream = plan.stream_ids()[("numbers", "default")]
        header = wire.data_header(wire.DATA, stream, sink, spout)

        # (c) three kinds of stranger at the master's port and at a stream manager's
        socks = strangers(zmq.DEALER, running.endpoint, keys, [payload, b"mac"])
        socks += strangers(zmq.PUSH, inbound, keys, [header, payload])
        status = wait_for(lambda: (s := running.status()) and refused(s, "master") >= 3
                          and refused(s, "container 1") >= 3 and s, 30, "the refusals")
        # (d) a pickle as raw TCP bytes, and as a data frame and a control message from
        # a client that does have the keys (a compromised container): dropped, not loaded
        send_raw(running.endpoint, payload)
        send_raw(inbound, payload)
        insider = make_client(zmq.Context.instance().socket(zmq.PUSH), keys)
        insider.connect(inbound)
        for garbage in malformed(header, wire.data_header(77, stream, sink, spout)):
            insider.send_multipart(garbage)
        insider.send_multipart([header, payload])
        control = make_client(zmq.Context.instance().socket(zmq.DEALER), keys)
        control.connect(running.endpoint)
        control.send_multipart([payload, b"not a mac"])
        dropped_before = status["dropped"]
        stats = running.wait_until(lambda s: total(s, "sink", "dropped") >= 1, timeout=30)
        wait_for(lambda: running.status()["dropped"] > dropped_before, 30,
                 "the master to drop the bad control message")
        executed = total(stats, "sink", "executed")
        running.wait_until(lambda s: total(s, "sink", "executed") > executed + 50, timeout=30)
        final = running.status()
        dead = [p.pid for p in procs if not alive(p)]
        for sock in (*socks, insider, control):
            sock.close(linger=0)
    assert not os.path.exists(marker)
    assert final["state"] == "running"
    assert dead == [] and len(procs) == 1 + 2 + 3  # the master, 2 containers, 3 instances
    assert refused(final, "master") >= 3 and refused(final, "container 1") >= 3
    master_log = Path(running.run_dir, "logs", "master.log").read_text()
    assert "master: refused a connection" in master_log
    assert "refused a CURVE client with an unknown key" in master_log
    (container_log,) = glob.glob(os.path.join(os.environ["TUPLEFLOW_RUN_ROOT"],
                                              "tf-spark-hostile-c1-*", "logs", "container.log"))
    text = Path(container_log).read_text()
    assert "inbound: refused a connection" in text
    assert text.count("dropped a frame") >= len(malformed(b"", b""))
    assert "Traceback" not in text


def malformed(header: bytes, unknown_kind: bytes) -> list[list[bytes]]:
    """Data messages a stream manager must drop, with a log line each."""
    return [[b"one part"], [b"a", b"b", b"c"], [b"short", b"header"],
            [unknown_kind, b"unknown kind"], [header[:-1], b"truncated header"]]


# -- recordings in a shared record_dir ---------------------------------------------------------

def test_a_record_dir_brings_the_containers_recordings_to_spark(spark, spark_cluster, tmp_path):
    topo = Topology("spark-rec", **QUIET)
    topo.spout("sentences", ListSpout([[s] for s in SENTENCES], fields=["sentence"],
                                      replay=True))
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences").record()
    topo.bolt("count", WordCount, parallelism=2).fields_grouping("split", ["word"])
    running = topo.submit(scheduler="spark", master=spark_cluster.master_url, containers=2,
                          ackers=1, record_dir=str(tmp_path))
    with running:
        running.wait_until(all_acked, timeout=90)
        running.stop_recording("split")
        words = sum(len(sentence.split()) for sentence in SENTENCES)
        stats = running.wait_until(  # each split's report after the recording stopped
            lambda s: total(s, "split", "emitted") >= words
            and all(r.recording == [] for r in s if r.component == "split"), timeout=60)
    # read once the containers gave their Spark task slots back (the job holds them all)
    frame = running.to_spark("split", spark=spark)
    assert frame.count() == total(stats, "split", "emitted") > 0
    tasks = {r["_task"] for r in frame.select("_task").distinct().collect()}
    assert tasks == set(running.plan.component_tasks()["split"])  # both containers'
    assert os.listdir(tmp_path) == [os.path.basename(running.run_dir)]


# -- checkpointed state (issue 21) -------------------------------------------------------------

@pytest.mark.timeout(600)  # Spark starts first, then three kills and the whole log
def test_checkpointed_state_is_exact_after_kills_on_the_spark_scheduler(
        spark, tmp_path, tupleflow_processes):
    """The stateful word count of test_checkpoints_mp.py with its two containers as Spark
    barrier tasks: a counter, the checkpoint spout and a log spout SIGKILLed in turn; the
    committed state (SQLite in the run directory, which the containers share) is still the
    batch count."""
    state, killed, _, stats = run_with_kills(
        tmp_path, "spark-ckpt", 3, 22, tupleflow_processes, scheduler="spark", master=spark,
        containers=2)
    assert [c for c, _ in killed] == ["count", "__checkpoint", "words"]
    assert {s.container for s in stats if s.component == "count"} == {0, 1}
    assert state == dict(Counter(WORDS))


@pytest.mark.timeout(600)
def test_redis_state_is_exact_after_kills_on_the_spark_scheduler(
        spark, tmp_path, redis_url, tupleflow_processes):
    """The same chaos with ``state_store`` a real redis-server: both containers (Spark
    barrier tasks) save in one namespace, the run's, and the committed state read back
    from it is the batch count."""
    import redis

    state, killed, checkpoint, stats = run_with_kills(
        tmp_path, "spark-redis", 3, 23, tupleflow_processes, scheduler="spark", master=spark,
        containers=2, state_store=redis_url)
    assert [c for c, _ in killed] == ["count", "__checkpoint", "words"]
    assert {s.container for s in stats if s.component == "count"} == {0, 1}
    assert state == dict(Counter(WORDS))
    client = redis.Redis.from_url(redis_url)
    namespaces = {k.decode().split(":")[1] for k in client.keys("tupleflow:*")}
    committed = client.keys("tupleflow:*:committed")
    client.close()
    assert len(namespaces) == 1 and len(committed) == 1  # one store for every container
    assert checkpoint["id"] > 0


# -- a master that may die, on Spark (issue 23) --------------------------------------------------

MARKED = 4000  # sentences of the master-kill test, each with a word of its own
MARKED_RATE = 200  # a second: the run outlives the kill and the adoption


def marked_word_count(name: str) -> Topology:
    """Sentence ``i`` carries ``m<i>``, so the sink shows it arrived; paced, acked."""
    topo = Topology(name, **QUIET)
    topo.spout("sentences", ListSpout([[f"m{i} {SENTENCES[i % len(SENTENCES)]}"]
                                       for i in range(MARKED)], fields=["sentence"],
                                      replay=True, rate=MARKED_RATE))
    topo.bolt("split", Split, parallelism=2).shuffle_grouping("sentences")
    topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("split")
    return topo


def sink_words(folders) -> set[str]:
    """The words every container's sinks recorded (the containers' folders are on this
    machine: the test cluster is on loopback)."""
    return {values[0] for folder in folders for values in read_sink(folder, "sink")}


def test_a_killed_master_on_spark_is_replaced_and_adopts_the_running_containers(spark):
    """SIGKILL the master of an at-least-once topology on Spark: the stream managers in the
    executors run on and route with no master; the handle starts a new one, which binds
    the same address and adopts them; the barrier job is neither lost nor submitted again;
    every sentence is acked and reaches the sink."""
    with marked_word_count("spark-master-kill").submit(
            scheduler="spark", master=spark, containers=2, ackers=1, max_spout_pending=100,
            message_timeout=10.0) as running:
        running.wait_until(lambda s: total(s, "sentences", "acked") >= 300, timeout=120)
        old, status = running.master_pid, running.status()
        folders = list(status["container_dirs"].values())
        instances = {s.task: s.pid for s in running.statistics()}
        flowed, relaunch = [], running._link.relaunch

        def later(n):  # the handle's relaunch, once words flowed with no master at all
            at_death = len(sink_words(folders))
            wait_for(lambda: len(sink_words(folders)) > at_death + 200, 60,
                     "words to reach the sink while no master runs")
            flowed.append(len(sink_words(folders)) - at_death)
            return relaunch(n)

        running._link.relaunch = later
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: running.master_pid != old, 120, "a new master")
        stats = running.wait_until(lambda s: total(s, "sentences", "acked") == MARKED
                                   and settled(s), timeout=180, interval=0.2)
        after, events = running.status(), running.events()
    assert flowed and flowed[0] > 200
    assert after["pid"] == running.master_pid != old and running.master_restarts == 1
    assert after["containers"] == status["containers"]  # the same stream managers, adopted
    assert {s.task: s.pid for s in stats} == instances  # no instance restarted for it
    assert {s.master_restarts for s in stats} == {1}
    (restarted,) = [e for e in events if e["kind"] == "master_restarted"]
    assert restarted["adopted"] == [0, 1] and restarted["started_again"] == []
    assert after["spark_job"]["rounds"] == 0 and after["spark_job"]["running"]
    seen = sink_words(folders)
    assert [i for i in range(MARKED) if f"m{i}" not in seen] == []  # 0 lost
    # the job's one round ended at the kill, its stream managers never restarted
    assert {r["container"]: r["restarts"] for r in running.job.result} == {0: 0, 1: 0}


@pytest.mark.timeout(600)  # Spark may start first, then two kills and their recoveries
def test_what_a_new_master_carries_over_on_spark(spark, tmp_path):
    """The carry-over of ``test_mp_master_carry`` on the Spark scheduler: the settings,
    tap, events and exceptions the notebook saw before the master was SIGKILLed are the
    new master's; every report says the master restarted once (counts restart, marked);
    and a spout restarted under the new master is told the cap and recording asked of the
    old one."""
    running = carried_numbers("spark-carried").submit(
        scheduler="spark", master=spark, containers=2, record_dir=str(tmp_path))
    with running:
        running.wait_until(lambda s: running.exceptions() and all(
            x.acked > 20 for x in carried_spouts(s)), timeout=120, interval=0.1)
        settings, events, exceptions, old = ask_what_a_new_master_must_carry(running, 180)
        stats = replace_the_master(running, old, 120)
        assert {s.master_restarts for s in stats} == {1}
        check_carried(running, settings, events, exceptions, old)
        (restarted,) = [e for e in running.events() if e["kind"] == "master_restarted"]
        assert restarted["adopted"] == [0, 1] and restarted["started_again"] == []
        assert running.sample("numbers", n=5) != []  # the tap asked of the old master
        check_a_restarted_spout_is_told(running, 120)


# -- a new number of containers on Spark (issue 22) ---------------------------------------------

@pytest.mark.timeout(600)  # two barrier jobs, and the whole log committed
def test_three_containers_instead_of_two_resubmit_the_job_and_the_counts_stay_exact(
        spark, tmp_path):
    """A checkpointed word count from the embedded log on two Spark containers, rebalanced
    to three containers (and three counters) while it runs: the driver submits the barrier
    job again with three tasks, the master and the handle stay. Then back to two counters
    in place (the same containers). The committed counts are exactly a batch count of the
    log."""
    half = len(REBALANCE_WORDS) // 2
    fill_log(tmp_path, "words", REBALANCE_WORDS[:half])
    with rebalanced_word_count(tmp_path).submit(scheduler="spark", master=spark, containers=2,
                                                checkpoint_interval=0.3) as running:
        running.wait_active(120)
        wait_for(lambda: sum(running.state("count").values()) > 0, 120, "a committed count")
        master, first = running.master_pid, running.events()[0]
        with pytest.raises(ValueError, match="needs 9 Spark task slots .* the cluster has 4"):
            running.rebalance({"count": 3}, containers=9)  # refused: nothing stops
        event = running.rebalance({"count": 3}, containers=3, timeout=300)
        plan, containers = running.plan(), running.status()["containers"]
        shrunk = running.rebalance({"count": 2}, timeout=300)  # the same containers: in place
        fill_log(tmp_path, "words", REBALANCE_WORDS[half:], create=False)
        wait_for(lambda: sum(running.state("count").values()) >= len(REBALANCE_WORDS), 240,
                 "the whole log to be committed")
        state, status = running.state("count"), running.status()
        stats, events = running.statistics(), running.events()
    print(f"\n[spark rebalance] 2 -> 3 containers: {event}\n[spark rebalance] in place, "
          f"count 3 -> 2: {shrunk}")
    assert state == dict(Counter(REBALANCE_WORDS))
    assert plan.containers == 3 and len(plan.component_tasks()["count"]) == 3
    assert {s.container for s in stats} == {0, 1, 2}
    assert not event["in_place"] and event["containers"] == 3
    assert event["keys_moved"]["count"] > 0
    assert shrunk["in_place"] and len(shrunk["tasks_removed"]) == 1
    assert status["containers"] == containers  # no stream manager restarted for it
    assert len(running.plan().component_tasks()["count"]) == 2
    # the same master (the dashboard's history with it), and one more barrier job
    assert status["pid"] == master and running.master_restarts == 0
    assert events[0] == first and [e["kind"] for e in events].count("rebalanced") == 2
    assert status["spark_job"] | {"group": None} == {
        "group": None, "running": True, "rounds": 0, "resized": 1, "containers": 3,
        "last_error": None}
    assert sorted(r["container"] for r in running.job.result) == [0, 1, 2]
