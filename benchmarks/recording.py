"""What recording a stream to Parquet costs, and how fast Spark reads a recording back.

Workload
    Heron's word count of ``wordcount.py`` (its spout and counting bolt, unchanged),
    run alternately without and with the spout's "default" stream recorded
    (``topo.spout(...).record()``), ``--rounds`` times each, in the same invocation so
    both see the same machine. Each run emits ``--tuples`` words.

Reading the output
    One RESULT line per run (``name=tupleflow`` or ``name=tupleflow-recorded``, in the
    shape of ``_common.Measurement``), then::

        RESULT name=recording-cost workload=wordcount plain_tps=... recorded_tps=...
               cost_percent=...   (median run of each; target: <= 15)
               plain_cpu_us=... recorded_cpu_us=... cpu_cost_percent=...  (spout process)
               converter_cpu_us=...  (the converter process, per tuple, after warm-up)
        RESULT name=spark-session seconds=...            (starting the local session)
        RESULT name=to-spark-count rows=... seconds=...  (target: < 10 s for 1,000,000)

    A recorded run is checked: the rows in its segments equal the words emitted.

Run it as a script, with ``runtime`` and ``workbench`` importable::

    python benchmarks/recording.py --tuples 1000000 --rounds 2
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time

from _common import BenchmarkError, Measurement, base_parser, check_equal, timeout_for
from wordcount import (
    CountBolt,
    WordSpout,
    check_tupleflow,
    counting_window,
    engine_options,
    wait_until_counted,
)

from runtime import Topology

WORKLOAD = "wordcount"


def build(record: bool) -> Topology:
    topology = Topology("recording-bench")
    spout = topology.spout("words", WordSpout)
    if record:
        spout.record()
    topology.bolt("count", CountBolt).fields_grouping("words", ["word"])
    return topology


def one_run(args, record: bool):
    config = {"tuples": args.tuples, **engine_options(args)}
    with build(record).submit(config=config) as running:
        base = running.wait_until(lambda s: spout(s).cpu_seconds > 0, timeout=60)
        stats = wait_until_counted(running, args.tuples, timeout_for(args.tuples))
        if record:  # closing the recording waits for its converter: its CPU is logged
            running.stop_recording("words")
            running.wait_until(lambda s: not spout(s).recording, timeout=120)
    check_tupleflow(stats, args.tuples)
    extra = [("spout_cpu_us_per_tuple", f"{spout_cpu_us(spout(base), spout(stats)):.3f}")]
    if record:
        check_equal("tupleflow-recorded", "rows recorded", recorded_rows(running), args.tuples)
        extra.append(("converter_cpu_us_per_tuple",
                      f"{converter_cpu_us(running, spout(stats).task, args.tuples):.3f}"))
    name = "tupleflow-recorded" if record else "tupleflow"
    measurement = Measurement(name, WORKLOAD, False, 1, 1, args.tuples, counting_window(stats),
                              tuple(extra))
    print(measurement.line(), flush=True)
    return measurement, running


def converter_cpu_us(running, task: int, tuples: int) -> float:
    """The converter process's CPU per tuple (after its warm-up), from the line it logs
    when it ends: the recording's cost outside the emitting process."""
    path = os.path.join(running.run_dir, "logs", f"words-{task}-recorder-default.log")
    with open(path) as f:
        found = re.findall(r"converter done: rows=(\d+) cpu_seconds=([0-9.]+)", f.read())
    if not found:
        raise BenchmarkError(f"tupleflow-recorded: no 'converter done' line in {path}")
    rows, seconds = found[-1]
    check_equal("tupleflow-recorded", "rows converted", int(rows), tuples)
    return float(seconds) * 1e6 / tuples


def median_extra(runs, key: str) -> float:
    return statistics.median(float(dict(m.extra)[key]) for m in runs)


def spout(stats):
    return next(s for s in stats if s.component == "words")


def spout_cpu_us(first, last) -> float:
    """CPU time of the spout process (its writer thread included) per tuple emitted
    between two reports, the first after start-up (imports, vocabulary, pyarrow's warm-up):
    steadier than throughput on a shared machine, where other processes' load counts."""
    emitted = last.emitted - first.emitted
    if emitted <= 0:
        raise BenchmarkError("tupleflow: no tuples emitted between two spout reports")
    return (last.cpu_seconds - first.cpu_seconds) * 1e6 / emitted


def recorded_rows(running) -> int:
    import pyarrow.parquet as pq

    from runtime.recording import segments

    return sum(pq.ParquetFile(f).metadata.num_rows for f in segments(running, "words"))


def spark_read(running) -> None:
    from workbench import spark_session

    started = time.perf_counter()
    spark = spark_session()
    print(f"RESULT name=spark-session seconds={time.perf_counter() - started:.3f}", flush=True)
    for name in ("to-spark-count", "to-spark-count-again"):  # the first pays Spark's warm-up
        started = time.perf_counter()
        rows = running.to_spark("words", spark=spark).count()
        seconds = time.perf_counter() - started
        print(f"RESULT name={name} rows={rows} seconds={seconds:.3f}", flush=True)
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__, default_tuples=1_000_000)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each kind")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark read")
    args = parser.parse_args(argv)
    try:
        plain, recorded, last = [], [], None
        for _ in range(args.rounds):
            plain.append(one_run(args, record=False)[0])
            measurement, last = one_run(args, record=True)
            recorded.append(measurement)
        p, r = (statistics.median(m.tps for m in runs) for runs in (plain, recorded))
        pc, rc = (median_extra(runs, "spout_cpu_us_per_tuple") for runs in (plain, recorded))
        cc = median_extra(recorded, "converter_cpu_us_per_tuple")
        print(f"RESULT name=recording-cost workload={WORKLOAD} tuples={args.tuples} "
              f"plain_tps={p:.0f} recorded_tps={r:.0f} cost_percent={100 * (1 - r / p):.1f} "
              f"plain_cpu_us={pc:.3f} recorded_cpu_us={rc:.3f} "
              f"cpu_cost_percent={100 * (rc / pc - 1):.1f} converter_cpu_us={cc:.3f}",
              flush=True)
        if not args.no_spark:
            spark_read(last)
    except BenchmarkError as exc:
        print(f"FAILED {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
