"""From a parsed ``%%topology`` cell to a :class:`runtime.Topology`.

Names are looked up in the namespace given (the notebook's), option values are read with
``ast.literal_eval``, every component is declared before any grouping (so lines may come in
any order and cycles are allowed), and any error, the runtime's included, is reported at the
line and word that caused it.

>>> from runtime.testing import ListSpout, Doubler, ListSink
>>> ns = {"numbers": ListSpout([[1], [2]], fields=["n"]), "Doubler": Doubler,
...       "ListSink": ListSink}
>>> parsed = parse_topology("demo ackers=1 containers=2", '''
... sink:   ListSink         <- double global
... double: Doubler * 2      <- nums fields(n)
... nums:   numbers
... ''', ns)
>>> sorted(parsed.topology.graph.edges(data="grouping"))
[('double', 'sink', 'global'), ('nums', 'double', 'fields(n)')]
>>> parsed.topology.config, parsed.containers
({'ackers': 1}, 2)
>>> parse_topology("demo", "sink: ListSnk <- nums", ns)
Traceback (most recent call last):
...
workbench._dsl.TopologySyntaxError: line 2: unknown name `ListSnk` (did you mean `ListSink`?)
    sink: ListSnk <- nums
          ^^^^^^^
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime import Bolt, Declarer, Spout, Topology, TopologyError
from runtime import options as c

from . import _dsl_window
from ._dsl import ComponentLine, Input, Line, Option, Token, did_you_mean, parse_cell

CONTAINERS = "containers"  # a submit setting, not a topology option
ALIASES = {"tick": c.TICK_FREQ_SECS, "timeout": c.MESSAGE_TIMEOUT}  # short option names
# what a component's line takes: its options, a window's, and max_parallelism (a keyword of
# topo.bolt/topo.spout: the most tasks a rebalance may give it)
PER_COMPONENT = c.COMPONENT_KEYS | _dsl_window.KEYS | {c.MAX_PARALLELISM}


@dataclass(frozen=True)
class ParsedTopology:
    """A built topology, the submit settings of its cell, and where each component was."""

    topology: Topology
    containers: int = 1
    lines: Mapping[str, int] = field(default_factory=dict)  # component id -> cell line

    @property
    def name(self) -> str:
        return self.topology.name

    def submit(self, **options: Any):
        """``topology.submit`` with the cell's ``containers`` (overridable)."""
        return self.topology.submit(**{CONTAINERS: self.containers, **options})


def parse_topology(header: str, body: str, namespace: Mapping[str, Any]) -> ParsedTopology:
    """Build the topology a ``%%topology`` cell describes (see docs/topology-magic.md).

    ``header`` is the magic's line (``NAME key=value ...``, with or without the leading
    ``%%topology``), ``body`` the cell, ``namespace`` where class names are looked up.
    Raises :class:`TopologySyntaxError` (a :class:`runtime.TopologyError`).
    """
    cell = parse_cell(header, body)
    options = {_option_key(cell.line, o, topology=True): _option_value(cell.line, o)
               for o in cell.options}
    containers = options.pop(CONTAINERS, 1)
    topo = _guarded(cell.line, cell.name, Topology, cell.name.text, **options)
    declarers = {comp.id.text: _declare(topo, comp, namespace) for comp in cell.components}
    for comp in cell.components:
        for inp in comp.inputs:
            _subscribe(topo, declarers[comp.id.text], comp, inp, namespace)
    if not any(spec.kind == "spout" for spec in topo.components.values()):
        raise cell.line.error(f"topology `{cell.name.text}` has no spout: give one line a Spout "
                              "class and no `<-`", cell.name)
    _guarded(cell.line, cell.name, topo.validate)
    return ParsedTopology(topo, containers, {comp.id.text: comp.line.number
                                             for comp in cell.components})


def _guarded(line: Line, token: Token, call: Callable, *args: Any, **kwargs: Any) -> Any:
    """``call(...)``, with a runtime TopologyError reported at ``token``."""
    try:
        return call(*args, **kwargs)
    except TopologyError as err:
        raise line.error(str(err), token) from err


# -- components --------------------------------------------------------------------------------
def _declare(topo: Topology, comp: ComponentLine, namespace: Mapping[str, Any]) -> Declarer:
    impl = _component_impl(comp, namespace)
    config = {_option_key(comp.line, o, topology=False): _option_value(comp.line, o)
              for o in comp.options}
    _dsl_window.gather_window(comp.line, comp.options, config)  # window=20s slide=10s ...
    if _is(impl, Spout):
        if comp.arrow:
            raise comp.line.error(f"`{comp.id.text}` is a spout ({_name(impl)}); only bolts "
                                  "take inputs", comp.arrow)
        return _guarded(comp.line, comp.id, topo.spout, comp.id.text, impl, comp.parallelism,
                        **config)
    if not comp.inputs and not config.get(c.TICK_FREQ_SECS):
        raise comp.line.error(f"bolt `{comp.id.text}` ({_name(impl)}) has no inputs; subscribe "
                              "it with `<- source grouping`", comp.id)
    return _guarded(comp.line, comp.id, topo.bolt, comp.id.text, impl, comp.parallelism,
                    **config)


def _component_impl(comp: ComponentLine, namespace: Mapping[str, Any]) -> Any:
    """A Spout/Bolt class or instance; a plain function is a factory, called once."""
    impl = lookup(comp.line, comp.impl, namespace)
    if callable(impl) and not isinstance(impl, type) and not _is(impl, (Spout, Bolt)):
        impl = _guarded_call(comp.line, comp.impl, impl)
    if not _is(impl, (Spout, Bolt)):
        raise comp.line.error(f"`{comp.impl.text}` is {_name(impl)}, not a Spout or Bolt "
                              "subclass (or an instance of one)", comp.impl)
    return impl


