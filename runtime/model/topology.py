"""The topology as data: components, their streams and subscriptions, checked as declared.

Defining a topology starts nothing and imports neither zmq nor networkx; every mistake
that can be seen at definition time raises :class:`TopologyError` there, naming the
component and the problem.

>>> from runtime.testing import ListSpout, ListSink
>>> topo = Topology("demo")
>>> _ = topo.spout("numbers", ListSpout([[1], [2]], fields=["n"]))
>>> _ = topo.bolt("sink", ListSink, parallelism=2).shuffle_grouping("numbers")
>>> sorted(topo.graph.edges)
[('numbers', 'sink')]
>>> topo.bolt("sink", ListSink)
Traceback (most recent call last):
...
runtime.model.errors.TopologyError: component 'sink': the id is already used by a bolt
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runtime import groupings as g

from . import hooks
from .api import Bolt, Spout
from .constants import (
    CHECKPOINT_INTERVAL,
    COMPONENT_KEYS,
    DEFAULT_STREAM,
    DEFAULTS,
    MAX_PARALLELISM,
    MESSAGE_TIMEOUT,
    RECORD,
    RESERVED_PREFIX,
    SCHEDULER_KEYS,
    TICK_FREQ_SECS,
    WINDOW,
)
from .errors import TopologyError
from .fields import FieldError, split_field
from .options import CHECKS, max_parallelism_problem, unknown_option
from .plan import check_config
from .suggest import did_you_mean
from .windowing import declare_window, timeout_warning


@dataclass(frozen=True)
class Subscription:
    """A bolt's input: a source component's stream, and how tuples are spread over tasks."""

    source: str
    stream: str
    grouping: g.Grouping

    def describe(self) -> str:
        stream = "" if self.stream == DEFAULT_STREAM else f"[{self.stream}]"
        return f"{self.source}{stream} --{g.label(self.grouping)}-->"


@dataclass(frozen=True)
class ComponentSpec:
    """One spout or bolt of the logical plan."""

    id: str
    kind: str  # "spout" or "bolt"
    impl: Any  # the Spout/Bolt subclass, or an instance used as a prototype per task
    parallelism: int
    streams: Mapping[str, tuple[str, ...]]
    inputs: tuple[Subscription, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    # the most tasks a rebalance may give it; for keyed state its number of key groups
    max_parallelism: int = g.KEY_GROUPS

    @property
    def class_name(self) -> str:
        impl = self.impl
        return impl.__name__ if isinstance(impl, type) else type(impl).__name__

    @property
    def keyed_state(self) -> bool:
        """Whether its tasks keep keyed, checkpointed state (a ``StatefulBolt`` says so, and
        a ``WindowedBolt``, whose held tuples a rebalance deals by key): a fields grouping
        into it goes through key groups, which a rebalance can move."""
        impl = self.impl if isinstance(self.impl, type) else type(self.impl)
        return bool(getattr(impl, "keyed_state", False))

    def new_instance(self) -> Spout | Bolt:
        """A fresh user object for one task: a new instance, or a deep copy of the prototype."""
        return self.impl() if isinstance(self.impl, type) else copy.deepcopy(self.impl)


_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def check_user_id(what: str, ident: str) -> None:
    """Component and stream ids: identifiers, and never the runtime's reserved ``__`` ones."""
    if not isinstance(ident, str) or not _ID.match(ident):
        raise TopologyError(f"{what}: {ident!r} is not a valid id (letters, digits, _ . -)")
    if ident.startswith(RESERVED_PREFIX):
        raise TopologyError(f"{what}: ids starting with {RESERVED_PREFIX!r} are reserved")


def declared_streams(comp_id: str, impl: Any) -> dict[str, tuple[str, ...]]:
    """Normalise a class's ``outputs`` into ``{stream: fields}``, checking names."""
    outputs = getattr(impl, "outputs", [])
    if isinstance(outputs, Mapping):
        streams = dict(outputs)
    elif isinstance(outputs, Sequence) and not isinstance(outputs, str):
        streams = {DEFAULT_STREAM: outputs}
    else:
        raise TopologyError(f"component {comp_id!r}: outputs must be a list of field names "
                            f"or a dict of stream -> fields, not {outputs!r}")
    return {s: _fields(comp_id, s, f) for s, f in streams.items()}


