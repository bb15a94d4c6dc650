"""Throughput of the Redis Streams queue spout into a counting bolt, acking off and on.

Workload
    ``--tuples`` random words (the word count's vocabulary and chooser, see _common.py) are
    put into a Redis stream as JSON strings before anything is timed. A topology of
    ``RedisQueueSpout`` tasks (``--spouts``) sends them, fields-grouped on the word, to
    counting bolts (``--bolts``) that keep a dict of counts, as in benchmarks/wordcount.py.
    With acking off a spout's item is acked in Redis as it is emitted (at most once); with
    acking on, once the counting bolt acked its tuple (at least once: XACK + XDEL, batched).

Implementations (``--only NAME``)
    tupleflow    the topology above, on this repository's engine.
    queue-loop   one process opens batches of ``--batch`` items and acks them, with no
                 topology: the most one Python client gets out of the queue (its limit).

Reading the output (one line per measurement, wrapped here)::

    RESULT name=tupleflow workload=redis-queue acking=on spouts=1 bolts=1
           tuples=200000 seconds=4.123 tps=48508 redis=7.0.15

``seconds`` is, for tupleflow, from the first tuple a counting bolt executed to the last
(start-up excluded, as in the word count); with acking on the run also waits until every
item is acked in Redis, and ``ack_lag_s`` says how long after the last count that was.
queue-loop times its loop. Every run checks its counts (bolt executions, Redis acks, an
empty queue at the end) and prints ``FAILED ...`` on stderr instead when they do not add up.

The benchmark starts its own ``redis-server`` (no persistence) on a free loopback port and
stops it at the end::

    python benchmarks/redis_queue.py --tuples 200000 --spouts 1 --bolts 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis
from _common import (
    BenchmarkError,
    Measurement,
    check_equal,
    checked_seconds,
    selected,
    timeout_for,
    vocabulary,
    word_chooser,
)
from wordcount import AckingCountBolt, CountBolt, counting_window, total

from runtime import Topology
from runtime.sources import RedisQueue, RedisQueueSpout

WORKLOAD = "redis-queue"
POLL_SECONDS = 0.05


# --- a redis-server of our own ----------------------------------------------------------


@contextlib.contextmanager
def redis_server():
    """A fresh redis-server on a free loopback port, without persistence; yields its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise BenchmarkError("redis-server is not installed (apt-get install redis-server)")
    with tempfile.TemporaryDirectory(prefix="tupleflow-redis-") as workdir:
        for _attempt in range(5):
            port = free_port()
            proc = subprocess.Popen(
                [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", workdir], stdout=subprocess.DEVNULL)
            try:
                if wait_ready(proc, port):
                    yield f"redis://127.0.0.1:{port}/0"
                    return
            finally:
                proc.terminate()
                proc.wait(10)
    raise BenchmarkError("redis-server did not start on a free loopback port in 5 attempts")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_ready(proc: subprocess.Popen, port: int, timeout: float = 10.0) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                if client.ping():
                    return True
            time.sleep(0.02)  # polling a condition with a deadline
        return False
    finally:
        client.close()


# --- filling ----------------------------------------------------------------------------


def fill(url: str, stream: str, tuples: int) -> None:
    """Put ``tuples`` random words (JSON strings) into a fresh stream; not timed."""
    words, choose = vocabulary(), word_chooser()
    client = redis.Redis.from_url(url)
    client.delete(stream, f"{stream}:stats", f"{stream}:dead", f"{stream}:why")
    client.close()
    with RedisQueue(stream, url) as queue:
        for start in range(0, tuples, 10_000):
            size = min(10_000, tuples - start)
            queue.put_many([json.dumps(choose(words)).encode() for _ in range(size)])


def check_queue(name: str, url: str, stream: str, tuples: int) -> None:
    with RedisQueue(stream, url) as queue:
        stats = queue.statistics()
    check_equal(name, "items acked in Redis", stats.acked, tuples)
    check_equal(name, "items left in the queue", stats.visible + stats.open, 0)
    check_equal(name, "items dead-lettered", stats.dead_lettered, 0)


# --- tupleflow --------------------------------------------------------------------------


def build_topology(url: str, stream: str, args, acking: bool) -> Topology:
    topology = Topology("redis-queue-bench")
    spout = RedisQueueSpout(stream, url, fields=["word"], batch_size=args.batch)
    topology.spout("words", spout, parallelism=args.spouts)
    bolt = AckingCountBolt if acking else CountBolt
    topology.bolt("count", bolt, parallelism=args.bolts).fields_grouping("words", ["word"])
    return topology


def run_tupleflow(url: str, args, acking: bool) -> Measurement:
    stream = f"bench-{'on' if acking else 'off'}"
    fill(url, stream, args.tuples)
    topology = build_topology(url, stream, args, acking)
    queue = RedisQueue(stream, url)
    config = {"ackers": 1 if acking else 0}
    try:
        with topology.submit(scheduler="local", config=config) as running:
            stats = wait_until_counted(running, args.tuples, timeout_for(args.tuples))
            lag = wait_until_acked(queue, args.tuples, timeout_for(args.tuples))
    finally:
        queue.close()
    check_equal("tupleflow", 'tuples executed by "count"', total(stats, "count", "executed"),
                args.tuples)
    check_equal("tupleflow", "instance restarts", sum(r.restarts for r in stats), 0)
    check_queue("tupleflow", url, stream, args.tuples)
    return Measurement("tupleflow", WORKLOAD, acking, args.spouts, args.bolts, args.tuples,
                       counting_window(stats), (("redis", server_version(url)),
                                                ("ack_lag_s", f"{lag:.3f}")))


def wait_until_counted(running, tuples: int, timeout: float) -> list:
    def done(stats) -> bool:
        return total(stats, "count", "executed") >= tuples

    try:
        return running.wait_until(done, timeout=timeout, interval=POLL_SECONDS)
    except TimeoutError as exc:
        raise BenchmarkError(f"tupleflow: {exc}") from None


def wait_until_acked(queue: RedisQueue, tuples: int, timeout: float) -> float:
    """Seconds from now until Redis has every item acked (spouts batch their acks)."""
    start = time.monotonic()
    while queue.statistics().acked < tuples:
        if time.monotonic() - start > timeout:
            raise BenchmarkError(f"tupleflow: Redis acked {queue.statistics().acked} of "
                                 f"{tuples} items within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)  # polling a condition with a deadline
    return time.monotonic() - start


# --- queue-loop -------------------------------------------------------------------------


def run_queue_loop(url: str, args, acking: bool) -> Measurement:
    stream = "bench-loop"
    fill(url, stream, args.tuples)
    counts: dict = {}
    get = counts.get
    with RedisQueue(stream, url) as queue:
        start = time.perf_counter()
        while items := queue.open("loop", args.batch):
            for item in items:
                word = json.loads(item.payload)
                counts[word] = get(word, 0) + 1
            queue.ack_many([item.id for item in items])
        seconds = time.perf_counter() - start
    check_equal("queue-loop", "sum of counts", sum(counts.values()), args.tuples)
    check_queue("queue-loop", url, stream, args.tuples)
    return Measurement("queue-loop", WORKLOAD, True, 1, 1, args.tuples,
                       checked_seconds("queue-loop", seconds),
                       (("redis", server_version(url)), ("batch", args.batch)))


def server_version(url: str) -> str:
    client = redis.Redis.from_url(url)
    try:
        return client.info("server")["redis_version"]
    finally:
        client.close()


# --- command line -----------------------------------------------------------------------

IMPLEMENTATIONS = {"tupleflow": run_tupleflow, "queue-loop": run_queue_loop}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tuples", type=int, default=200_000, help="items in the queue per run")
    p.add_argument("--spouts", type=int, default=1, help="spout parallelism")
    p.add_argument("--bolts", type=int, default=1, help="counting bolt parallelism")
    p.add_argument("--batch", type=int, default=100, help="items opened per open call")
    p.add_argument("--acking", choices=("off", "on", "both"), default="both")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this implementation (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if min(args.tuples, args.spouts, args.bolts, args.batch) < 1:
        p.error("--tuples, --spouts, --bolts and --batch must be positive")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.acking]
    failed = 0
    with redis_server() as url:
        for name in selected(p, list(IMPLEMENTATIONS), args.only):
            for acking in modes if name == "tupleflow" else [True]:
                try:
                    print(IMPLEMENTATIONS[name](url, args, acking).line(), flush=True)
                except BenchmarkError as error:
                    print(f"FAILED {error}", file=sys.stderr, flush=True)
                    failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
