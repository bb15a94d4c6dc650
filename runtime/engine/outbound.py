"""The outbound side of an instance: per-stream batches, split among subscribers' tasks.

``emit`` only appends the values to its stream's batch. When the batch is full (or the
flush interval has passed) each subscriber's grouping splits it among that
subscriber's tasks, and each part is encoded once and sent as one frame. Grouping per
batch rather than per emit keeps the per-tuple work in tight loops: a subscriber with
a single task takes the batch whole, and an all-grouping encodes it once for every task.

On a stream of one field every batch holds the tuples' bare values, not one-element
lists: that is how they travel (``runtime/wire/__init__.py``, "One-field streams"). Whatever
hands tuples to something else (a custom grouping, a tap, a report of a tuple that
cannot be sent) wraps a bare value back into its list first.

Tracked tuples (at least once) are the exception: each copy sent to a task needs its
own edge id, which the anchors must know before they are acked, so their targets are
chosen at emit time (``Outlet.targets``) and they wait in per-task ``tracked`` batches,
flat. A spout's hold ``values, ids, values, ids, ...`` (``ids`` is ``{root id: edge
id}``, or an int root that is its own edge id), sent as TRACKED frames; a bolt's hold
``values, ids, ack_val`` triples (``ids`` an int root and ``ack_val`` the copy's edge
id, or a map with ``ack_val`` 0: the Tuple's own two fields as the receiver starts
them), sent as ANCHORED frames (docs/internals/acker.md, "One root, flat").
``StreamOut.stride`` is 2 or 3.

A stream can be tapped (``running.sample``): while ``StreamOut.tap`` is set, every frame
sent also leaves its last tuples in the :class:`Tap`'s bounded buffer. Untapped, the cost
is one attribute check per frame sent, never any work per tuple.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from runtime import wire
from runtime.groupings import (
    AllGrouping,
    FieldsGrouping,
    GlobalGrouping,
    LocalOrShuffleGrouping,
    ShuffleGrouping,
    field_hash,
    key_slots,
    key_task,
)

from .errors import not_a_list
from .pending import PendingLists

Send = Callable[[bytes, bytes], None]


class Runs(Protocol):
    """What a stream needs of its runs of numbered roots (``runtime/engine/runs.py``,
    which imports this module: the stream knows them only by this shape)."""

    def queued(self) -> int:
        """Tuples waiting in the runs."""

    def end(self, out: StreamOut) -> None:
        """Send every run that holds a tuple, through ``out``."""

    def pending(self) -> list[list]:
        """Every list the runs fill as the spout emits (entries, msg_ids, emit times)."""

    def put(self, i: int, part: list) -> None:
        """Put ``part`` where the ``i``-th of :meth:`pending`'s lists sits."""

    def send_tails(self, out: StreamOut, heads: list[int]) -> None:
        """Send what each run holds past its length in ``heads`` (entries' lengths
        first, as :meth:`pending`), a traced emit's tuples, as a run of its own."""


