"""The drafter of a rank that does not draft: rank 0's draft reaches it through the lockstep."""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from ..drafters import Draft
from ..sampling import SamplingParams


class Follower:
    """Holds no weights and proposes nothing itself; named after rank 0's
    drafter so that every rank's stats say what drafted. Not a `NoDrafter`:
    code that plans by drafter kind (the bench's runs) must plan the same on
    every rank, and rank 0's drafter does draft."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fresh(self) -> "Follower":
        return Follower(self.name)

    def prefill(self, tokens: Sequence[int]) -> None:
        pass

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0) -> Draft:
        return Draft.empty()

    def rewind(self, length: int) -> None:
        pass
