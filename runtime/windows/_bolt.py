"""The windowed bolt: the user's ``process_window(window)`` called by a
:class:`WindowManager` that the bolt's ``process`` and ticks drive.

At least once, as Storm does it: a tuple is acked when it leaves every window (when it
is evicted), not when it arrives, and whatever ``process_window`` emits is anchored to
every tuple of the window, so a failure downstream replays the window's inputs.
"""

from __future__ import annotations

import logging
import time

from runtime.model.api import Bolt, Context, Tuple
from runtime.model.constants import ACKERS, DEFAULT_STREAM, DEFAULTS, MESSAGE_TIMEOUT, WINDOW
from runtime.model.windowing import timeout_warning

from ._manager import WindowManager, WindowView
from ._saved import Incoming, Outgoing

log = logging.getLogger("tupleflow.windows")


class WindowedBolt(Bolt):
    """A bolt that sees windows of tuples instead of single tuples. Override
    :meth:`process_window`; declare it with ``topo.bolt(id, cls, window=Window...)``.

    Do not ack the window's tuples: they are acked as they leave the window. An
    override of ``prepare`` must call ``super().prepare(config, context)``.
    """

    # processing time, in seconds since the epoch; a test may put a fake clock here
    clock = staticmethod(time.time)
    # its fields groupings go through key groups (ComponentSpec.keyed_state), so that a
    # rebalance under checkpoints deals its held tuples as it deals keyed state (_split.py)
    keyed_state = True

    def prepare(self, config: dict, context: Context) -> None:
        window = config.get(WINDOW)
        if window is None:
            raise RuntimeError(f"{type(self).__name__}: no window; declare the bolt with "
                               "topo.bolt(..., window=Window.sliding(...))")
        self._windows = WindowManager(window, context.this_inputs)
        self._anchors: list | None = None  # the tuples of the window being processed
        self._collector_emit = self.emit
        self.emit = self._window_emit
        _warn_timeout(context.component_id, window, config)

    def process_window(self, window: WindowView) -> None:
        """Handle one window: ``window.tuples``, ``.new``, ``.expired``, ``.start``,
        ``.end`` (ms, event time only). What it emits is anchored to ``window.tuples``."""
        raise NotImplementedError(f"{type(self).__name__} must define process_window(window)")

    # -- what the user may read ----------------------------------------------------------
    @property
    def watermark(self) -> int | None:
        """The last watermark (ms), event time only."""
        return self._manager().watermark

    @property
    def late_tuples(self) -> int:
        """Late tuples so far (sent to the late stream or dropped)."""
        return self._manager().late

    @property
    def open_tuples(self) -> int:
        """Tuples held in open windows or waiting for the watermark (not yet acked)."""
        return self._manager().queued

    def window_report(self) -> dict | None:  # overrides Bolt.window_report
        """What the task reports with its statistics (``InstanceStats.window``): the
        watermark (ms), open windows and the oldest one's start (ms; None where windows
        cannot be named in advance, see :meth:`WindowManager.open_windows`), tuples held,
        late tuples, windows evaluated, and the last evaluated window's bounds (ms, None in
        processing time) and tuples. None before ``prepare``."""
        windows = getattr(self, "_windows", None)
        if windows is None:
            return None
        count, oldest = windows.open_windows() or (None, None)
        start, end, held = windows.last or (None, None, None)
        return {"watermark": windows.watermark, "open_windows": count,
                "oldest_window_start": oldest, "open_tuples": windows.queued,
                "late_tuples": windows.late, "evaluated": windows.evaluated,
                "last_window_start": start, "last_window_end": end,
                "last_window_tuples": held}

    # -- checkpoints (driven by runtime/state's Checkpointed) -----------------------------
    def snapshot_windows(self) -> dict:
        """What the windows hold, as msgpack types: saved with each checkpoint of a
        topology submitted with ``checkpoint_interval`` (docs/windows.md, "Checkpoints")."""
        out = Outgoing()
        windows = self._manager().snapshot(out.encode)
        return {"sources": out.sources, "windows": windows}

    def restore_windows(self, saved: dict | None) -> None:
        """Back to what :meth:`snapshot_windows` saved, at a rollback or a restart; empty
        windows for None (no checkpoint committed yet)."""
        current = self._manager()
        if saved is None:
            self._windows = WindowManager(current.window, current.inputs)
            return
        self._windows = WindowManager.restored(current.window, current.inputs,
                                               saved["windows"], Incoming(saved["sources"]).decode)

    # -- driven by the engine ------------------------------------------------------------
    def process(self, tup: Tuple) -> None:
        windows = self._manager()
        ts = self._timestamp(tup)
        if ts is not None and windows.is_late(ts):
            return self._late(tup, ts)
        self._run(windows.add(tup, (tup.component, tup.stream), ts, self._now_ms()))

    def process_tick(self, tup: Tuple) -> None:
        self._run(self._manager().tick(self._now_ms()))

    def _run(self, views: list[WindowView]) -> None:
        for view in views:
            self._anchors = view.tuples
            try:
                self.process_window(view)
            finally:
                self._anchors = None
        for tup in self._windows.take_expired():  # after: a crash above replays them
            self.ack(tup)

    def _window_emit(self, values, stream: str = DEFAULT_STREAM, anchors=None):
        if anchors is None:
            anchors = self._anchors
        return self._collector_emit(values, stream=stream, anchors=anchors)

    def _late(self, tup: Tuple, ts: int) -> None:
        """Storm's late tuple: older than the watermark. Counted; sent on the late stream
        (anchored to it) when there is one; acked either way."""
        windows = self._windows
        windows.late += 1
        stream = windows.window.late_stream
        if stream is not None:
            self._collector_emit([ts, list(tup.values)], stream=stream, anchors=[tup])
        self.ack(tup)

    def _timestamp(self, tup: Tuple) -> int | None:
        field = self._windows.window.timestamp_field
        if field is None:
            return None
        ts = tup.get(field)
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise ValueError(f"{type(self).__name__}: tuple from {tup.component!r} stream "
                             f"{tup.stream!r} has no timestamp in field {field!r} (int ms), "
                             f"got {ts!r}")
        return int(ts)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _manager(self) -> WindowManager:
        try:
            return self._windows
        except AttributeError:
            raise RuntimeError(f"{type(self).__name__}.prepare must call "
                               "super().prepare(config, context)") from None


def _warn_timeout(comp_id: str, window, config: dict) -> None:
    """Storm's warning, in the task's log, with the options the topology really runs with
    (the definition-time one only knew the topology's own)."""
    if not int(config.get(ACKERS, 0) or 0):
        return
    message = timeout_warning(comp_id, window,
                              float(config.get(MESSAGE_TIMEOUT, DEFAULTS[MESSAGE_TIMEOUT])))
    if message:
        log.warning("%s", message)
