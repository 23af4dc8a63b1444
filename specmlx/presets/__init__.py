"""Named target/drafter pairs, read from the packaged presets.toml.

A preset's models live in `paths.models_dir()/NAME/ROLE/` once fetched (`specmlx
models fetch NAME`). Wherever the engine takes a model path, it also takes a
preset name.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..drafters.labels import NGRAM
from ..errors import SpecmlxError
from ..paths import models_dir

# The catalog and the bundled drafters ship inside the package, so a wheel has them too.
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ModelSource:
    """One model of a preset: where to get it and where it goes."""

    role: str  # "target" or the drafter's name
    hub: str | None
    offline: str | None  # a checkpoint key of specmlx.convert.sources
    bundled: str | None = None  # a drafter shipped with the package, relative to PACKAGE_DIR


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    target: ModelSource
    drafters: tuple[ModelSource, ...]
    drafter: str  # the default: a drafter's role, NGRAM or NONE

    @property
    def sources(self) -> tuple[ModelSource, ...]:
        return (self.target, *self.drafters)


def catalog_path() -> Path:
    return PACKAGE_DIR / "presets.toml"


def bundled_path(source: "ModelSource") -> Path:
    """Where a bundled drafter ships (None-safe callers check `source.bundled`)."""
    return PACKAGE_DIR / str(source.bundled)


@lru_cache(maxsize=1)
def _catalog() -> tuple[str, dict[str, Preset]]:
    try:
        data = tomllib.loads(catalog_path().read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SpecmlxError(f"{catalog_path()}: cannot read the preset catalog ({err})") from None
    presets = {}
    for name, entry in data.get("presets", {}).items():
        models = entry.get("models", {})
        sources = [ModelSource(role, m.get("hub"), m.get("offline"), m.get("bundled")) for role, m in models.items()]
        presets[name] = Preset(
            name=name,
            description=entry.get("description", ""),
            target=next(s for s in sources if s.role == "target"),
            drafters=tuple(s for s in sources if s.role != "target"),
            drafter=entry.get("drafter", NGRAM),
        )
    return data.get("default", next(iter(presets))), presets


def presets() -> dict[str, Preset]:
    return dict(_catalog()[1])


def default_preset_name() -> str:
    return _catalog()[0]


def get_preset(name: str) -> Preset:
    known = _catalog()[1]
    if name not in known:
        raise SpecmlxError(f"unknown preset {name!r} (known: {', '.join(known)})")
    return known[name]


def is_preset(name: str) -> bool:
    return name in _catalog()[1]


def model_path(preset: Preset, role: str = "target") -> Path:
    return models_dir() / preset.name / role


def is_fetched(path: Path) -> bool:
    return (path / "config.json").is_file()


def fetched_path(preset: Preset, role: str = "target") -> Path:
    """The local directory of a preset's model; a clear error if not fetched yet."""
    path = model_path(preset, role)
    if not is_fetched(path):
        raise SpecmlxError(
            f"preset {preset.name} is not fetched yet ({path} is missing); "
            f"run: specmlx models fetch {preset.name}"
        )
    return path