class StreamOut(PendingLists):
    """One declared stream of this component: its pending batches (untracked, tracked,
    direct, and a tracking spout's runs, which it sends), its subscribers' outlets, its
    counts, and the tap and recorder watching it while they are on."""

    __slots__ = ("name", "arity", "bare", "items", "outlets", "direct", "direct_tracked",
                 "send", "on_bad", "emitted", "counted", "transferred", "_reported", "_fixed",
                 "tap", "recorder", "runs", "stride", "tracked_kind", "clock", "emptied_at")

    def __init__(self, name: str, arity: int, send: Send,
                 on_bad: Callable[[str, list, dict | None], None],
                 tracked_kind: int = wire.TRACKED) -> None:
        self.name, self.arity, self.send, self.on_bad = name, arity, send, on_bad
        # a spout's tracked batches hold pairs (TRACKED), a bolt's triples (ANCHORED)
        self.tracked_kind = tracked_kind
        self.stride = 3 if tracked_kind == wire.ANCHORED else 2
        self.bare = arity == 1  # batches hold bare values (runtime/wire/__init__.py)
        self.items: list = []
        self.outlets: list[Outlet] = []
        self.direct: dict[int, tuple[bytes, list]] = {}  # task -> (header, pending values)
        self.direct_tracked: dict[int, tuple[bytes, list]] = {}  # the same, tracked
        self.emitted = self.transferred = 0
        self.counted = 0  # tracked copies waiting whose tuples already count (flush_tracked)
        self._reported: set[int] = set()
        self.tap: Tap | None = None  # set while someone samples this stream
        self.recorder = None  # a runtime.recording._parquet.Recorder while this stream is recorded
        # a spout's tracked tuples numbered by consecutive roots, one run per target
        # task, which flush_tracked sends (runtime/engine/runs.py); None: not numbered
        self.runs: Runs | None = None
        # the executor's clock (None: not read), and when it last found every pending
        # list empty: every tuple waiting now was emitted since (the flush timer's
        # ``Executor.flush_due`` sends a batch only once that is a flush interval ago)
        self.clock: Callable[[], float] | None = None
        self.emptied_at = float("-inf")

    def unwire(self) -> None:
        """Forget the subscribers' tasks (a rebalance wires them again; flush first)."""
        self.outlets.clear()
        self.direct.clear()
        self.direct_tracked.clear()
        if hasattr(self, "_fixed"):
            del self._fixed

    def attach_runs(self, runs: Runs) -> None:
        """Number this stream's tracked tuples in ``runs`` from now on."""
        self.runs = runs

    def entry(self, values, comp: str):
        """What this stream's batches hold for ``values``: the list, or on a one-field
        stream the bare value (runtime/wire/__init__.py, "One-field streams")."""
        if not self.bare:
            return values
        try:
            return values[0]
        except (TypeError, LookupError):
            raise not_a_list(comp, self.name, values) from None

    def tracked_copies(self, values, direct: int | None) -> list[list]:
        """The tracked batches one tuple goes into: one per target task, chosen now
        (``direct``: the one task emit_direct names)."""
        if direct is not None:
            return [self.direct_tracked[direct][1]]
        return self.tracked_batches(values)

    def tracked_batches(self, values) -> list[list]:
        """The tracked batches one tuple goes into, one per target task."""
        fixed = self.fixed_copies
        if fixed is not None:
            return fixed
        return [o.tracked[i] for o in self.outlets for i in o.targets(values)]

    @property
    def fixed_copies(self) -> list[list] | None:
        """When no subscriber's choice depends on the values: the batches, computed once."""
        try:
            return self._fixed
        except AttributeError:
            fixed = [o.fixed for o in self.outlets]
            self._fixed = (None if None in fixed else
                           [o.tracked[i] for o in self.outlets for i in o.fixed])
            return self._fixed

    def queued(self) -> int:
        """Tuples waiting in this stream's batches (read twice per spout step: no lists)."""
        n = len(self.items) + (self.runs.queued() if self.runs is not None else 0)
        for _, pending in self.direct.values():
            n += len(pending)
        stride = self.stride  # values, ids (, ack_val)
        for _, pending in self.direct_tracked.values():
            n += len(pending) // stride
        for outlet in self.outlets:
            for pending in outlet.tracked:
                n += len(pending) // stride
        return n

    def flush(self) -> None:
        """Split the pending batch among subscribers and send every part."""
        items = self.items
        if items:
            for outlet in self.outlets:
                outlet.take(items, self)
        if self.recorder is not None:  # untracked tuples are recorded here, after take:
            self.recorder.flushed((items, *(p for _, p in self.direct.values())))  # its bytes
        if items:
            self.emitted += len(items)
            items.clear()
        for header, pending in self.direct.values():
            if pending:
                self.emitted += len(pending)
                self.ship(header, pending)
                pending.clear()
        self.flush_tracked()
        self._reported.clear()

    def flush_tracked(self) -> None:
        """Send the tracked batches. Their tuples count as emitted now, as an untracked
        batch's and a run's do: an emit of one copy counts nothing (a count per child cost
        ~320 instructions, a 64-bit int made and freed). An emit of any other number of
        copies counted its tuple at once and its copies in ``counted``, which the copies
        sent here do not count again; a count never goes back (a report between an emit
        and its flush reads no less than the one before)."""
        stride, sent = self.stride, 0
        for outlet in self.outlets:
            for header, part in zip(outlet.tracked_headers, outlet.tracked):
                if part:
                    sent += len(part) // stride
                    self.ship(header, part, tracked=True)
                    part.clear()
        for header, part in self.direct_tracked.values():
            if part:
                sent += len(part) // stride
                self.ship(header, part, tracked=True)
                part.clear()
        if sent:  # a traced call's tails go alone (send_tails): not every copy counted
            counted = min(self.counted, sent)  # may be among them; the rest go later
            self.counted -= counted
            self.emitted += sent - counted
        if self.runs is not None:  # newer than any tracked batch: a tracked emit ends
            self.runs.end(self)  # them first
        if self.clock is not None and not self.items and not self._direct_waiting():
            self.emptied_at = self.clock()  # (a full batch's flush, or the timer's)

    def _direct_waiting(self) -> bool:
        """Whether an untracked direct batch holds a tuple (what flush_tracked leaves)."""
        return bool(self.direct) and any(pending for _, pending in self.direct.values())

    def ship_run(self, header: bytes, tracked_header: bytes, first: int, part: list) -> None:
        """Send a run as one RUN frame: ``[first, part]``. A run holding a value msgpack
        cannot carry goes the tracked way instead, which drops and reports that tuple.
        Its tuples count as emitted now."""
        self.emitted += len(part)
        try:
            body = wire.encode_batch([first, part])
        except (TypeError, ValueError, OverflowError):
            return self.ship(tracked_header, _pairs(part, first), tracked=True)
        self.send(header, body)
        self.transferred += len(part)
        if self.tap is not None:
            self.tap.saw(_pairs(part, first), (wire.dest_of(header),), True)

    def ship(self, header: bytes, part: list, tracked: bool = False) -> None:
        """Encode and send one frame; values msgpack cannot carry are dropped and reported."""
        try:
            body = wire.encode_batch(part)
        except (TypeError, ValueError, OverflowError):
            part = self._without_unencodable(part, tracked)
            if not part:
                return
            body = wire.encode_batch(part)
        self.send(header, body)
        if self.recorder is not None and part is self.items:  # the whole batch, encoded:
            self.recorder.encoded = body  # the recorder appends these very bytes
        self.transferred += len(part) // self.stride if tracked else len(part)
        if self.tap is not None:
            self.tap.saw(part, (wire.dest_of(header),), tracked and self.stride)

    def ship_to_all(self, headers: list[bytes], part: list) -> None:
        try:
            body = wire.encode_batch(part)
        except (TypeError, ValueError, OverflowError):
            part = self._without_unencodable(part)
            if not part:
                return
            body = wire.encode_batch(part)
        for header in headers:
            self.send(header, body)
        if self.recorder is not None and part is self.items:
            self.recorder.encoded = body
        self.transferred += len(part) * len(headers)
        if self.tap is not None:
            self.tap.saw(part, tuple(wire.dest_of(h) for h in headers), False)

    def _without_unencodable(self, part: list, tracked: bool = False) -> list:
        good = []
        if tracked:
            stride = self.stride
            for i in range(0, len(part), stride):
                entry, ids = part[i], part[i + 1]
                if wire.encodable(entry):
                    good += part[i:i + stride]
                else:
                    self.drop(entry, ids)
            return good
        for entry in part:
            if wire.encodable(entry):
                good.append(entry)
            else:
                self.drop(entry)
        return good

    def drop(self, entry, ids: dict | int | None = None) -> None:
        """A tuple (its batch entry) that cannot be sent: reported once per flush, however
        many subscribers (a tracked copy also fails its roots, each copy once)."""
        values = [entry] if self.bare else entry
        if ids:
            self.on_bad(self.name, values, ids)
        elif id(entry) not in self._reported:
            self._reported.add(id(entry))
            self.on_bad(self.name, values, None)


