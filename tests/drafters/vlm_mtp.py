"""mlx-vlm's MTP drafters (0.7.10: `mlx_vlm.speculative.drafters.qwen3_5_mtp`, `nemotron_h_mtp`)
holding specmlx's weights and bound to mlx-lm's target: the reference test_native_mtp_reference.py
checks specmlx's `NativeMTPDrafter` against. mlx-vlm has its own decoder layers, attention,
multimodal RoPE, MoE and norms; only the weights and the target are shared.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_vlm.speculative.drafters.nemotron_h_mtp.config import NemotronHMTPConfig
from mlx_vlm.speculative.drafters.nemotron_h_mtp.nemotron_h_mtp import NemotronHMTPDraftModel
from mlx_vlm.speculative.drafters.qwen3_5_mtp.config import Qwen3_5MTPConfig
from mlx_vlm.speculative.drafters.qwen3_5_mtp.qwen3_5_mtp import Qwen3_5MTPDraftModel


def drafter(text_config: dict, weights: dict[str, mx.array], target: nn.Module) -> nn.Module:
    """The reference for the target's architecture (`text_config["model_type"]`)."""
    if text_config["model_type"] == "nemotron_h":
        return nemotron_h(text_config, weights, target)
    return qwen3_5(text_config, weights, target)


def nemotron_h(config: dict, weights: dict[str, mx.array], target: nn.Module) -> NemotronHMTPDraftModel:
    """Bound by hand: its `bind` accepts only mlx-vlm's own Nemotron-H class, and reads the same tables."""
    model = NemotronHMTPDraftModel(NemotronHMTPConfig.from_dict({"text_config": config}))
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    model._input_embed, model._lm_head_fn = target.backbone.embeddings, target.lm_head
    model._cache = model.make_cache()
    return model


def qwen3_5(text_config: dict, weights: dict[str, mx.array], target: nn.Module) -> Qwen3_5MTPDraftModel:
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

    def __init__(self, model: nn.Module) -> None:
        self.logits: list[mx.array] = []
        head = model._lm_head_fn

        def recording(hidden: mx.array) -> mx.array:
            out = head(hidden)
            self.logits.append(out.reshape(-1, out.shape[-1])[-1])
            return out

        model._lm_head_fn = recording


def weights_of(module: nn.Module) -> dict[str, mx.array]:
    return dict(tree_flatten(module.parameters()))
