"""The house's boundaries, read from the source: the engine, round and
generation know nothing of ranks, servers, benches, training or the app, and
each of their functions reads on one screen."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .test_imports import graph

ROOT = Path(__file__).resolve().parent.parent
CORE = ("specmlx.engine", "specmlx.round", "specmlx.generation", "specmlx.decoding", "specmlx.parts",
        "specmlx.config")
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


def test_a_generation_reads_the_engine_through_its_parts_and_its_config_is_a_leaf():
    """The engine starts generations; they name only the protocols it meets (`parts.py`), for
    their types too, and a request's settings (`config.py`) depend on none of them."""
    edges = graph()
    for module in ("specmlx.round", "specmlx.generation", "specmlx.decoding", "specmlx.parts"):
        assert "specmlx.engine" not in reach(edges, module), module
    assert not reach(edges, "specmlx.config") & set(CORE)


@pytest.mark.parametrize("core", CORE)
def test_no_function_of_the_core_is_longer_than_a_screen(core):
    path = ROOT / (core.replace(".", "/") + ".py")
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > LONGEST]
    assert not long, f"{core}: {long}"


def section(text: str, heading: str) -> str:
    """A markdown section: from its `## heading` to the next `## ` (or the end)."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_architecture_layout_names_every_module_and_folder():
    """docs/architecture.md's "Code layout" is the map of the tree: every module of specmlx/ and
    the app, and every folder, is named there (a new file that is not fails here)."""
    layout = section((ROOT / "docs" / "architecture.md").read_text(), "Code layout")
    missing = []
    for top in ("specmlx", "app"):
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or path.name in ("__init__.py", "__main__.py"):
                continue
            if path.suffix == ".py" and path.name not in layout:
                missing.append(str(path.relative_to(ROOT)))
            elif path.is_dir() and path.parent.name != "bundled" and f"{path.name}/" not in layout:
                missing.append(str(path.relative_to(ROOT)) + "/")
    assert not missing, f"docs/architecture.md's code layout does not name {missing}"


README_LINES = 300  # the README is a front door; the reference lives in docs/


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines (at most {README_LINES}): move the rest to docs/"


def test_where_to_change_what_names_files_that_exist():
    """Every path the README's "where to change what" table names (in backticks, with a slash)
    exists: a moved or renamed file fails here until the table follows it."""
    table = section((ROOT / "README.md").read_text(), "Where to change what")
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| task")]
    assert len(rows) >= 6, "the README's where-to-change-what table has lost its rows"
    named = [p for row in rows for p in re.findall(r"`([^`\s]+/[^`\s]*)`", row)]
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, f"README's where-to-change-what table names paths that do not exist: {missing}"


def five_steps(page: str) -> list[str]:
    """A page's numbered steps of the round, links read as the README writes them."""
    return [line.replace("(hybrid.md)", "(docs/hybrid.md)") for line in page.splitlines()
            if re.match(r"\d\. \*\*|   \S", line) and line.strip()]


def test_the_readme_and_the_architecture_describe_one_round():
    readme = section((ROOT / "README.md").read_text(), "The round in five steps")
    architecture = section((ROOT / "docs" / "architecture.md").read_text(), "How a round works")
    assert len(five_steps(readme)) > 10 and five_steps(readme) == five_steps(architecture)[:len(five_steps(readme))]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(page):
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:|#", link)]
    broken = sorted({link for link in local if not (page.parent / link).exists()})
    assert not broken, f"{page.relative_to(ROOT)} links to files that do not exist: {broken}"


# A test of which kind a cache layer is: read in specmlx/caches/ alone, where each kind's verbs live.
KIND_TEST = re.compile(
    r"isinstance\([^)]*\b(KVCache|QuantizedKVCache|RotatingKVCache|ArraysCache|CacheList|BatchKVCache|"
    r"RecurrentCache|BatchRecurrentCache)\b"
    r"|\btype\([^)]*\) is (not )?\w*Cache\b"
    r"|hasattr\([^,]+, \"(reachable|pending|checkpoint|keys|values|state_at|cache)\"\)"
    r"|\bis_recurrent\(")
ROOM = ROOT / "specmlx" / "caches"


def test_every_kind_test_of_a_cache_layer_lives_in_the_caches_room():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in [*(ROOT / "specmlx").rglob("*.py"), *(ROOT / "app").rglob("*.py")] if ROOM not in path.parents
             for n, line in enumerate(path.read_text().splitlines(), 1) if KIND_TEST.search(line)]
    assert not found, "kind tests of cache layers outside specmlx/caches/:\n" + "\n".join(found)


def test_the_engine_and_the_disk_know_nothing_of_each_other():
    """The engine and the drafters import nothing of the prompt cache on disk, and the disk never names
    the engine: what stands above both (`specmlx/keeping.py`: a slot, the app) ties them."""
    edges = graph()
    below = ["specmlx.engine", *(m for m in edges if m.startswith("specmlx.drafters"))]
    reached = sorted({f"{m} -> {d}" for m in below for d in reach(edges, m) if d.startswith("specmlx.diskcache")})
    assert not reached, reached
    disk = [m for m in edges if m.startswith("specmlx.diskcache")]
    assert not [m for m in disk if "specmlx.engine" in reach(edges, m)]
    named = [p.name for p in (ROOT / "specmlx" / "diskcache").glob("*.py") if re.search(r"\bEngine\b", p.read_text())]
    assert not named, f"the disk names the engine: {named}"
