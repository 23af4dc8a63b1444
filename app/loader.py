"""From the command line's choice of models to a ready Session, or to a clear failure.

Runs on the MLX thread. Loading itself is `specmlx.loading.load_pair`, the
same path as every other front end; this adds only what the app shows when
no model could be loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from specmlx.caches.kinds import KVBits
from specmlx import presets
from specmlx.diskcache.keeper import DEFAULT_GB, open_keeper
from specmlx.drafters import MTP, Drafter
from specmlx.engine import Engine
from specmlx.errors import SpecmlxError
from specmlx.loading import LoadedModel, check_pair, load_drafter, load_pair, resolve_drafter, ships_mtp
from specmlx.log import user_error
from specmlx.memory import GB
from specmlx.warmup import warm_up_at_load

from .drafters import Loader
from .session import Session


@dataclass(frozen=True)
class ModelChoice:
    """What the user asked for: a target (a preset name, directory or repo id;
    None for the default preset) and a drafter (None for the target's default)."""

    target: str | None = None
    drafter: str | None = None
    disk_cache: bool = True  # keep the chat's caches on disk too (`specmlx.diskcache`)
    kv: KVBits | None = None  # the target's keys and values kept quantized (`--kv-bits`)


@dataclass(frozen=True)
class LoadFailure:
    """Why no model could be loaded, and the commands that fix it."""

    message: str
    commands: tuple[str, ...]


def load_session(choice: ModelChoice, progress: Callable[[str], None] = lambda step: None) -> Session:
    """Load the target and drafter and build the engine, reporting each step."""
    target, drafter = load_pair(choice.target, choice.drafter, progress)
    warm_up_at_load(target.model, [drafter], progress=progress, kv=choice.kv)
    disk = None
    if choice.disk_cache:
        try:
            disk = open_keeper(target.path, int(DEFAULT_GB * GB), choice.kv)
        except SpecmlxError as err:  # the chat works without it: say so and go on
            progress(f"{err}; chats are kept in memory only")
    progress("ready")
    return Session(Engine(target.model, drafter, target.tokenizer, kv=choice.kv), target_name=target.name,
                   later=preset_drafters(choice.target or presets.default_preset_name(), target), disk=disk)


def preset_drafters(preset: str, target: LoadedModel) -> dict[str, Loader]:
    """Every drafter of the target's preset, by name, each loaded when first chosen; for a target
    directory that ships MTP layers of its own (`preset` is then that directory), those, as `mtp`."""
    if ships_mtp(preset):
        return {MTP: partial(load_later, preset, MTP, target)}
    if not presets.is_preset(preset):
        return {}
    return {role: partial(load_later, preset, role, target) for role in presets.get_preset(preset).roles}


def load_later(preset: str, role: str, target: LoadedModel) -> Drafter:
    """One drafter of the preset (or the target directory's own MTP layers), checked against the
    target as at startup, then loaded."""
    drafter = resolve_drafter(role, preset)
    _, path = check_pair(preset, drafter)
    return load_drafter(drafter, target, path)


def failure(err: BaseException, choice: ModelChoice) -> LoadFailure:
    """What the missing-model screen says: the error, then how to get a model."""
    message = str(user_error(err, "loading the models failed"))
    commands = []
    preset = choice.target if choice.target is None or presets.is_preset(choice.target) else None
    if choice.target is None:
        try:
            preset = presets.default_preset_name()
        except SpecmlxError:
            preset = None
    if preset:
        commands.append(f"specmlx models fetch {preset}")
    commands.append("specmlx models list")
    commands += [
        "specmlx convert SOURCE --out DIR   # SOURCE: a GGUF file, a Hugging Face directory or repo id",
        "specmlx-chat --target DIR [--drafter DIR|ngram|suffix|none]",
    ]
    return LoadFailure(message, tuple(commands))

