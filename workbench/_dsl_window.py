"""A windowed bolt's options on a ``%%topology`` line: ``window=20s slide=10s
timestamp_field=ts lag=5s watermark_interval=1s late_stream=late`` becomes
``window=Window.sliding(Duration(20), Duration(10), timestamp_field="ts", ...)``.

A length with a unit (``ms``, ``s``, ``m``, ``h``) is a ``Duration``; a bare integer is a
``Count`` for ``window`` and ``slide`` (tuples), and seconds for ``lag`` and
``watermark_interval``. No ``slide`` means a tumbling window (docs/topology-magic.md).

>>> from workbench._dsl import Line, Option, Token
>>> line = Line(2, "avg: Avg <- events window=20s slide=10s")
>>> length = Option(Token("word", "window", 20), Token("word", "20s", 27))
>>> config = {"window": length_value(line, length), "slide": Duration(10)}
>>> gather_window(line, (length,), config)
>>> config
{'window': Window(length=Duration(20), slide=Duration(10))}
"""

from __future__ import annotations

import re
from typing import Any

from runtime import Count, Duration, TopologyError, Window

from ._dsl import Line, Option

LENGTHS = ("window", "slide", "lag", "watermark_interval")  # values read by length_value
NAMES = ("timestamp_field", "late_stream")  # values that are plain words
KEYS = frozenset(LENGTHS + NAMES)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def length_value(line: Line, opt: Option) -> Duration | Count:
    """``20s``, ``500ms``, ``1.5m`` -> Duration; ``100`` -> Count (window, slide) or
    seconds (lag, watermark_interval)."""
    m = _LENGTH.match(opt.value.text)
    if m is None:
        raise line.error(f"`{opt.key.text}` must be a length such as 20s, 500ms, 2m or (in "
                         f"tuples) 100, not `{opt.value.text}`", opt.value)
    number, unit = m.groups()
    try:
        if unit is None and opt.key.text in ("window", "slide"):
            if "." in number:
                raise TopologyError(f"a count of tuples is an integer, not {number}")
            return Count(int(number))
        seconds = float(number) * _UNITS[unit or "s"]
        return Duration(int(seconds) if seconds.is_integer() else seconds)
    except TopologyError as err:
        raise line.error(f"`{opt.key.text}`: {err}", opt.value) from None


def gather_window(line: Line, options: tuple[Option, ...], config: dict[str, Any]) -> None:
    """Replace the window options in ``config`` (in place) with one ``window`` Window."""
    given = {key: config.pop(key) for key in list(config) if key in KEYS}
    if not given:
        return
    where = {o.key.text: o for o in options}
    if "window" not in given:
        first = where[next(iter(given))]
        raise line.error(f"`{first.key.text}` needs `window=LENGTH` on the same line",
                         first.key)
    length = given.pop("window")
    try:
        config["window"] = Window.sliding(length, given.pop("slide", length), **given)
    except TopologyError as err:
        raise line.error(str(err), where["window"].key) from None
