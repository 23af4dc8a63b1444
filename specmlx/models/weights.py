"""Loading a checkpoint's weights into a model built from its config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import mlx.core as mx
import mlx.nn as nn

from ..errors import SpecmlxError


def load_into(model: nn.Module, weights: Mapping[str, mx.array], quantization: Mapping[str, Any] | None,
              folder: Path, what: str) -> nn.Module:
    """`weights` into `model`, strictly, quantized as mlx-lm lays it out: a layer is quantized
    iff the checkpoint has its scales. A mismatch is one line naming `what` in `folder`."""
    if quantization and any(k.endswith(".scales") for k in weights):
        nn.quantize(model, group_size=quantization["group_size"], bits=quantization["bits"],
                    class_predicate=lambda path, _: f"{path}.scales" in weights)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as err:
        raise SpecmlxError(f"{folder}: {what} do not match its config ({err})") from None
    mx.eval(model.parameters())
    return model


def read_weights(folder: Path) -> dict[str, mx.array]:
    """Every tensor of every *.safetensors file in `folder` (sharded or not)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise SpecmlxError(f"{folder}: no *.safetensors files")
    weights: dict[str, mx.array] = {}
    for path in files:
        try:
            weights.update(mx.load(str(path)))
        except (OSError, ValueError, RuntimeError) as err:
            raise SpecmlxError(f"{path}: unreadable safetensors ({err})") from None
    return weights


def read_config(folder: Path) -> dict[str, Any]:
    """A checkpoint's `config.json`; one line where it is unreadable or not an object."""
    try:
        raw = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise SpecmlxError(f"{folder}: unreadable config.json ({err})") from None
    if not isinstance(raw, dict):
        raise SpecmlxError(f"{folder}: config.json is not an object")
    return raw
