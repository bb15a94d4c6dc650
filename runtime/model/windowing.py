"""What a window is, as a topology declares it: ``Window.sliding``/``tumbling`` of a
``Duration`` or a ``Count``, event time or processing time, and its checks.

This is definition-time data only; the windows themselves are kept by
:mod:`runtime.windows` in the bolt's task. Times are held in integer milliseconds, the
unit of a timestamp field (docs/windows.md).

>>> w = Window.sliding(Duration(20), Duration(10), timestamp_field="ts", lag=Duration(5))
>>> w.length, w.slide, w.lag, w.watermark_interval
(Duration(20), Duration(10), Duration(5), Duration(1))
>>> Window.tumbling(Count(3))
Window(length=Count(3), slide=Count(3))
>>> Window.sliding(Duration(10), Count(2), lag=Duration(5))
Traceback (most recent call last):
...
runtime.model.errors.TopologyError: window: lag needs a timestamp_field (event time); \
without one, windows follow processing time and nothing is late
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import TopologyError


class Duration:
    """A length of time in seconds (a window's length, slide, lag or watermark interval).

    >>> Duration(1.5).ms
    1500
    """

    __slots__ = ("seconds", "ms")

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise TopologyError(f"Duration: seconds must be a number > 0, not {seconds!r}")
        self.seconds = seconds
        self.ms = round(seconds * 1000)  # event time is int milliseconds
        if self.ms < 1:
            raise TopologyError(f"Duration: {seconds!r} s is under a millisecond")

    def __eq__(self, other: object) -> bool:
        return type(other) is Duration and other.ms == self.ms

    def __hash__(self) -> int:
        return hash(("Duration", self.ms))

    def __repr__(self) -> str:
        return f"Duration({self.seconds!r})"


class Count:
    """A number of tuples (a window's length or slide).

    ``Count()`` with no number is also Trident's counting aggregator
    (``runtime.Count`` is :class:`runtime.trident.Count`, a subclass of this one).

    >>> Count(20).n
    20
    """

    def __init__(self, n: int | None = None) -> None:
        if n is not None and (type(n) is not int or n < 1):
            raise TopologyError(f"Count: n must be an integer >= 1, not {n!r}")
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Count) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Count", self.n))

    def __repr__(self) -> str:
        return "Count()" if self.n is None else f"Count({self.n})"


Length = Duration | Count


@dataclass(frozen=True)
class Window:
    """A window of a :class:`WindowedBolt` (the ``window=`` option of ``Topology.bolt``).
    Build one with :meth:`sliding` or :meth:`tumbling`."""

    length: Length
    slide: Length
    timestamp_field: str | None = None
    lag: Duration | None = None
    watermark_interval: Duration | None = None
    late_stream: str | None = None

    @classmethod
    def sliding(cls, length: Length, slide: Length, *, timestamp_field: str | None = None,
                lag: Duration | None = None, watermark_interval: Duration | None = None,
                late_stream: str | None = None) -> Window:
        """Windows of ``length`` evaluated every ``slide`` (each a Duration or a Count).
        With ``timestamp_field``, event time: windows follow the tuples' own timestamps
        (int ms), a watermark (latest timestamp minus ``lag``, every
        ``watermark_interval``, default 1 s) closes them, and tuples older than the
        watermark are late (sent to ``late_stream``, or counted and dropped)."""
        window = cls(_length("length", length), _length("slide", slide), timestamp_field,
                     lag, watermark_interval, late_stream)
        window.check()
        if window.event_time and watermark_interval is None:  # Storm's default: each second
            window = replace(window, watermark_interval=Duration(1))
        return window

    @classmethod
    def tumbling(cls, length: Length, **options: Any) -> Window:
        """Windows of ``length`` that do not overlap: a sliding window sliding by its length."""
        return cls.sliding(length, length, **options)

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None

    def check(self) -> None:
        """TopologyError for options that do not go together."""
        problem = _problem(self)
        if problem:
            raise TopologyError(f"window: {problem}")

    def tick_seconds(self) -> float | None:
        """How often the bolt's task needs a tick: each watermark (event time), each
        slide of processing time, or never (a count slide triggers on arrival)."""
        if self.event_time:
            return self.watermark_interval.seconds
        return self.slide.seconds if isinstance(self.slide, Duration) else None

    def holds_ms(self) -> int | None:
        """How long a tuple may wait in its windows before it is acked, as Storm reckons
        it: length + slide (event time adds the lag and the watermark interval, which
        docs/windows.md asks to leave room for), or None when it depends on counts."""
        if not (isinstance(self.length, Duration) and isinstance(self.slide, Duration)):
            return None
        return self.length.ms + self.slide.ms

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in (
            "timestamp_field", "lag", "watermark_interval", "late_stream")
            if getattr(self, k) is not None)
        return f"Window(length={self.length!r}, slide={self.slide!r}{extra})"


def _length(what: str, value: Any) -> Length:
    if isinstance(value, Duration) or (isinstance(value, Count) and value.n is not None):
        return value
    raise TopologyError(f"window: {what} must be Duration(seconds) or Count(n), "
                        f"not {value!r}")


def _problem(w: Window) -> str | None:
    if w.timestamp_field is not None and not isinstance(w.timestamp_field, str):
        return f"timestamp_field must be a field name, not {w.timestamp_field!r}"
    for name in ("lag", "watermark_interval"):
        value = getattr(w, name)
        if value is not None and not isinstance(value, Duration):
            return f"{name} must be a Duration, not {value!r}"
        if value is not None and not w.event_time:
            return (f"{name} needs a timestamp_field (event time); without one, windows "
                    "follow processing time and nothing is late")
    if w.late_stream is not None and not w.event_time:
        return "late_stream needs a timestamp_field: only event time has late tuples"
    if w.late_stream is not None and not isinstance(w.late_stream, str):
        return f"late_stream must be a stream id, not {w.late_stream!r}"
    return None


LATE_FIELDS = ("ts", "values")  # a late tuple, as its late stream carries it


def declare_window(comp_id: str, impl: Any, window: Any, streams: dict,
                   config: dict) -> None:
    """The checks ``Topology.bolt(..., window=...)`` makes; adds the late stream to
    ``streams`` and the tick the window needs to ``config`` (both in place)."""
    if not isinstance(window, Window):
        raise TopologyError(f"component {comp_id!r}: window must be a Window (Window.sliding "
                            f"or Window.tumbling), not {window!r}")
    if not callable(getattr(impl, "process_window", None)):
        raise TopologyError(f"component {comp_id!r}: window= needs a WindowedBolt (one with "
                            "process_window(window))")
    if config.get("tick_freq_secs") is not None:
        raise TopologyError(f"component {comp_id!r}: a windowed bolt's ticks are its "
                            "window's; drop tick_freq_secs")
    if window.late_stream is not None:
        if window.late_stream in streams:
            raise TopologyError(f"component {comp_id!r}: late_stream {window.late_stream!r} "
                                "is already one of its declared streams")
        streams[window.late_stream] = LATE_FIELDS
    config["tick_freq_secs"] = window.tick_seconds()


def timeout_warning(comp_id: str, window: Window, message_timeout: float) -> str | None:
    """Storm's warning: tuples held longer than ``message_timeout`` time out and are
    replayed while still in their window. Only with acking: a checkpointed topology has
    none (its windows are in the checkpoint instead), and is not warned."""
    holds = window.holds_ms()
    if holds is None or holds <= message_timeout * 1000:
        return None
    return (f"component {comp_id!r}: message_timeout ({message_timeout} s) is shorter than "
            f"the window's length + slide ({holds / 1000} s): with acking on (ackers > 0) "
            "its tuples will time out and be replayed before they leave the window; raise "
            "message_timeout (a topology submitted with checkpoint_interval runs with "
            "acking off and saves its open windows with each checkpoint: no timeout applies)")
