"""The target's keys and values kept at 8 or 4 bits (`--kv-bits`): speculation stays exact against the target
alone with the same quantized cache. Greedy output equals its own, with a model drafter, an MTP head and prompt
lookup, for a transformer and a hybrid (its attention layers quantized); above temperature 0 the distribution is
its own (chi-square, with a drafter that misreports q as the planted-bias control). Without the quantization the
answer differs, so the tests see that it is applied."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from specmlx.caches.kinds import KVBits
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

from . import tiny, tiny_hybrid
from .quantized import alone, quantized
from .test_engine_distribution import (LENGTH, PROMPT as SHORT, MisreportingDrafter, chi_square_pvalue,
                                       sample_sequences)

VOCAB = 64
PROMPT = random.Random(0).choices(range(VOCAB), k=40) * 2  # repeats: prompt lookup finds drafts
TOKENS = 24
GROUP = 32  # the tiny models' heads are 32 wide


def answer(engine: Engine, prompt: list[int], num_draft: int = 3) -> list[int]:
    run = engine.generate(prompt, GenerationConfig(max_tokens=TOKENS, policy=DraftPolicy(num_draft=num_draft)))
    return [e.token for e in run.token_events()]


@pytest.fixture(scope="module")
def qwen():
    """A target flat enough (sharpness 1) that its quantized keys change its greedy answer."""
    return tiny.build(tiny.qwen2_args(VOCAB, hidden=128), seed=1, sharpness=1.0)


@pytest.mark.parametrize("bits", [8, 4])
def test_greedy_is_the_target_alone_with_the_same_quantized_cache_whatever_drafts(qwen, bits):
    kv = KVBits(bits, GROUP)
    expected = alone(qwen, PROMPT, TOKENS, kv)
    assert expected != alone(qwen, PROMPT, TOKENS, None)  # the negative control: a float cache answers otherwise
    head = tiny.mtp(qwen.args, seed=2)
    drafters = [NoDrafter(), PromptLookupDrafter(), ModelDrafter(tiny.perturbed(qwen, qwen.args, 0.5, seed=3), VOCAB),
                MTPDrafter(head, VOCAB)]
    for drafter in drafters:
        engine = Engine(qwen, drafter, eos_token_ids=[], kv=kv)
        run = engine.generate(PROMPT, GenerationConfig(max_tokens=TOKENS, policy=DraftPolicy(num_draft=3)))
        assert [e.token for e in run.token_events()] == expected, type(drafter).__name__
        if not isinstance(drafter, NoDrafter):
            assert run.stats.drafted > 0


def test_a_hybrids_attention_layers_are_quantized_and_its_rewinds_stay_exact():
    hybrid = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=1, head_dim=32)
    kv = KVBits(4, GROUP)
    expected = alone(hybrid, PROMPT, TOKENS, kv)
    for drafter in (PromptLookupDrafter(), ModelDrafter(tiny_hybrid.tiny_qwen3_5(VOCAB, seed=4, head_dim=32), VOCAB)):
        assert answer(Engine(hybrid, drafter, eos_token_ids=[], kv=kv), PROMPT) == expected, type(drafter).__name__


def test_quantized_keys_and_values_take_what_their_bits_say(qwen):
    """Per position a head of 32 float32 values takes 128 bytes; at 8 bits 32, at 4 bits 16, and a scale and
    a bias (float32) per group of 32: 40 and 24 bytes."""
    held = {}
    for bits in (None, 8, 4):
        engine = Engine(qwen, NoDrafter(), eos_token_ids=[], kv=None if bits is None else KVBits(bits, GROUP))
        engine.prefill(PROMPT)
        held[bits] = engine.cache.held_bytes()
    assert held[8] / held[None] == pytest.approx(40 / 128) and held[4] / held[None] == pytest.approx(24 / 128)


class ReadsTargetCache(ModelDrafter):
    """A drafter that reads the target's keys and values (as a Gemma 4 assistant does)."""

    reads_target_cache = True


def test_what_cannot_be_quantized_is_one_line(qwen):
    narrow = tiny.tiny_qwen(VOCAB, seed=1)  # heads of 16: no group of 32 fits
    with pytest.raises(SpecmlxError, match="cannot keep its keys and values at 8 bits in groups of 32"):
        Engine(narrow, NoDrafter(), eos_token_ids=[], kv=KVBits(8, GROUP))
    with pytest.raises(SpecmlxError, match="reads the target's keys and values, which --kv-bits keeps quantized"):
        Engine(qwen, ReadsTargetCache(qwen, VOCAB), eos_token_ids=[], kv=KVBits(8, GROUP))


# -- above temperature 0 ------------------------------------------------------------------------------------

SMALL = 5  # the distribution test's vocabulary: every 3-token continuation enumerated


@pytest.fixture(scope="module")
def pair():
    args = tiny.qwen2_args(SMALL, layers=1, hidden=128)
    target = tiny.build(args, seed=7, sharpness=2.0)
    return target, tiny.perturbed(target, args, noise=0.6, seed=8)


def exact_quantized(target, sampling: SamplingParams, kv: KVBits) -> dict[tuple[int, ...], float]:
    """P(x1..xL | prompt) under the target with its keys and values quantized, by a forward of every
    sequence at once into a fresh quantized cache (each position's keys are quantized on their own, so
    this is the cache a generation fills position by position)."""
    import itertools

    import numpy as np

    from specmlx.sampling import warp

    seqs = list(itertools.product(range(SMALL), repeat=LENGTH))
    batch = mx.array([SHORT + list(seq[:-1]) for seq in seqs])
    p = mx.exp(warp(target(batch, cache=quantized(target, kv))[:, len(SHORT) - 1:], sampling))
    chosen = mx.take_along_axis(p, mx.array(seqs)[..., None], axis=-1)[..., 0]
    return dict(zip(seqs, np.prod(np.array(chosen, dtype=np.float64), axis=-1).tolist()))


@pytest.mark.parametrize("misreports", [False, True], ids=["exact", "planted bias"])
def test_above_temperature_zero_the_distribution_is_the_quantized_targets(pair, misreports):
    target, draft_model = pair
    kv, sampling = KVBits(4, GROUP), SamplingParams(temp=1.0)
    drafter = MisreportingDrafter(draft_model, SMALL) if misreports else ModelDrafter(draft_model, SMALL)
    if misreports:
        drafter.blend = 0.2
    samples, rounds = sample_sequences(Engine(target, drafter, eos_token_ids=[], kv=kv), sampling)
    assert 1 < rounds < LENGTH
    p = chi_square_pvalue(samples, exact_quantized(target, sampling, kv))
    assert (p < 1e-3) if misreports else (p > 1e-3)
