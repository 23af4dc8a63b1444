"""specmlx's modules import each other without a cycle.

A cycle makes import order matter, and hides which module is the leaf that
others may build on (errors.py, paths.py, prompting.py). The graph is read
from the source with `ast`: absolute and relative imports, at any depth
(inside functions too, since they run as soon as the function does), and
those under `if TYPE_CHECKING:` too: they never run, but a module that names
another for its types depends on it as much, and a circle there is a circle
in the design (a protocol, or a leaf module, breaks it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specmlx"


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, for every module and package of `root`."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` names in its imports."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import mod` imports the submodule when there is one
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {m for m in found if m in known}


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules importing it runs first.

    Importing `a.b.c` runs `a.b`'s `__init__` too, so a package counts as
    imported with any of its modules; but not the importer's own packages,
    which are already running when it is imported, nor the top package.
    """
    names = module_names(root)
    known = set(names)
    edges: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        targets = set()
        for module in imported(tree, name, path.name == "__init__.py", known):
            parts = module.split(".")
            targets.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
        edges[name] = {t for t in targets if t != name and t not in own and t in known}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None: a depth-first search for a back edge."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_package_imports_without_a_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_leaves_import_nothing_of_specmlx_but_errors():
    edges = graph()
    assert edges["specmlx.errors"] == set()
    assert edges["specmlx.paths"] == set()
    assert edges["specmlx.prompting"] <= {"specmlx.errors"}


def test_train_imports_nothing_from_the_bench():
    edges = graph()
    assert any(m.startswith("specmlx.train.") for m in edges)
    from_bench = {m: sorted(d for d in deps if d.split(".")[:2] == ["specmlx", "bench"])
                  for m, deps in edges.items() if m.split(".")[:2] == ["specmlx", "train"]}
    assert {m: deps for m, deps in from_bench.items() if deps} == {}


def test_the_server_imports_nothing_from_its_benches():
    edges = graph()
    assert "specmlx.bench.serve.cli" in edges and "specmlx.serve.builder" in edges["specmlx.bench.serve.cli"]
    from_bench = {m: sorted(d for d in deps if d.startswith("specmlx.bench"))
                  for m, deps in edges.items() if m.startswith("specmlx.serve")}
    assert {m: deps for m, deps in from_bench.items() if deps} == {}


def test_a_cycle_is_found_through_relative_imports_and_function_bodies(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "a.py").write_text("from .sub import b\n")
    (root / "sub" / "b.py").write_text("def late():\n    from ..c import thing\n")
    (root / "c.py").write_text("import pkg.a\n")
    assert find_cycle(graph(root)) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (root / "c.py").write_text("from . import a as _a  # noqa\n")
    assert find_cycle(graph(root)) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (root / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    assert find_cycle(graph(root)) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]  # for types alone, still a circle
    (root / "c.py").write_text("thing = 1\n")
    assert find_cycle(graph(root)) is None


def test_a_package_init_counts_with_its_modules(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("from .b import x\n")
    (root / "sub" / "b.py").write_text("x = 1\n")
    (root / "sub" / "other.py").write_text("from ..a import y\n")
    (root / "a.py").write_text("from .sub.b import x\ny = x\n")
    assert find_cycle(graph(root)) is None  # sub's __init__ does not import other.py
    (root / "sub" / "__init__.py").write_text("from .b import x\nfrom . import other\n")
    assert find_cycle(graph(root)) == ["pkg.a", "pkg.sub", "pkg.sub.other", "pkg.a"]
