"""The bolt's side of one task: frames of tuples turned into ``process`` calls, the acks
and fails of its inputs, the tuples it emits anchored to them, and its ticks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from itertools import count, islice, repeat, tee
from operator import itemgetter, length_hint
from sys import getrefcount

from runtime import wire
from runtime.acking._ids import SELF_INIT
from runtime.model.api import BasicBolt, Bolt, FailedException, OneFieldTuple, Tuple, TupleSource
from runtime.model.constants import SYSTEM, TICK
from runtime.model.plan import PhysicalPlan
from runtime.model.topology import ComponentSpec

from .acks import AckOut
from .bolt_acks import InputAcks
from .errors import UserCodeError, call_user
from .hot import c_module
from .stats import TaskCounts

_ID_TYPES = {int, dict}
_INT = {int}


class BoltSide(InputAcks):
    """One bolt task's input: where each frame came from (its sources), the input set
    aside while output waited (``leftover``), and a BasicBolt's input being processed
    (``current``, which its emits anchor to). Its acks and anchored emits are
    :class:`~runtime.engine.bolt_acks.InputAcks`'."""

    def __init__(self, user: Bolt, plan: PhysicalPlan, specs: Mapping[str, ComponentSpec],
                 spec: ComponentSpec, counts: TaskCounts, acks: AckOut, acking: bool,
                 batch_size: int) -> None:
        self.user, self.plan, self.specs, self.counts = user, plan, specs, counts
        self.acks, self.acking, self.batch_size = acks, acking, batch_size
        self.name, self.comp = spec.class_name, spec.id  # for error messages
        self.basic = isinstance(user, BasicBolt)
        self._sources: dict[tuple[int, int], TupleSource] = {}
        self.current: list[Tuple | None] = [None]  # a BasicBolt's input being processed
        # the tracked batch the last one-root child went into, unsent, and its stream
        # (wiring's fast anchored emit sets them): a BasicBolt's ack is folded into that
        # child, and the batch is sent once full (ack_basic)
        self.last_child: list = [None, None]
        # input set aside while output waited: (entries, source, ids) (execute)
        self.leftover: tuple = ()
        # a fields-grouped input's key of an entry, for the sampled hot keys (stats.py)
        self._keyers = {(sub.source, sub.stream): keyer
                        for sub in spec.inputs
                        if sub.source in specs and (keyer := _keyer(
                            sub.grouping, specs[sub.source].streams.get(sub.stream, ())))}
        # execute_data's strides, untracked, tracked and a RUN's: C or Python (hot.py);
        # a BasicBolt's ack or fail each input as process returns or raises (_basic)
        self._strides = _strides((self.current, self.ack_basic, self.fail)
                                 if self.basic else None)

    # -- frames -------------------------------------------------------------------------
    def on_frame(self, h: wire.Header, body: bytes, waiting: Sized,
                 ack_now: bool = True, process: Callable | None = None,
                 before: Iterable[tuple[int, bytes, Callable, Callable]] = ()) -> None:
        """A DATA, TRACKED, RUN or ANCHORED frame: ``process`` its tuples; the acks of a
        tracked frame go at once (``ack_now`` False: with the next frame's, or at the
        flush: a traced frame's, which would otherwise cost a frame of acks of its own).
        ``process``, if given, is called instead of the user's (the tracer's wrapper).
        ``before``: frames that rode with this one, ``(kind, body, process, after)``
        each (a TRACED frame's traced entries, tracing.py), processed first, each with
        its own ``process``, ``after()`` once its tuples are done
        (:meth:`execute_riders`); their acks go with this frame's."""
        self.counts.frame_arrived()
        batch = wire.decode_batch(body)
        source = self._source(h.src, h.stream)
        parts = [(*_parts(kind, wire.decode_batch(inner)), call, after)
                 for kind, inner, call, after in before]  # (a frame's traced riders: few)
        plain = not self.leftover
        if plain and parts:
            # a TRACED frame's riders first, each with its wrapper, then the frame they
            # rode in the data loop, as if untraced (at 1 % nearly every frame carries
            # a traced tuple: docs/internals/tracing-log.md, "2026-11-27, night")
            self.execute_riders(parts, source, waiting)
            parts, plain = [], not self.leftover
        if h.kind == wire.DATA:
            if plain:
                return self.execute_data(batch, source, waiting, process=process)
            return self.execute(batch, source, None, waiting, None, process, parts)
        entries, ids, vals = _PARTS[h.kind](batch)
        try:
            if plain:  # (a RUN's ids counted from its first root: execute_data)
                return self.execute_data(entries, source, waiting, ids, vals,
                                         batch[0] if h.kind == wire.RUN else None, process)
            return self.execute(entries, source, ids, waiting, vals, process, parts)
        finally:  # they are few frames, and waiting for the flush timer would add to
            if ack_now:  # complete latency
                self.acks.flush()

    def _source(self, src: int, stream: int) -> TupleSource:
        key = (src, stream)
        source = self._sources.get(key)
        if source is None:
            source = self._sources[key] = self._new_source(src, stream)
        return source

    def _new_source(self, src: int, stream: int) -> TupleSource:
        try:
            comp, name = self.plan.streams[stream]
            info = self.plan.task(src)
        except IndexError:
            raise wire.WireError(f"frame from unknown task {src} or stream {stream}") from None
        if info.component != comp:
            raise wire.WireError(f"task {src} does not belong to {comp!r}")
        return TupleSource.of(comp, src, name, self.specs[comp].streams[name])

    def execute(self, entries: list, source: TupleSource, ids: Iterable | None,
                waiting: Sized, vals: Iterable | None = None,
                process: Callable | None = None, before: list[tuple] = ()) -> None:
        """``process`` each entry of a frame's batch as a Tuple from ``source`` (``ids``:
        the entries' tracking ids in order, None for untracked ones; ``vals``: their
        starting ``ack_val``, None for all 0: a tuple of one tree starts with its own edge
        id, the root itself for a spout's tuple, docs/internals/acker.md). A BasicBolt's input
        is acked when ``process`` returns, failed when it raises FailedException, and
        its emits anchor to it. A ``process`` given is called instead of the user's (a
        traced frame's wrapper): the user's object is never touched, since reading or
        patching its ``__dict__`` would slow every attribute its own code reads.

        ``before``: batches to process first, in this call, ``(entries, ids, vals,
        process, after)`` each (the traced frames that rode with this one, each with its
        wrapper, ``after()`` once its last tuple is done and acked, before the next
        batch's first), the switch between wrappers per batch, not a test per tuple.
        Since 2026-11-28 :meth:`on_frame` hands them here only while input is set aside
        (to be set aside after it); else :meth:`execute_riders` runs them in the data
        loop, as it runs a BasicBolt's frames (docs/internals/performance-log.md, "Issue
        17, fourteenth pass").

        Once output waits unsent (``waiting``), the rest is set aside in ``leftover`` (a
        bolt emitting 10,000 tuples per input must not turn a whole frame of inputs into
        output at once); :meth:`run_leftover` takes it up again (the rest of ``before``'s
        batches too, with the user's ``process``). Called while input is set aside (the
        next entry of a TRACED frame no untraced frame rode: each entry has an
        ``execute`` of its own, so that its acks go as it ends), it processes nothing
        and sets its batches aside after that input, in order.

        Each Tuple is made as its entry comes, and one that ``process`` did not keep is
        made again for the next entry: when nothing but this loop holds it (its
        reference count is what it was when it was made), nobody can see it change, so
        its fields are set anew instead of a new Tuple being allocated, as CPython's
        ``zip`` and ``enumerate`` reuse their result tuples. A bolt that keeps its input
        (to ack later, or in a window) gets a new Tuple each time. In-process, with the
        word count's bolt: ~150-200 ns a tuple less (docs/internals/performance.md,
        "Tuples made once")."""
        user = self.user.process if process is None else process
        parts = [*before, (entries, ids, vals, user, None)] if before else (
            (entries, ids, vals, user, None),)
        if self.leftover:  # (before 2026-11-27 its rest took the place of the one before's)
            return self._set_aside_after(parts)
        basic, current = self.basic, self.current
        ack_basic = self.ack_basic
        bare = len(source.fields) == 1  # its entries are bare values (runtime/wire)
        make = OneFieldTuple if bare else Tuple
        tup, alone, done, counts = None, 0, 0, self.counts
        started = counts.started_batch(self._keyers.get((source.component, source.stream)))
        mark = counts.left  # the next sampled tuple (stats.TaskCounts.checkpoint)
        at = first = 0  # the batch being processed, and ``done`` at its start
        try:
            for at, (entries, ids, vals, process, after) in enumerate(parts):  # noqa: B007 (read after it)
                first = done
                tids = repeat(None) if ids is None else iter(ids)
                tvals = repeat(0) if vals is None else iter(vals)
                for entry, tid, val in zip(entries, tids, tvals):
                    if done == mark:
                        mark = counts.checkpoint(done, entry)
                    if tup is not None and getrefcount(tup) == alone:  # nobody kept it
                        tup.values = [entry] if bare else entry
                        tup.ids, tup.ack_val = tid, val
                    else:
                        tup = make(entry, source, tid)
                        tup.ack_val = val
                        alone = getrefcount(tup)
                    if basic:
                        current[0] = tup
                        try:
                            process(tup)
                        except FailedException:
                            self.fail(tup)
                        else:
                            ack_basic(tup)
                        current[0] = None
                    else:
                        process(tup)
                    done += 1
                    if waiting:
                        break
                else:
                    if after is not None:
                        after()
                    continue
                break
        except Exception as exc:
            raise UserCodeError(f"{self.name}.process", exc) from exc
        finally:
            current[0] = None
            counts.ended_batch(started, done, mark)
        if at + 1 < len(parts):  # stopped in a batch before the last: the rest as one
            entries, ids, vals = _rest(parts, at, done - first, tids, tvals)
            tids, tvals, first = iter(ids), iter(vals), done
        self._set_aside(entries, source, (ids, tids), (vals, tvals), done - first)

    def execute_riders(self, parts: list[tuple], source: TupleSource, waiting: Sized,
                       ) -> None:
        """A TRACED frame's riders, ``(entries, ids, vals, process, after)`` each (as
        :meth:`execute`'s ``before``), one :meth:`execute_data` each with its wrapper
        ``process``, ``after()`` once all its tuples are done. Once output waits, the
        rest (of this rider, and the riders after it) is set aside, with the user's
        ``process``, untraced, as :meth:`execute` sets it aside. Before 2026-11-28 the
        riders ran in :meth:`execute`'s general loop, ~1.5 µs a traced word at the
        counter against ~0.8 µs in the data loop (docs/internals/tracing-log.md,
        "2026-11-28, late morning")."""
        for at, (entries, ids, vals, process, after) in enumerate(parts):
            if self.leftover or (at and waiting):
                return self._set_aside_riders(parts[at:], source)
            self.execute_data(entries, source, waiting, ids, vals, process=process)
            if not self.leftover:
                after()

    def _set_aside_riders(self, parts: list[tuple], source: TupleSource) -> None:
        """Riders not processed, set aside whole after what was (if anything was)."""
        if not self.leftover:
            self.leftover = ([], source, [], [])
        self._set_aside_after(parts)

    def execute_data(self, entries: list, source: TupleSource, waiting: Sized,
                     ids: Iterable | None = None, vals: Iterable | None = None,
                     first: int | None = None, process: Callable | None = None) -> None:
        """:meth:`execute` for the commonest frames: untracked tuples (DATA, ``ids`` None)
        or tracked ones (RUN, TRACKED, ANCHORED: ``ids`` and ``vals`` as :meth:`execute`
        takes them; a RUN's also its ``first`` root, from which its ids are counted here
        instead), nothing traced riding with them, no input set aside; a BasicBolt's
        too, whose strides ack or fail each input as :meth:`execute` does
        (:func:`_basic`). A reused Tuple gets its values set, and a tracked one its
        ``ids`` and ``ack_val`` (an untracked Tuple has no ids and an ``ack_val`` of 0,
        which nothing changes: an ``ack`` or ``fail`` of it leaves its fields alone).
        A ``process`` given is called instead of the user's (a traced entry's wrapper,
        as :meth:`execute` takes it). The loop counts no tuples: it runs from one sampled tuple
        (:meth:`TaskCounts.checkpoint`) to the next, one stride a call of
        :func:`_untracked` or :func:`_tracked` (or of their C twins, ``_hot.Stride``:
        :func:`_strides`), and one stopped by output waiting, or a raise, reads how far
        it got from the entries' iterator. The word count's bolt, in callgrind: 3,431 ->
        2,799 instructions a tuple at most once with the Python strides, of which its own
        ``process``, decoding and a Tuple's values are ~2,350
        (docs/internals/performance-log.md, "Word count on a faster machine"), 2,418 with
        the C ones; at least once 4,311 -> 3,479 ("Issue 17, thirteenth pass"). The
        sentences' split (a BasicBolt) in C: 35,951 -> 34,700 a sentence at least once,
        37,739 -> 36,864 at most once ("fourteenth pass")."""
        counts, n, left = self.counts, len(entries), iter(entries)
        if ids is None:
            rows, stride = left, self._strides[0]
        elif first is None:  # zip takes no more ids than it gives out: the rest are next
            tids, tvals = iter(ids), iter(vals)
            rows, stride = zip(left, tids, tvals), self._strides[1]
        else:
            rows, stride = left, self._strides[2]
        call = (self.user.process if process is None else process,
                OneFieldTuple if len(source.fields) == 1 else Tuple,
                source, waiting)  # (a one-field stream's entries are bare values: wire)
        started = counts.started_batch(self._keyers.get((source.component, source.stream)))
        mark, done = counts.left, 0
        try:
            while done < n:
                if done == mark:
                    mark = counts.checkpoint(done, entries[done])
                stop = min(n, mark) if mark > done else n  # (mark -1: metrics off)
                root = () if first is None else (first + done,)
                if not stride(rows, stop - done, *call, *root):  # output waits
                    done = n - length_hint(left)
                    break
                done = stop
        except Exception as exc:
            done = n - length_hint(left) - 1  # (the tuple that raised is not done)
            raise UserCodeError(f"{self.name}.process", exc) from exc
        finally:
            counts.ended_batch(started, done, mark)
        if first is not None:  # a RUN's rest: its roots counted on, one list for ids and
            ids = vals = list(range(first + done, first + n))  # vals (each id its own
        elif ids is not None:  # ack_val, the same int, as tee gave them: _run_parts)
            return self._set_aside(entries, source, (ids, tids), (vals, tvals), done)
        if done < n:
            self.leftover = (entries[done:], source, ids, vals)

    def _set_aside(self, entries: list, source: TupleSource, ids: tuple, vals: tuple,
                   done: int) -> None:
        """Keep the entries not processed, with the rest of their ``ids`` and ``vals``
        (each given as the iterable and the iterator execute took them from)."""
        rest = len(entries) - done
        if rest:  # zip took no more ids than it gave out: the rest are the next ones
            self.leftover = (entries[done:], source, *(
                None if given is None else list(islice(it, rest)) for given, it in (ids, vals)))

    def _set_aside_after(self, parts: list[tuple]) -> None:
        """Set ``execute``'s batches aside whole after the input set aside already (of
        the same frame): they run with the user's ``process``, untraced."""
        entries, source, ids, vals = self.leftover
        tids = repeat(None) if ids is None else iter(ids)
        tvals = repeat(0) if vals is None else iter(vals)
        entries, ids, vals = _rest([(entries, ids, vals, None, None), *parts], 0, 0, tids,
                                   tvals)
        self.leftover = (entries, source, ids, vals)

    def run_leftover(self, waiting: Sized) -> None:
        """Process the input set aside while output waited (the driver calls this once
        nothing waits any more, before it reads another frame)."""
        leftover, self.leftover = self.leftover, ()
        if leftover:
            entries, source, ids, vals = leftover
            self.execute(entries, source, ids, waiting, vals)

    def tick(self, every) -> None:
        source = TupleSource.of(SYSTEM, 0, TICK, ["freq"])
        call_user(f"{self.name}.process_tick", self.user.process_tick,
                  Tuple([every], source))


