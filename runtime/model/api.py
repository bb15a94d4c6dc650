"""The user API: spouts, bolts, tuples and the context an instance is started with.

These classes hold no runtime machinery. When an instance starts, the executor binds
``emit``, ``ack`` and friends on the user's object to its collector, so a call from
``next_tuple`` or ``process`` goes straight to the routing code with no extra layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .constants import DEFAULT_STREAM, TICK


def _not_running(name: str):
    def method(self, *args, **kwargs):
        raise RuntimeError(
            f"{type(self).__name__}.{name}() can only be called while the component runs "
            "(from open/prepare, next_tuple, process or the ack/fail callbacks)"
        )

    method.__name__ = name
    return method


class Component:
    """What spouts and bolts share: the declared output fields.

    ``outputs`` is a list of field names for the default stream, or a mapping from
    stream id to field names.
    """

    outputs: list[str] | Mapping[str, list[str]] = []

    emit = _not_running("emit")
    emit_direct = _not_running("emit_direct")


class Spout(Component):
    """A source of tuples. Override ``next_tuple`` and call ``self.emit(values)`` in it.

    Give ``emit`` a ``msg_id`` to have the tuple tracked: ``ack(msg_id)`` or
    ``fail(msg_id)`` is then called back in this same instance.
    """

    def open(self, config: dict, context: Context) -> None:
        """Called once, in the instance process, before the first ``next_tuple``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples. Emitting nothing tells the runtime to idle briefly."""

    def ack(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` failed or timed out; replay it if you care."""

    def close(self) -> None:
        """Called when the topology is killed, if the instance gets the chance."""

    def activate(self) -> None:
        """Called when this spout is activated: when the topology starts running, and on
        ``running.resume()`` after a pause. ``next_tuple`` is called from then on."""

    def deactivate(self) -> None:
        """Called on ``running.pause()``. No ``next_tuple`` until ``activate``; acks and
        fails of tuples still in flight keep arriving."""

    def progress(self) -> int | None:
        """How far this spout has got, for the max-spout-pending auto-tuner.

        ``None`` (the default) means the number of tuples acked so far; a spout reading
        a log may return its committed offset instead (Storm @Twitter §3.3.3).
        """
        return None

    # -- rebalancing (docs/internals/rebalance.md) ---------------------------------------
    # whether a rebalance may change this spout's parallelism: only a spout that says so,
    # since one that splits its work by task index would read twice or skip silently
    resizable: bool = False

    def rebalanced(self, context: Context | None, fresh: bool) -> None:
        """A rebalance switched the topology to a new plan while this spout was paused:
        ``context`` is the task's context now (``parallelism`` may have changed), or None
        when this task was removed (it stops next: give back what it holds). ``fresh``
        says the instance opened on the new plan already (added by this rebalance, or
        restarted during it), so what it read in ``open`` may be stale. The default does
        nothing: a spout whose tasks all read one shared source needs nothing."""

    # -- rewinding (checkpoints: docs/internals/checkpoints.md) -------------------------
    def checkpoint_position(self) -> Any:
        """Where this spout has read up to (msgpack types), saved with each checkpoint. A
        spout that can go back there overrides this and :meth:`restore_position`; the
        default, None, says it cannot (see :func:`rewindable`)."""
        return None

    def restore_position(self, position: Any) -> None:
        """Go back to ``position`` (one that :meth:`checkpoint_position` returned, or None
        for where this run first opened it): read again from there, nothing in flight."""


def fixed_parallelism(spout: Any) -> str | None:
    """Why a rebalance may not change this spout's parallelism, or None when it may (its
    class sets ``resizable = True``).

    >>> class Shared(Spout):
    ...     resizable = True
    >>> fixed_parallelism(Shared()) is None, fixed_parallelism(Spout())
    (True, 'a Spout cannot change its parallelism (its class does not set resizable = True)')
    """
    if getattr(spout, "resizable", False):
        return None
    return (f"a {type(spout).__name__} cannot change its parallelism (its class does not set "
            "resizable = True)")


def rewindable(spout: Spout) -> bool:
    """Whether ``spout`` can be rewound to a checkpoint: its class overrides both
    ``checkpoint_position`` and ``restore_position`` (asked of the class, so a spout not
    yet opened answers too).

    >>> class Log(Spout):
    ...     def checkpoint_position(self): return {0: 12}
    ...     def restore_position(self, position): pass
    >>> rewindable(Log()), rewindable(Spout())
    (True, False)
    """
    kind = type(spout)
    return (kind.checkpoint_position is not Spout.checkpoint_position
            and kind.restore_position is not Spout.restore_position)


class Bolt(Component):
    """Processes tuples. Override ``process``; emit with ``self.emit(values, anchors=[tup])``
    and acknowledge with ``self.ack(tup)`` (or ``self.fail(tup)``)."""

    ack = _not_running("ack")
    fail = _not_running("fail")
    reset_timeout = _not_running("reset_timeout")

    def prepare(self, config: dict, context: Context) -> None:
        """Called once, in the instance process, before the first tuple."""

    def process(self, tup: Tuple) -> None:
        """Handle one input tuple."""

    def process_tick(self, tup: Tuple) -> None:
        """Handle a tick tuple (sent every ``tick_freq_secs`` when that is set)."""

    def cleanup(self) -> None:
        """Called when the topology is killed, if the instance gets the chance."""

    def window_report(self) -> dict | None:
        """What the task reports of its windows with its statistics
        (``InstanceStats.window``). ``None`` (the default): a bolt without windows;
        ``runtime.windows.WindowedBolt`` overrides it."""
        return None


