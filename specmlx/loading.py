"""Loading targets and drafters: presets, local MLX directories or Hugging Face repos.

The one way in for every front end (the CLI, the server, the bench, the app,
training): `load_models`, for one target and its drafters in this process or
sharded over ranks (a `Placement`: `specmlx.distributed.load.Ranks` plugs the
sharded specifics in), and `load_pair` for a target and one drafter. mlx-lm
does the loading; this module decides what a drafter spec means, checks a
pairing before any weights load, reports each step, and turns every way
loading can fail into one clear line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import mlx.nn as nn

from .compat import check_compatible, check_vocab_fits
from .drafters import (BUILTIN, MTP, NGRAM, NONE, SUFFIX, Drafter, ModelDrafter, NoDrafter, PromptLookupDrafter,
                       SuffixDrafter)
from .drafters.block import BlockDrafter
from .drafters.gemma4_assistant import Gemma4AssistantDrafter
from .drafters.mtp import MTPDrafter
from .drafters.native_mtp import NativeMTPDrafter
from .errors import SpecmlxError, first_line
from .hub import download, is_repo_id
from .memory import check_fits
from .models.dflash import is_block_dir, load_block_drafter
from .models.gemma4_assistant import is_gemma4_assistant_dir, load_gemma4_assistant
from .models.mtp import is_mtp_dir, load_mtp
from .models.native_mtp import RUN, has_native_mtp, load_native_mtp
from .paths import models_dir
from .peers import ALONE, Peers
from .presets import default_preset_name, fetched_path, get_preset, is_preset
from .vocab import vocab_size

MODEL_DRAFTERS = "a preset name, model directory or repo id, 'ngram', 'suffix' or 'none'"

# Told each step of a load, as one line ("loading target ..."), for progress displays.
Progress = Callable[[str], None]


@dataclass(frozen=True)
class LoadedModel:
    model: nn.Module
    tokenizer: Any  # mlx-lm TokenizerWrapper
    path: Path
    name: str


def display_name(source: str) -> str:
    """What a model is called on screen: a preset's name, a preset drafter's
    role (`mtp`), a directory's own name, or a repo id as is."""
    if source in BUILTIN or is_preset(source) or is_repo_id(source) and not Path(source).exists():
        return source
    path = Path(source).expanduser().resolve()
    if path.parent.parent == models_dir().expanduser().resolve():  # models/PRESET/ROLE
        return path.parent.name if path.name == "target" else path.name
    return path.name


def resolve(source: str) -> Path:
    """A local model directory: a path, a preset name (its target), or an
    `owner/name` repo id downloaded from the hub."""
    if is_preset(source):
        return fetched_path(get_preset(source))
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise SpecmlxError(f"{source}: not a model directory (expected a folder with config.json)")
        if not (path / "config.json").is_file():
            raise SpecmlxError(f"{source}: no config.json in this directory; is it an MLX model?")
        return path
    if is_repo_id(source):
        return download(source)
    raise SpecmlxError(f"{source}: no such model directory")


def load(source: str, path: Path | None = None) -> LoadedModel:
    """Load a model and its tokenizer with mlx-lm; every failure is one line."""
    path = resolve(source) if path is None else path
    try:
        json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecmlxError(f"{path / 'config.json'}: unreadable config ({err})") from None
    from mlx_lm.utils import load as mlx_load

    try:
        model, tokenizer = mlx_load(str(path))
    except Exception as err:  # mlx-lm raises many types for broken directories
        message = first_line(err)
        raise SpecmlxError(f"{source}: cannot load model: {message}") from None
    loaded = LoadedModel(model, tokenizer, path, display_name(source))
    check_vocab_fits(tokenizer, vocab_size(model), source)
    return loaded


@dataclass(frozen=True)
class DrafterSource:
    """A drafter spec resolved against a target: `ngram`, `suffix`, `none`, or a model
    directory / repo id (`source`), and its display `name`."""

    source: str
    name: str

    @property
    def builtin(self) -> bool:
        return self.source in BUILTIN