def _untracked(entries: Iterator, k: int, process: Callable, make: type,
               source: TupleSource, waiting: Sized) -> bool:
    """Up to ``k`` untracked tuples of :meth:`BoltSide.execute_data`, one Tuple reused
    while nobody keeps it (:meth:`BoltSide.execute` says how that is known); False when
    it stopped because output waits. The spec of its C twin (``_hot.Stride``), which
    ``tests/runtime/test_hot_strides.py`` holds to the same rules."""
    bare = make is OneFieldTuple
    tup = make(None, source)
    alone = getrefcount(tup)
    for entry in islice(entries, k):
        if getrefcount(tup) == alone:
            tup.values = [entry] if bare else entry
        else:
            tup = make(entry, source)
            alone = getrefcount(tup)
        process(tup)
        if waiting:
            return False
    return True


def _tracked(rows: Iterator, k: int, process: Callable, make: type, source: TupleSource,
             waiting: Sized) -> bool:
    """:func:`_untracked` for ``entry, ids, ack_val`` rows: a reused Tuple gets its ids
    and ``ack_val`` set too; one the user keeps (to ack later) keeps its own."""
    bare = make is OneFieldTuple
    tup = make(None, source)
    alone = getrefcount(tup)
    for entry, ids, val in islice(rows, k):
        if getrefcount(tup) == alone:
            tup.values = [entry] if bare else entry
        else:
            tup = make(entry, source)
            alone = getrefcount(tup)
        tup.ids = ids
        tup.ack_val = val
        process(tup)
        if waiting:
            return False
    return True


