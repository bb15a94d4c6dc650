"""Why is it slow: the bottleneck finder behind ``running.explain()``, public.

The rules live with the rest of observation, in ``runtime/observe/diagnosis.py`` (read
``docs/internals/diagnosis.md``); this module is their public import path, for the
dashboard and for anyone who wants findings from a recorded metrics dict.
"""

from .observe.diagnosis import BUSY, KINDS, SKEWED, Finding, diagnose

__all__ = ["BUSY", "Finding", "KINDS", "SKEWED", "diagnose"]