def resolve_drafter(spec: str | None, target: str) -> DrafterSource:
    """What to draft with: `spec`, a preset's drafter, or prompt lookup.

    A preset name stands for that preset's own drafter, and with a preset target
    a drafter role of that preset (e.g. `mtp`) for that drafter; `mtp` with a target
    directory that ships MTP layers stands for them; with no spec, a preset target
    brings its drafter and any other target gets prompt lookup.
    """
    if spec is None:
        return resolve_drafter(target, target) if is_preset(target) else DrafterSource(NGRAM, NGRAM)
    if is_preset(target) and spec in get_preset(target).roles:
        return DrafterSource(str(fetched_path(get_preset(target), spec)), spec)  # `--drafter mtp`
    if spec == MTP and not Path(spec).exists():
        if not ships_mtp(target):
            raise SpecmlxError(f"--drafter mtp: {target} ships no MTP layers specmlx can run ({RUN} directories "
                               "that kept them: specmlx convert keeps them)")
        return DrafterSource(target, MTP)
    if is_preset(spec):
        preset = get_preset(spec)
        if preset.drafter in BUILTIN:
            return DrafterSource(preset.drafter, preset.drafter)
        return DrafterSource(str(fetched_path(preset, preset.drafter)), preset.drafter)
    return DrafterSource(spec, display_name(spec))


def ships_mtp(target: str) -> bool:
    """Whether a local target directory holds MTP layers of its own (`models.native_mtp`)."""
    path = Path(target).expanduser()
    return path.is_dir() and has_native_mtp(path)


def load_drafter(drafter: DrafterSource, target: LoadedModel, path: Path | None = None) -> Drafter:
    """`ngram`, `suffix`, `none`, an MTP-style head, or a model that shares the target's tokenizer."""
    if drafter.source == NGRAM:
        return PromptLookupDrafter()
    if drafter.source == SUFFIX:
        return SuffixDrafter()  # its instances (`fresh`) share one memory of the sessions
    if drafter.source == NONE:
        return NoDrafter()
    path = resolve(drafter.source) if path is None else path
    width = vocab_size(target.model)
    if is_mtp_dir(path):
        return MTPDrafter(load_mtp(path), width, name=drafter.name)
    if drafter.name == MTP and has_native_mtp(path):  # the target's own MTP layers (`resolve_drafter`)
        return NativeMTPDrafter(load_native_mtp(path, target.model), width, name=drafter.name)
    if is_gemma4_assistant_dir(path):
        return Gemma4AssistantDrafter(load_gemma4_assistant(path), width, name=drafter.name)
    if is_block_dir(path):
        return BlockDrafter(load_block_drafter(path), width, name=drafter.name)
    model = load(drafter.source, path)
    check_compatible(target.tokenizer, model.tokenizer, str(target.path), drafter.source)
    return ModelDrafter(model.model, width, name=drafter.name)


def load_tokenizer(source: str, path: Path) -> Any:
    """Only the tokenizer, as mlx-lm's `load` would build it: seconds, not gigabytes."""
    from mlx_lm.utils import load_tokenizer as mlx_load_tokenizer

    try:
        config = json.loads((path / "config.json").read_text())
        return mlx_load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except Exception as err:  # unreadable config, missing or broken tokenizer files
        message = first_line(err)
        raise SpecmlxError(f"{source}: cannot load its tokenizer: {message}") from None


def is_head_dir(path: Path) -> bool:
    """An MTP-style head: it reads the target, may ship no tokenizer, and is checked on attach."""
    return is_mtp_dir(path) or is_gemma4_assistant_dir(path) or is_block_dir(path) or has_native_mtp(path)


def check_pair(target: str, drafter: DrafterSource,
               fits: Callable[[Path, Path | None], None] = check_fits) -> tuple[Path, Path | None]:
    """Resolve both, check their tokenizers agree and that they fit in memory
    together (`fits`: on one machine, or a rank's share), before any weights
    load: a wrong pairing costs seconds."""
    target_path = resolve(target)
    drafter_path = None if drafter.builtin else resolve(drafter.source)
    check_resolved(target, target_path, drafter, drafter_path, fits)
    return target_path, drafter_path


