"""No import cycle in runtime, workbench or kernel_ext, counting the imports inside
functions: a lazy import that closes a circle is still a wrong arrow (the layers
themselves are import-linter's contracts in pyproject.toml, run by ``make lint``)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "workbench", "kernel_ext")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """``{dotted module name: its file}`` for every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules that ``module`` imports anywhere in its file. ``from p import
    x`` counts as importing ``p.x`` when that is a module, else ``p`` (as grimp does)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            names.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                         for a in node.names)
    return {name for name in names if name in modules and name != module}


def _absolute(package: str, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    parts = package.split(".")[:len(package.split(".")) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    modules = module_files(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        graph.add_edges_from((module, target) for target in imported(module, path, modules))
    return graph


def test_the_graph_sees_the_packages_and_imports_inside_functions():
    graph = import_graph()
    assert {"runtime", "runtime.model.topology", "workbench", "kernel_ext"} <= set(graph)
    # runtime/__init__.py imports the scheduler inside a function (the submit hook)
    assert graph.has_edge("runtime", "runtime.processes.scheduler")


def test_a_cycle_made_by_a_function_level_import_is_found(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "runtime" / "low.py").write_text("def f():\n    from runtime import high\n")
    (tmp_path / "runtime" / "high.py").write_text("from . import low\n")
    assert list(nx.simple_cycles(import_graph(tmp_path))) != []


def test_no_import_cycles():
    cycles = sorted(" -> ".join(c + c[:1]) for c in nx.simple_cycles(import_graph()))
    assert cycles == []


def importers_of(top: str, root: Path = ROOT) -> set[str]:
    """The project's modules that import the package ``top`` (or a module of it)."""
    found = set()
    for module, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(name == top or name.startswith(top + ".") for name in names):
                found.add(module)
    return found



def test_only_the_wire_package_speaks_msgpack():
    """Tuples and control records travel as msgpack, encoded and checked in one place
    (runtime/wire): a module packing on its own would bypass the checks of what a peer
    may send."""
    speakers = importers_of("msgpack")
    assert speakers  # the check sees the imports it guards
    assert {m for m in speakers if not m.startswith("runtime.wire.")} == set()


def test_a_module_importing_msgpack_outside_the_wire_package_is_found(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "workbench" / "rogue.py").write_text("def f():\n    import msgpack.ext\n")
    assert importers_of("msgpack", tmp_path) == {"workbench.rogue"}
