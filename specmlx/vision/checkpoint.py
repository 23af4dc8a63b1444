"""Which tower a checkpoint has, and loading it: each family (`qwen.py`, `gemma.py`) by the `model_type`
its `config.json` names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import SpecmlxError
from .gemma import GemmaTower
from .qwen import QwenTower
from .tower import VisionTower

FAMILIES = {arch: family for family in (QwenTower, GemmaTower) for arch in family.ARCHITECTURES}


def has_vision(path: Path) -> bool:
    """Whether the checkpoint at `path` declares a vision tower of an architecture read here."""
    config = _config(path)
    return config.get("model_type") in FAMILIES and isinstance(config.get("vision_config"), dict)


def load_vision(path: Path) -> VisionTower:
    """The vision tower of the checkpoint at `path` (`has_vision`); refused in one line where mlx-vlm is
    missing, the directory lacks its weights, or its family's images are not read here."""
    config = _config(path)
    try:
        import mlx_vlm  # noqa: F401
    except ImportError:
        raise SpecmlxError("reading images needs mlx-vlm: pip install 'specmlx[vision]'") from None
    family = FAMILIES[config["model_type"]]
    missing = [key for key in family.NEEDS if key not in config]
    if missing:
        raise SpecmlxError(f"{path}: its config.json lacks {', '.join(missing)}, which place an image's rows")
    return family.load(path, config)


def family_of(path: Path) -> Any:
    """The tower family of the checkpoint at `path` (`has_vision`)."""
    return FAMILIES[_config(path)["model_type"]]


def _config(path: Path) -> dict:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
