"""Turning logits into the distribution a token is drawn from.

Rejection sampling is exact only if the target's p and the drafter's q come from
the same warp, so both go through `warp` here. The filters are mlx-lm's own, in
the order its `make_sampler` applies them, so plain decoding here samples from
the same distribution mlx-lm does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from .errors import SpecmlxError


@dataclass(frozen=True)
class SamplingParams:
    """Temperature and truncation; `temp == 0` means greedy decoding."""

    temp: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temp) and self.temp >= 0):
            raise SpecmlxError(f"temperature must be >= 0, got {self.temp}")
        if not (0 < self.top_p <= 1):
            raise SpecmlxError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SpecmlxError(f"top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not (0 <= self.min_p <= 1):
            raise SpecmlxError(f"min-p must be in [0, 1], got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temp == 0


def warp(logits: mx.array, params: SamplingParams) -> mx.array:
    """Log-probabilities (float32, shape of `logits`) of the distribution to sample.

    Float32 throughout: p/q ratios of bf16 probabilities underflow.
    Tokens cut by top-p, top-k or min-p get -inf.
    """
    logprobs = logits.astype(mx.float32)
    logprobs = logprobs - mx.logsumexp(logprobs, axis=-1, keepdims=True)
    if params.top_p < 1:
        logprobs = apply_top_p(logprobs, params.top_p)
    if params.min_p > 0:
        logprobs = apply_min_p(logprobs, params.min_p)
    if 0 < params.top_k < logprobs.shape[-1]:
        logprobs = apply_top_k(logprobs, params.top_k)
    logprobs = logprobs * (1.0 / params.temp)
    return logprobs - mx.logsumexp(logprobs, axis=-1, keepdims=True)


def sample(logprobs: mx.array, key: mx.array) -> mx.array:
    """Draw one token per row of `logprobs` (Gumbel-max: exactly softmax(logprobs))."""
    return mx.random.categorical(logprobs, axis=-1, key=key)
