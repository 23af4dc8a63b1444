"""Prompt lookup: draft by copying what followed an earlier match of the tail.

No model: the n-gram ending the sequence is searched for in the prompt and
the output so far, longest n first, most recent match first. Code edits and
summaries repeat their input, which is where this wins.
"""

from __future__ import annotations

from array import array
from typing import Any, Sequence

import mlx.core as mx

from ..sampling import SamplingParams
from ..schedule.widths import cut
from .base import Draft, HoldsNothing
from .labels import NGRAM


def lookup(tokens: Sequence[int], num_draft: int, max_ngram: int, min_ngram: int) -> list[int]:
    """The up to `num_draft` tokens that followed the latest earlier match of the tail."""
    size = len(tokens)
    packed = _packed(tokens)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        start = _latest(packed, size - n, size - 1)
        if start is not None:
            return list(tokens[start + n : start + n + num_draft])
    return []


def may_match(tokens: Sequence[int], min_ngram: int) -> bool:
    """Whether a lookup could find anything once one more token, whichever, follows `tokens`. Its
    tail then ends with that token, so the `min_ngram - 1` tokens before it must occur earlier,
    followed by a token: when they do not, the next round is known to propose nothing before its
    token is drawn, and its forward can start first (`generation.overlaps`)."""
    size = len(tokens)
    if size < max(min_ngram, 1):
        return False
    return min_ngram <= 1 or _latest(_packed(tokens), size - min_ngram + 1, size - 1) is not None


def _packed(tokens: Sequence[int]) -> bytes:
    """The tokens as 4-byte words: one C search (`bytes.rfind`) per tail instead of a Python loop
    over the context, which at an agent's 20K tokens cost milliseconds a round, a GPU step's worth."""
    return array("I", tokens).tobytes()


def _latest(packed: bytes, tail: int, end: int) -> int | None:
    """Where the latest occurrence of the tokens from `tail` on starts, among those that end before
    token `end`; None if there is none. A byte match off a word boundary is no match: search on."""
    needle, stop = packed[4 * tail :], 4 * end
    while (at := packed.rfind(needle, 0, stop)) >= 0:
        if at % 4 == 0:
            return at // 4
        stop = at + len(needle) - 1
    return None


class PromptLookupDrafter(HoldsNothing):
    """Deterministic drafter: its q is one-hot, so verification stays exact."""
    name = NGRAM
    drafts = True

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def may_propose(self, tokens: Sequence[int]) -> bool:
        return may_match(tokens, self.min_ngram)

    def fresh(self) -> "PromptLookupDrafter":
        return PromptLookupDrafter(self.max_ngram, self.min_ngram)

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Any = None,  # a copy from the context: verified, its forbidden tokens rejected
    ) -> Draft:
        found = cut(lookup(tokens, num_draft, self.max_ngram, self.min_ngram))
        if not found:
            return Draft.empty()
        return Draft(mx.array(found, dtype=mx.uint32))
