"""The MTP layer DeepSeek-V3, GLM-4.5 (`glm4_moe`) and GLM-4.7-Flash (`glm4_moe_lite`) checkpoints
ship (`model.layers.{num_hidden_layers}.*`, `num_nextn_predict_layers: 1`), as a drafter's network.

One step (DeepSeek-V3 report §2.2; Hugging Face's `MtpModel` in transformers 5.23's
`modeling_layers.py`): x = eh_proj(concat(enorm(embed(token)), hnorm(hidden))), one decoder block of
the target's own kind (mlx-lm's `DeepseekV3DecoderLayer` or `Glm4MoeLiteDecoderLayer`, MLA
attention, or `glm4_moe.DecoderLayer`; the MoE block at that layer index), then its `shared_head`'s
norm. That normed output is what its own head scores and what a chained step reads as its hidden
state, as Hugging Face chains its MTP layers and mlx-vlm's GLM-5 drafter its one; `hidden` at the
first step is the target's final-normed hidden state, and every position reads its token. vLLM
(`deepseek_mtp.py`) chains the block's output before that norm and zeroes the token embedding at
position 0: docs/hybrid.md.

Stored as Hugging Face has it (`model.layers.{N}.`: `embed_tokens`, a copy of the target's, is
not read; experts one tensor each; MLA's fused `kv_b_proj`), or under `mtp.` in this module's own
names (`specmlx convert`'s `mtp.safetensors`). mlx-lm's own sanitize (the target's model type's)
renames the block's tensors.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import deepseek_v3, glm4_moe, glm4_moe_lite
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from .native_mtp_config import PREFIX, NativeMTPConfig, WholeVocabulary

_OWN = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")  # the MTP layer's tensors beside its block
# By the target's model type: its decoder block, and the mlx-lm model whose sanitize renames the block.
BLOCKS = {"deepseek_v3": (deepseek_v3.DeepseekV3DecoderLayer, deepseek_v3.Model),
          "glm4_moe": (glm4_moe.DecoderLayer, glm4_moe.Model),
          "glm4_moe_lite": (glm4_moe_lite.Glm4MoeLiteDecoderLayer, glm4_moe_lite.Model)}


def stored_prefix(config: dict) -> str:
    """Where Hugging Face's checkpoint keeps the layer: one past the target's last."""
    return f"model.layers.{config['num_hidden_layers']}."


class DeepseekV3MTP(WholeVocabulary, nn.Module):
    """A DeepSeek-V3-style MTP layer; `args` are the target's mlx-lm args (their `model_type` picks
    the block)."""

    def __init__(self, args: Any) -> None:
        super().__init__()
        width, eps = args.hidden_size, args.rms_norm_eps
        self.config = NativeMTPConfig(width, args.vocab_size, 1)
        self.enorm = nn.RMSNorm(width, eps=eps)
        self.hnorm = nn.RMSNorm(width, eps=eps)
        self.eh_proj = nn.Linear(2 * width, width, bias=False)
        self.block = BLOCKS[args.model_type][0](args, args.num_hidden_layers)
        self.shared_head = SharedHead(width, args.vocab_size, eps)

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and hidden states at t -> features at t+1 (normed)."""
        cache = cache or [None]
        # [enorm(embedding), hnorm(hidden)]: Hugging Face's and vLLM's order (MiMo's is reversed)
        x = self.eh_proj(mx.concatenate([self.enorm(embeddings), self.hnorm(hidden)], axis=-1))
        mask = create_attention_mask(x, cache[0], return_array=True)  # MLA masks its scores by array
        return self.shared_head.norm(self.block(x, mask, cache[0]))

    def logits(self, target: nn.Module, features: mx.array) -> mx.array:
        """Its own head (a copy of the target's in DeepSeek-V3's checkpoints), not the target's."""
        return self.shared_head.head(features)

    def make_cache(self) -> list[KVCache]:
        return [KVCache()]


class SharedHead(nn.Module):
    """The layer's own final norm and output head (DeepSeek-V3's is a copy of the target's head)."""

    def __init__(self, width: int, vocab_size: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width, eps=eps)
        self.head = nn.Linear(width, vocab_size, bias=False)


def sanitize(weights: dict[str, mx.array], args: Any, config: dict) -> dict[str, mx.array]:
    """Stored tensors -> this module's names, for a target with mlx-lm `args` and `config.json` `config`:
    Hugging Face's renamed by mlx-lm's own rules (experts stacked; for DeepSeek-V3 fp8 dequantized and
    `kv_b_proj` split), this module's own (under `mtp.`) passed as they are."""
    stored = stored_prefix(config)
    own = {k.removeprefix(PREFIX): v for k, v in weights.items() if k.startswith(PREFIX)}
    hf = {k.removeprefix(stored): v for k, v in weights.items() if k.startswith(stored)}
    block = {f"model.layers.0.{k}": v for k, v in hf.items() if not k.startswith((*_OWN, "embed_tokens."))}
    block = BLOCKS[args.model_type][1].sanitize(SimpleNamespace(args=replace(args, num_hidden_layers=1)), block)
    own.update({f"block.{k.removeprefix('model.layers.0.')}": v for k, v in block.items()})
    own.update({k: v for k, v in hf.items() if k.startswith(_OWN)})
    return own
