"""The import graph of src/headtrace is acyclic (docs/architecture.md).

Every import statement counts, wherever it is written: at the top of a module, inside a function,
under `if TYPE_CHECKING:`. Importing `a.b.c` also runs the packages above it (`a/__init__.py`,
`a/b/__init__.py`) unless the importing module sits inside them already (then they are running).
Lazy attributes reached through `importlib.import_module` (the packages' `__getattr__`) are not
imports a module makes when it loads, and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "headtrace"


def modules(root: Path = SRC / PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package by its __init__.py)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, known: set[str]) -> list[str]:
    """The package's modules an import statement loads (its own target and any submodules it names)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = importer.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
    loaded = []
    for name in names:
        while name and name not in known:  # `import a.b.func`-like spellings: the module that exists
            name = name.rpartition(".")[0]
        if name:
            loaded.append(name)
    return loaded


def import_graph(root: Path = SRC / PACKAGE) -> dict[str, dict[str, str]]:
    """importer -> {imported module: 'file:line' of the first statement that loads it}."""
    files = modules(root)
    known = set(files)
    graph: dict[str, dict[str, str]] = {name: {} for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        running = set(_ancestors(name)) | {name}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(node, name, path.name == "__init__.py", known):
                for loaded in [*_ancestors(target), target]:
                    if loaded in known and loaded not in running:
                        where = f"{path.relative_to(root.parent)}:{node.lineno}"
                        graph[name].setdefault(loaded, where)
    return graph


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None (depth-first search, colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def circles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The modules that import each other, circle by circle (strongly connected components of more
    than one module, or one that imports itself), each sorted."""
    reach = {node: _reachable(graph, node) for node in graph}
    found = {tuple(sorted(n for n in reach[node] if node in reach[n])) for node in graph if node in reach[node]}
    return sorted(list(circle) for circle in found)


def _reachable(graph: dict[str, dict[str, str]], start: str) -> set[str]:
    seen, todo = set(), list(graph[start])
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph[node]
    return seen


def describe(graph: dict[str, dict[str, str]]) -> str:
    """Each circle's modules, and one cycle through it with the statement behind each arrow."""
    lines = []
    for circle in circles(graph):
        inside = {a: {b: w for b, w in graph[a].items() if b in circle} for a in circle}
        cycle = find_cycle(inside)
        lines.append(f"{len(circle)} modules import each other: {', '.join(circle)}; e.g. " + " -> ".join(cycle))
        lines += [f"  {a} -> {b} at {graph[a][b]}" for a, b in zip(cycle, cycle[1:])]
    return "\n".join(lines)


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    if find_cycle(graph):
        pytest.fail("import cycles:\n" + describe(graph), pytrace=False)


def test_the_graph_sees_function_level_type_checking_and_parent_package_imports(tmp_path):
    """The checker itself, on a package written for it: each kind of import closes a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("from . import sibling\n")  # inside pkg.sub: no edge to it
    (pkg / "sub" / "sibling.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\n")
    (pkg / "c.py").write_text("import pkg.sub.sibling\n")
    graph = import_graph(pkg)
    assert set(graph["pkg.c"]) == {"pkg.sub", "pkg.sub.sibling"}  # the parent package runs too
    assert find_cycle(graph) is None
    (pkg / "sub" / "sibling.py").write_text("def g():\n    from ..a import f\n")
    graph = import_graph(pkg)
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.leaf", "pkg.sub.sibling", "pkg.a"]
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.leaf", "pkg.sub.sibling"]]
    assert "pkg.sub.sibling -> pkg.a at pkg/sub/sibling.py:2" in describe(graph)


ARCHITECTURE = SRC.parent / "docs" / "architecture.md"


def documented_layers() -> list[str]:
    """The modules of docs/architecture.md's layer table, row by row, left to right."""
    text = ARCHITECTURE.read_text().split("## The import layers", 1)[1].split("```")[1]
    rows = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("layer", "─"))]
    order = []
    for line in rows:
        body = line[21:].strip()  # a row's modules, continued on indented lines, then its torch column
        cells = body.rsplit("  ", 1)[0] if "  " in body else body
        for name in cells.replace("->", " ").replace(",", " ").replace(";", " ").replace("…", "").split():
            order.append(name if name == PACKAGE else f"{PACKAGE}.{name}")
    return order


def test_the_architecture_page_draws_every_module_and_each_import_points_down_its_table():
    graph, order = import_graph(), documented_layers()
    assert sorted(order) == sorted(graph), "docs/architecture.md's layers list each module once"
    position = {name: i for i, name in enumerate(order)}
    upward = [
        f"{a} -> {b} ({where})"
        for a, targets in graph.items()
        for b, where in targets.items()
        if position[b] < position[a]
    ]
    assert not upward, "imports against docs/architecture.md's layers: " + "; ".join(upward)