def _fields(comp_id: str, stream: str, fields: Any) -> tuple[str, ...]:
    """The field names; a field may carry a type hint for recordings ("count: int" or
    ("count", int)), which is dropped here (runtime/model/fields.py; recordings use it)."""
    check_user_id(f"component {comp_id!r}", stream)
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TopologyError(f"component {comp_id!r} stream {stream!r}: fields must be a list "
                            f"of strings, not {fields!r}")
    try:
        fields = [split_field(f)[0] for f in fields]
    except FieldError as exc:
        raise TopologyError(f"component {comp_id!r} stream {stream!r}: fields must be a list "
                            f"of strings (a name, or 'name: type'): {exc}") from None
    dupes = sorted({f for f in fields if list(fields).count(f) > 1})
    if dupes:
        raise TopologyError(f"component {comp_id!r} stream {stream!r}: duplicate fields {dupes}")
    return tuple(fields)


class Topology:
    """A named graph of spouts and bolts, plus topology-wide options.

    Options (``ackers``, ``message_timeout``, ``max_spout_pending``, ``batch_size``,
    ``flush_interval``, ...) can be given here, per component, or at submit time; an
    unknown one is refused with the closest known key. Keys of one's own, which reach
    ``open`` and ``prepare`` in their ``config``, go in ``config={...}``.
    """

    def __init__(self, name: str, config: Mapping[str, Any] | None = None,
                 **options: Any) -> None:
        check_user_id("topology", name)
        self.name = name
        where = f"topology {name!r}"
        check_options(where, options, CHECKS)
        self.config = {**_user_config(where, config), **options}
        self._components: dict[str, ComponentSpec] = {}

    # -- declaring ------------------------------------------------------------------------
    def spout(self, comp_id: str, impl: Any, parallelism: int = 1, *,
              max_parallelism: int | None = None, **config: Any) -> Declarer:
        """Add a spout (a :class:`Spout` subclass, or an instance used as a prototype).
        ``max_parallelism``: as for :meth:`bolt`."""
        return self._add(comp_id, "spout", Spout, impl, (parallelism, max_parallelism), config)

    def bolt(self, comp_id: str, impl: Any, parallelism: int = 1, *,
             max_parallelism: int | None = None, **config: Any) -> Declarer:
        """Add a bolt; subscribe it to inputs with the returned declarer's groupings.

        ``max_parallelism`` is the most tasks a rebalance may give it (more is refused),
        and for a StatefulBolt the number of key groups its keys and their state are split
        into: fixed for the topology's life. Default: 128, or the parallelism if higher;
        at most 32768. See docs/internals/rebalance.md."""
        return self._add(comp_id, "bolt", Bolt, impl, (parallelism, max_parallelism), config)

    def persistent_aggregate(self, comp_id: str, source: str, group_by, aggregator, state,
                             *, parallelism: int = 1, value_field: str = "value") -> Declarer:
        """Trident's groupBy + persistentAggregate: keep ``aggregator`` (e.g. ``Count()``)
        of a transactional batch spout's tuples per ``group_by`` key in ``state`` (a map
        with ``multi_get``/``multi_put``, e.g. ``SQLiteMap``), exact under replays. The
        bolt emits ``group_by + [value_field]`` for each key a batch changes. See
        :mod:`runtime.trident`."""
        return hooks.call("persistent_aggregate", self, comp_id, source, group_by, aggregator,
                          state, parallelism=parallelism, value_field=value_field)

    def _add(self, comp_id, kind, base, impl, sizes, config) -> Declarer:
        """``sizes``: the parallelism and the max_parallelism asked (None: the default)."""
        check_user_id("component", comp_id)
        if comp_id in self._components:
            taken = self._components[comp_id].kind
            raise TopologyError(f"component {comp_id!r}: the id is already used by a {taken}")
        _check_impl(comp_id, kind, base, impl)
        parallelism, maximum = sizes
        _check_parallelism(comp_id, parallelism)
        maximum = _max_parallelism(comp_id, parallelism, maximum)
        _check_config(comp_id, config)
        streams = declared_streams(comp_id, impl)
        config = dict(config)
        self._check_windowed(comp_id, kind, impl, streams, config)
        _check_recorded(comp_id, config, streams)
        self._components[comp_id] = ComponentSpec(comp_id, kind, impl, parallelism, streams,
                                                  config=dict(config),
                                                  max_parallelism=maximum)
        return Declarer(self, comp_id)

    def _check_windowed(self, comp_id, kind, impl, streams, config) -> None:
        """A ``window=`` goes with a WindowedBolt and the other way round (it adds the
        late stream and the ticks: runtime/model/windowing.py)."""
        window = config.get(WINDOW)
        if window is None:
            if callable(getattr(impl, "process_window", None)):
                raise TopologyError(f"component {comp_id!r}: a WindowedBolt needs window=, "
                                    "e.g. window=Window.tumbling(Count(10))")
            return
        if kind != "bolt":
            raise TopologyError(f"component {comp_id!r}: only bolts take a window")
        declare_window(comp_id, impl, window, streams, config)
        if self.config.get(CHECKPOINT_INTERVAL):  # acking off: its windows are checkpointed
            return
        timeout = self.config.get(MESSAGE_TIMEOUT, DEFAULTS[MESSAGE_TIMEOUT])
        message = timeout_warning(comp_id, window, float(timeout))
        if message:
            warnings.warn(message, stacklevel=4)

    def _subscribe(self, comp_id: str, source: str, stream: str, grouping: g.Grouping) -> None:
        spec = self._components[comp_id]
        self._components[comp_id] = replace(spec, inputs=spec.inputs + (
            Subscription(source, stream, grouping),))

    def source_fields(self, comp_id: str, source: str, stream: str) -> tuple[str, ...]:
        """The fields of ``source``'s ``stream``, or a TopologyError naming what is wrong."""
        if source not in self._components:
            hint = did_you_mean(source, self._components)
            raise TopologyError(f"component {comp_id!r}: unknown source component "
                                f"{source!r}{hint}")
        streams = self._components[source].streams
        if stream not in streams:
            hint = did_you_mean(stream, streams)
            raise TopologyError(f"component {comp_id!r}: source {source!r} declares no stream "
                                f"{stream!r}{hint} (it declares {sorted(streams)})")
        return streams[stream]

    # -- reading ----------------------------------------------------------------------------
    @property
    def components(self) -> Mapping[str, ComponentSpec]:
        """The components in declaration order (read-only view)."""
        return dict(self._components)

    @property
    def graph(self):
        """The logical plan as a ``networkx.DiGraph``: nodes are components (attributes
        ``kind``, ``parallelism``, ``max_parallelism``, ``cls``), edges carry ``stream``
        and ``grouping``."""
        from .graph import logical_graph

        return logical_graph(self)

    def validate(self) -> None:
        """Checks that need the whole topology: at least one spout, every bolt fed."""
        if not any(c.kind == "spout" for c in self._components.values()):
            raise TopologyError(f"topology {self.name!r}: no spout; add one with topo.spout()")
        for c in self._components.values():
            if c.kind == "bolt" and not c.inputs and not c.config.get(TICK_FREQ_SECS):
                raise TopologyError(f"component {c.id!r}: bolt has no inputs; subscribe it "
                                    "with a grouping, e.g. .shuffle_grouping('source')")

    def physical_plan(self, containers: int = 1, **config: Any):
        """The packing of tasks into containers (printable)."""
        from .plan import PhysicalPlan

        self.validate()
        return PhysicalPlan.pack(self, containers, {**self.config, **config})

    def submit(self, scheduler: str = "local", containers: int = 1,
               config: Mapping[str, Any] | None = None, **options: Any):
        """Launch the topology and return a :class:`RunningTopology` handle.

        Use it as a context manager: leaving the ``with`` block kills the topology. The
        handle's ``topology`` is this object (what ``workbench.reconcile`` reads a
        persistent aggregation's definition from). ``options`` are engine options and the
        scheduler's (``detached``, ``master``, ...); keys of one's own go in ``config``.
        """
        where = f"topology {self.name!r}: submit"
        check_options(where, options, CHECKS.keys() | SCHEDULER_KEYS)
        return hooks.call("submit", self, scheduler=scheduler, containers=containers,
                          config={**_user_config(where, config), **options})

    def _repr_svg_(self) -> str | None:
        """The logical graph as a picture in a notebook, the one ``%%topology`` draws (when
        the workbench is imported: see ``hooks.picture``); None shows the repr."""
        return hooks.picture(self)

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, components={list(self._components)})"


