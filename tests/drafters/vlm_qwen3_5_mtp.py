"""mlx-vlm's Qwen3.5 MTP drafter (`mlx_vlm.speculative.drafters.qwen3_5_mtp`, 0.7.10) holding
specmlx's weights and bound to mlx-lm's target: the reference test_native_mtp_reference.py checks
specmlx's `NativeMTPDrafter` against. mlx-vlm has its own decoder layer, attention, multimodal
RoPE and norms; only the weights and the target are shared.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_vlm.speculative.drafters.qwen3_5_mtp.config import Qwen3_5MTPConfig
from mlx_vlm.speculative.drafters.qwen3_5_mtp.qwen3_5_mtp import Qwen3_5MTPDraftModel


def drafter(text_config: dict, weights: dict[str, mx.array], target: nn.Module) -> Qwen3_5MTPDraftModel:
    """`text_config` as Qwen3.5's `config.json` has it; `weights` in specmlx's (mlx-lm's) names."""
    rope = dict(text_config["rope_parameters"])
    rotary = int(text_config["head_dim"] * rope["partial_rotary_factor"])
    rope.setdefault("mrope_section", [rotary // 2, 0, 0])  # text only: every section reads the same position
    config = Qwen3_5MTPConfig.from_dict({"text_config": {**text_config, "rope_parameters": rope}})
    model = Qwen3_5MTPDraftModel(config)
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    model.reset(target)
    return model


class Recorded:
    """Wraps the drafter's head so that each draft step's logits are kept, in order."""

    def __init__(self, model: Qwen3_5MTPDraftModel) -> None:
        self.logits: list[mx.array] = []
        head = model._lm_head_fn

        def recording(hidden: mx.array) -> mx.array:
            out = head(hidden)
            self.logits.append(out.reshape(-1, out.shape[-1])[-1])
            return out

        model._lm_head_fn = recording


def weights_of(module: nn.Module) -> dict[str, mx.array]:
    return dict(tree_flatten(module.parameters()))