def _pairs(part: list, first: int) -> list:
    """A run as a tracked batch: ``entry, root, entry, root + 1, ...``."""
    pairs = [None] * (2 * len(part))
    pairs[0::2] = part
    pairs[1::2] = range(first, first + len(part))
    return pairs


class Outlet:
    """One subscriber of a stream: its tasks, and how a batch is split among them."""

    __slots__ = ("tasks", "headers", "take", "targets", "fixed", "pick", "str_key",
                 "tracked", "tracked_headers", "run_headers")

    def __init__(self, grouping, tasks, stream_id: int, src: int, bare: bool = False,
                 tracked_kind: int = wire.TRACKED) -> None:
        self.tasks = list(tasks)
        self.headers = [wire.data_header(wire.DATA, stream_id, t, src) for t in self.tasks]
        self.take = _splitter(grouping, self, bare)
        self.pick = _picker(grouping, self.tasks)
        # (index, n) when pick hashes the key at index modulo n (FieldsGrouping.str_key)
        self.str_key = grouping.str_key() if type(grouping) is FieldsGrouping else None
        self.targets = _targets(grouping, self.tasks, self.pick)
        self.fixed = _fixed_targets(grouping, self.tasks)
        self.tracked: list[list] = [[] for _ in self.tasks]
        self.tracked_headers = [wire.data_header(tracked_kind, stream_id, t, src)
                                for t in self.tasks]
        self.run_headers = [wire.data_header(wire.RUN, stream_id, t, src) for t in self.tasks]