def _run(entries: Iterator, k: int, process: Callable, make: type, source: TupleSource,
         waiting: Sized, root: int) -> bool:
    """:func:`_tracked` for a RUN frame's entries from the one whose ids and ``ack_val``
    are the int ``root``, the next one's ``root + 1``, and so on (:func:`_run_parts`):
    the same int object for both, by which ``ack`` tells a spout tuple's only copy. Its
    C twin counts them in C, ~300 instructions a tuple less than ``tee`` and ``count``
    (docs/internals/performance-log.md, "Issue 17, thirteenth pass")."""
    return _tracked(zip(entries, *tee(count(root))), k, process, make, source, waiting)


def _basic(stride: Callable, current: list, ack: Callable, fail: Callable) -> Callable:
    """``stride`` for a BasicBolt, as :meth:`BoltSide.execute` runs one: its input is
    ``current[0]`` while ``process`` runs and while it is acked (``ack``, after a
    return) or failed (``fail``, after a FailedException, and the stride goes on), and
    None after, also after a raise, which comes out as raised. Neither keeps the Tuple,
    so it is reused as a plain bolt's is. The spec of the C strides made with
    ``current``, ``ack``, ``fail`` and ``failed`` (``_hot.Stride``), which
    ``tests/runtime/test_hot_strides.py`` holds to the same rules."""
    def basic_stride(rows, k, process, make, source, waiting, *root) -> bool:
        def one(tup) -> None:
            current[0] = tup
            try:
                process(tup)
            except FailedException:
                fail(tup)
            else:
                ack(tup)
            finally:
                current[0] = None
        return stride(rows, k, one, make, source, waiting, *root)
    return basic_stride


