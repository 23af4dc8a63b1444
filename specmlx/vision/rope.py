"""The target's attention rotated at given multimodal positions, for one prefill (`vision/__init__.py`).

mlx-lm's attention layers call `self.rope(x, offset=cache.offset)`; for the span of one call, each one's
`rope` is swapped for the multimodal rotation at the span's positions (mlx-vlm's Qwen3.5 rotation, the
reference for these checkpoints), then put back. The swap holds only while the call builds its graph
(MLX evaluates lazily, but the arrays it needs are captured by then), on the one thread that runs MLX."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import mlx.core as mx
import mlx.nn as nn

from ..hidden import inner_model


class Positioned:
    """A rotation at fixed positions, (3, B, L), whatever offset it is called with."""

    def __init__(self, rotary: Any, positions: mx.array) -> None:
        self.rotary, self.positions = rotary, positions

    def __call__(self, x: mx.array, offset: Any = 0) -> mx.array:
        rotated, _ = self.rotary.apply_rotary(x, x, self.positions, unsqueeze_dim=1)
        return rotated


def multimodal_rotary(text_config: dict) -> Any:
    """mlx-vlm's Qwen3.5 rotation for a checkpoint's `text_config`: its partial rotary width, base and
    sections."""
    from mlx_vlm.models.qwen3_5.language import Qwen3_5RotaryEmbedding

    rope = text_config.get("rope_parameters") or {}
    width = int(text_config["head_dim"] * rope.get("partial_rotary_factor", 1.0))
    return Qwen3_5RotaryEmbedding(width, base=rope.get("rope_theta", 10000.0), mrope_section=rope["mrope_section"])


def attention_layers(target: nn.Module) -> list[nn.Module]:
    """The target's attention modules that rotate: its layers' `self_attn` with a `rope`."""
    found = [getattr(layer, "self_attn", None) for layer in inner_model(target).layers]
    return [attn for attn in found if attn is not None and hasattr(attn, "rope")]


@contextmanager
def rotated_at(target: nn.Module, rotary: Any, positions: mx.array) -> Iterator[None]:
    """Within the block, the target's attention rotates at `positions`, (3, B, L)."""
    layers = attention_layers(target)
    originals = [attn.rope for attn in layers]
    for attn in layers:
        attn.rope = Positioned(rotary, positions)
    try:
        yield
    finally:
        for attn, rope in zip(layers, originals):
            attn.rope = rope
