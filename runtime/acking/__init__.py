"""The acker's XOR ledger, public so that a notebook can step through it by hand.

This is the very class the ``__acker`` tasks run (``runtime/acking/_ledger.py``; read
``docs/internals/acker.md``): pure, with the clock passed in as ``now``, and every
outcome returned as a value. Tutorial 1 uses it to show why one 64-bit XOR per spout
tuple is enough to know when a whole tuple tree has been processed.

>>> ledger = AckLedger(timeout_secs=30.0)
>>> sentence = new_id()                  # the edge from the spout to the splitter
>>> ledger.init(root_id=1, spout_task=0, xor_val=sentence, now=0.0)
[]
>>> cow, moon = new_id(), new_id()       # the splitter emits two words, anchored
>>> ledger.ack(1, sentence ^ cow ^ moon, now=0.1)   # ...and acks the sentence
[]
>>> ledger.ack(1, cow, now=0.2)
[]
>>> ledger.ack(1, moon, now=0.3)         # the last tuple of the tree: XOR is zero
[Completed(root_id=1, spout_task=0)]

The runtime's spouts skip the init when a tuple goes to exactly one task: its root id
(from :class:`RootIds`) carries the spout task, and is the edge id too, so the ledger
can tell what the init would have said (``docs/internals/acker.md``):

>>> root = RootIds(task=3).new()
>>> ledger.ack(root, root, now=0.4)      # acked by a bolt that anchored nothing to it
[Completed(root_id=..., spout_task=3)]
"""

from ._ids import RootIds, new_id, root_task
from ._ledger import AckLedger, Completed, Failed, LedgerStatistics, Renewed

__all__ = ["AckLedger", "Completed", "Failed", "LedgerStatistics", "Renewed", "RootIds",
           "new_id", "root_task"]
