"""The Spark bridge: what a topology recorded (and its metrics and events) as PySpark
DataFrames, batch or streaming (``RunningTopology.to_spark`` and friends call it).

The runtime writes recordings as Parquet segments (``runtime/recording/_sink.py``); this
module only reads them, with Spark. pyspark is imported inside the functions, so
``import runtime`` and ``import workbench`` never import it, and a notebook that never
asks for a DataFrame never starts a JVM. It lives in the runtime, below the processes
(pyproject.toml, ``[tool.importlinter]``), so that ``RunningTopology`` imports it
without an upward import; ``workbench`` re-exports ``spark_session``.

The SparkSession is the active one if there is one; otherwise one is made, once:
``local[*]``, no UI, few shuffle partitions, bound to 127.0.0.1, UTC, quiet logs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from ._parquet import check_stream
from ._read import segments
from ._sink import read_fields

SHUFFLE_PARTITIONS = 4  # a laptop's worth: the default 200 makes small queries slow
_lock = threading.Lock()


class SparkUnavailable(RuntimeError):
    """Spark cannot start here (no Java, or no pyspark)."""


def spark_session():
    """The active SparkSession, or a new local one made for a notebook on one machine."""
    with _lock:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        _check_java()
        # Bind the driver to loopback from the JVM's first line (else it warns that the
        # hostname resolves to loopback and picks another interface).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python functions (workbench.reconcile's batch job) run in this interpreter, with
        # its packages, not whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        spark = (SparkSession.builder.master("local[*]").appName("tupleflow")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.sql.session.timeZone", "UTC")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        return spark


def _check_java() -> None:
    import shutil  # here: every instance imports this module, only the bridge needs it

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkUnavailable("the Spark bridge needs Java 17 (no `java` on PATH and no "
                               "JAVA_HOME); install a JDK, e.g. apt-get install openjdk-17-jre")


# -- recordings ----------------------------------------------------------------------------
def to_spark(running, component: str, stream: str = "default", *, spark=None):
    """Everything recorded so far of ``component``'s ``stream``, as a DataFrame: the
    declared fields (typed by their hints, else by the data) plus ``_root_id``, ``_task``,
    ``_emit_ts``. Nothing recorded yet: an empty DataFrame with the declared columns."""
    spark = spark or spark_session()
    folder = _recorded(running, component, stream)
    if not segments(running, component, stream):
        return spark.createDataFrame([], declared_schema(running, component, stream))
    return spark.read.parquet(folder)


def spark_stream(running, component: str, stream: str = "default", *, spark=None,
                 timeout: float = 30.0, max_files_per_trigger: int | None = None):
    """A streaming DataFrame over the growing recording (Structured Streaming's file
    source: each micro-batch reads the segments written since the last).

    A file source needs its schema up front: it is read from the first segment, or, if
    none is written yet, built from the declared type hints; with untyped fields and no
    segment it waits up to ``timeout`` seconds for the first one (TimeoutError after)."""
    spark = spark or spark_session()
    folder = _recorded(running, component, stream)
    schema = _stream_schema(spark, running, component, stream, timeout)
    reader = spark.readStream.schema(schema)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    os.makedirs(folder, exist_ok=True)  # the file source wants the folder to exist
    return reader.parquet(folder)


def _recorded(running, component: str, stream: str) -> str:
    check_stream(running.plan.streams, component, stream)
    return running.recording_dir(component, stream)


def _stream_schema(spark, running, component: str, stream: str, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        files = segments(running, component, stream)
        if files:
            return spark.read.parquet(files[0]).schema
        fields, types = _declared(running, component, stream)
        if fields and all(f in types for f in fields):
            return declared_schema(running, component, stream)
        if time.monotonic() > deadline:
            raise TimeoutError(_no_schema(component, stream, timeout, fields, types))
        time.sleep(0.1)


def _no_schema(component: str, stream: str, timeout: float, fields: list[str],
               types: dict[str, str]) -> str:
    where = f"component {component!r} stream {stream!r}: no segment recorded in {timeout} s"
    if not fields:
        return (f"{where}, and no instance has started recording it; start it with "
                f"running.record({component!r}, {stream!r}) or .record() when declaring")
    untyped = [f for f in fields if f not in types]
    return (f"{where}, and fields {untyped} have no type hint to take the schema from; "
            "declare them, e.g. outputs = ['word: str', 'count: int'], or wait longer")


def _declared(running, component: str, stream: str) -> tuple[list[str], dict[str, str]]:
    """The fields and type hints the recording instances left next to the segments
    (nothing before one of them started recording: the client holds no user code)."""
    return read_fields(running.recording_dir(component, stream)) or ([], {})


SPARK_TYPES = {"str": "StringType", "int": "LongType", "float": "DoubleType",
               "bool": "BooleanType", "bytes": "BinaryType"}


def declared_schema(running, component: str, stream: str):
    """The schema the declaration promises: hinted fields typed, others as strings."""
    from pyspark.sql import types as T

    fields, types = _declared(running, component, stream)
    columns = [T.StructField(f, getattr(T, SPARK_TYPES.get(types.get(f), "StringType"))())
               for f in fields]
    return T.StructType(columns + [T.StructField("_root_id", T.LongType()),
                                   T.StructField("_task", T.IntegerType()),
                                   T.StructField("_emit_ts", T.TimestampType())])


# -- metrics and events --------------------------------------------------------------------
def metrics_frame(running, window: str = "10m", *, spark=None):
    """``running.metrics(window)``'s series as rows ``(component, time, executed_per_s,
    emitted_per_s)``: one per component per second (per minute past 10 minutes)."""
    from pyspark.sql import types as T

    spark = spark or spark_session()
    series = running.metrics(window)["series"]
    rows = [(component, _ts(t), float(executed), float(emitted))
            for component, points in series.items() for t, executed, emitted in points]
    schema = T.StructType([T.StructField("component", T.StringType()),
                           T.StructField("time", T.TimestampType()),
                           T.StructField("executed_per_s", T.DoubleType()),
                           T.StructField("emitted_per_s", T.DoubleType())])
    return spark.createDataFrame(rows, schema)


def state_frame(state: dict, *, spark=None):
    """A committed state (``running.state(component)``) as rows ``(key, value)``: the key
    as text; the value a long or a double when every value is a number, else JSON."""
    from pyspark.sql import types as T

    spark = spark or spark_session()
    values = list(state.values())
    if all(type(v) is int for v in values):
        kind, convert = T.LongType(), int
    elif all(type(v) in (int, float) for v in values):
        kind, convert = T.DoubleType(), float
    else:
        kind, convert = T.StringType(), lambda v: json.dumps(v, default=str)
    rows = [(str(k), convert(v)) for k, v in state.items()]
    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", kind)])
    return spark.createDataFrame(rows, schema)


def events_frame(running, *, spark=None):
    """``running.events()`` as rows ``(kind, time, component, task, details)``; details
    is the rest of the event as JSON (events of different kinds carry different fields)."""
    from pyspark.sql import types as T

    spark = spark or spark_session()
    rows = [_event_row(e) for e in running.events()]
    schema = T.StructType([T.StructField("kind", T.StringType()),
                           T.StructField("time", T.TimestampType()),
                           T.StructField("component", T.StringType()),
                           T.StructField("task", T.LongType()),
                           T.StructField("details", T.StringType())])
    return spark.createDataFrame(rows, schema)


def explain_frame(running, window: str = "1m", *, spark=None):
    """``running.explain(window)``'s findings as rows ``(rank, component, task, kind,
    advice, score, evidence)``, most important first; evidence is JSON (each kind has
    its own numbers)."""
    from pyspark.sql import types as T

    spark = spark or spark_session()
    rows = [(rank, f.component, f.task, f.kind, f.advice, float(f.score),
             json.dumps(f.evidence, default=str))
            for rank, f in enumerate(running.explain(window), start=1)]
    schema = T.StructType([T.StructField("rank", T.IntegerType()),
                           T.StructField("component", T.StringType()),
                           T.StructField("task", T.LongType()),
                           T.StructField("kind", T.StringType()),
                           T.StructField("advice", T.StringType()),
                           T.StructField("score", T.DoubleType()),
                           T.StructField("evidence", T.StringType())])
    return spark.createDataFrame(rows, schema)


def traces_frame(running, status: str | None = None, limit: int = 100, *, spark=None):
    """``running.traces(status, limit)`` as one row per hop: ``(msg_id, spout, spout_task,
    status, complete_ms, held_by, hop, component, task, stream, values, parent, queued_ms,
    executed_ms, outcome, emitted)``; msg_id and values as JSON, held_by as
    "component:task" (or "<transit>")."""
    from pyspark.sql import types as T

    spark = spark or spark_session()
    rows = [row for t in running.traces(status, limit) for row in _hop_rows(t)]
    text, long_, double = T.StringType(), T.LongType(), T.DoubleType()
    schema = T.StructType([T.StructField(name, kind) for name, kind in (
        ("msg_id", text), ("spout", text), ("spout_task", long_), ("status", text),
        ("complete_ms", double), ("held_by", text), ("hop", long_), ("component", text),
        ("task", long_), ("stream", text), ("values", text), ("parent", long_),
        ("queued_ms", double), ("executed_ms", double), ("outcome", text),
        ("emitted", T.TimestampType()))])
    return spark.createDataFrame(rows, schema)


def _hop_rows(trace) -> list[tuple]:
    held = trace.held_by
    held = None if held is None else (held[0] if held[1] is None else f"{held[0]}:{held[1]}")
    head = (json.dumps(trace.msg_id, default=str), trace.component, trace.task, trace.status,
            trace.complete_ms, held)
    return [(*head, i, h.component, h.task, h.stream, json.dumps(h.values, default=str),
             h.parent, h.queued_ms, h.executed_ms, h.outcome, _ts(h.emitted_at))
            for i, h in enumerate(trace.hops)]


def _event_row(event: dict[str, Any]) -> tuple:
    rest = {k: v for k, v in event.items() if k not in ("kind", "time", "component", "task")}
    task = event.get("task")
    component = event.get("component")
    return (event.get("kind"), _ts(event.get("time")),
            None if component is None else str(component),
            task if isinstance(task, int) else None, json.dumps(rest, default=str))


def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)