class Declarer:
    """Returned by ``Topology.bolt``/``spout``: subscribes a bolt to its inputs."""

    def __init__(self, topology: Topology, comp_id: str) -> None:
        self._topology = topology
        self.id = comp_id

    def _group(self, source: str, stream: str, grouping: g.Grouping) -> Declarer:
        topo = self._topology
        if topo._components[self.id].kind != "bolt":
            raise TopologyError(f"component {self.id!r}: only bolts take inputs")
        topo.source_fields(self.id, source, stream)
        if any(s.source == source and s.stream == stream
               for s in topo._components[self.id].inputs):
            raise TopologyError(f"component {self.id!r}: already subscribed to {source!r} "
                                f"stream {stream!r}; a bolt takes each stream once, with one "
                                "grouping")
        topo._subscribe(self.id, source, stream, grouping)
        return self

    def shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> Declarer:
        """Spread tuples evenly over the bolt's tasks."""
        return self._group(source, stream, g.ShuffleGrouping())

    def fields_grouping(self, source: str, fields: Sequence[str],
                        stream: str = DEFAULT_STREAM) -> Declarer:
        """Tuples with equal values in ``fields`` go to the same task."""
        fields, declared = self._key_fields("fields", source, fields, stream)
        return self._group(source, stream, g.FieldsGrouping(fields, declared))

    def partial_key_grouping(self, source: str, fields: Sequence[str],
                             stream: str = DEFAULT_STREAM) -> Declarer:
        """Each key goes to the less loaded of two tasks (Storm's partial key grouping):
        a hot key is shared by two tasks, whose partial results a later bolt merges."""
        fields, declared = self._key_fields("partial key", source, fields, stream)
        return self._group(source, stream, g.PartialKeyGrouping(fields, declared))

    def _key_fields(self, what: str, source: str, fields, stream: str) -> tuple[list, tuple]:
        """The key fields of a grouping, checked against what the source declares."""
        declared = self._topology.source_fields(self.id, source, stream)
        fields = [fields] if isinstance(fields, str) else list(fields)
        missing = [f for f in fields if f not in declared]
        if missing or not fields:
            raise TopologyError(
                f"component {self.id!r}: {what} grouping on {missing or fields} but "
                f"{source!r} stream {stream!r} declares fields {list(declared)}")
        return fields, declared

    def all_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> Declarer:
        """Every task of the bolt gets every tuple."""
        return self._group(source, stream, g.AllGrouping())

    def global_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> Declarer:
        """Every tuple goes to the bolt's task with the lowest id."""
        return self._group(source, stream, g.GlobalGrouping())

    def local_or_shuffle_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> Declarer:
        """Shuffle among the bolt's tasks in the sender's container, if any."""
        return self._group(source, stream, g.LocalOrShuffleGrouping())

    def direct_grouping(self, source: str, stream: str = DEFAULT_STREAM) -> Declarer:
        """The sender picks the task, with ``emit_direct(task, values)``."""
        return self._group(source, stream, g.DirectGrouping())

    def custom_grouping(self, source: str, grouping: Any,
                        stream: str = DEFAULT_STREAM) -> Declarer:
        """Your own grouping: an object with ``choose_tasks(values) -> list[int]``."""
        if not callable(getattr(grouping, "choose_tasks", None)):
            raise TopologyError(f"component {self.id!r}: custom grouping {grouping!r} has no "
                                "choose_tasks(values) method")
        return self._group(source, stream, grouping)

    def record(self, stream: str = DEFAULT_STREAM) -> Declarer:
        """Record this component's ``stream`` to Parquet in the run directory from the
        start (the same as the ``record=[stream, ...]`` option); read it back with
        ``running.to_spark(component, stream)`` or ``runtime.recording.read_table``."""
        topo = self._topology
        spec = topo._components[self.id]
        recorded = list(spec.config.get(RECORD) or ())
        if stream not in recorded:
            recorded.append(stream)
        _check_recorded(self.id, {RECORD: recorded}, spec.streams)
        topo._components[self.id] = replace(spec, config={**spec.config, RECORD: recorded})
        return self

    def __repr__(self) -> str:
        return f"Declarer({self.id!r})"


