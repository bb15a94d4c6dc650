"""Wiring one task: its context, its streams to their subscribers' tasks, and the
collector bound onto the user's object (``emit``, ``emit_direct``, a bolt's ``ack``,
``fail``, ``reset_timeout``).

The emit functions are closures made here, once, at wiring time, over the batches and
outlets they append to: that is the engine's per-tuple path (docs/internals/performance.md),
``emit -> list.append``, with the commonest calls (the default stream, the right arity, no
``msg_id``) checked first and anything unusual taken the checked way. Tracked tuples (a
spout's with a ``msg_id``, a bolt's anchored to tracked inputs, both only with acking on)
go to :meth:`SpoutSide.emit_root` / :meth:`BoltSide.emit_anchored`, or, on a tracking
spout's default stream, into its :class:`~runtime.engine.runs.Runs`.

The hottest of them with acking on (the bolt's ``ack``, a BasicBolt's child, a tracking
spout's one-field emit) are also written in C (``_hot*.c``, built by setup.py): the Python
closure stays the spec, and the C one, chosen here at wiring time, does the same work on
its fast path and hands it every other call. ``TUPLEFLOW_PURE_PYTHON=1``, or no built
extension, keeps the Python closures (``hot.py`` makes the choice;
docs/internals/performance.md, "The acking closures in C").
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Callable, Mapping

from runtime import wire
from runtime.acking._ids import id_bits, new_id
from runtime.groupings import DirectGrouping, FieldsGrouping
from runtime.model.api import Context, OneFieldTuple, Tuple
from runtime.model.constants import DEFAULT_STREAM
from runtime.model.plan import PhysicalPlan
from runtime.model.topology import ComponentSpec
from runtime.observe.user_metrics import UserMetrics

from .bolt_side import BoltSide
from .errors import arity, not_a_list, unknown_stream, wrong_arity
from .hot import c_bits, c_module
from .outbound import Outlet, StreamOut
from .runs import Runs
from .spout_side import SpoutSide

Send = Callable[[bytes, bytes], None]
_TUPLES = (Tuple, OneFieldTuple)
OnBad = Callable[[str, list, "dict | None"], None]


def task_context(plan: PhysicalPlan, spec: ComponentSpec, task: int, run_dir: str,
                 metrics: UserMetrics | None = None) -> Context:
    info = plan.task(task)
    return Context(plan.topology, info.component, task, info.index,
                   len(plan.component_tasks()[info.component]),
                   plan.component_tasks(), info.container, run_dir, dict(spec.streams),
                   plan.task_containers(), metrics=metrics,
                   this_inputs=tuple((s.source, s.stream) for s in spec.inputs))


def build_streams(plan: PhysicalPlan, specs: Mapping[str, ComponentSpec], spec: ComponentSpec,
                  context: Context, send: Send, on_bad: OnBad) -> dict[str, StreamOut]:
    """Each declared stream of this component, wired to its subscribers' tasks (a bolt's
    tracked tuples travel as ANCHORED triples, a spout's as TRACKED pairs)."""
    kind = wire.ANCHORED if spec.kind == "bolt" else wire.TRACKED
    streams = {name: StreamOut(name, len(fields), send, on_bad, kind)
               for name, fields in spec.streams.items()}
    subscribe_all(streams, plan, specs, spec, context)
    return streams


def subscribe_all(streams: Mapping[str, StreamOut], plan: PhysicalPlan,
                  specs: Mapping[str, ComponentSpec], spec: ComponentSpec,
                  context: Context) -> None:
    """Wire each stream to its subscribers' tasks in ``plan``; a rebalance calls it again,
    its batches flushed, with the new plan (each outlet is made afresh)."""
    tasks, stream_ids = plan.component_tasks(), plan.stream_ids()
    for out in streams.values():
        out.unwire()
    for target in specs.values():
        for sub in target.inputs:
            if sub.source == spec.id:
                _subscribe(streams[sub.stream], sub, tasks[target.id],
                           stream_ids[(spec.id, sub.stream)], context,
                           target.max_parallelism if target.keyed_state else 0)