class BasicBolt(Bolt):
    """A bolt whose emits are anchored to the input being processed, and whose input is
    acked when ``process`` returns (Storm's ``BaseBasicBolt``). Raise
    :class:`FailedException` to fail the input instead."""


class FailedException(Exception):
    """Raised from ``BasicBolt.process`` to fail the current input tuple."""


@dataclass(frozen=True, slots=True)
class TupleSource:
    """Where a tuple came from: shared by every tuple of one (task, stream)."""

    component: str
    task: int
    stream: str
    fields: tuple[str, ...]
    index: Mapping[str, int] = field(repr=False)

    @classmethod
    def of(cls, component: str, task: int, stream: str, fields) -> TupleSource:
        fields = tuple(fields)
        return cls(component, task, stream, fields, {f: i for i, f in enumerate(fields)})


class Tuple:
    """One tuple as a bolt sees it: ``values`` plus where it came from.

    >>> src = TupleSource.of("words", 3, "default", ["word", "n"])
    >>> t = Tuple(["storm", 2], src)
    >>> t["word"], t[1], t.component, t.task, t.stream, t.fields
    ('storm', 2, 'words', 3, 'default', ('word', 'n'))
    """

    __slots__ = ("values", "source", "ids", "ack_val")

    def __init__(self, values: list, source: TupleSource, ids: Any = None) -> None:
        self.values = values
        self.source = source
        self.ids = ids  # {root id: edge id} of a tracked tuple (owned by the runtime)
        # (owned by the runtime) the edge ids of the tuples anchored to this one, XORed;
        # with an int root as ids, also its own edge id: the tuple's whole ack value
        self.ack_val = 0

    @property
    def component(self) -> str:
        return self.source.component

    @property
    def task(self) -> int:
        return self.source.task

    @property
    def stream(self) -> str:
        return self.source.stream

    @property
    def fields(self) -> tuple[str, ...]:
        return self.source.fields

    @property
    def is_tick(self) -> bool:
        return self.source.stream == TICK

    def __getitem__(self, key: str | int) -> Any:
        if type(key) is str:
            try:
                return self.values[self.source.index[key]]
            except KeyError:
                raise KeyError(
                    f"tuple from {self.source.component!r} stream {self.source.stream!r} "
                    f"has no field {key!r}; its fields are {list(self.source.fields)}"
                ) from None
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        i = self.source.index.get(key)
        return default if i is None else self.values[i]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def __repr__(self) -> str:
        s = self.source
        return (f"Tuple({self.values!r}, component={s.component!r}, task={s.task}, "
                f"stream={s.stream!r})")


class OneFieldTuple(Tuple):
    """A :class:`Tuple` of a one-field stream, made from the bare value its frame
    carries (``runtime/wire/__init__.py``, "One-field streams"): the one-element ``values`` list is
    built in the same call that makes the Tuple. It is a Tuple in every other way.

    >>> src = TupleSource.of("words", 3, "default", ["word"])
    >>> t = OneFieldTuple("storm", src)
    >>> t.values, t["word"], isinstance(t, Tuple)
    (['storm'], 'storm', True)
    """

    __slots__ = ()

    def __init__(self, value: Any, source: TupleSource, ids: Any = None) -> None:
        self.values = [value]
        self.source = source
        self.ids = ids
        self.ack_val = 0


@dataclass(frozen=True)
class Context:
    """What an instance knows about itself and the topology, passed to open/prepare."""

    topology_name: str
    component_id: str
    task_id: int
    task_index: int
    parallelism: int
    component_tasks: Mapping[str, tuple[int, ...]]
    container: int
    run_dir: str
    this_outputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task_containers: Mapping[int, int] = field(default_factory=dict)
    # the task's user-metric registry (runtime.observe.user_metrics), given by the engine
    metrics: Any = field(default=None, compare=False, repr=False)
    # the (component, stream) pairs this component subscribes to (a windowed bolt's
    # watermark waits for each of them)
    this_inputs: tuple[tuple[str, str], ...] = ()

    def get_component_tasks(self, component_id: str) -> tuple[int, ...]:
        """The task ids of a component, in task-index order (for ``emit_direct``)."""
        return self.component_tasks[component_id]

    def output_fields(self, stream: str = DEFAULT_STREAM) -> tuple[str, ...]:
        return self.this_outputs[stream]

    def register_metric(self, name: str, kind: str, buckets=None):
        """A metric of this task, reported with its statistics, shown in the dashboard
        and exported (``submit(metrics_port=0)``): ``kind`` is ``"counter"`` (``inc``),
        ``"gauge"`` (``set``, ``inc``, ``dec``) or ``"histogram"`` (``observe``; ``buckets``
        are upper bounds, Prometheus's defaults if None). The same name returns the same
        object; ValueError for a bad name or kind (docs/internals/metrics.md)."""
        if self.metrics is None:
            raise RuntimeError("register_metric: this context belongs to no running task")
        return self.metrics.register(name, kind, buckets)
