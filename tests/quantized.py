"""The target alone with its keys and values quantized: the reference `--kv-bits` answers are checked against."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from specmlx.caches.kinds import KVBits


def quantized(model, kv: KVBits | None) -> list:
    """mlx-lm's own cache for `model`, its attention layers quantized as `kv` says."""
    return [kv.layer() if kv is not None and type(c).__name__ in ("KVCache", "RotatingKVCache") else c
            for c in make_prompt_cache(model)]


def alone(model, prompt: list[int], n: int, kv: KVBits | None) -> list[int]:
    """The target alone, greedy, one token a step into its own (quantized) cache."""
    cache = quantized(model, kv)
    logits = model(mx.array([prompt]), cache=cache)[0, -1]
    out = []
    for _ in range(n):
        out.append(mx.argmax(logits).item())
        logits = model(mx.array([[out[-1]]]), cache=cache)[0, -1]
    return out
