"""No drafter: plain autoregressive decoding through the same round loop.

The baseline for every speed-up: one target forward per token, and the same
sampling, stats and events as speculative runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx

from ..sampling import SamplingParams
from .base import Draft, HoldsNothing
from .labels import NONE


class NoDrafter(HoldsNothing):
    name = NONE
    drafts = False

    def may_propose(self, tokens: Sequence[int]) -> bool:
        return False

    def fresh(self) -> "NoDrafter":
        return NoDrafter()

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Any = None,  # nothing to draw
    ) -> Draft:
        return Draft.empty()
