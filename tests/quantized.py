"""The target alone with its keys and values quantized: the reference `--kv-bits` answers are checked against."""

from __future__ import annotations

from mlx_lm.models.cache import make_prompt_cache

from specmlx.caches.kinds import KVBits

from .test_engine_hybrid import greedy_alone


def quantized(model, kv: KVBits | None) -> list:
    """mlx-lm's own cache for `model`, its attention layers quantized as `kv` says."""
    return [kv.layer() if kv is not None and type(c).__name__ in ("KVCache", "RotatingKVCache") else c
            for c in make_prompt_cache(model)]


def alone(model, prompt: list[int], n: int, kv: KVBits | None) -> list[int]:
    """The target alone, greedy, one token a step into its own (quantized) cache."""
    return greedy_alone(model, prompt, n, quantized(model, kv))
