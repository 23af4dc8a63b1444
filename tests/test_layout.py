"""The house's boundaries, read from the source: the engine, round and
generation know nothing of ranks, servers, benches, training or the app, and
each of their functions reads on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specmlx"
CORE = ("specmlx.engine", "specmlx.round", "specmlx.generation")
ABOVE = ("specmlx.distributed", "specmlx.serve", "specmlx.bench", "specmlx.train", "app")
LONGEST = 40  # lines a function of the core may take


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(path: Path) -> set[str]:
    """Modules `path` imports when it runs: every import statement, in functions too,
    but not those under `if TYPE_CHECKING:` (read by type checkers alone)."""
    tree = ast.parse(path.read_text())
    checking = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and ast.unparse(node.test).endswith("TYPE_CHECKING") for n in ast.walk(node)}
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}  # `from . import x` may name a module
    return found


def graph() -> dict[str, set[str]]:
    """specmlx's modules and the specmlx modules each imports at run time."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, path in files.items():
        targets = set()
        for imported in runtime_imports(path):
            while imported and imported not in files:  # `a.b.c` where c is a name in a.b
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = targets
    return edges


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("core", CORE)
def test_the_core_imports_nothing_from_the_layers_above_it(core):
    edges = graph()
    assert core in edges
    above = sorted(m for m in reach(edges, core) if m.startswith(ABOVE))
    assert not above, f"{core} reaches {above}"


@pytest.mark.parametrize("core", CORE)
def test_no_function_of_the_core_is_longer_than_a_screen(core):
    path = ROOT / (core.replace(".", "/") + ".py")
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > LONGEST]
    assert not long, f"{core}: {long}"


def test_the_reader_sees_through_relative_and_deferred_imports(tmp_path):
    """What makes the checks above able to fail: an import inside a function
    and a relative one count; one under TYPE_CHECKING does not."""
    module = PACKAGE / "round.py"
    imports = runtime_imports(module)
    assert "specmlx.verify" in imports and "specmlx.engine" not in imports
    edges = graph()
    assert "specmlx.distributed.lockstep" in reach(edges, "specmlx.distributed.follower")
