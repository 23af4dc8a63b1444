"""Loading targets and drafters: local MLX directories or Hugging Face repos.

mlx-lm does the loading; this module turns every way it can fail into one
clear line, and decides what a drafter spec (`ngram`, `none`, a path) means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.nn as nn

from .compat import check_compatible, check_vocab_fits
from .drafters import Drafter, ModelDrafter, NoDrafter, PromptLookupDrafter
from .drafters.gemma4_assistant import Gemma4AssistantDrafter
from .models.gemma4_assistant import is_gemma4_assistant_dir, load_gemma4_assistant
from .drafters.mtp import MTPDrafter
from .models.mtp import is_mtp_dir, load_mtp
from .errors import SpecmlxError
from .memory import check_fits
from .presets import fetched_path, get_preset, is_preset
from .vocab import vocab_size

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
MODEL_DRAFTERS = "a preset name, model directory or repo id, 'ngram' or 'none'"


@dataclass(frozen=True)
class LoadedModel:
    model: nn.Module
    tokenizer: Any  # mlx-lm TokenizerWrapper
    path: Path
    name: str


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
    if REPO_ID.fullmatch(source):
        return download(source)
    raise SpecmlxError(f"{source}: no such model directory")


def download(repo: str) -> Path:
    """Fetch an MLX model repo from the Hugging Face hub (with progress bars)."""
    from huggingface_hub import snapshot_download
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    try:
        return Path(snapshot_download(repo, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    except Exception as err:  # offline, unknown repo, gated repo, disk full...
        reason = _one_line(err, last=True)
        raise SpecmlxError(f"{repo}: not a local directory, and downloading it failed: {reason}") from None


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
        message = _one_line(err)
        raise SpecmlxError(f"{source}: cannot load model: {message}") from None
    loaded = LoadedModel(model, tokenizer, path, source)
    check_vocab_fits(tokenizer, vocab_size(model), source)
    return loaded


def drafter_source(spec: str | None, target: str) -> str:
    """What to draft with: `spec`, a preset's drafter, or prompt lookup.

    A preset name stands for that preset's own drafter, and with a preset target
    a drafter role of that preset (e.g. `mtp`) for that drafter; with no spec, a
    preset target brings its drafter and any other target gets prompt lookup.
    """
    if spec is None:
        return drafter_source(target, target) if is_preset(target) else "ngram"
    if is_preset(target) and spec in {d.role for d in get_preset(target).drafters}:
        return str(fetched_path(get_preset(target), spec))  # `--drafter mtp`: that preset's drafter
    if is_preset(spec):
        preset = get_preset(spec)
        if preset.drafter in ("ngram", "none"):
            return preset.drafter
        return str(fetched_path(preset, preset.drafter))
    return spec


def load_drafter(spec: str, target: LoadedModel, path: Path | None = None) -> Drafter:
    """`ngram`, `none`, or a model that shares the target's tokenizer."""
    if spec == "ngram":
        return PromptLookupDrafter()
    if spec == "none":
        return NoDrafter()
    path = resolve(spec) if path is None else path
    if is_mtp_dir(path):
        return MTPDrafter(load_mtp(path), vocab_size(target.model), name=spec)
    if is_gemma4_assistant_dir(path):
        return Gemma4AssistantDrafter(load_gemma4_assistant(path), vocab_size(target.model), name=spec)
    drafter = load(spec, path)
    check_compatible(target.tokenizer, drafter.tokenizer, target.name, drafter.name)
    return ModelDrafter(drafter.model, vocab_size(target.model), name=spec)


def load_tokenizer(source: str, path: Path) -> Any:
    """Only the tokenizer, as mlx-lm's `load` would build it: seconds, not gigabytes."""
    from mlx_lm.utils import load_tokenizer as mlx_load_tokenizer

    try:
        config = json.loads((path / "config.json").read_text())
        return mlx_load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except Exception as err:  # unreadable config, missing or broken tokenizer files
        message = _one_line(err)
        raise SpecmlxError(f"{source}: cannot load its tokenizer: {message}") from None


def is_head_dir(path: Path) -> bool:
    """An MTP-style head: it reads the target, may ship no tokenizer, and is checked on attach."""
    return is_mtp_dir(path) or is_gemma4_assistant_dir(path)


def check_pair(target: str, drafter: str) -> tuple[Path, Path | None]:
    """Resolve both, check their tokenizers agree and that they fit in memory
    together, before any weights load: a wrong pairing costs seconds."""
    target_path = resolve(target)
    drafter_path = None if drafter in ("ngram", "none") else resolve(drafter)
    if drafter_path is not None and not is_head_dir(drafter_path):
        check_compatible(load_tokenizer(target, target_path), load_tokenizer(drafter, drafter_path),
                         target, drafter)
    check_fits(target_path, drafter_path)
    return target_path, drafter_path


def load_pair(target: str, drafter: str | None = None) -> tuple[LoadedModel, Drafter]:
    """Check the pair (`check_pair`), then load the target and the drafter."""
    drafter = drafter_source(drafter, target)
    target_path, drafter_path = check_pair(target, drafter)
    loaded = load(target, target_path)
    return loaded, load_drafter(drafter, loaded, drafter_path)


def _one_line(err: BaseException, last: bool = False) -> str:
    """One line of a library's error (the first, or the last for tracebacks
    relayed as text), or its type when it says nothing."""
    lines = str(err).strip().splitlines()
    return (lines[-1] if last else lines[0]) if lines else type(err).__name__
