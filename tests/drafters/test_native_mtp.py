"""The MTP layers a Qwen3.5 / Qwen3-Next / Nemotron-H / DeepSeek-V3 / GLM-4.5 / GLM-4.7-Flash / MiMo
checkpoint ships, drafting through the engine for its target: greedy output is the target's own, its
cache holds only real positions after each generation, and above temperature 0 the target's
distribution is kept."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters import Draft
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.hidden import decoder, embed
from specmlx.models.nemotron_h_mtp import NemotronHMTP
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

from .. import tiny_hybrid
from ..test_engine_distribution import chi_square_pvalue, exact_distribution, sample_sequences
from ..test_engine_hybrid import PROMPT, VOCAB, greedy_alone

BUILDS = {"qwen3_5": tiny_hybrid.tiny_qwen3_5, "qwen3_5_moe": tiny_hybrid.tiny_qwen3_5_moe,
          "qwen3_next": tiny_hybrid.tiny_qwen3_next, "nemotron_h": tiny_hybrid.tiny_nemotron_h_moe,
          "deepseek_v3": tiny_hybrid.tiny_deepseek_v3, "glm4_moe": tiny_hybrid.tiny_glm4_moe,
          "glm4_moe_lite": tiny_hybrid.tiny_glm4_moe_lite, "mimo": tiny_hybrid.tiny_mimo}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def target(request):
    return BUILDS[request.param](VOCAB, seed=1)


LAYERS = {"nemotron_h": tiny_hybrid.tiny_nemotron_h_mtp, "mimo": tiny_hybrid.tiny_mimo_mtp,
          "deepseek_v3": tiny_hybrid.tiny_deepseek_v3_mtp, "glm4_moe": tiny_hybrid.tiny_deepseek_v3_mtp,
          "glm4_moe_lite": tiny_hybrid.tiny_deepseek_v3_mtp}


def layers(target, guesses: bool = True):
    """The MTP layers of the target's architecture (Qwen3.5's for the Qwen family), random (`guesses`:
    some drafts accepted)."""
    return LAYERS.get(target.model_type, tiny_hybrid.tiny_native_mtp)(target, seed=2, guesses=guesses)


@pytest.mark.parametrize("num_draft", [1, 3])
def test_greedy_output_is_the_target_alone(target, num_draft):
    drafter = NativeMTPDrafter(layers(target), VOCAB)
    engine = Engine(target, drafter, eos_token_ids=[])
    generation = engine.generate(PROMPT, GenerationConfig(max_tokens=40, policy=DraftPolicy(num_draft=num_draft)))
    assert [e.token for e in generation.token_events()] == greedy_alone(target, PROMPT, 40)
    assert 0 < generation.stats.accepted < generation.stats.drafted  # rounds rewound at every depth


def test_the_automatic_length_stays_exact(target):
    mtp = layers(target)
    engine = Engine(target, NativeMTPDrafter(mtp, VOCAB), eos_token_ids=[])
    generation = engine.generate(PROMPT, GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=None)))
    assert [e.token for e in generation.token_events()] == greedy_alone(target, PROMPT, 30)


def test_after_a_generation_its_cache_holds_only_real_positions(target):
    drafter = NativeMTPDrafter(layers(target), VOCAB)
    engine = Engine(target, drafter, eos_token_ids=[])
    for max_tokens in (7, 19):
        list(engine.generate(PROMPT, GenerationConfig(max_tokens=max_tokens, policy=DraftPolicy(num_draft=3))))
        assert drafter.history.length == engine.cache_length()
        assert drafter.cache.length <= drafter.real <= len(engine.context) - 1


def test_after_each_round_its_cache_holds_what_a_fresh_feed_of_the_committed_tokens_gives(target):
    """Entry j of its cache: token j+1 and the target's hidden state at j, as one forward over the
    committed tokens (with the target's hidden states of a fresh prefill) computes them, within
    float32 tolerance. A rewind one position late, or entries left from the MTP's own features, fail."""
    drafter = NativeMTPDrafter(layers(target), VOCAB)
    engine = Engine(target, drafter, eos_token_ids=[])
    rounds = 0
    for _ in engine.generate(PROMPT, GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=3))):
        n = drafter.cache.length
        context = engine.context
        hidden = decoder(target, mx.array([context[:n]]), make_prompt_cache(target))
        fresh = drafter.model.make_cache()
        drafter.model(embed(target, mx.array(context[1 : n + 1]))[None], hidden, fresh)
        for mine, want in zip(drafter.cache, fresh):
            assert mx.allclose(mine.keys[..., :n, :], want.keys[..., :n, :], atol=1e-4)
            assert mx.allclose(mine.values[..., :n, :], want.values[..., :n, :], atol=1e-4)
        rounds += n > 0
    assert rounds > 5


