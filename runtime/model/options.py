"""What each engine option may be set to: one checker per key, used wherever options
enter (``Topology``/``submit`` through the physical plan, and the ``%%topology`` cell).

>>> option_problem("ackers", -1), option_problem("max_spout_pending", "auto")
('an integer >= 0', None)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from . import constants as c
from .suggest import did_you_mean


def option_problem(key: str, value: Any) -> str | None:
    """What ``value`` should have been for engine option ``key`` (None: it is fine, or
    ``key`` is not an engine option — user keys pass through to open/prepare)."""
    check = CHECKS.get(key)
    return check(value) if check else None


def max_parallelism_problem(value: Any) -> str | None:
    """What ``max_parallelism=`` must be, on ``topo.spout``/``topo.bolt`` and in a
    ``%%topology`` line (that it is at least the parallelism is checked beside it).

    >>> max_parallelism_problem(16), max_parallelism_problem(0)
    (None, 'an integer from 1 to 32768')
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and \
        1 <= value <= c.MAX_PARALLELISM_LIMIT
    return None if ok else f"an integer from 1 to {c.MAX_PARALLELISM_LIMIT}"


def unknown_option(where: str, key: str, known: Iterable[str], *, user_keys: bool) -> str:
    """The message for an option nobody knows: the closest known key, the list, and (where
    user keys are allowed) where a key of one's own goes instead.

    >>> print(unknown_option("topology 'x'", "max_spout_pendng", CHECKS, user_keys=True))
    ... # doctest: +ELLIPSIS
    topology 'x': unknown option 'max_spout_pendng' (did you mean 'max_spout_pending'?); ...
    """
    hint = did_you_mean(key, known)
    mine = ("; a key of your own goes in config={...} (it reaches open and prepare)"
            if user_keys else "")
    return f"{where}: unknown option {key!r}{hint}; the options are {sorted(known)}{mine}"


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _int_from(low: int) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = isinstance(x, int) and not isinstance(x, bool) and x >= low
        return None if ok else f"an integer >= {low}"

    return check


def _seconds(*, positive: bool = False, none_ok: bool = False) -> Callable[[Any], str | None]:
    def check(x: Any) -> str | None:
        ok = (x is None and none_ok) or (_number(x) and (x > 0 if positive else x >= 0))
        what = "a number of seconds " + ("> 0" if positive else ">= 0")
        return None if ok else what + (" or None" if none_ok else "")

    return check


def _timeout(x: Any) -> str | None:
    """message_timeout: timeouts cannot be turned off. A tuple lost in a dead process would
    hold its max-spout-pending slot for ever, and enough of them stop the spout for good
    (Storm's STORM-3514)."""
    if _number(x) and x > 0:
        return None
    off = x is None or _number(x)  # 0, a negative number or None: an attempt to turn it off
    return "a number of seconds > 0" + (" (timeouts cannot be turned off: a lost tuple "
                                        "would hold its max_spout_pending slot for ever)"
                                        if off else "")


def _pending(x: Any) -> str | None:
    ok = x is None or x == c.AUTO or _int_from(1)(x) is None
    return None if ok else f"an integer >= 1, {c.AUTO!r} or None"


def _folder(x: Any) -> str | None:
    ok = x is None or (isinstance(x, str) and os.path.isabs(x))
    return None if ok else "an absolute path (a folder the containers and this machine share)"


def _port(x: Any) -> str | None:
    ok = x is None or (isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 65535)
    return None if ok else "a port number 0..65535 (0: any free port) or None"


def _streams(x: Any) -> str | None:
    ok = isinstance(x, list | tuple) and all(isinstance(s, str) for s in x)
    return None if ok else "a list of stream ids"


def _fraction(x: Any) -> str | None:
    return None if _number(x) and 0.0 <= x <= 1.0 else "a fraction 0.0..1.0 (0.0: off)"


def _store(x: Any) -> str | None:
    if x in ("sqlite", "memory") or (isinstance(x, str) and x.startswith("redis://")):
        return None
    return '"sqlite", "memory" or a redis:// URL'


CHECKS: dict[str, Callable[[Any], str | None]] = {
    c.ACKERS: _int_from(0),
    c.METRICS_ENABLED: lambda x: None if isinstance(x, bool) else "True or False",
    c.BATCH_SIZE: _int_from(1),
    c.BACKPRESSURE_HIGH: _int_from(1),
    c.BACKPRESSURE_LOW: _int_from(1),
    c.MAX_SPOUT_PENDING: _pending,
    c.TICK_FREQ_SECS: _seconds(positive=True, none_ok=True),
    c.MESSAGE_TIMEOUT: _timeout,
    c.TUNE_INTERVAL: _seconds(positive=True),
    c.TARGET_LATENCY: _seconds(positive=True, none_ok=True),
    c.HEARTBEAT_TIMEOUT: _seconds(positive=True, none_ok=True),
    c.FLUSH_INTERVAL: _seconds(positive=True),
    c.STATS_INTERVAL: _seconds(positive=True),
    c.SPOUT_WAIT: _seconds(),
    c.RESTART_BACKOFF_MAX: _seconds(),
    c.RECORD: _streams,
    c.RECORD_ROWS: _int_from(1),
    c.RECORD_SECONDS: _seconds(positive=True),
    c.RECORD_DIR: _folder,
    c.METRICS_PORT: _port,
    c.TRACE: _fraction,
    c.TRACE_STORE: _int_from(1),
    c.CHECKPOINT_INTERVAL: _seconds(positive=True, none_ok=True),
    c.STATE_STORE: _store,
}
