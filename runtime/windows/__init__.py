"""Windowed bolts: Storm's count and time windows, tumbling and sliding, in processing
time or event time with watermarks and late tuples (docs/windows.md).

:class:`WindowedBolt` is the user's base class; the pure window logic is
:class:`WindowManager` (``_manager.py``), which the bolt drives from ``process`` and its
ticks. The window itself is declared with ``Window`` (``runtime/model/windowing.py``).
A rebalance under checkpoints deals a component's open windows over its new tasks with
:func:`split_windows` (``_split.py``).
"""

from runtime.model.windowing import Count, Duration, Window

from ._bolt import WindowedBolt
from ._manager import WindowManager, WindowView
from ._split import deal_rules, split_windows, unsplittable

__all__ = ["Count", "Duration", "Window", "WindowManager", "WindowView", "WindowedBolt",
           "deal_rules", "split_windows", "unsplittable"]