def _subscribe(out: StreamOut, sub, tasks: tuple[int, ...], stream_id: int,
               context: Context, key_groups: int) -> None:
    """``key_groups``: the subscriber's, when it keeps keyed state (else 0)."""
    task = context.task_id
    grouping = copy.copy(sub.grouping)  # each sender prepares its own
    if key_groups and isinstance(grouping, FieldsGrouping):
        grouping.keyed = True  # keyed state: through key groups (runtime/groupings.py)
        grouping.key_groups = key_groups
    if isinstance(grouping, DirectGrouping):
        for t in tasks:
            out.direct[t] = (wire.data_header(wire.DATA, stream_id, t, task), [])
            out.direct_tracked[t] = (wire.data_header(out.tracked_kind, stream_id, t, task),
                                     [])
        return
    prepare = getattr(grouping, "prepare", None)  # a duck-typed custom grouping may lack it
    if prepare is not None:
        prepare(context, sub.stream, tasks)
    else:
        grouping.target_tasks = list(tasks)
    out.outlets.append(Outlet(grouping, tasks, stream_id, task, out.bare, out.tracked_kind))


# -- the collector ----------------------------------------------------------------------

class Collector:
    """What the collector's functions are made from: the task's streams, its batch size,
    whether acking is on, and the room that takes its tracked tuples (``spout`` or
    ``bolt``, the other None). It holds no state of its own once :meth:`bind` ran."""

    def __init__(self, comp: str, streams: Mapping[str, StreamOut], batch_size: int,
                 acking: bool, spout: SpoutSide | None, bolt: BoltSide | None) -> None:
        self.comp, self.streams, self.size, self.acking = comp, streams, batch_size, acking
        self.spout, self.bolt = spout, bolt
        # per stream: (arity, batch, StreamOut)
        self.routes = {name: (out.arity, out.items, out) for name, out in streams.items()}

    def bind(self, user) -> None:
        """Set the collector's functions on the user's object."""
        user.emit = self.spout_emit() if self.spout is not None else self.any_bolt_emit()
        user.emit_direct = self.emit_direct
        if self.bolt is not None:
            user.ack = self.bolt_ack()
            user.fail = self.bolt.fail
            user.reset_timeout = self.bolt.reset_timeout

    def checked(self, values, stream):
        """The stream's arity, batch and outlet, once the stream and the arity are
        right."""
        routes = self.routes
        try:
            n, items, out = routes[stream]
            ok = len(values) == n
        except KeyError:
            raise unknown_stream(self.comp, stream, routes) from None
        except TypeError:
            ok = False
        if not ok:
            raise wrong_arity(self.comp, stream, values, routes[stream][0])
        return n, items, out

    def spout_emit(self):
        """A spout's ``emit``: :meth:`any_spout_emit`, with the commonest calls made cheap
        (the default stream's, and a tracking spout's tracked ones into its runs)."""
        emit, routes = self.any_spout_emit(), self.routes
        if DEFAULT_STREAM not in routes:
            return emit
        default = _default_stream_first(emit, routes[DEFAULT_STREAM], self.size)
        runs = self.streams[DEFAULT_STREAM].runs
        return default if runs is None else _into_runs(default, runs, routes, self.size)

    def any_spout_emit(self):
        """A spout's ``emit`` on any stream: append, flush a full batch; a ``msg_id``
        makes a tracked tuple (acking on), or one acked at once (acking off)."""
        routes, checked, comp, size = self.routes, self.checked, self.comp, self.size
        emit_root = self.spout.emit_root if self.acking else None
        at_emit = self.spout.at_emit

        def emit(values, stream=DEFAULT_STREAM, msg_id=None):
            try:  # the common case inline; anything unusual goes through checked()
                n, items, out = routes[stream]
                ok = len(values) == n
            except (KeyError, TypeError):
                ok = False
            if not ok:
                n, items, out = checked(values, stream)
            if msg_id is not None:
                if emit_root is not None:
                    return emit_root(out, values, msg_id)
                at_emit.append(msg_id)
            try:
                items.append(values[0] if n == 1 else values)
            except (TypeError, LookupError):
                raise not_a_list(comp, stream, values) from None
            if len(items) >= size:
                out.flush()

        return emit

    def any_bolt_emit(self):
        """A bolt's ``emit``: :meth:`bolt_emit`, with a tracking BasicBolt's commonest call
        (the default stream, to one task per tuple, unanchored by hand) made cheap."""
        emit, out = self.bolt_emit(), self.streams.get(DEFAULT_STREAM)
        if (not (self.acking and self.bolt.basic) or out is None
                or DEFAULT_STREAM not in _one_target(self.streams)):
            return emit
        return _basic_default_first(emit, self.bolt, out, 12 * self.size)

    def bolt_emit(self):
        """A bolt's ``emit``: append, flush a full batch; anchored to tracked inputs
        (or, for a BasicBolt, to its input) it makes a tracked tuple (acking on)."""
        routes, checked, comp, size = self.routes, self.checked, self.comp, self.size
        acking, basic, current = self.acking, self.bolt.basic, self.bolt.current
        anchored = self.bolt.emit_anchored
        one_target, last = _one_target(self.streams), self.bolt.last_child
        bits, limit = id_bits(), 3 * size

        def emit(values, stream=DEFAULT_STREAM, anchors=None):
            try:
                n, items, out = routes[stream]
                ok = len(values) == n
            except (KeyError, TypeError):
                ok = False
            if not ok:
                n, items, out = checked(values, stream)
            if acking and (anchors is not None or basic):
                anchor = current[0] if anchors is None else anchors
                if type(anchor) is list and len(anchor) == 1:
                    anchor = anchor[0]
                pick = one_target.get(stream)
                if (pick is not None and type(anchor) in _TUPLES and type(anchor.ids) is int
                        and out.recorder is None):
                    # the commonest anchored emit, written out (acker.md, "One root, flat")
                    try:
                        entry = values[0] if n == 1 else values
                    except (TypeError, LookupError):
                        raise not_a_list(comp, stream, values) from None
                    batch = pick(values)
                    edge = bits(63) or new_id()
                    anchor.ack_val ^= edge
                    batch += (entry, anchor.ids, edge)
                    last[0], last[1] = batch, out  # where ack_basic may fold the input's ack
                    # a BasicBolt's batch waits for the end of its input (ack_basic), so
                    # that its children travel, and are acked, together (up to a cap)
                    if len(batch) >= limit and (anchors is not None or not basic
                                                or len(batch) >= 4 * limit):
                        out.flush_tracked()
                    return
                if anchored(out, values, current if anchors is None else anchors):
                    return
            try:
                items.append(values[0] if n == 1 else values)
            except (TypeError, LookupError):
                raise not_a_list(comp, stream, values) from None
            if len(items) >= size:
                out.flush()

        return emit

    def bolt_ack(self) -> Callable:
        """The bolt's ``ack``: :meth:`BoltSide.ack`, with the commonest cases written out
        (a spout tuple's only copy that anchored nothing: its root goes on the leaves; a
        tuple of one root: its ack value is XORed into the root's). Neither updates a
        counter: :meth:`AckOut.flush` counts them (~330 instructions an ack less:
        docs/internals/performance-log.md, "Issue 17, ninth pass")."""
        leaves, slow, combined = self.bolt.acks.leaves, self.bolt.ack, self.bolt.acks.combined
        acked = self.bolt.acks.acked
        get = acked.get

        def ack(tup) -> None:
            ids = tup.ids
            if ids is tup.ack_val:  # a spout tuple's only copy, untouched: a leaf,
                tup.ids = None  # counted as acked at the flush (AckOut); a second ack
                leaves.append(ids)  # of the same tuple changes nothing
            elif type(ids) is int:  # one root: its ack value is ack_val (acker.md)
                tup.ids = None
                combined.append(ids)  # (counted at the flush too)
                acked[ids] = get(ids, 0) ^ tup.ack_val  # XORed into the task's other acks
            else:  # of the root (AckOut); several roots, untracked, acked already
                slow(tup)

        hot = c_module()  # (the C one keeps the leaves it takes in order in a stretch:
        return ack if hot is None else hot.Ack(  # AckOut.stretch, _hot_bolt.c's LeafRun)
            ack, leaves, combined, acked, *_TUPLES, slow, self.bolt.acks.stretch)

    def emit_direct(self, task: int, values, stream=DEFAULT_STREAM, msg_id=None,
                    anchors=None):
        """``emit_direct``: to the one task named, on a stream it subscribes to with a
        direct grouping (rare: no closure of its own)."""
        out, target = self._direct(task, values, stream)
        if self.acking and self._tracked_direct(out, task, values, msg_id, anchors):
            return None
        target.append(out.entry(values, self.comp))
        if len(target) >= self.size:
            out.flush()
        if msg_id is not None and self.spout is not None:
            self.spout.at_emit.append(msg_id)
        return None

    def _direct(self, task: int, values, stream: str) -> tuple[StreamOut, list]:
        out = self.streams.get(stream)
        if out is None:
            raise unknown_stream(self.comp, stream, self.streams)
        target = out.direct.get(task)
        if target is None:
            raise ValueError(f"component {self.comp!r}: emit_direct to task {task}, which "
                             f"does not subscribe to stream {stream!r} with a direct "
                             "grouping")
        if arity(values) != out.arity:
            raise wrong_arity(self.comp, stream, values, out.arity)
        return out, target[1]

    def _tracked_direct(self, out: StreamOut, task: int, values, msg_id, anchors) -> bool:
        """A direct emit that is tracked: True once it was sent the tracked way."""
        if self.spout is not None:
            if msg_id is None:
                return False
            self.spout.emit_root(out, values, msg_id, direct=task)
            return True
        current = self.bolt.current
        if anchors is None and current[0] is None:
            return False
        return self.bolt.emit_anchored(out, values, current if anchors is None else anchors,
                                       direct=task)