_STRIDES = {"untracked": _untracked, "tracked": _tracked, "run": _run}


def _strides(basic: tuple | None = None) -> tuple[Callable, Callable, Callable]:
    """:func:`_untracked`, :func:`_tracked` and :func:`_run`, or their C twins
    (``_hot.Stride``, which do the same and hand any other call to them), as
    :mod:`runtime.engine.hot` chooses; a BasicBolt's (``basic``: its ``current``, ack
    and fail) each as :func:`_basic` makes it."""
    specs = {rows: spec if basic is None else _basic(spec, *basic)
             for rows, spec in _STRIDES.items()}
    hot = c_module()
    if hot is None:
        return tuple(specs.values())
    more = {} if basic is None else {**dict(zip(("current", "ack", "fail"), basic)),
                                     "failed": FailedException}
    return tuple(hot.Stride(spec=spec, tuple_type=Tuple, one_type=OneFieldTuple, rows=rows,
                            **more) for rows, spec in specs.items())


def _rest(parts: list[tuple], at: int, done: int, tids: Iterator,
          tvals: Iterator) -> tuple[list, list, list]:
    """What is left of ``parts`` (execute's batches) as one batch, its entries, ids and
    starting ``ack_val``: the ``at``-th from its ``done``-th tuple on (``tids`` and
    ``tvals``: the iterators execute took its ids and vals from, past that tuple's),
    and every later one whole."""
    rest = len(parts[at][0]) - done
    entries, ids, vals = parts[at][0][done:], [*islice(tids, rest)], [*islice(tvals, rest)]
    for more, more_ids, more_vals, _, _ in parts[at + 1:]:
        entries += more
        ids += islice(repeat(None) if more_ids is None else more_ids, len(more))
        vals += islice(repeat(0) if more_vals is None else more_vals, len(more))
    return entries, ids, vals


