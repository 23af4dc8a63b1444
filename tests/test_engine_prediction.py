"""A request's prediction changes how fast, never what: greedy output and the sampled
distribution are the target's whatever the prediction says.

Greedy: a correct prediction (the target's own output), a wrong one, none, and one
that diverges halfway and then agrees again, with every kind of drafter, alone and
in a batch. Sampled: the chi-square test of `test_engine_distribution.py`, and its
negative control, verification that trusts the prediction a little more.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import pytest

import specmlx.round as round_module
from specmlx.batch import Batch, Member
from specmlx.caches.stream import make_cache
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.schedule.widths import COPIED
from specmlx.sampling import SamplingParams

from .test_engine import PROMPTS, reference_greedy
from .test_engine_distribution import LENGTH, PROMPT, RUNS, VOCAB, chi_square_pvalue, exact_distribution
from .test_engine_distribution import pair  # noqa: F401  (the tiny target and its drafter, a fixture)

MAX_TOKENS = 48


def predictions(own: list[int], vocab: int) -> dict[str, tuple[int, ...]]:
    """Predictions of an answer whose greedy tokens are `own`."""
    half = len(own) // 2
    return {
        "correct": tuple(own),
        "wrong": tuple((t * 7 + 3) % vocab for t in own),
        "none": (),
        # New text in the middle (an edit), then the old text again past it.
        "diverges then agrees": tuple(own[:half] + [(t + 1) % vocab for t in own[half : half + 5]]
                                      + own[half + 5 :]),
        "longer": tuple(own + own),
    }


def drafters(target, noisy_drafter, vocab):
    return {"none": NoDrafter(), "ngram": PromptLookupDrafter(), "model": ModelDrafter(noisy_drafter, vocab)}


@pytest.mark.parametrize("drafter", ["none", "ngram", "model"])
@pytest.mark.parametrize("auto", [False, True])
def test_greedy_output_is_the_targets_own_whatever_the_prediction(tokenizer, vocab, target, noisy_drafter,
                                                                  drafter, auto):
    engine = Engine(target, drafters(target, noisy_drafter, vocab)[drafter], eos_token_ids=[])
    policy = DraftPolicy(num_draft=None if auto else 3, lookup=2 if drafter == "model" else 0)
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        own = reference_greedy(target, prompt, MAX_TOKENS)
        for name, prediction in predictions(own, vocab).items():
            generation = engine.generate(prompt, GenerationConfig(max_tokens=MAX_TOKENS, policy=policy,
                                                                  prediction=prediction))
            assert [e.token for e in generation.token_events()] == own, name
            stats = generation.stats
            assert stats.prediction_accepted <= stats.prediction_drafted <= stats.drafted
            if name == "correct":  # whole spans copied: every proposal accepted, few rounds
                assert stats.prediction_accepted == stats.prediction_drafted >= MAX_TOKENS - stats.rounds
                # one round more at most: the copy near the end is cut to a length of the set (`widths.cut`)
                assert stats.rounds <= -(-MAX_TOKENS // (DraftPolicy().prediction_draft + 1)) + 1
            if name == "none":
                assert stats.prediction_drafted == 0
            if name == "diverges then agrees":  # it copied again after the edit: at most half came before it
                assert stats.prediction_accepted > len(own) // 2 + 5


def test_the_prediction_draft_length_caps_each_copy(tokenizer, vocab, target):
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    own = tuple(reference_greedy(target, prompt, MAX_TOKENS))
    for cap, copied in ((6, 6), (5, 4)):  # 5 is no length of the set: each copy is cut to 4 (`widths.cut`)
        config = GenerationConfig(max_tokens=MAX_TOKENS, prediction=own, policy=DraftPolicy(prediction_draft=cap))
        rounds = list(engine.generate(prompt, config))
        assert [r.drafted for r in rounds[:6]] == [copied] * 6 and all(r.drafted in COPIED for r in rounds)


def test_rows_of_a_batch_follow_their_own_predictions(tokenizer, vocab, target, noisy_drafter):
    """Rows with different predictions (and none) decode together; each is the target's own greedy text."""
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    owns = [reference_greedy(target, p, MAX_TOKENS) for p in prompts]
    batch = Batch(target, len(make_cache(target)), max_rows=8)
    queue = [(i, name, prediction) for i, own in enumerate(owns) for name, prediction in predictions(own, vocab).items()]
    outputs, counted = {}, {}
    while queue or batch.members:
        while queue and not batch.full:
            i, name, prediction = queue.pop(0)
            drafter = drafters(target, noisy_drafter, vocab)["model" if i % 2 else "ngram"]
            config = GenerationConfig(max_tokens=MAX_TOKENS, prediction=prediction,
                                      policy=DraftPolicy(num_draft=None if i == 2 else 2))
            member = Member(Engine(target, drafter, eos_token_ids=[]), prompts[i], config)
            batch.add(member)
            outputs[member], counted[member] = [], (i, name)
        for member, event in batch.step():
            outputs[member] += [t.token for t in event.tokens]
    for member, tokens in outputs.items():
        i, name = counted[member]
        assert tokens == owns[i], counted[member]
        if name == "correct":
            assert member.stats.prediction_accepted == member.stats.prediction_drafted > 0
    assert batch.widest == 8