def _check_impl(comp_id: str, kind: str, base: type, impl: Any) -> None:
    cls = impl if isinstance(impl, type) else type(impl)
    if not issubclass(cls, base):
        raise TopologyError(f"component {comp_id!r}: {cls.__name__} is not a "
                            f"{base.__name__} subclass (a {kind} must be one)")


def _check_parallelism(comp_id: str, parallelism: Any) -> None:
    if type(parallelism) is not int or parallelism < 1:
        raise TopologyError(f"component {comp_id!r}: parallelism must be an integer >= 1, "
                            f"not {parallelism!r}")


def _max_parallelism(comp_id: str, parallelism: int, maximum: Any) -> int:
    """The component's maximum parallelism: the one asked, checked, or the default
    (:data:`~runtime.groupings.KEY_GROUPS`, or the parallelism if higher)."""
    if maximum is None:
        return max(g.KEY_GROUPS, parallelism)
    if problem := max_parallelism_problem(maximum):
        raise TopologyError(f"component {comp_id!r}: max_parallelism must be {problem}, "
                            f"not {maximum!r}")
    if maximum < parallelism:
        raise TopologyError(f"component {comp_id!r}: max_parallelism {maximum} is below its "
                            f"parallelism {parallelism} (it is the most tasks the component "
                            "may ever have)")
    return maximum


