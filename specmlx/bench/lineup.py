"""The target and the drafters it is benchmarked with, loaded once.

Every drafter is a spec string loaded by `specmlx.loading.load_drafter`, so a
new drafter kind needs no change here: it is one more `--drafter` value. A spec
ending in `+adaptive` runs that drafter with the adaptive draft length
(`--num-draft` is then where the length starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import mlx.nn as nn

from ..drafters import Drafter, ModelDrafter, NoDrafter
from ..loading import LoadedModel, check_pair, drafter_source, load, load_drafter, resolve


ADAPTIVE = "+adaptive"


@dataclass(frozen=True)
class Entrant:
    """One drafter under test. `name` labels it in tables; `spec` loaded it."""

    name: str
    spec: str
    drafter: Drafter
    adaptive: bool = False

    @property
    def model(self) -> nn.Module | None:
        """The drafter's language model, which mlx-lm can draft with too; None
        for drafters mlx-lm has no equivalent of (prompt lookup, none)."""
        return self.drafter.model if isinstance(self.drafter, ModelDrafter) else None

    @property
    def drafts(self) -> bool:
        """False for `none`: it runs once per temperature, not once per draft length."""
        return not isinstance(self.drafter, NoDrafter)


@dataclass(frozen=True)
class Lineup:
    target: LoadedModel
    entrants: tuple[Entrant, ...]


def drafter_specs(target: str, requested: Iterable[str]) -> list[str]:
    """Drafter specs to load: each `--drafter` value (comma-separated lists
    allowed, preset names meaning their drafter), else the target's default
    drafter and prompt lookup."""
    specs = [part.strip() for value in requested for part in value.split(",") if part.strip()]
    if not specs:
        specs = [drafter_source(None, target), "ngram"]
    resolved = [drafter_source(base, target) + suffix for base, suffix in map(split_adaptive, specs)]
    return list(dict.fromkeys(resolved))  # dedupe, keep order


def split_adaptive(spec: str) -> tuple[str, str]:
    """("drafter", "+adaptive") or ("drafter", "")."""
    return (spec[: -len(ADAPTIVE)], ADAPTIVE) if spec.endswith(ADAPTIVE) else (spec, "")


def label(spec: str) -> str:
    """A short name: a model directory's own name (a preset keeps its role there)."""
    return Path(spec).name if spec not in ("ngram", "none") else spec


def load_lineup(target: str, specs: list[str]) -> Lineup:
    """Check every pair before any weights load, then load the target once, and
    each drafter once (an adaptive entrant shares its drafter)."""
    bases = [split_adaptive(spec)[0] for spec in specs]
    paths = {base: check_pair(target, base)[1] for base in bases}
    loaded = load(target, resolve(target))
    drafters = {base: load_drafter(base, loaded, path) for base, path in paths.items()}
    names = [label(base) + split_adaptive(spec)[1] for base, spec in zip(bases, specs)]
    names = [n if names.count(n) == 1 else s for n, s in zip(names, specs)]  # keep them apart
    entrants = tuple(
        Entrant(name, spec, drafters[base], adaptive=spec.endswith(ADAPTIVE))
        for name, spec, base in zip(names, specs, bases)
    )
    return Lineup(loaded, entrants)
