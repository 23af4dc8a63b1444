"""Named target/drafter pairs, read from the packaged presets.toml.

A preset's models live in `paths.models_dir()/NAME/ROLE/` once fetched (`specmlx
models fetch NAME`). Wherever the engine takes a model path, it also takes a
preset name. A target that ships its own MTP layers (`native_mtp`) offers them as the
drafter `mtp`, which lives in the target's own directory.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..drafters.labels import BUILTIN, MTP, NGRAM
from ..errors import SpecmlxError
from ..memory import needed_bytes, weights_bytes
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
    size_gb: float | None = None  # the hub repo's published size, decimal GB (presets.toml says where from)
    convert: bool = False  # a Hugging Face checkpoint, converted on fetch (`specmlx convert`: 4-bit on Metal)
    converted_gb: float | None = None  # a converted checkpoint's size in its 4-bit MLX form, decimal GB
    native_mtp: bool = False  # it ships MTP layers of its own, kept by the conversion (`--drafter mtp`)

    @property
    def memory_bytes(self) -> int:
        """Its weights in memory: a converted checkpoint's 4-bit form, else what `source_bytes` says."""
        return int(self.converted_gb * 1e9) if self.convert and self.converted_gb else source_bytes(self)


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

    @property
    def own_mtp(self) -> bool:
        """Whether `mtp` names its target's own MTP layers (no drafter model of that name)."""
        return self.target.native_mtp and MTP not in {d.role for d in self.drafters}

    @property
    def roles(self) -> tuple[str, ...]:
        """The drafters it names: its drafter models, and `mtp` where its target ships MTP layers."""
        return tuple(d.role for d in self.drafters) + ((MTP,) if self.own_mtp else ())

    @property
    def download_bytes(self) -> int:
        """What `specmlx models fetch` downloads: every hub repo (bundled drafters ship with the package)."""
        return sum(source_bytes(s) for s in self.sources if not s.bundled)

    @property
    def memory_bytes(self) -> int:
        """What the preset needs in memory in its 4-bit MLX form: the weights of the target (its MTP
        layers among them) and of every drafter (a server or the app may hold them all), plus
        memory.py's margin. The state a conversation keeps (KV, a hybrid's recurrent state) is counted
        from the config once it is on disk, at load (`memory.check_fits`)."""
        return needed_bytes(sum(s.memory_bytes for s in self.sources))


def catalog_path() -> Path:
    return PACKAGE_DIR / "presets.toml"


def bundled_path(source: "ModelSource") -> Path:
    """Where a bundled drafter ships (None-safe callers check `source.bundled`)."""
    return PACKAGE_DIR / str(source.bundled)


def source_bytes(source: ModelSource) -> int:
    """A model's size in its MLX form: a bundled head's own files, else the hub repo's published
    size (its weights plus a tokenizer: a little more than MLX holds, never less)."""
    if source.bundled:
        return weights_bytes(bundled_path(source))
    return int((source.size_gb or 0) * 1e9)


@lru_cache(maxsize=1)
def _catalog() -> tuple[str, dict[str, Preset]]:
    try:
        data = tomllib.loads(catalog_path().read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SpecmlxError(f"{catalog_path()}: cannot read the preset catalog ({err})") from None
    presets = {name: _read_preset(name, entry) for name, entry in data.get("presets", {}).items()}
    return data.get("default", next(iter(presets))), presets


def _read_preset(name: str, entry: dict) -> Preset:
    """One [presets.NAME] table; a catalog mistake is one clear line, not a KeyError later."""
    sources = [_read_source(name, role, m) for role, m in entry.get("models", {}).items()]
    targets = [s for s in sources if s.role == "target"]
    if not targets:
        raise SpecmlxError(f"{catalog_path()}: preset {name} has no [models.target]")
    preset = Preset(name=name, description=entry.get("description", ""), target=targets[0],
                    drafters=tuple(s for s in sources if s.role != "target"), drafter=entry.get("drafter", NGRAM))
    if preset.drafter not in BUILTIN and preset.drafter not in preset.roles:
        raise SpecmlxError(f"{catalog_path()}: preset {name}'s drafter {preset.drafter!r} is none of its models")
    return preset


def _read_source(preset: str, role: str, m: dict) -> ModelSource:
    source = ModelSource(role, m.get("hub"), m.get("offline"), m.get("bundled"), m.get("size_gb"),
                         bool(m.get("convert")), m.get("converted_gb"), bool(m.get("native_mtp")))
    if not source.bundled and not _positive(source.size_gb):
        # the memory check before a fetch needs every downloaded model's size
        raise SpecmlxError(f"{catalog_path()}: {preset}/{role} has no size_gb")
    if source.convert and not (source.hub and _positive(source.converted_gb)):
        raise SpecmlxError(f"{catalog_path()}: {preset}/{role} is converted on fetch: it needs hub and converted_gb")
    return source


def _positive(size: object) -> bool:
    return isinstance(size, (int, float)) and size > 0


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
    """Where a model of the preset goes; the target's own MTP layers are in the target's directory."""
    if role == MTP and preset.own_mtp:
        role = "target"
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
