"""Numbers formatted for people: counts as 1.2k / 3.4M, durations that switch from ms to s,
bytes as kB / MB, a CPU share that cannot be more than the machine has. Pure functions;
each returns "–" for a value that is missing or not a number (never raises).

>>> count(950), count(12_345), count(4_912_900), rate(3.333), rate(1025.0)
('950', '12.3k', '4.91M', '3.33', '1.02k')
>>> millis(0.0431), millis(57.549), millis(1250.0), millis(None)
('0.043 ms', '57.5 ms', '1.25 s', '–')
"""

from __future__ import annotations

import os
from typing import Any

MISSING = "–"
STEPS = ((1e9, "G"), (1e6, "M"), (1e3, "k"))  # (size, suffix), largest first
BYTE_STEPS = ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB"))


def number(value: Any) -> float | None:
    """``value`` when it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _sig(value: float) -> str:
    """Three significant digits, no exponent: 1.25, 12.3, 123; two below 1."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}"
    return f"{value:.2g}" if abs(value) >= 0.001 else f"{value:.1e}"  # 0.043, not 0.0431


def count(value: Any) -> str:
    """A count: exact below 1,000, then three significant digits and k / M / G.

    >>> count(0), count(999), count(1000), count(49_129), count(2_500_000_000), count("x")
    ('0', '999', '1k', '49.1k', '2.5G', '–')
    """
    v = number(value)
    if v is None:
        return MISSING
    for size, suffix in STEPS:
        if abs(v) >= size:
            return _sig(v / size) + suffix
    return f"{v:.0f}"


def rate(value: Any) -> str:
    """A rate per second (or any measure): three significant digits, k / M past 1,000.

    >>> rate(0), rate(0.5), rate(235.4), rate(12_000.0)
    ('0', '0.5', '235', '12k')
    """
    v = number(value)
    if v is None:
        return MISSING
    if abs(v) >= 1000:
        return count(v)
    return _sig(v)


def millis(value: Any) -> str:
    """A duration given in milliseconds: in ms up to a second, then in seconds.

    >>> millis(0), millis(3.0), millis(999.4), millis(61_000)
    ('0 ms', '3 ms', '999 ms', '61 s')
    """
    v = number(value)
    if v is None:
        return MISSING
    if abs(v) >= 999.5:
        return f"{_sig(v / 1000)} s"
    return f"{_sig(v)} ms"


def seconds(value: Any) -> str:
    """A duration in seconds (held time): ms below a second.

    >>> seconds(0.25), seconds(43.2), seconds(None)
    ('250 ms', '43.2 s', '–')
    """
    v = number(value)
    return MISSING if v is None else millis(v * 1000)


def size(value: Any) -> str:
    """Bytes, in B / kB / MB / GB (powers of 1024).

    >>> size(512), size(7_304_234), size(None)
    ('512 B', '6.97 MB', '–')
    """
    v = number(value)
    if v is None:
        return MISSING
    for step, unit in BYTE_STEPS:
        if abs(v) >= step:
            return f"{_sig(v / step)} {unit}"
    return f"{v:.0f} B"


def share(value: Any) -> str:
    """A share from 0 to 1 (capacity), two decimals.

    >>> share(0.976), share(None)
    ('0.98', '–')
    """
    v = number(value)
    return MISSING if v is None else f"{v:.2f}"


def cpu(value: Any, cores: int | None = None) -> str:
    """A CPU percentage (100 = one core busy). More than the machine's ``cores`` × 100 is
    not a measurement (the first report has no previous sample to measure from): shown as
    missing rather than as a number nobody can believe.

    >>> cpu(46.2, cores=2), cpu(461.0, cores=2), cpu(None)
    ('46.2', '–', '–')
    """
    v = number(value)
    limit = 100.0 * (cores or os.cpu_count() or 1)
    if v is None or v < 0 or v > limit:
        return MISSING
    return _sig(v)


def whole(value: Any) -> str:
    """An exact integer with thousands separators (restarts, a task number's count).

    >>> whole(49129), whole(3.0), whole(True)
    ('49,129', '3', '–')
    """
    v = number(value)
    return MISSING if v is None else f"{v:,.0f}"


def limit(value: Any) -> str:
    """max spout pending: a number, ``auto``, or ``none`` (no limit).

    >>> limit(None), limit(2000), limit("auto")
    ('none', '2k', 'auto')
    """
    if value is None:
        return "none"
    return str(value) if isinstance(value, str) else count(value)


FORMATS = {"int": count, "count": count, "rate": rate, "ms": millis, "s": seconds,
           "bytes": size, "share": share, "cpu": cpu, "whole": whole, "limit": limit,
           "id": lambda v: MISSING if number(v) is None else str(int(v))}


def cell(value: Any, kind: str) -> str:
    """A table cell's text for ``value`` formatted as ``kind`` (a key of :data:`FORMATS`)."""
    return FORMATS[kind](value)
