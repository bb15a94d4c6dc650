"""Who watches one task's streams: taps (``running.sample``, the last tuples sent) and
recordings (``running.record``, Parquet in the run directory;
runtime/recording/_parquet.py). Both are switched on a stream's
:class:`~runtime.engine.outbound.StreamOut` (its ``tap`` and ``recorder``), which feeds
them as it sends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from runtime.model.constants import RECORD_DIR, RECORD_ROWS, RECORD_SECONDS
from runtime.model.topology import ComponentSpec
from runtime.recording._parquet import declared_types, open_recorder

from .outbound import StreamOut, Tap

log = logging.getLogger("tupleflow.executor")

OnError = Callable[[str, BaseException], None]


class StreamWatch:
    """The taps and recordings on one task's streams: it switches them on and off, and
    reads what the taps saw."""

    def __init__(self, spec: ComponentSpec, task: int, streams: Mapping[str, StreamOut],
                 config: Mapping, run_dir: str, monotonic: Callable[[], float],
                 wall: Callable[[], float], on_error: OnError) -> None:
        self.spec, self.task, self.streams, self.config = spec, task, streams, config
        self.run_dir, self.monotonic, self.wall = run_dir, monotonic, wall
        self.on_error = on_error

    # -- taps ---------------------------------------------------------------------------
    def tap(self, stream: str, n: int, seconds: float) -> None:
        """Keep the last ``n`` tuples sent on ``stream`` for the next ``seconds`` (a new
        request extends the time); an unknown stream is ignored with a log line."""
        out = self.streams.get(stream)
        if out is None:
            log.warning("tap of unknown stream %r of %r ignored", stream, self.spec.id)
            return
        until = self.monotonic() + seconds
        out.tap = (Tap(n, until, self.wall, out.bare) if out.tap is None
                   else out.tap.resized(n, until))

    def tap_samples(self) -> dict[str, list[dict]]:
        """What each tapped stream sent lately, oldest first; a tap whose time is up is
        switched off here (so a stream nobody samples any more costs nothing again).
        Safe from another thread: the buffer is copied in one C-level step."""
        now, found = self.monotonic(), {}
        for name, out in self.streams.items():
            tap = out.tap
            if tap is None:
                continue
            if now > tap.until:
                out.tap = None
                continue
            found[name] = self._samples(name, tap)
        return found

    def _samples(self, name: str, tap: Tap) -> list[dict]:
        fields = list(self.spec.streams[name])
        return [{"values": values, "fields": fields, "task": self.task, "stream": name,
                 "ids": ids, "to": list(to), "time": t}
                for values, ids, to, t in list(tap.samples)]

    # -- recordings ---------------------------------------------------------------------
    def set_recording(self, stream: str, on: bool) -> bool:
        """Start or stop recording ``stream`` to Parquet in the run directory; False (and
        a log line) for a stream this component does not declare. Stopping writes what
        was buffered first."""
        out = self.streams.get(stream)
        if out is None:
            log.warning("recording of unknown stream %r of %r ignored", stream, self.spec.id)
            return False
        if on and out.recorder is None:
            out.recorder = self._recorder(stream)
        elif not on and out.recorder is not None:
            try:  # written before the statistics (another thread) say it stopped
                out.recorder.close()
            finally:
                out.recorder = None
        return True

    def _recorder(self, stream: str):
        where = f"{self.spec.class_name} recording of stream {stream!r}"
        config = self.config
        return open_recorder(
            self.run_dir, self.spec.id, stream, self.task,
            list(self.spec.streams[stream]), declared_types(self.spec.impl, stream),
            report=lambda message: self.on_error(where, RuntimeError(message)),
            segment_rows=int(config.get(RECORD_ROWS, 200_000)),
            segment_seconds=float(config.get(RECORD_SECONDS, 1.0)), clock=self.wall,
            base=config.get(RECORD_DIR))

    def close_recordings(self) -> None:
        """Write every open segment (called on the way out, after the last flush)."""
        for name, out in self.streams.items():
            if out.recorder is not None:
                self.set_recording(name, False)
