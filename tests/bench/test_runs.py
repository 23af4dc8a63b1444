"""The three modes on tiny random models, and mlx-lm's rounds from `from_draft` flags."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.bench.runs import count_rounds, run_mlx_lm_spec, run_specmlx, run_target
from specmlx.caches.kinds import KVBits
from specmlx.drafters import ModelDrafter, PromptLookupDrafter
from specmlx.policy import DraftPolicy

from .. import tiny
from ..quantized import alone

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
T, F = True, False


# -- count_rounds: pure, on hand-written flags ------------------------------------


def test_each_false_flag_ends_a_round():
    # rounds: [T T F] [F] [T F] -> 3 rounds, 3 accepted drafts, 6 tokens
    count = count_rounds([T, T, F, F, T, F], num_draft=2, max_tokens=100)
    assert (count.rounds, count.accepted, count.drafted, count.tokens) == (3, 3, 6, 6)
    assert count.tokens / count.rounds == 2.0  # mlx-lm's mean accepted length


def test_a_trailing_run_of_drafts_is_a_round_cut_short():
    # [T T F] [F] [T F] [T]: the last round hit max_tokens = 7 with 1 token left to draft
    count = count_rounds([T, T, F, F, T, F, T], num_draft=2, max_tokens=7)
    assert (count.rounds, count.accepted, count.drafted, count.tokens) == (4, 4, 7, 7)
    assert count.tokens / count.rounds == pytest.approx(1.75)


def test_all_accepted_and_none_accepted():
    all_in = count_rounds([T, T, T, F] * 3, num_draft=3, max_tokens=12)
    assert (all_in.rounds, all_in.accepted, all_in.drafted) == (3, 9, 9)
    none_in = count_rounds([F] * 5, num_draft=4, max_tokens=5)
    # mlx-lm drafts min(k, tokens left): 4, 4, 3, 2, 1
    assert (none_in.rounds, none_in.accepted, none_in.drafted) == (5, 0, 14)
    assert count_rounds([], num_draft=4, max_tokens=8).rounds == 0


def test_rounds_are_counted_by_their_drafted_tokens():
    """A round's verify scores its drafts + 1 rows: what its forwards cost. mlx-lm drafts min(k, left)."""
    assert count_rounds([F] * 5, num_draft=4, max_tokens=5).drafted_histogram == (0, 1, 1, 1, 2)
    assert count_rounds([T, T, F, F], num_draft=2, max_tokens=100).drafted_histogram == (0, 0, 2)


# -- the modes on tiny models -----------------------------------------------------


def greedy(model, prompt: list[int], n: int, eos: set[int]) -> list[int]:
    out = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=n):
        if int(token) in eos:
            break
        out.append(int(token))
    return out


@pytest.fixture
def wrapped(tokenizer):
    return TokenizerWrapper(tokenizer)


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_tokens_agree_across_modes(wrapped, target, noisy_drafter, vocab, k):
    prompt = wrapped.encode(PROMPT)
    expected = greedy(target, prompt, 20, wrapped.eos_token_ids)
    args = dict(prompt_id="p", prompt=prompt, temp=0.0, max_tokens=20, seed=0)
    alone = run_target(target, wrapped, **args)
    mlx_spec = run_mlx_lm_spec(target, wrapped, noisy_drafter, "noisy", num_draft=k, **args)
    ours = run_specmlx(target, wrapped, ModelDrafter(noisy_drafter, vocab, "noisy"), "noisy",
                       num_draft=k, **args)
    for m in (alone, mlx_spec, ours):
        assert list(m.tokens) == expected, m.mode
        assert m.decode_s > 0
        assert m.round_tokens == m.generated + (m.finish_reason == "eos")
        assert 0 <= m.accepted <= m.drafted <= k * m.rounds
    assert alone.rounds == alone.round_tokens and alone.drafted == 0
    assert mlx_spec.rounds < alone.rounds  # the noisy copy does get drafts accepted
    assert alone.drafted_histogram == (alone.rounds,) and alone.drafter_steps == 0
    for m in (mlx_spec, ours):  # every round counted at its width, a drafter forward per drafted token
        assert sum(m.drafted_histogram) == m.rounds and m.drafter_steps == m.drafted
        assert sum(n * c for n, c in enumerate(m.drafted_histogram)) == m.drafted


def test_copied_proposals_take_no_drafter_step(wrapped, target, noisy_drafter, vocab):
    """+lookup copies from the context before the drafter runs: those rounds cost no drafter forward."""
    prompt = wrapped.encode(PROMPT * 2)
    m = run_specmlx(target, wrapped, ModelDrafter(noisy_drafter, vocab, "noisy"), "noisy", prompt_id="p",
                    prompt=prompt, temp=0.0, num_draft=1, max_tokens=16, seed=0, policy=DraftPolicy(lookup=2))
    assert sum(m.drafted_histogram) == m.rounds and m.drafter_steps < m.drafted


