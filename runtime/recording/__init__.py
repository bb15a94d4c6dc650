"""Reading recorded streams back, without Spark: pyarrow Tables and pandas DataFrames.

Words, one meaning each: *record* is only the user's verb and its options (``record=``,
``running.record``, ``record_dir``); a *recording* is the folder of Parquet *segments* of
one component's stream; a *recorder* (``_parquet.py``) appends the emitting task's
batches to raw segments, one *entry* per batch (``_raw.py``); a *converter* process
(``_convert.py``) turns them into Parquet with a *sink* (``_sink.py``); ``frames.py`` is
the Spark bridge.

A recording (``topo.spout(...).record("default")``, the ``record=[...]`` option, or
``running.record(component, stream)``) is a folder of Parquet segments,
``run_dir/recordings/<component>/<stream>/part-<task>-<opened ns>-<seq>.parquet``, each
written under a hidden temporary name and renamed when complete; a folder named
``_rejected`` holds, as text, segments that did not fit the stream's column types.
Raw segments a killed run left unconverted (hidden ``.part-*.parquet.raw`` files that no
live process holds) are converted to Parquet first, so what was emitted before a kill
is read too.

Every row holds the tuple's values under the declared field names, plus ``_root_id``
(the tuple tree's root id as a signed 64-bit integer when the tuple was tracked, else
null), ``_task`` (the emitting task) and ``_emit_ts`` (when its batch was flushed, a UTC
timestamp). pyarrow is imported when a function here is called, not before.

>>> import tempfile
>>> segments(tempfile.mkdtemp(), "words")
[]
"""

from ._read import read_pandas, read_table, segments
from ._sink import META_COLUMNS, recording_dir
from .frames import SparkUnavailable, spark_session

__all__ = ["META_COLUMNS", "SparkUnavailable", "read_pandas", "read_table", "recording_dir",
           "segments", "spark_session"]
