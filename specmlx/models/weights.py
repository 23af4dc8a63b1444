"""Loading a checkpoint's weights into a model built from its config."""

from __future__ import annotations

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
