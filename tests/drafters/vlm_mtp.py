"""mlx-vlm's MTP drafters (0.7.10: `mlx_vlm.speculative.drafters.qwen3_5_mtp`, `nemotron_h_mtp`,
`glm_moe_dsa_mtp`) holding specmlx's weights and bound to mlx-lm's target: the reference
test_native_mtp_reference.py and test_deepseek_v3_mtp_reference.py check specmlx's `NativeMTPDrafter`
against. mlx-vlm has its own decoder layers, attention, multimodal RoPE, MoE and norms; only the
weights and the target are shared.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_vlm.speculative.drafters.glm_moe_dsa_mtp.config import GlmMoeDsaMTPConfig
from mlx_vlm.speculative.drafters.glm_moe_dsa_mtp.glm_moe_dsa_mtp import GlmMoeDsaMTPDraftModel
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


def glm_moe_dsa(target: nn.Module, weights: dict[str, mx.array], index_topk: int) -> GlmMoeDsaMTPDraftModel:
    """mlx-vlm's GLM-5 (`glm_moe_dsa`) MTP drafter holding a DeepSeek-V3 MTP layer's `weights` (specmlx's
    names), bound to the DeepSeek-V3 `target`. Its block is DeepSeek-V3.2's: MLA and DeepSeek-V3's MoE, plus a
    lightning indexer (random here) that keeps every key while there are at most `index_topk` of them."""
    args = dict(vars(target.args), model_type="glm_moe_dsa", index_head_dim=16, index_n_heads=2,
                index_topk=index_topk, rope_parameters={"rope_theta": target.args.rope_theta})
    model = GlmMoeDsaMTPDraftModel(GlmMoeDsaMTPConfig.from_dict({"text_config": args}))
    theirs = {"shared_head.norm.weight": "mtp.shared_head_norm.weight"}
    given = {theirs.get(k, "mtp." + k.removeprefix("block.")): v for k, v in weights.items()
             if k != "shared_head.head.weight"}  # it scores with the target's own head
    left = set(dict(tree_flatten(model.parameters()))) - set(given)
    assert left and all(".indexer." in k for k in left), left
    model.load_weights(list(given.items()), strict=False)
    mx.eval(model.parameters())
    model.reset(target)
    return model


def drop_drafted(model: nn.Module) -> None:
    """Drop the cache entries the drafter's own drafting wrote this round, so that the accepted drafts are
    fed again from the target's verified hidden states (specmlx's convention)."""
    for c in model._cache:
        c.trim(model._round_appended)
    if hasattr(model, "_next_position"):  # the drafters on mlx-vlm's AutoregressiveMTPDraftModel
        model._next_position -= model._round_appended
    model._round_appended = 0


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
