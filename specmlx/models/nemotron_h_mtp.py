"""The MTP layers Nemotron-H checkpoints ship (`mtp.*`), as a drafter's network.

One step (mlx-vlm's `nemotron_h_mtp`, 0.7.10): x = eh_proj(concat(enorm(embed(token)), hnorm(hidden)))
on the first block, then the blocks of `mtp_hybrid_override_pattern` (attention `*` and MoE `E`,
mlx-lm's own `NemotronHBlock`s), then the last block's `final_layernorm`; `hidden` is the target's
final-normed hidden state, and the target's head scores the result. Its norms are plain RMSNorms
(no zero-centred convention), and its experts are stored one tensor each, as the target's are.
"""

from __future__ import annotations

import re
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache
from mlx_lm.models.nemotron_h import NemotronHBlock

from ..errors import SpecmlxError
from .native_mtp_config import PREFIX, NativeMTPConfig, WholeVocabulary

_EXPERT = re.compile(r"(.*)\.experts\.(\d+)\.(up_proj|down_proj)\.weight$")
_STACKED = {"up_proj": "fc1", "down_proj": "fc2"}  # mlx-lm's names for the stacked experts
_KINDS = "*E-"  # attention, MoE, MLP: the blocks an MTP step can run (only attention keeps a cache)


class NemotronHMTP(WholeVocabulary, nn.Module):
    """Nemotron-H MTP blocks; `args` are the target's mlx-lm args, `pattern` the MTP's block types."""

    def __init__(self, args: Any, pattern: str) -> None:
        super().__init__()
        if not pattern or set(pattern) - set(_KINDS):  # a Mamba block would need a state rewound as well
            raise SpecmlxError(f"Nemotron-H MTP blocks {pattern!r}: specmlx runs attention, MoE and MLP blocks "
                               f"({_KINDS}) only")
        width, eps = args.hidden_size, args.layer_norm_epsilon
        self.config = NativeMTPConfig(width, args.vocab_size, len(pattern))
        self.layers = [NemotronHBlock(args, kind) for kind in pattern]
        first, last = self.layers[0], self.layers[-1]
        first.enorm = nn.RMSNorm(width, eps=eps)
        first.hnorm = nn.RMSNorm(width, eps=eps)
        first.eh_proj = nn.Linear(2 * width, width, bias=False)
        last.final_layernorm = nn.RMSNorm(width, eps=eps)

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and the target's hidden states at t -> features at t+1."""
        first = self.layers[0]
        x = first.eh_proj(mx.concatenate([first.enorm(embeddings), first.hnorm(hidden)], axis=-1))
        caches = iter(cache or [None] * len(self.make_cache()))
        mask = create_attention_mask(x, cache[0] if cache else None)
        for layer in self.layers:
            x = layer(x, mask, next(caches) if layer.block_type == "*" else None)
        return self.layers[-1].final_layernorm(x)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for layer in self.layers if layer.block_type == "*"]


def pattern(config: dict) -> str:
    """The MTP's block types: `mtp_hybrid_override_pattern`, or `mtp_layers_block_type` spelled out."""
    chars = config.get("mtp_hybrid_override_pattern")
    if chars is None:
        names = {"attention": "*", "moe": "E", "mlp": "-", "mamba": "M"}
        chars = "".join(names[t] for t in config.get("mtp_layers_block_type") or [])
    return "".join(chars)


def sanitize(weights: dict[str, mx.array], shift_norms: bool = False) -> dict[str, mx.array]:
    """`mtp.*` tensors -> this module's names: the prefix dropped, attention's K/V scales dropped, and
    experts stacked as mlx-lm stacks the target's. `shift_norms` is unused: its norms are plain."""
    out = {k.removeprefix(PREFIX): v for k, v in weights.items() if not k.endswith((".k_scale", ".v_scale"))}
    groups: dict[tuple[str, str], dict[int, str]] = {}
    for key in out:
        if match := _EXPERT.fullmatch(key):
            base, expert, projection = match.groups()
            groups.setdefault((base, projection), {})[int(expert)] = key
    for (base, projection), keys in groups.items():
        out[f"{base}.switch_mlp.{_STACKED[projection]}.weight"] = mx.stack([out.pop(keys[e]) for e in sorted(keys)])
    return out
