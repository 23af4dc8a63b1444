"""The house's boundaries, read from the source: the engine, round and
generation know nothing of ranks, servers, benches, training or the app, and
each of their functions reads on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .test_imports import graph

ROOT = Path(__file__).resolve().parent.parent
CORE = ("specmlx.engine", "specmlx.round", "specmlx.generation")
ABOVE = ("specmlx.distributed", "specmlx.serve", "specmlx.bench", "specmlx.train", "app")
LONGEST = 40  # lines a function of the core may take


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