def _fixed_targets(grouping, tasks: list[int]) -> tuple[int, ...] | None:
    """The target indexes when they do not depend on the values (one task, or all)."""
    if isinstance(grouping, AllGrouping):
        return tuple(range(len(tasks)))
    return (0,) if getattr(grouping, "single", False) and len(tasks) == 1 else None


def _picker(grouping, tasks: list[int]) -> Callable[[list], int] | None:
    """``pick(values)``: the index of the one task a tuple goes to, when every tuple goes
    to exactly one task; None when a tuple may go to several (or to a custom choice)."""
    if len(tasks) == 1 and (getattr(grouping, "single", False)
                            or isinstance(grouping, AllGrouping)):
        return _first
    return grouping.pick if getattr(grouping, "single", False) else None


def _first(values) -> int:
    return 0


def _targets(grouping, tasks: list[int], pick) -> Callable[[list], tuple | list]:
    """``targets(values)``: the indexes (into ``tasks``) one tuple goes to, chosen now
    (``pick``: the grouping's :func:`_picker`)."""
    if pick is not None:
        return lambda values: (pick(values),)
    if isinstance(grouping, AllGrouping):
        every = tuple(range(len(tasks)))
        return lambda values: every
    index, choose = {t: i for i, t in enumerate(tasks)}, grouping.choose_tasks

    def chosen(values):
        try:
            return [index[t] for t in choose(values)]
        except KeyError as exc:
            raise ValueError(f"grouping {grouping!r} chose task {exc.args[0]}, which is not "
                             f"one of the subscriber's tasks {tasks}") from None

    return chosen


def _splitter(grouping, outlet: Outlet, bare: bool) -> Callable[[list, StreamOut], None]:
    """``take(items, out)`` for this grouping, specialised by shape (``bare``: the items
    are bare values, of a one-field stream)."""
    headers, n = outlet.headers, len(outlet.tasks)
    single = getattr(grouping, "single", False)  # a duck-typed custom grouping has none
    if isinstance(grouping, AllGrouping) or (single and n == 1):
        return _whole(headers)
    if isinstance(grouping, FieldsGrouping) and len(grouping.indexes) == 1:
        field = None if bare else grouping.indexes[0]
        if grouping.keyed:
            return _by_key_group(headers, field, grouping.key_groups)
        return _by_field(headers, field)
    if single:
        pick = grouping.pick
        if bare and type(grouping) not in _VALUE_BLIND:
            pick = _on_list(pick)
        return _by_pick(headers, pick)
    choose = grouping.choose_tasks
    return _by_choice(headers, outlet.tasks, grouping, _on_list(choose) if bare else choose)


