"""The package's layering, read from the source (docs/ARCHITECTURE.md).

Every import counts, including imports inside functions (a lazy import hides a cycle, it
does not remove it); only `if TYPE_CHECKING:` blocks are left out, since they never run.
Folders map to packages through pyproject.toml's `package-dir`, read here, so the check
follows the real mapping.

A package `__init__` that imports its modules found on disk (`pkgutil.iter_modules`, as
engine/tasks does) counts as importing every one of them.

Rules:
- engine/, store/, data/ and analysis/ (the core) never import tui/ or the CLI; the
  application modules of llmscope/ (report, export, live, ...) never import tui/ or the CLI;
- no cycle between the parts engine, store, data, analysis, app, tui, cli;
- no cycle between modules inside engine/, store/, data/ and the CLI;
- argparse is used by the CLI only;
- no module imports the CLI's private (`_name`) helpers.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

CORE = ("engine", "store", "data", "analysis")
CLI_PACKAGE = "llmscope.cli"  # the package and every module in it, plus llmscope.__main__


def is_cli(module: str) -> bool:
    return module in (CLI_PACKAGE, "llmscope.__main__") or module.startswith(CLI_PACKAGE + ".")


# Module edges that still close a cycle, each with who removes it. An entry that no longer
# exists fails the test, so the list only shrinks.
KNOWN_EDGES: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    where: str  # file:line


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """package name -> folder, from pyproject.toml's [tool.setuptools] package-dir."""
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {pkg: root / folder for pkg, folder in cfg["package-dir"].items()}


def modules(dirs: dict[str, Path]) -> dict[str, Path]:
    """module name -> file for every .py file under the mapped folders (deepest mapping wins)."""
    out: dict[str, Path] = {}
    for pkg, folder in sorted(dirs.items(), key=lambda kv: len(kv[0])):
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder).with_suffix("").parts
            if any(p.startswith(".") or p in ("__pycache__", "builtin") for p in rel):
                continue
            parts = [pkg, *rel]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_edges(mods: dict[str, Path]) -> list[Edge]:
    """Module -> module imports between the given modules (function-level ones included)."""
    edges: list[Edge] = []
    for mod, path in mods.items():
        tree = _parse(path)
        is_pkg = path.name == "__init__.py"
        if is_pkg and "pkgutil.iter_modules" in ast.unparse(tree):
            # a package that imports its modules found on disk (engine/tasks) imports them all
            edges += [
                Edge(mod, m, f"{path}:discovery") for m in mods if m.rpartition(".")[0] == mod
            ]
        for node in _runtime_nodes(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                # `from pkg import mod` imports the module pkg.mod
                targets = [target] + [f"{target}.{a.name}" for a in node.names]
            for t in targets:
                # the longest known module the name refers to
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and t != "llmscope":
                    edges.append(Edge(mod, t, f"{path}:{node.lineno}"))
    return edges


def part(module: str) -> str:
    """The layer a module belongs to: a core subpackage, tui, cli, or app (other llmscope.*)."""
    if is_cli(module):
        return "cli"
    bits = module.split(".")
    if len(bits) > 1 and bits[1] in (*CORE, "tui"):
        return bits[1]
    return "app"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Edge]]:
    mods = modules(package_dirs())
    return mods, import_edges(mods)


def _live(edges: list[Edge]) -> list[Edge]:
    return [e for e in edges if (e.src, e.dst) not in KNOWN_EDGES]