def _check_config(comp_id: str, config: Mapping[str, Any]) -> None:
    unknown = sorted(set(config) - COMPONENT_KEYS)
    if unknown:
        hint = did_you_mean(unknown[0], COMPONENT_KEYS | {MAX_PARALLELISM})
        raise TopologyError(f"component {comp_id!r}: unknown option(s) {unknown}{hint}; "
                            f"per-component options are {sorted(COMPONENT_KEYS)}")
    check_config(f"component {comp_id!r}", config)


def check_options(where: str, options: Mapping[str, Any], known) -> None:
    """Keyword options are the engine's (or the scheduler's, at submit): an unknown key is a
    typo until shown otherwise, so it is refused with the closest known one; a known key's
    value is checked now, not when the topology starts."""
    for key in options:
        if key not in known:
            raise TopologyError(unknown_option(where, key, known, user_keys=True))
    check_config(where, options)


def _user_config(where: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """``config=``: any keys (user keys pass through), engine keys' values checked."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise TopologyError(f"{where}: config must be a dict of options, not {config!r}")
    check_config(where, config)
    return dict(config)


def _check_recorded(comp_id: str, config: Mapping[str, Any], streams: Mapping) -> None:
    """Every stream named by the ``record`` option is one the component declares."""
    recorded = config.get(RECORD)
    if recorded is None:
        return
    if isinstance(recorded, str) or not all(isinstance(s, str) for s in recorded):
        raise TopologyError(f"component {comp_id!r}: record must be a list of stream ids, "
                            f"not {recorded!r}")
    for stream in recorded:
        if stream not in streams:
            raise TopologyError(f"component {comp_id!r}: cannot record stream {stream!r}"
                                f"{did_you_mean(stream, streams)}; it declares "
                                f"{sorted(streams)}")
