"""Stopping a draft once the drafter is unsure."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest

from specmlx.drafters import ModelDrafter
from specmlx.drafters.confidence import unsure
from specmlx.sampling import SamplingParams

from ..test_engine import PROMPTS

TOP = math.exp(2) / (math.exp(2) + 2)  # top probability of logits [2, 0, 0]: 0.787


@pytest.mark.parametrize("scores", [
    mx.array([2.0, 0.0, 0.0]),  # raw logits
    mx.array([2.0, 0.0, 0.0]) - mx.logsumexp(mx.array([2.0, 0.0, 0.0])),  # log-probabilities
    mx.array([2.0, 0.0, 0.0, -float("inf")]),  # a filtered-out token
])
def test_top_probability_against_the_threshold(scores):
    assert unsure(scores, TOP + 0.01) and not unsure(scores, TOP - 0.01)
    assert not unsure(scores, 0.0)  # 0: never stop


def draft_lengths(drafter: ModelDrafter, prompt: list[int], num_draft: int, p_min: float) -> list[int]:
    drafter.prefill(prompt)
    draft = drafter.draft(prompt, num_draft, SamplingParams(), mx.random.key(0), p_min)
    drafter.rewind(len(prompt) - 1)
    return draft.tokens.tolist()


def test_an_unsure_drafter_proposes_a_prefix_of_its_full_draft(tokenizer, vocab, noisy_drafter):
    drafter = ModelDrafter(noisy_drafter, vocab)
    prompt = tokenizer.encode(PROMPTS[2])
    full = draft_lengths(drafter, prompt, 8, 0.0)
    assert len(full) == 8
    assert draft_lengths(drafter, prompt, 8, 1e-9) == full
    assert draft_lengths(drafter, prompt, 8, 0.999) == full[:1]  # the first step's token is still proposed
    seen = set()
    for p_min in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7):
        tokens = draft_lengths(drafter, prompt, 8, p_min)
        assert tokens == full[: len(tokens)]
        seen.add(len(tokens))
    assert len(seen | {1, 8}) > 2  # some threshold stopped part-way