def test_a_fresh_drafter_shares_the_layers_and_starts_empty(target):
    drafter = NativeMTPDrafter(layers(target, guesses=False), VOCAB, name="mtp")
    other = drafter.fresh()
    assert other.model is drafter.model and other.name == "mtp" and other.history.length == 0


SAMPLING = SamplingParams(temp=1.0)
SMALL = 5  # the chi-square test's vocabulary (test_engine_distribution)


@pytest.fixture(scope="module", params=["qwen3_5", "nemotron_h", "deepseek_v3", "glm4_moe", "mimo"])
def small_pair(request):
    target = tiny_hybrid.sharpened(BUILDS[request.param](SMALL, seed=7), 0.5)
    return target, layers(target, guesses=False)


def test_the_target_distribution_is_kept_above_temperature_0(small_pair):
    target, mtp = small_pair
    samples, rounds_per_run = sample_sequences(Engine(target, NativeMTPDrafter(mtp, SMALL), eos_token_ids=[]),
                                               SAMPLING)
    assert 1 < rounds_per_run < 3  # multi-round, with both accepts and rejections
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) > 1e-3


class Misreporting(NativeMTPDrafter):
    """The planted bias: samples from q but reports q as uniform."""

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0, allowed=None) -> Draft:
        draft = super().draft(tokens, num_draft, sampling, key, p_min, allowed)
        return draft if draft.probs is None else Draft(draft.tokens, mx.full(draft.probs.shape, 1 / SMALL))


def test_the_check_detects_a_planted_bias(small_pair):
    target, mtp = small_pair
    samples, _ = sample_sequences(Engine(target, Misreporting(mtp, SMALL), eos_token_ids=[]), SAMPLING)
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING)) < 1e-3



def test_nemotron_h_mtp_blocks_with_a_mamba_mixer_are_refused():
    target = BUILDS["nemotron_h"](VOCAB, seed=1)
    with pytest.raises(SpecmlxError, match=r"^Nemotron-H MTP blocks 'M\*': specmlx runs attention, MoE and MLP"):
        NemotronHMTP(target.args, "M*")


def test_mimos_step_is_the_one_vllm_runs():
    """No reference drafter runs MiMo's layer; vLLM's `mimo_mtp.py` step written out from its modules
    instead: token embedding zeroed at position 0 only, `input_proj` over [hidden_layernorm(hidden),
    token_layernorm(embedding)], the target's block, `final_layernorm`; fed in two calls, as drafting
    feeds it."""
    from mlx_lm.models import mimo
    from mlx_lm.models.base import create_attention_mask

    target = tiny_hybrid.tiny_mimo(VOCAB, seed=1)
    mtp = tiny_hybrid.tiny_mimo_mtp(target, seed=2)
    mx.random.seed(3)
    embeddings, hidden = mx.random.normal((2, 1, 7, 64))
    zeroed = embeddings * (mx.arange(7) > 0)[None, :, None]
    x = mtp.input_proj(mx.concatenate([mtp.hidden_layernorm(hidden), mtp.token_layernorm(zeroed)], axis=-1))
    want = mtp.final_layernorm(mimo.TransformerBlock.__call__(mtp, x, create_attention_mask(x, None)))
    cache = mtp.make_cache()
    got = mx.concatenate([mtp(embeddings[:, :5], hidden[:, :5], cache), mtp(embeddings[:, 5:], hidden[:, 5:], cache)],
                         axis=1)
    assert mx.allclose(got, want, atol=1e-5).item()
