"""The MTP layer MiMo checkpoints ship (`model.mtp_layers.0.*`), as a drafter's network.

One step (vLLM's `mimo_mtp.py`): x = input_proj(concat(hidden_layernorm(hidden),
token_layernorm(embed(token)))), in that order, the reverse of DeepSeek's; one decoder block of the
target's kind (mlx-lm's `mimo.TransformerBlock`, whose tensors sit beside the layer's own, with no
wrapper); then `final_layernorm`, whose output the target's head scores and the next chained step
reads as its hidden state. The token embedding at position 0 is zeroed, as in vLLM. MiMo-7B
declares `num_nextn_predict_layers` 1 or more; the first layer drafts every step.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import mimo
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from .native_mtp_config import PREFIX, NativeMTPConfig, WholeVocabulary

STORED = "model.mtp_layers.0."  # Hugging Face's name for the first MTP layer


class MiMoMTP(WholeVocabulary, mimo.TransformerBlock):
    """MiMo's first MTP layer: the target's block, with its own norms and projection beside it."""

    def __init__(self, args: Any) -> None:
        super().__init__(args)
        width, eps = args.hidden_size, args.rms_norm_eps
        self.config = NativeMTPConfig(width, args.vocab_size, 1)
        self.token_layernorm = nn.RMSNorm(width, eps=eps)
        self.hidden_layernorm = nn.RMSNorm(width, eps=eps)
        self.input_proj = nn.Linear(2 * width, width, bias=False)
        self.final_layernorm = nn.RMSNorm(width, eps=eps)

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and hidden states at t -> features at t+1."""
        cache = cache or [None]
        if cache[0] is None or cache[0].offset == 0:  # position 0 reads no token (vLLM zeroes it)
            embeddings = mx.concatenate([mx.zeros_like(embeddings[:, :1]), embeddings[:, 1:]], axis=1)
        x = self.input_proj(mx.concatenate([self.hidden_layernorm(hidden), self.token_layernorm(embeddings)], axis=-1))
        x = super().__call__(x, create_attention_mask(x, cache[0]), cache[0])
        return self.final_layernorm(x)

    def make_cache(self) -> list[KVCache]:
        return [KVCache()]


def sanitize(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Stored tensors -> this module's names: the first layer's prefix (or `mtp.`) dropped, the
    other layers' left out."""
    return {k.removeprefix(p): v for k, v in weights.items() for p in (STORED, PREFIX) if k.startswith(p)}
