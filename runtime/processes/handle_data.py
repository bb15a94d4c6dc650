"""The running topology's questions about what it produced: recordings, checkpointed
state and the Spark bridge (runtime/recording/, runtime/state/). A part of
:class:`~runtime.processes.client.RunningTopology`."""

from __future__ import annotations

import contextlib

from runtime import state as _state
from runtime import wire
from runtime.model.constants import RECORD_DIR, STATE_STORE

__all__ = ["DataQuestions"]


class DataQuestions:
    """Recordings, state and DataFrames; needs the handle's ``name``, ``plan``,
    ``run_dir`` and ``_ask``."""

    # -- recordings (runtime/recording/) -----------------------------------------------------
    def record(self, component: str, stream: str = "default") -> list[int]:
        """Start recording ``component``'s ``stream`` to Parquet segments under
        ``run_dir/recordings/<component>/<stream>/``: values under the declared field
        names, plus ``_root_id``, ``_task`` and ``_emit_ts``. A restarted instance keeps
        recording. Returns the tasks told (an instance not ready yet is told when it is);
        ValueError for an unknown component or stream."""
        return self._set_recording(component, stream, True)

    def stop_recording(self, component: str, stream: str = "default") -> list[int]:
        """Stop recording ``component``'s ``stream``; the instances write what they hold."""
        return self._set_recording(component, stream, False)

    def _set_recording(self, component: str, stream: str, on: bool) -> list[int]:
        from runtime.recording._parquet import check_stream

        check_stream(self.plan.streams, component, stream)
        return self._ask(wire.AskRecord, component=component, stream=stream, on=on)

    @property
    def record_base(self) -> str:
        """Where recordings go: this run's own folder in the ``record_dir`` option, when
        given (a folder the containers and this machine share), else the run directory."""
        return self.plan.config.get(RECORD_DIR) or self.run_dir

    def recording_dir(self, component: str, stream: str = "default") -> str:
        """The folder a stream's Parquet segments are written to (it may not exist yet)."""
        from runtime.recording._parquet import recording_dir

        return recording_dir(self.record_base, component, stream)

    # -- checkpointed state (runtime/state/, docs/internals/checkpoints.md) -----------------
    def state(self, component: str) -> dict:
        """The last committed state of the StatefulBolt ``component``, merged over its
        tasks (each holds its own keys); empty before the first checkpoint commits."""
        with contextlib.closing(self._state_store()) as store:
            return _state.committed_state(store, component)[1]

    def checkpoint(self) -> dict | None:
        """The last committed checkpoint: ``{"id", "epoch", "duration", "time"}`` (seconds,
        and the wall time of the commit), or None before the first."""
        with contextlib.closing(self._state_store()) as store:
            committed = store.committed()
        return None if committed is None else {"id": committed[0], **committed[1]}

    def _state_store(self):
        if not _state.checkpointing(self.plan.config):
            raise ValueError(f"topology {self.name!r} was not submitted with "
                             "checkpoint_interval: it keeps no checkpointed state")
        return _state.open_store(str(self.plan.config[STATE_STORE]), self.run_dir)

    # -- the Spark bridge (runtime/recording/frames.py; few runs use Spark, so the bridge
    # is imported on first use) ---------------------------------------------------------------
    def to_spark(self, component: str, stream: str = "default", spark=None):
        """What was recorded of ``component``'s ``stream``, as a ``pyspark.sql.DataFrame``
        (see ``runtime.recording.frames.to_spark``; the SparkSession starts on first use)."""
        from runtime.recording import frames

        return frames.to_spark(self, component, stream, spark=spark)

    def spark_stream(self, component: str, stream: str = "default", spark=None,
                     timeout: float = 30.0):
        """A streaming DataFrame (Structured Streaming file source) over the growing
        recording of ``component``'s ``stream`` (see ``runtime.recording.frames.spark_stream``)."""
        from runtime.recording import frames

        return frames.spark_stream(self, component, stream, spark=spark, timeout=timeout)

    def state_frame(self, component: str, spark=None):
        """:meth:`state` as a Spark DataFrame of rows ``(key, value)``."""
        from runtime.recording import frames

        return frames.state_frame(self.state(component), spark=spark)

    def metrics_frame(self, window: str = "10m", spark=None):
        """The per-component rate series of :meth:`metrics` as a Spark DataFrame."""
        from runtime.recording import frames

        return frames.metrics_frame(self, window, spark=spark)

    def events_frame(self, spark=None):
        """The topology's :meth:`events` as a Spark DataFrame."""
        from runtime.recording import frames

        return frames.events_frame(self, spark=spark)