def _one_target(streams: Mapping[str, StreamOut]) -> dict[str, Callable]:
    """Per stream whose one subscriber takes each tuple on one task: ``batch_of(values)``,
    the tracked batch of that task (for the bolt's fast anchored emit: a tuple anchored
    to one Tuple of one tree, ``entry, root, edge``; see ``bolt_emit``)."""
    return {name: _batch_of(out.outlets[0]) for name, out in streams.items()
            if len(out.outlets) == 1 and out.outlets[0].pick is not None}


def _batch_of(outlet: Outlet) -> Callable:
    tracked, pick = outlet.tracked, outlet.pick
    if len(tracked) == 1:
        (batch,) = tracked
        return lambda values: batch
    return lambda values: tracked[pick(values)]


def _basic_default_first(emit, bolt: BoltSide, out: StreamOut, cap: int):
    """``emit`` of a tracking BasicBolt, its commonest call written out: a child of the
    input on the default stream, whose one subscriber takes it on one task, unrecorded,
    the input of one tree (``ids`` an int). Per child: the pick, an edge id, an XOR into
    the input's ``ack_val`` and one ``+=`` of ``entry, root, edge`` (acker.md,
    "One root, flat"); the batch waits for the end of the input (``ack_basic``), up to
    ``cap`` items. In-process, 0.26-0.45 us a child less than ``bolt_emit``'s own way
    with one counter, up to 0.44 with two (docs/internals/performance-log.md, "Issue 17,
    third pass")."""
    (outlet,) = out.outlets
    tracked, pick, bare, n = outlet.tracked, outlet.pick, out.bare, out.arity
    one = tracked[0] if len(tracked) == 1 else None  # one task: no pick to make
    current, last, bits = bolt.current, bolt.last_child, id_bits()

    def emit_child(values, stream=DEFAULT_STREAM, anchors=None):
        anchor = current[0]
        if stream is DEFAULT_STREAM and anchors is None and anchor is not None:
            root = anchor.ids
            if type(root) is int and out.recorder is None:
                try:
                    ok = len(values) == n
                    entry = values[0] if bare else values
                    batch = one if one is not None else tracked[pick(values)]
                except Exception:  # the checked way reports it (a wrong arity, a bad key)
                    ok = False
                if ok:
                    edge = bits(63) or new_id()
                    anchor.ack_val ^= edge
                    batch += (entry, root, edge)
                    if last[0] is not batch:  # where ack_basic may fold the input's ack
                        last[0], last[1] = batch, out
                    if len(batch) >= cap:
                        out.flush_tracked()
                    return None
        return emit(values, stream, anchors)

    hot = c_module()
    if hot is not None:
        emit_child = hot.EmitChild(
            spec=emit_child, emit=emit, current=current, last=last, out=out, one=one,
            tracked=tracked, pick=pick, bits=c_bits(bits), new_id=new_id, default=DEFAULT_STREAM,
            tuple_type=Tuple, one_type=OneFieldTuple, n=n, cap=cap, bare=bare)
    if outlet.str_key is None or one is not None:
        return emit_child
    return _str_key_first(emit_child, bolt, out, cap)