def _keyer(grouping, fields: tuple) -> Callable[[object], object] | None:
    """An entry's grouping key when ``grouping`` groups by fields (it has ``indexes``):
    the bare value of a one-field stream, else the value or values at those indexes."""
    indexes = getattr(grouping, "indexes", None)
    if not indexes:
        return None
    if len(fields) == 1:
        return _bare_key
    return itemgetter(*indexes)


def _bare_key(entry):
    return entry


def _tracked_parts(batch: list) -> tuple[list, list, list]:
    """A TRACKED batch, ``entry, ids, entry, ids, ...``, as its entries, their ids and
    their starting ``ack_val``: ``ids`` is ``{root: edge}`` (``ack_val`` 0), or an int
    root that is its own edge id (a spout tuple's only copy: ``ack_val`` is the root)."""
    ids = batch[1::2]
    if len(batch) % 2 or not set(map(type, ids)) <= _ID_TYPES:
        raise wire.WireError("a tracked batch must hold values, ids pairs (ids: int or map)")
    return batch[::2], ids, [i if type(i) is int else 0 for i in ids]


def _anchored_parts(batch: list) -> tuple[list, list, list]:
    """An ANCHORED batch, ``entry, ids, ack_val, ...``, as its entries, their ids and
    their starting ``ack_val``: ``ids`` an int root and ``ack_val`` the tuple's edge id
    (its ack value, until it anchors tuples of its own), or a ``{root: edge}`` map and
    ``ack_val`` 0."""
    ids, vals = batch[1::3], batch[2::3]
    if (len(batch) % 3 or not set(map(type, ids)) <= _ID_TYPES
            or not set(map(type, vals)) <= _INT):
        raise wire.WireError("an anchored batch must hold values, ids, ack_val triples")
    return batch[::3], ids, vals


def _run_parts(batch: list) -> tuple[list, Iterator, Iterator]:
    """A RUN batch, ``[first, [entry, ...]]``, as its entries, their ids and their
    starting ``ack_val``: the n-th tuple's ids are the self-initialising root ``first +
    n``, its own edge id, and so is its ``ack_val`` (the same int: ``tee``)."""
    if (len(batch) != 2 or type(batch[0]) is not int or type(batch[1]) is not list
            or batch[0] < SELF_INIT or batch[0] + len(batch[1]) > 1 << 64):
        raise wire.WireError("a run must be [first self-initialising root, [values, ...]]")
    first, entries = batch
    return (entries, *tee(count(first)))


# a tracked frame's batch as its entries, their ids and their starting ack_val, by kind
_PARTS = {wire.RUN: _run_parts, wire.TRACKED: _tracked_parts, wire.ANCHORED: _anchored_parts}


def _parts(kind: int, batch: list) -> tuple[list, Iterable | None, Iterable | None]:
    """Any tuple frame's batch as its entries, ids and starting ``ack_val`` (None, None
    for a DATA frame's)."""
    return (batch, None, None) if kind == wire.DATA else _PARTS[kind](batch)
