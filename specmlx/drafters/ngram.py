"""Prompt lookup: draft by copying what followed an earlier match of the tail.

No model: the n-gram ending the sequence is searched for in the prompt and
the output so far, longest n first, most recent match first. Code edits and
summaries repeat their input, which is where this wins.
"""

from __future__ import annotations

from typing import Any, Sequence

import mlx.core as mx

from ..sampling import SamplingParams
from .base import Draft, HoldsNothing
from .labels import NGRAM


def lookup(tokens: Sequence[int], num_draft: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The up to `num_draft` tokens that followed the latest earlier match of the tail."""
    size = len(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        tail = list(tokens[size - n :])
        # Scan backwards so the most recent match wins; skip the tail itself.
        for start in range(size - n - 1, -1, -1):
            if tokens[start] == tail[0] and list(tokens[start : start + n]) == tail:
                follow = tokens[start + n : start + n + num_draft]
                if follow:
                    return list(follow)
    return []


class PromptLookupDrafter(HoldsNothing):
    """Deterministic drafter: its q is one-hot, so verification stays exact."""
    name = NGRAM
    drafts = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def fresh(self) -> "PromptLookupDrafter":
        return PromptLookupDrafter(self.max_ngram, self.min_ngram)

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Any = None,  # a copy from the context: verified, its forbidden tokens rejected
    ) -> Draft:
        found = lookup(tokens, num_draft, self.max_ngram, self.min_ngram)
        if not found:
            return Draft.empty()
        return Draft(mx.array(found, dtype=mx.uint32))
