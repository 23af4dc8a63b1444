"""No drafter: plain autoregressive decoding through the same round loop.

The baseline for every speed-up: one target forward per token, and the same
sampling, stats and events as speculative runs.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx

from ..sampling import SamplingParams
from .base import Draft
from .labels import NONE


class NoDrafter:
    name = NONE
    drafts = False
    draft_model, reads_target_cache = None, False

    def fresh(self) -> "NoDrafter":
        return NoDrafter()

    def prefill(self, tokens: Sequence[int]) -> None:
        pass

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Any = None,  # nothing to draw
    ) -> Draft:
        return Draft.empty()

    def rewind(self, length: int) -> None:
        pass

    def adopt(self, source: "NoDrafter | None", length: int) -> int:
        return length  # it holds nothing

    def held_bytes(self) -> int:
        return 0

    def bytes_per_token(self, target: Any) -> int:
        return 0