# groupings whose pick never looks at the values (it may be handed a bare value); not
# their subclasses, which may
_VALUE_BLIND = (ShuffleGrouping, GlobalGrouping, LocalOrShuffleGrouping)


def _on_list(fn: Callable[[list], Any]) -> Callable[[Any], Any]:
    """``fn``, which takes a tuple's values, for a bare value."""
    return lambda value: fn([value])


def _whole(headers: list[bytes]):
    if len(headers) == 1:
        header = headers[0]
        return lambda items, out: out.ship(header, items)
    return lambda items, out: out.ship_to_all(headers, items)


def _by_field(headers: list[bytes], field: int | None):
    """A fields grouping on one field: the same choice as ``FieldsGrouping.pick``, through
    the same :func:`~runtime.groupings.field_hash` (``field`` None: the items are that
    field's bare values)."""
    n, key = len(headers), field_hash

    def index(entry):
        return key(entry if field is None else entry[field]) % n

    def take(items, out):
        parts = [[] for _ in headers]
        try:
            if field is None:
                for v in items:
                    parts[key(v) % n].append(v)
            else:
                for values in items:
                    parts[key(values[field]) % n].append(values)
        except (TypeError, ValueError):  # a key msgpack could not carry either: go carefully
            parts = _split_carefully(items, index, len(headers), out)
        _ship_parts(headers, parts, out)

    return take


def _by_key_group(headers: list[bytes], field: int | None, groups: int):
    """The same for a subscriber with keyed state: the choice of
    :func:`~runtime.groupings.key_task` through its ``groups`` key groups (issue 22)."""
    n, key = len(headers), field_hash

    def index(entry):
        return key_task(key(entry if field is None else entry[field]), n, groups)

    if n > groups:
        return _by_pick(headers, index)
    slots = key_slots(n, groups)
    power = groups & (groups - 1) == 0  # then the product's top bits: a shift, no scaling
    deal = _deal_shifted(slots, 33 - groups.bit_length()) if power else _deal_scaled(slots, groups)

    def take(items, out):
        try:
            parts = deal(items, field, n)
        except (TypeError, ValueError):  # a key msgpack could not carry either: go carefully
            parts = _split_carefully(items, index, len(headers), out)
        _ship_parts(headers, parts, out)

    return take


def _deal_shifted(slots: list[int], shift: int):
    """Items to their tasks' parts, :func:`~runtime.groupings.key_task` inlined for a
    power-of-two number of groups: the top bits of hash * 0x9E3779B1 (for 128, >> 25).
    The scaled form costs ~13 % more a tuple: the default keeps the shift."""
    key = field_hash

    def deal(items, field, n):
        parts = [[] for _ in range(n)]
        if field is None:
            for v in items:
                parts[slots[(key(v) * 0x9E3779B1 & 0xFFFFFFFF) >> shift]].append(v)
        else:
            for values in items:
                parts[slots[(key(values[field]) * 0x9E3779B1 & 0xFFFFFFFF) >> shift]].append(
                    values)
        return parts

    return deal


def _deal_scaled(slots: list[int], groups: int):
    """The same for any number of groups: the product scaled to ``groups`` (>> 32)."""
    key = field_hash

    def deal(items, field, n):
        parts = [[] for _ in range(n)]
        if field is None:
            for v in items:
                parts[slots[(key(v) * 0x9E3779B1 & 0xFFFFFFFF) * groups >> 32]].append(v)
        else:
            for values in items:
                parts[slots[(key(values[field]) * 0x9E3779B1 & 0xFFFFFFFF) * groups
                            >> 32]].append(values)
        return parts

    return deal


def _by_pick(headers: list[bytes], pick: Callable[[list], int]):
    def take(items, out):
        parts = [[] for _ in headers]
        try:
            for values in items:
                parts[pick(values)].append(values)
        except (TypeError, ValueError):  # a fields-grouping key that cannot be sent
            parts = _split_carefully(items, pick, len(headers), out)
        _ship_parts(headers, parts, out)

    return take