def check_resolved(target: str, target_path: Path, drafter: DrafterSource, drafter_path: Path | None,
                   fits: Callable[[Path, Path | None], None] = check_fits) -> None:
    """`check_pair` on directories already resolved."""
    if drafter_path is not None and not is_head_dir(drafter_path):
        check_compatible(load_tokenizer(target, target_path), load_tokenizer(drafter.source, drafter_path),
                         target, drafter.source)  # errors name what the user typed, in full
    same = drafter_path is not None and drafter_path.resolve() == target_path.resolve()
    fits(target_path, None if same else drafter_path)  # the target's own MTP layers are in its files


class Placement(Protocol):
    """Where a load puts the target and its drafters: this process (`ONE_PROCESS`),
    or a shard of the target on each rank of a group (`specmlx.distributed.load.Ranks`)."""

    @property
    def where(self) -> str:
        """How the "checking" line ends: nothing, or the ranks."""

    def settle(self, target: Path, drafters: Sequence[Path]) -> Placement:
        """This placement with what it decides from the model directories (e.g. how to shard)."""

    def check(self, target: str, target_path: Path, drafters: Mapping[DrafterSource, Path | None]) -> None:
        """Refuse a pairing, or models that cannot fit, before any weights load."""

    def load_target(self, source: str, path: Path, say: Progress) -> LoadedModel: ...

    def load_drafter(self, drafter: DrafterSource, target: LoadedModel, path: Path | None,
                     say: Progress) -> Drafter: ...

    def peers(self, target: LoadedModel) -> Peers:
        """What every engine on the target keeps in step with, once all has loaded."""


class OneProcess:
    """Everything in this process: each pairing is checked to fit on this machine."""

    where = ""

    def settle(self, target: Path, drafters: Sequence[Path]) -> OneProcess:
        return self

    def check(self, target: str, target_path: Path, drafters: Mapping[DrafterSource, Path | None]) -> None:
        for drafter, path in drafters.items():
            check_resolved(target, target_path, drafter, path)

    def load_target(self, source: str, path: Path, say: Progress) -> LoadedModel:
        say(f"loading target {display_name(source)} ({path})")
        return load(source, path)

    def load_drafter(self, drafter: DrafterSource, target: LoadedModel, path: Path | None,
                     say: Progress) -> Drafter:
        if path is not None:
            say(f"loading drafter {drafter.name} ({path})")
        return load_drafter(drafter, target, path)

    def peers(self, target: LoadedModel) -> Peers:
        return ALONE


ONE_PROCESS = OneProcess()


@dataclass(frozen=True)
class Loaded:
    """A target and its drafters, loaded; `peers` is what an engine on them keeps in step
    with: `Engine(loaded.target.model, drafter, loaded.target.tokenizer, peers=loaded.peers)`."""

    target: LoadedModel
    drafters: list[Drafter]
    peers: Peers


def load_models(target: str | None, specs: Sequence[str | None], progress: Progress | None = None,
                placement: Placement = ONE_PROCESS) -> Loaded:
    """One target (default: the default preset) and a drafter for each spec (None: the
    preset's, else prompt lookup), placed by `placement`. Every pairing is checked before
    any weights load; then the target loads once and each distinct drafter once."""
    say = progress or (lambda step: None)
    target = target or default_preset_name()
    sources = [resolve_drafter(spec, target) for spec in specs]
    say(f"checking {display_name(target)}" + "".join(f" + {s.name}" for s in dict.fromkeys(sources)
                                                     if not s.builtin) + placement.where)
    target_path = resolve(target)
    paths = {s: None if s.builtin else resolve(s.source) for s in dict.fromkeys(sources)}
    placement = placement.settle(target_path, [p for p in paths.values() if p is not None])
    placement.check(target, target_path, paths)
    loaded = placement.load_target(target, target_path, say)
    built = {source: placement.load_drafter(source, loaded, path, say) for source, path in paths.items()}
    return Loaded(loaded, [built[s] for s in sources], placement.peers(loaded))


def load_pair(target: str | None = None, drafter: str | None = None,
              progress: Progress | None = None) -> tuple[LoadedModel, Drafter]:
    """A target (default: the default preset) and its drafter (default: the
    preset's, else prompt lookup), checked, then loaded; `progress` hears each step."""
    loaded = load_models(target, [drafter], progress)
    return loaded.target, loaded.drafters[0]
