"""The MTP layers Qwen3.5 and Qwen3-Next checkpoints ship (`mtp.*`), as a drafter's network.

One step (vLLM's `qwen3_next_mtp.py`, mlx-vlm's `qwen3_5_mtp`): features =
norm(layers(fc(concat(pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden))))),
where `hidden` is the target's final-normed hidden state and the layers are the target's own
full-attention decoder layers (mlx-lm's classes, so gates, partial rotary and MoE are the
target's). The target's own head turns the features into logits, and the features stand in
for the target's next hidden state when steps are chained.

Found and loaded by `native_mtp.py`. Hugging Face stores the norms zero-centred (weight - 1),
as it does the target's; an MLX conversion stores them as mlx-lm's RMSNorm wants them.
"""

from __future__ import annotations

import re
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import qwen3_5, qwen3_next
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from .native_mtp_config import PREFIX, NativeMTPConfig, WholeVocabulary

# Norms Hugging Face stores zero-centred (weight - 1); mlx-lm's RMSNorm wants the weight itself.
_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight",
          "norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")
_EXPERT = re.compile(r"(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|scales|biases)$")


class Qwen3_5MTP(WholeVocabulary, nn.Module):
    """Qwen3.5 / Qwen3-Next MTP layers; `args` are the target's text model's mlx-lm args."""

    def __init__(self, args: Any, num_layers: int) -> None:
        super().__init__()
        width, eps = args.hidden_size, args.rms_norm_eps
        self.config = NativeMTPConfig(width, args.vocab_size, num_layers)
        layer = qwen3_next.Qwen3NextDecoderLayer if isinstance(args, qwen3_next.ModelArgs) else qwen3_5.DecoderLayer
        full = args.full_attention_interval - 1  # an index whose layer is full attention
        self.pre_fc_norm_embedding = nn.RMSNorm(width, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(width, eps=eps)
        self.fc = nn.Linear(2 * width, width, bias=False)
        self.layers = [layer(args, full) for _ in range(num_layers)]
        self.norm = nn.RMSNorm(width, eps=eps)

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and the target's hidden states at t -> features at t+1."""
        x = mx.concatenate([self.pre_fc_norm_embedding(embeddings), self.pre_fc_norm_hidden(hidden)], axis=-1)
        x = self.fc(x)
        cache = cache or [None] * len(self.layers)
        mask = create_attention_mask(x, cache[0])
        for layer, c in zip(self.layers, cache):
            x = layer(x, mask, c)
        return self.norm(x)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]


def sanitize(weights: dict[str, mx.array], shift_norms: bool) -> dict[str, mx.array]:
    """`mtp.*` tensors -> this module's names: the prefix dropped, zero-centred norms shifted where
    `shift_norms`, and experts stacked as mlx-lm's `switch_mlp` (fused `gate_up_proj` or one per expert)."""
    out = {}
    for key, value in weights.items():
        key = key[len(PREFIX):] if key.startswith(PREFIX) else key
        if shift_norms and key.endswith(_NORMS) and value.ndim == 1:
            value = value + 1.0
        out[key] = value
    for key in [k for k in out if k.endswith(".experts.gate_up_proj")]:
        base = key[: -len(".experts.gate_up_proj")]
        gate, up = mx.split(out.pop(key), 2, axis=-2)
        out[f"{base}.switch_mlp.gate_proj.weight"], out[f"{base}.switch_mlp.up_proj.weight"] = gate, up
        out[f"{base}.switch_mlp.down_proj.weight"] = out.pop(f"{base}.experts.down_proj")
    groups: dict[tuple[str, str, str], dict[int, str]] = {}
    for key in out:
        if match := _EXPERT.fullmatch(key):
            base, expert, projection, suffix = match.groups()
            groups.setdefault((base, projection, suffix), {})[int(expert)] = key
    for (base, projection, suffix), keys in groups.items():
        out[f"{base}.switch_mlp.{projection}.{suffix}"] = mx.stack([out.pop(keys[e]) for e in sorted(keys)])
    return out
