"""The curated public API, tuples as bolts see them, and the collector outside a run."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys

import pytest

import runtime
from runtime import BasicBolt, Bolt, Spout, Tuple
from runtime.model.api import TupleSource


def test_all_is_sorted():
    assert runtime.__all__ == sorted(runtime.__all__)


def test_every_name_in_all_exists():
    assert [name for name in runtime.__all__ if not hasattr(runtime, name)] == []


def test_every_public_class_and_function_is_in_all():
    """Guard test (as httpx has): a public name added to ``runtime`` must be exported."""
    public = {name for name, value in vars(runtime).items()
              if not name.startswith("_")
              and (inspect.isclass(value) or inspect.isfunction(value))
              and value.__module__.startswith("runtime")}
    assert public - set(runtime.__all__) == set()
    assert set(runtime._HOMES) - set(runtime.__all__) == set()  # the names imported at first use


def test_import_runtime_imports_the_api_only_when_a_name_is_used():
    """Every process of a topology imports some ``runtime.*`` module and so this package:
    the public API is imported name by name, at first use, not with the package."""
    probe = ("import sys, runtime\n"
             "before = sorted(m for m in sys.modules if m.startswith('runtime'))\n"
             "from runtime import Topology, wire\n"
             "print(before, Topology.__module__, wire.__name__, 'runtime.trident' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["['runtime',", "'runtime.model',", "'runtime.model.hooks']",
                   "runtime.model.topology", "runtime.wire", "False"]
    with pytest.raises(AttributeError, match="no attribute 'Topolgy'"):
        runtime.Topolgy  # noqa: B018 (the attribute access is the test)


# Every public module (docs/architecture.md): its __all__ is the curated list of names.
PUBLIC_MODULES = ["runtime", "runtime.testing", "runtime.tuning", "runtime.options",
                  "runtime.diagnosis",
                  "runtime.acking", "runtime.sources", "runtime.trident", "runtime.recording",
                  "runtime.wire", "runtime.groupings", "runtime.windows", "runtime.state",
                  "workbench",
                  "kernel_ext"]
# Names a public module defines without exporting them, on purpose.
NOT_EXPORTED = {
    "runtime.trident": {"STATS_DIR", "log"},  # where the bolts leave statistics; a logger
}


def defined_names(module) -> set[str]:
    """The names a module's own file binds at top level with def, class or an assignment
    (not the ones it imports), public ones only."""
    tree = ast.parse(inspect.getsource(module))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_has_a_sorted_all_of_names_that_exist(name):
    module = importlib.import_module(name)
    exported = module.__dict__.get("__all__")
    assert isinstance(exported, list) and exported == sorted(exported)
    assert [n for n in exported if not hasattr(module, n)] == []


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_name_a_module_defines_is_exported_or_private_on_purpose(name):
    module = importlib.import_module(name)
    missing = defined_names(module) - set(module.__all__) - NOT_EXPORTED.get(name, set())
    assert missing == set()


def test_the_guard_sees_a_defined_name_left_out():
    module = importlib.import_module("runtime.groupings")
    assert "ShuffleGrouping" in defined_names(module)
    assert "stable_hash" in defined_names(module) and "zlib" not in defined_names(module)


def test_the_issues_names_are_exported():
    assert {"Topology", "Spout", "Bolt", "BasicBolt", "Tuple", "Context"} <= set(runtime.__all__)


def test_issue_21s_window_names_are_exported():
    assert {"WindowedBolt", "Window", "Count", "Duration"} <= set(runtime.__all__)
    # one Count serves Trident (Count()) and windows (Count(n))
    assert runtime.Count().zero() == 0 and runtime.Count(3).n == 3
    assert issubclass(BasicBolt, Bolt)


# -- tuples ---------------------------------------------------------------------------------

def tup(values=("storm", 3)) -> Tuple:
    return Tuple(list(values), TupleSource.of("words", 7, "default", ["word", "n"]))


def test_tuple_fields_by_name_and_index():
    t = tup()
    assert (t["word"], t["n"], t[0], t[-1]) == ("storm", 3, "storm", 3)
    assert (t.component, t.task, t.stream, t.fields) == ("words", 7, "default", ("word", "n"))
    assert list(t) == ["storm", 3] and len(t) == 2 and not t.is_tick


def test_unknown_field_names_the_fields():
    with pytest.raises(KeyError, match=r"tuple from 'words' stream 'default' has no field "
                                       r"'wrd'; its fields are \['word', 'n'\]"):
        tup()["wrd"]


def test_get_with_a_default():
    assert tup().get("n") == 3 and tup().get("missing", "-") == "-"


def test_tuple_repr():
    assert repr(tup()) == "Tuple(['storm', 3], component='words', task=7, stream='default')"


def test_tick_tuples_say_so():
    assert Tuple([5], TupleSource.of("__system", 0, "__tick", ["freq"])).is_tick


# -- the collector outside a run ------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: Spout().emit(["x"]),
    lambda: Spout().emit_direct(3, ["x"]),
    lambda: Bolt().emit(["x"]),
    lambda: Bolt().ack(tup()),
    lambda: Bolt().fail(tup()),
])
def test_collector_calls_outside_a_run_explain_themselves(call):
    with pytest.raises(RuntimeError, match=r"\.(emit|emit_direct|ack|fail)\(\) can only be "
                                           "called while the component runs"):
        call()


def test_the_error_names_the_users_class():
    class Words(Spout):
        pass

    with pytest.raises(RuntimeError, match=r"^Words\.emit\(\)"):
        Words().emit(["x"])


def test_spout_callbacks_are_user_hooks_not_collector_calls():
    spout = Spout()
    assert spout.ack("id") is None and spout.fail("id") is None