@pytest.mark.slow
def test_the_mapping_covers_every_folder(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    mods, _ = graph
    for name in (
        "llmscope.cli",
        "llmscope.engine.runner",
        "llmscope.engine.tasks.base",
        "llmscope.store.db",
        "llmscope.data.suites",
        "llmscope.analysis.metrics",
        "llmscope.tui.app",
    ):
        assert name in mods, f"{name} not found through pyproject's package-dir"


def test_core_and_app_never_import_tui_or_cli(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    _, edges = graph
    bad = [
        f"{e.where}: {e.src} imports {e.dst}"
        for e in _live(edges)
        if part(e.src) in (*CORE, "app") and part(e.dst) in ("tui", "cli")
    ]
    assert not bad, "\n".join(bad)


def test_no_cycles_between_parts(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    _, edges = graph
    g: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for e in _live(edges):
        a, b = part(e.src), part(e.dst)
        if a != b:
            g[a].add(b)
            why.setdefault((a, b), f"{e.where}: {e.src} -> {e.dst}")
    found = cycles(g)
    detail = [
        f"{comp}: " + "; ".join(v for (a, b), v in why.items() if a in comp and b in comp)
        for comp in found
    ]
    assert not found, "\n".join(detail)


@pytest.mark.parametrize("where", ["engine", "store", "data", "cli"])
def test_no_module_cycles_inside(graph: tuple[dict[str, Path], list[Edge]], where: str) -> None:
    _, edges = graph
    g: dict[str, set[str]] = defaultdict(set)
    for e in _live(edges):
        if part(e.src) == where and part(e.dst) == where:
            g[e.src].add(e.dst)
    assert not cycles(g)


def test_argparse_only_in_the_cli(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    mods, _ = graph
    bad = []
    for mod, path in mods.items():
        if part(mod) == "cli":
            continue
        for node in _runtime_nodes(_parse(path)):
            if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
                bad.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "argparse":
                bad.append(f"{path}:{node.lineno}")
    assert not bad, "argparse outside the CLI: " + ", ".join(bad)


def test_no_private_names_from_the_cli(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    """The CLI's private helpers (e.g. `_parse_opts`) stay inside the CLI modules."""
    mods, _ = graph
    bad = []
    for mod, path in mods.items():
        for node in _runtime_nodes(_parse(path)):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if not is_cli(node.module) or mod == node.module:
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    bad.append(f"{path.name}:{node.lineno} imports {node.module}.{a.name}")
    assert not bad, "\n".join(bad)


def test_known_edges_still_exist(graph: tuple[dict[str, Path], list[Edge]]) -> None:
    _, edges = graph
    present = {(e.src, e.dst) for e in edges}
    stale = [f"{a} -> {b} ({who})" for (a, b), who in KNOWN_EDGES.items() if (a, b) not in present]
    assert not stale, "fixed: remove from KNOWN_EDGES: " + "; ".join(stale)


def test_the_check_finds_a_lazy_import_cycle(tmp_path: Path) -> None:
    """The checker itself: a cycle closed by an import inside a function is found;
    one closed only under TYPE_CHECKING is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import x\n"
    )
    (pkg / "d.py").write_text("from . import c\n")
    mods = modules({"pkg": pkg})
    g: dict[str, set[str]] = defaultdict(set)
    for e in import_edges(mods):
        g[e.src].add(e.dst)
    assert cycles(g) == [["pkg.a", "pkg.b"]]
    assert g["pkg.c"] == set() and "pkg.c" in g["pkg.d"]


def test_discovery_counts_as_importing_every_module(
    graph: tuple[dict[str, Path], list[Edge]],
) -> None:
    _, edges = graph
    found = {
        e.dst for e in edges if e.src == "llmscope.engine.tasks" and e.where.endswith(":discovery")
    }
    assert {
        "llmscope.engine.tasks.choice",
        "llmscope.engine.tasks.yesno",
        "llmscope.engine.tasks.base",
    } <= found


# -- the module map (docs/ARCHITECTURE.md) ---------------------------------------------------


def _module_map():  # scripts/ is not a package: load the generator by path
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_module_names_its_one_concept_and_stays_small() -> None:
    """A module opens with a docstring naming what it holds, and holds one concept: past the
    size limit it holds several (split it along them, docs/ARCHITECTURE.md)."""
    mm = _module_map()
    files = mm.source_files(ROOT)
    assert len(files) > 100  # the walk found the package
    undocumented = [p.relative_to(ROOT).as_posix() for p in files if not mm.concept(p)]
    assert not undocumented, f"modules without a docstring naming their concept: {undocumented}"
    big = {
        p.relative_to(ROOT).as_posix(): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > mm.MAX_LINES
    }
    assert not big, f"modules over {mm.MAX_LINES} lines: {big}"


def test_the_module_map_in_the_architecture_doc_is_current() -> None:
    """docs/ARCHITECTURE.md lists every module with its concept, as the modules say it."""
    mm = _module_map()
    assert mm.doc_map() == mm.module_map(), (
        "docs/ARCHITECTURE.md's module map is out of date: run `python scripts/module_map.py --write`"
    )