def test_a_model_drafting_for_itself_in_mlx_lm_has_every_draft_accepted(wrapped, target):
    prompt = wrapped.encode(PROMPT)
    m = run_mlx_lm_spec(target, wrapped, target, "self", prompt_id="p", prompt=prompt,
                        temp=0.0, num_draft=3, max_tokens=12, seed=0)
    assert m.finish_reason == "length"
    assert (m.rounds, m.accepted, m.drafted, m.round_tokens) == (3, 9, 9, 12)  # [T T T F] x 3


def test_every_mode_stops_at_eos_without_counting_it(tokenizer, target, noisy_drafter, vocab):
    prompt = tokenizer.encode(PROMPT)
    plain = greedy(target, prompt, 12, {tokenizer.eos_token_id})
    assert len(plain) >= 6, "the tiny target should not end this prompt at once"
    stop_at = next(i for i in range(3, len(plain)) if plain[i] not in plain[:i])
    wrapped = TokenizerWrapper(tokenizer, eos_token_ids=[plain[stop_at]])
    args = dict(prompt_id="p", prompt=prompt, temp=0.0, max_tokens=12, seed=0)
    runs = [run_target(target, wrapped, **args),
            run_mlx_lm_spec(target, wrapped, noisy_drafter, "noisy", num_draft=2, **args),
            run_specmlx(target, wrapped, ModelDrafter(noisy_drafter, vocab, "noisy"), "noisy",
                        num_draft=2, **args)]
    for m in runs:
        assert list(m.tokens) == plain[:stop_at], m.mode
        assert m.finish_reason == "eos"
        assert m.round_tokens >= stop_at + 1  # the rounds did produce the EOS


def test_sampled_runs_are_reproducible_by_seed(wrapped, target):
    prompt = wrapped.encode(PROMPT)
    args = dict(prompt_id="p", prompt=prompt, temp=0.8, max_tokens=16)
    assert run_target(target, wrapped, seed=3, **args).tokens == run_target(target, wrapped, seed=3, **args).tokens
    ours = [run_specmlx(target, wrapped, PromptLookupDrafter(), "ngram", num_draft=2, seed=3, **args)
            for _ in range(2)]
    assert ours[0].tokens == ours[1].tokens
    # ... and by the seed, not in spite of it: other seeds sample other tokens.
    # (Each output is a function of its seed; among four seeds, some two differ.)
    seeds = (3, 4, 5, 6)
    alone = {run_target(target, wrapped, seed=seed, **args).tokens for seed in seeds}
    assert len(alone) > 1
    ours = {run_specmlx(target, wrapped, PromptLookupDrafter(), "ngram", num_draft=2, seed=seed, **args).tokens
            for seed in seeds}
    assert len(ours) > 1


def test_profiled_specmlx_splits_its_decode_time(wrapped, target, noisy_drafter, vocab):
    prompt = wrapped.encode(PROMPT)
    m = run_specmlx(target, wrapped, ModelDrafter(noisy_drafter, vocab, "noisy"), "noisy", prompt_id="p",
                    prompt=prompt, temp=0.0, num_draft=2, max_tokens=10, seed=0, profile=True)
    assert m.split is not None and m.split.rounds == m.rounds
    assert m.split.draft_s > 0 and m.split.verify_s > 0 and m.split.other_s >= 0
    assert m.split.draft_s + m.split.verify_s <= m.decode_s + 1e-6
    unprofiled = run_specmlx(target, wrapped, PromptLookupDrafter(), "ngram", prompt_id="p",
                             prompt=prompt, temp=0.0, num_draft=2, max_tokens=10, seed=0)
    assert unprofiled.split is None


# -- --kv-bits: every mode keeps the target's keys and values quantized, the baseline included -----------------


@pytest.fixture(scope="module")
def wide(vocab):
    """A target flat enough (sharpness 1) that quantized keys change its greedy answer, with heads of 32
    (a group of 32 quantizes them), and a noisy copy drafting."""
    args = tiny.qwen2_args(vocab, hidden=128)
    target = tiny.build(args, seed=1, sharpness=1.0)
    return target, tiny.perturbed(target, args, 0.05, seed=3)


def test_with_kv_bits_every_mode_answers_as_the_target_alone_with_that_cache(wrapped, wide, vocab):
    target, near = wide
    prompt, kv = wrapped.encode(PROMPT * 3), KVBits(4, 32)
    args = dict(prompt_id="p", prompt=prompt, temp=0.0, max_tokens=24, seed=0)
    expected = alone(target, prompt, 24, kv)
    float_baseline = run_target(target, wrapped, **args)
    runs = [run_target(target, wrapped, kv=kv, **args),
            run_mlx_lm_spec(target, wrapped, near, "near", num_draft=3, kv=kv, **args),
            run_specmlx(target, wrapped, ModelDrafter(near, vocab, "near"), "near", num_draft=3, kv=kv, **args),
            run_specmlx(target, wrapped, PromptLookupDrafter(), "ngram", num_draft=3, kv=kv, **args)]
    for m in runs:
        assert list(m.tokens) == expected[: len(m.tokens)] and len(m.tokens) > 8, (m.mode, m.drafter)
    assert list(float_baseline.tokens) != list(runs[0].tokens)  # the control: a float baseline answers otherwise
    assert runs[2].accepted > 0