# -- above temperature 0 -----------------------------------------------------

SAMPLING = SamplingParams(temp=1.0)
# A plausible prediction of PROMPT's continuation (it repeats 0 1 2 3), longer than the answer.
PREDICTED = (3, 0, 1, 2, 3, 0, 1)


def sampled(target, drafter, length: int) -> tuple[list[tuple[int, ...]], list]:
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    samples, stats = [], []
    for seed in range(RUNS):
        config = GenerationConfig(max_tokens=length, sampling=SAMPLING, seed=seed, prediction=PREDICTED,
                                  policy=DraftPolicy(num_draft=1))
        generation = engine.generate(PROMPT, config)
        samples.append(tuple(e.token for e in generation.token_events()))
        stats.append(generation.stats)
    return samples, stats


def test_a_prediction_keeps_the_target_distribution(pair):  # noqa: F811
    target, drafter = pair
    length = LENGTH + 1
    samples, stats = sampled(target, drafter, length)
    predicted, accepted = sum(s.prediction_drafted for s in stats), sum(s.prediction_accepted for s in stats)
    assert 0 < accepted < predicted  # copies accepted and rejected
    assert sum(s.drafted - s.prediction_drafted for s in stats) > 0  # and the drafter served where the prediction was lost
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING, length)) > 1e-3


def test_the_check_detects_verification_that_trusts_the_prediction_more(monkeypatch, pair):  # noqa: F811
    """Negative control: each copied token's probability under the target raised by 0.15 (and p
    renormalised) before verification, in rounds that copy the prediction only."""
    target, drafter = pair
    honest = round_module.verify

    def trusting(logits, p, draft, key):
        if p is None or not draft.predicted:
            return honest(logits, p, draft, key)
        k = draft.size  # p's rows: [last, d1..dk]; row i is where draft token i is checked
        raised = mx.concatenate([p[:k] + 0.15 * (mx.arange(VOCAB)[None] == draft.tokens[:, None]), p[k:]])
        return honest(logits, raised / raised.sum(axis=-1, keepdims=True), draft, key)

    monkeypatch.setattr(round_module, "verify", trusting)
    samples, _ = sampled(target, drafter, LENGTH + 1)
    assert chi_square_pvalue(samples, exact_distribution(target, SAMPLING, LENGTH + 1)) < 1e-3


def test_the_usage_counts_only_the_copies_the_answer_keeps(tokenizer, vocab, target):
    """A stop token inside a copied run: the copies after it were accepted but are not in the answer."""
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    own = reference_greedy(target, prompt, MAX_TOKENS)
    stop = next(i for i in range(3, MAX_TOKENS) if own[i] not in own[:i])  # its first appearance
    config = GenerationConfig(max_tokens=MAX_TOKENS, prediction=tuple(own), stop_tokens={own[stop]})
    generation = engine.generate(prompt, config)
    assert [e.token for e in generation.token_events()] == own[:stop]
    stats = generation.stats
    assert stats.prediction_accepted == stats.generation_tokens == stop < stats.accepted
    assert stats.prediction_tokens == MAX_TOKENS


@pytest.mark.parametrize("batched", [False, True])
def test_a_drafter_that_missed_the_copies_drafts_as_one_that_saw_the_answer(tokenizer, vocab, target, noisy_drafter,
                                                                            batched):
    """Output is exact whatever a drafter holds, so its caches are checked apart: after rounds that copied
    (which the drafter never saw) and rounds it drafted, it drafts what a fresh one fed the answer drafts."""
    prompt = tokenizer.encode(PROMPTS[1])
    own = reference_greedy(target, prompt, MAX_TOKENS)
    prediction = tuple(own[:10] + [(t + 1) % vocab for t in own[10:20]] + own[20:])  # copy, draft, copy
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    config = GenerationConfig(max_tokens=MAX_TOKENS, prediction=prediction, policy=DraftPolicy(num_draft=3))
    if batched:
        batch, other = Batch(target, len(make_cache(target)), max_rows=2), Engine(
            target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
        member = Member(engine, prompt, config)
        batch.add(member)
        batch.add(Member(other, tokenizer.encode(PROMPTS[0]), replace(config, prediction=())))  # it drafts meanwhile
        while batch.members:
            batch.step()
        stats = member.stats
    else:
        generation = engine.generate(prompt, config)
        list(generation)
        stats = generation.stats
    assert 0 < stats.prediction_drafted < stats.drafted  # copies and drafts both
    context = engine.context
    fresh = ModelDrafter(noisy_drafter, vocab)
    fresh.prefill(context)
    greedy, key = SamplingParams(), mx.random.key(0)
    assert engine.drafter.draft(context, 6, greedy, key).tokens.tolist() == fresh.draft(context, 6, greedy, key).tokens.tolist()
