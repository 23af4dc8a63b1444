"""From the command line's choice of models to a ready Session, or to a clear failure.

Runs on the MLX thread. Presets come from `specmlx.presets`; its import is
guarded so that the app still runs on explicit model directories without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine
from specmlx.errors import SpecmlxError

from .session import Session

SPECIAL_DRAFTERS = ("ngram", "none")


@dataclass(frozen=True)
class ModelChoice:
    """What the user asked for: a target (a directory or repo id) or a preset, and a drafter."""

    target: str | None = None
    drafter: str | None = None
    preset: str | None = None


@dataclass(frozen=True)
class Plan:
    """Where each model comes from, and the short names the UI shows."""

    target: str
    target_name: str
    drafter: str  # a model directory or repo id, "ngram" or "none"
    drafter_name: str
    preset: str | None = None


@dataclass(frozen=True)
class LoadFailure:
    """Why no model could be loaded, and the commands that fix it."""

    message: str
    commands: tuple[str, ...]


def plan(choice: ModelChoice) -> Plan:
    """Resolve a choice to model sources; a preset must have been fetched."""
    if choice.target:
        drafter = choice.drafter or "ngram"
        return Plan(choice.target, _short(choice.target), drafter, _short(drafter))
    from specmlx import presets
    from specmlx.loading import drafter_source

    preset = presets.get_preset(choice.preset or presets.default_preset_name())
    drafter_name = choice.drafter or preset.drafter
    drafter = drafter_source(drafter_name, preset.name)  # a role of the preset: its fetched path
    target = str(presets.fetched_path(preset))
    return Plan(target, preset.name, drafter, _short(drafter_name), preset.name)


def load_session(choice: ModelChoice, progress: Callable[[str], None] = lambda step: None) -> Session:
    """Load the target and drafter and build the engine, reporting each step."""
    from specmlx.loading import check_pair, load, load_drafter

    steps = plan(choice)
    # The same checks as the command line: tokenizers and memory, before any weights load.
    target_path, drafter_path = check_pair(steps.target, steps.drafter)
    progress(f"loading target {steps.target_name} ({steps.target})")
    target = load(steps.target, target_path)
    if steps.drafter not in SPECIAL_DRAFTERS:
        progress(f"loading drafter {steps.drafter_name} ({steps.drafter})")
    drafter = load_drafter(steps.drafter, target, drafter_path)
    if isinstance(drafter, ModelDrafter):
        drafter.name = steps.drafter_name  # shown in the stats panel; the path is too long
    progress("ready")
    return Session(Engine(target.model, drafter, target.tokenizer), target_name=steps.target_name)


def failure(err: BaseException, choice: ModelChoice) -> LoadFailure:
    """What the missing-model screen says: the error, then how to get a model."""
    message = str(err) if isinstance(err, SpecmlxError) else f"{type(err).__name__}: {err}"
    commands = []
    preset = choice.preset if not choice.target else None
    from specmlx import presets

    if not choice.target:
        try:
            preset = preset or presets.default_preset_name()
        except SpecmlxError:
            preset = None
    if preset:
        commands.append(f"python -m specmlx.models fetch {preset}")
    commands.append("python -m specmlx.models list")
    commands += [
        "python -m specmlx.convert SOURCE --out DIR   # SOURCE: a GGUF file, a Hugging Face directory or repo id",
        "python -m app --target DIR [--drafter DIR|ngram|none]",
    ]
    return LoadFailure(message, tuple(commands))


def _short(source: str) -> str:
    """A model's display name: its directory's name, or a repo id as is."""
    if source in SPECIAL_DRAFTERS:
        return source
    path = Path(source).expanduser()
    return path.name if path.exists() else source