def _split_carefully(items: list, pick: Callable[[Any], int], n: int, out: StreamOut):
    """The slow path of a split, for a batch holding a key that cannot be hashed (and so
    cannot be sent either): that tuple is dropped and reported, the others go on."""
    parts = [[] for _ in range(n)]
    for entry in items:
        try:
            parts[pick(entry)].append(entry)
        except (TypeError, ValueError):
            out.drop(entry)
    return parts


def _by_choice(headers: list[bytes], tasks: list[int], grouping,
               choose: Callable[[Any], list[int]]):
    index = {t: i for i, t in enumerate(tasks)}

    def take(items, out):
        parts = [[] for _ in headers]
        for entry in items:
            for task in choose(entry):
                i = index.get(task)
                if i is None:
                    raise ValueError(f"grouping {grouping!r} chose task {task}, which "
                                     f"is not one of the subscriber's tasks {tasks}")
                parts[i].append(entry)
        _ship_parts(headers, parts, out)

    return take


def _ship_parts(headers: list[bytes], parts: list[list], out: StreamOut) -> None:
    for header, part in zip(headers, parts):
        if part:
            out.ship(header, part)


# -- taps (running.sample) ----------------------------------------------------------------



class Tap:
    """The last ``n`` tuples a stream sent, each ``(values, ids, to, time)``: ``ids`` the
    ``{root: edge}`` of a tracked tuple (None otherwise), ``to`` the destination tasks,
    ``time`` the wall-clock time of the frame. It is on until ``until`` (a monotonic time).
    ``bare``: the stream has one field, and its batches hold bare values.

    >>> tap = Tap(2, until=5.0, clock=lambda: 1.5)
    >>> tap.saw([[1], [2], [3]], (7,), tracked=False)
    >>> list(tap.samples)
    [([2], None, (7,), 1.5), ([3], None, (7,), 1.5)]
    >>> tap = Tap(2, until=5.0, clock=lambda: 1.5, bare=True)
    >>> tap.saw(["a", 3, "b", {3: 3}], (7,), tracked=True)
    >>> list(tap.samples)
    [(['a'], {3: 3}, (7,), 1.5), (['b'], {3: 3}, (7,), 1.5)]
    >>> tap.saw(["c", 3, 6, "d", {4: 9}, 0], (7,), tracked=3)  # a bolt's triples
    >>> list(tap.samples)
    [(['c'], {3: 6}, (7,), 1.5), (['d'], {4: 9}, (7,), 1.5)]
    """

    __slots__ = ("n", "until", "clock", "samples", "bare")

    def __init__(self, n: int, until: float, clock: Callable[[], float] = time.time,
                 bare: bool = False) -> None:
        self.n, self.until, self.clock, self.bare = n, until, clock, bare
        self.samples: deque[tuple] = deque(maxlen=n)

    def saw(self, part: list, to: tuple[int, ...], tracked: bool | int) -> None:
        """One frame was sent: keep copies of its last ``n`` entries (the part is reused).
        ``tracked``: True (or 2) for a spout's pairs, 3 for a bolt's triples."""
        now, bare = self.clock(), self.bare
        if tracked == 3:  # entry, root, its edge id (or a map, 0)
            last = iter(part[-3 * self.n:])
            self.samples.extend(([entry] if bare else entry,
                                 {ids: val} if type(ids) is int else ids, to, now)
                                for entry, ids, val in zip(last, last, last))
        elif tracked:  # entry, ids, ... flat; an int ids is a root that is its own edge
            last = iter(part[-2 * self.n:])
            self.samples.extend(([entry] if bare else entry,
                                 {ids: ids} if type(ids) is int else ids, to, now)
                                for entry, ids in zip(last, last))
        else:
            last = part[-self.n:]
            self.samples.extend(([entry] if bare else entry, None, to, now) for entry in last)

    def resized(self, n: int, until: float) -> Tap:
        """This tap, kept on until ``until`` and holding ``n`` (what it holds is kept)."""
        if n == self.n:
            self.until = until
            return self
        tap = Tap(n, until, self.clock, self.bare)
        tap.samples.extend(self.samples)
        return tap