def _is(impl: Any, base: type | tuple[type, ...]) -> bool:
    return issubclass(impl if isinstance(impl, type) else type(impl), base)


def _name(impl: Any) -> str:
    return impl.__name__ if isinstance(impl, type) else f"an instance of {type(impl).__name__}"


def lookup(line: Line, token: Token, namespace: Mapping[str, Any]) -> Any:
    """The object a (possibly dotted) name refers to, with a suggestion when there is none."""
    head, *rest = token.text.split(".")
    if head not in namespace:
        choices = [k for k in namespace if not k.startswith("_")]
        raise line.error(f"unknown name `{head}`{_suggest(head, choices, namespace)}", token)
    obj = namespace[head]
    for attr in rest:
        if not hasattr(obj, attr):
            hint = did_you_mean(attr, [a for a in dir(obj) if not a.startswith("_")])
            raise line.error(f"`{head}` has no attribute `{attr}`{hint}", token)
        obj = getattr(obj, attr)
    return obj


def _suggest(word: str, choices: list[str], namespace: Mapping[str, Any]) -> str:
    """A close match, preferring names of spouts, bolts and groupings."""
    likely = [k for k in choices if _is(namespace[k], (Spout, Bolt))
              or callable(getattr(namespace[k], "choose_tasks", None))]
    return did_you_mean(word, likely) or did_you_mean(word, choices)


def _guarded_call(line: Line, token: Token, factory: Callable) -> Any:
    try:
        return factory()
    except Exception as err:
        raise line.error(f"calling `{token.text}()` raised {type(err).__name__}: {err}",
                         token) from err


# -- inputs ------------------------------------------------------------------------------------
def _subscribe(topo: Topology, declarer: Declarer, comp: ComponentLine, inp: Input,
               namespace: Mapping[str, Any]) -> None:
    line, source = comp.line, inp.source.text
    if source not in topo.components:
        raise line.error(f"unknown source component `{source}`"
                         f"{did_you_mean(source, topo.components)}", inp.source)
    stream = inp.stream.text if inp.stream else c.DEFAULT_STREAM
    declared = _guarded(line, inp.stream or inp.source, topo.source_fields, comp.id.text,
                        source, stream)
    name = inp.grouping_name
    if name in ("fields", "partial_key"):
        _check_fields(line, inp, declared)
        args: tuple = ([a.text for a in inp.args],)
    elif name == "custom":
        args = (_custom_grouping(line, inp.args[0], namespace),)
    else:
        args = ()
    method = getattr(declarer, f"{name}_grouping")
    where = inp.args[0] if name == "custom" else inp.grouping or inp.source
    _guarded(line, where, method, source, *args, stream=stream)


def _check_fields(line: Line, inp: Input, declared: tuple[str, ...]) -> None:
    for arg in inp.args:
        if arg.text not in declared:
            stream = inp.stream.text if inp.stream else c.DEFAULT_STREAM
            raise line.error(f"`{inp.source.text}` stream `{stream}` has no field `{arg.text}`"
                             f"{did_you_mean(arg.text, declared)}; it declares "
                             f"{', '.join(declared) or 'no fields'}", arg)


def _custom_grouping(line: Line, token: Token, namespace: Mapping[str, Any]) -> Any:
    """The grouping object a name refers to; a class is instantiated with no arguments."""
    grouping = lookup(line, token, namespace)
    return _guarded_call(line, token, grouping) if isinstance(grouping, type) else grouping


# -- options -----------------------------------------------------------------------------------
def _option_key(line: Line, opt: Option, *, topology: bool) -> str:
    key = ALIASES.get(opt.key.text, opt.key.text)
    known = set(c.DEFAULTS) | {CONTAINERS} if topology else PER_COMPONENT
    if key in known:
        return key
    if not topology and (key in c.DEFAULTS or key == CONTAINERS):
        raise line.error(f"`{key}` is a topology option: set it on the %%topology line",
                         opt.key)
    if topology and key in PER_COMPONENT:
        raise line.error(f"`{key}` is a per-component option: set it on a component's line",
                         opt.key)
    where = "topology" if topology else "per-component"
    hint = did_you_mean(opt.key.text, known | {a for a, k in ALIASES.items() if k in known})
    raise line.error(f"unknown {where} option `{opt.key.text}`{hint}; the {where} options "
                     f"are {', '.join(sorted(known))}", opt.key)


def _option_value(line: Line, opt: Option) -> Any:
    key = ALIASES.get(opt.key.text, opt.key.text)
    text = opt.value.text
    if key in _dsl_window.LENGTHS:
        return _dsl_window.length_value(line, opt)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if not text.isidentifier():
            raise line.error(f"`{text}` is not a Python literal (a number, a quoted string, "
                             "True, False or None)", opt.value) from None
        value = text  # a bare word is a string: max_spout_pending=auto
    if key == c.RECORD and isinstance(value, str):  # record=default or record="default,errors"
        value = [stream.strip() for stream in value.split(",") if stream.strip()]
    problem = _value_problem(key, value)
    if problem:
        raise line.error(f"`{opt.key.text}` must be {problem}, not {value!r}", opt.value)
    return value


def _value_problem(key: str, value: Any) -> str | None:
    if key == c.MAX_PARALLELISM:
        return c.max_parallelism_problem(value)
    return _containers_problem(value) if key == CONTAINERS else c.option_problem(key, value)


def _containers_problem(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return None if ok else "an integer >= 1"