def _str_key_first(emit_child, bolt: BoltSide, out: StreamOut, cap: int):
    """``emit_child`` for a subscriber that groups on one field over several tasks
    (:meth:`FieldsGrouping.str_key`), its commonest call written out further: a list of
    the right arity whose key is a str, hashed here as the grouping's ``pick`` would
    (``crc32`` of its UTF-8), a call less a child; anything else (another key, a str
    subclass, another call) goes through ``emit_child``. At 1/1/2, 84,115 -> 79,442
    instructions a sentence in the split. A closure of its own, its tail written out
    again: the same choice made inside ``emit_child`` cost ~150 instructions a child
    more, with one counter or two (docs/internals/performance-log.md, "Issue 17, seventh
    pass")."""
    (outlet,) = out.outlets
    tracked, n, (at, tasks), crc = outlet.tracked, out.arity, outlet.str_key, zlib.crc32
    bare, current, last, bits = out.bare, bolt.current, bolt.last_child, id_bits()

    def emit_keyed(values, stream=DEFAULT_STREAM, anchors=None):
        anchor = current[0]
        if (stream is DEFAULT_STREAM and anchors is None and anchor is not None
                and type(values) is list and len(values) == n
                and type(key := values[at]) is str and out.recorder is None):
            root = anchor.ids
            if type(root) is int:
                batch = tracked[crc(key.encode()) % tasks]
                edge = bits(63) or new_id()
                anchor.ack_val ^= edge
                batch += (key if bare else values, root, edge)
                if last[0] is not batch:  # where ack_basic may fold the input's ack
                    last[0], last[1] = batch, out
                if len(batch) >= cap:
                    out.flush_tracked()
                return None
        return emit_child(values, stream, anchors)

    hot = c_module()
    if hot is None:
        return emit_keyed
    return hot.EmitKeyed(
        spec=emit_keyed, current=current, last=last, out=out, tracked=tracked, key_at=at,
        tasks=tasks, bits=c_bits(bits), new_id=new_id, default=DEFAULT_STREAM, tuple_type=Tuple,
        one_type=OneFieldTuple, n=n, cap=cap, bare=bare)


