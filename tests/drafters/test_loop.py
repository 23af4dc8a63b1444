"""The drafting loop's overlap: starting each step early changes no draft, and starts every step."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.drafters import ModelDrafter
from specmlx.drafters import loop
from specmlx.sampling import SamplingParams


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temp=0.8)], ids=["greedy", "sampled"])
def test_overlapped_steps_draft_what_unoverlapped_ones_do(monkeypatch, vocab, noisy_drafter, sampling):
    tokens = list(range(3, 20))
    started: list[int] = []
    real = mx.async_eval

    def spy(*arrays):
        started.append(len(arrays))
        real(*arrays)

    monkeypatch.setattr(mx, "async_eval", spy)
    drafts = {}
    for overlap in (False, True):
        monkeypatch.setattr(loop, "overlaps_steps", lambda: overlap)
        drafter = ModelDrafter(noisy_drafter, vocab)
        drafter.prefill(tokens)
        draft = drafter.draft(tokens, 5, sampling, mx.random.key(7))
        drafts[overlap] = (draft.tokens.tolist(), None if draft.probs is None else draft.probs.tolist())
    assert drafts[True] == drafts[False]
    assert started == [1] * 5  # one early start a step, and none without the overlap
