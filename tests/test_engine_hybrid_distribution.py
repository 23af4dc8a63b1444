"""Above temperature 0 a hybrid target's output distribution is its own: seeded speculative runs
over a five-token vocabulary, with rejections that rewind its recurrent layers (Gated DeltaNet,
Mamba-2), match the exact distribution by a chi-square test; a rewind one position late is
caught by the same test."""

from __future__ import annotations

import pytest

from specmlx.drafters import ModelDrafter, PromptLookupDrafter
from specmlx.engine import Engine
from specmlx.caches.recurrent import RecurrentCache
from specmlx.sampling import SamplingParams

from . import tiny, tiny_hybrid
from .test_engine_distribution import LENGTH, VOCAB, chi_square_pvalue, exact_distribution, sample_sequences

SAMPLING = SamplingParams(temp=1.0)


def hybrid_pair(build):
    target = tiny_hybrid.sharpened(build(VOCAB, seed=7), 0.5)  # sharpness 2 in all
    return target, tiny.perturbed(target, target.args, noise=0.6, seed=8)


@pytest.fixture(scope="module")
def pair():
    return hybrid_pair(tiny_hybrid.tiny_qwen3_5)


@pytest.mark.parametrize("build", [tiny_hybrid.tiny_qwen3_5, tiny_hybrid.tiny_nemotron_h], ids=["qwen3_5", "nemotron_h"])
def test_a_hybrid_drafter_keeps_the_hybrid_target_distribution(build):
    target, drafter = hybrid_pair(build)
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    samples, rounds_per_run = sample_sequences(engine, SAMPLING)
    assert 1 < rounds_per_run < LENGTH  # multi-round, with both accepts and rejections
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) > 1e-3


def test_prompt_lookup_keeps_the_hybrid_target_distribution(pair):
    target, _ = pair
    samples, _ = sample_sequences(Engine(target, PromptLookupDrafter(), eos_token_ids=[]), SAMPLING)
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) > 1e-3


def test_the_check_detects_a_rewind_one_position_late(pair, monkeypatch):
    """The planted bias: a recurrent layer's state one position past the length it reports."""
    target, drafter = pair
    trim = RecurrentCache.trim

    def late(self, n):
        if n >= 1 and self.reachable(self.offset - n + 1) == self.offset - n + 1:
            trim(self, n - 1)
            self.offset -= 1
            return n
        return trim(self, n)

    monkeypatch.setattr(RecurrentCache, "trim", late)
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    samples, _ = sample_sequences(engine, SAMPLING)
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) < 1e-3