def _default_stream_first(emit, route: tuple, size: int):
    """``emit`` with the commonest call made cheap: the default stream, the right arity,
    and no ``msg_id``. Anything else goes through ``emit`` itself, which checks it all."""
    n, items, out = route
    append, flush, bare = items.append, out.flush, out.bare
    if bare:
        return _one_field_first(emit, items, flush, size)

    def emit_default(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is DEFAULT_STREAM:
            try:
                ok = len(values) == n
                entry = values[0] if bare else values
            except (TypeError, LookupError):  # the checked way reports it
                ok = False
            if ok and msg_id is None:
                append(entry)
                if len(items) >= size:
                    flush()
                return None
        return emit(values, stream, msg_id)

    return emit_default


def _one_field_first(emit, items: list, flush, size: int):
    """:func:`_default_stream_first` for a stream of one field, whose batch holds bare
    values: a list of one value is unpacked in one step, which checks its length too
    (``len(values) == 1`` and ``values[0]`` cost ~230 instructions more, and the word
    count's spout is the bound of its pipeline: docs/internals/performance-log.md, "Word
    count on a faster machine"). Only a list: a tuple, or anything else, goes the
    checked way, which takes a tuple and refuses what has no positions (a set)."""
    append = items.append

    def emit_one(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is not DEFAULT_STREAM or msg_id is not None or type(values) is not list:
            return emit(values, stream, msg_id)
        try:
            (entry,) = values
        except ValueError:  # the wrong arity: the checked way reports it
            return emit(values, stream, msg_id)
        append(entry)
        if len(items) >= size:
            flush()

    hot = c_module()
    if hot is None:
        return emit_one
    return hot.EmitOne(spec=emit_one, items=items, flush=flush, default=DEFAULT_STREAM,
                       size=size)


def _into_runs(emit_default, runs: Runs, routes, size: int):
    """``emit_default`` that also makes cheap a tracking spout's commonest tracked call: a
    ``msg_id`` on the default stream, unrecorded, goes into its target's run
    (:mod:`runtime.engine.runs`): the grouping's choice and three appends."""
    n, _, out = routes[DEFAULT_STREAM]
    if len(runs.entries) == 1:  # one task: no choice to make, and the lists at hand
        return _into_one_run(emit_default, runs, out, n, size)
    bare, pick = out.bare, out.outlets[0].pick
    entries, msg_ids, stamps = runs.entries, runs.msg_ids, runs.stamps

    def emit_picked(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is DEFAULT_STREAM and msg_id is not None and out.recorder is None:
            try:
                ok = len(values) == n
                entry = values[0] if bare else values
                i = pick(values)
            except Exception:  # the checked way reports it (a wrong arity, a bad key)
                ok = False
            if ok:
                msg_ids[i].append(msg_id)
                stamps[i].append(runs.stamp)
                run = entries[i]
                run.append(entry)
                if len(run) >= size:
                    out.flush_tracked()
                return None
        return emit_default(values, stream, msg_id)

    hot = c_module()
    if hot is None:
        return emit_picked
    return hot.EmitPicked(spec=emit_picked, entries=entries, ids=msg_ids, stamps=stamps,
                          runs=runs, out=out, default=DEFAULT_STREAM, pick=pick,
                          emit=emit_default, n=n, size=size, bare=bare)


def _into_one_run(emit_default, runs: Runs, out: StreamOut, n: int, size: int):
    """:func:`_into_runs` for a subscriber of one task (in-process 20-70 ns a tuple less
    than ``emit_picked`` with ``_first``, on the spout's whole cost)."""
    if out.bare:  # (its entries are bare values: a one-field stream's own closure)
        return _one_field_run(emit_default, runs, out, size)
    (run,), (ids,), (stamps,) = runs.entries, runs.msg_ids, runs.stamps
    run_append, id_append, stamp_append = run.append, ids.append, stamps.append

    def emit_tracked(values, stream=DEFAULT_STREAM, msg_id=None):
        if stream is DEFAULT_STREAM and msg_id is not None and out.recorder is None:
            try:
                ok = len(values) == n
            except TypeError:
                ok = False
            if ok:
                id_append(msg_id)
                stamp_append(runs.stamp)
                run_append(values)
                if len(run) >= size:
                    out.flush_tracked()
                return None
        return emit_default(values, stream, msg_id)

    return emit_tracked


def _one_field_run(emit_default, runs: Runs, out: StreamOut, size: int):
    """:func:`_into_one_run` for a stream of one field: a list of one value is unpacked
    in one step, which checks its length too, as :func:`_one_field_first` does at most
    once (docs/internals/performance-log.md, "Issue 17, ninth pass"); anything else, a tuple
    included, goes the checked way. Its four lines of appends are ``emit_tracked``'s
    written out again: the word count's spout, the bound of its pipeline, took 7,750
    instructions a word with ``emit_tracked``, 7,515 with this, 7,981 with those lines
    shared through a call."""
    (run,), (ids,), (stamps,) = runs.entries, runs.msg_ids, runs.stamps
    run_append, id_append, stamp_append = run.append, ids.append, stamps.append

    def emit_tracked(values, stream=DEFAULT_STREAM, msg_id=None):
        if (stream is not DEFAULT_STREAM or msg_id is None or type(values) is not list
                or out.recorder is not None):
            return emit_default(values, stream, msg_id)
        try:
            (entry,) = values
        except ValueError:  # the wrong arity: the checked way reports it
            return emit_default(values, stream, msg_id)
        id_append(msg_id)
        stamp_append(runs.stamp)
        run_append(entry)
        if len(run) >= size:
            out.flush_tracked()

    hot = c_module()
    if hot is None:
        return emit_tracked
    return hot.EmitRun(spec=emit_tracked, entries=run, ids=ids, stamps=stamps, runs=runs,
                       out=out, default=DEFAULT_STREAM, size=size)
