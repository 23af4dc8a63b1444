"""The round loop on tiny random models: exactness, rewinds, syncs, stops."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.errors import SpecmlxError
from specmlx.events import Source
from specmlx.sampling import SamplingParams

from . import tiny
from .costs import FixedCosts

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "The quick brown fox jumps over the lazy dog. The quick",
    "for i in range(10):\n    print(i",
]


def reference_greedy(model: nn.Module, prompt: list[int], n: int) -> list[int]:
    """The target's own greedy output, from mlx-lm's generate_step."""
    steps = generate_step(mx.array(prompt), model, max_tokens=n)
    return [int(token) for token, _ in steps]


POLICY = {field.name for field in dataclasses.fields(DraftPolicy)}


def run(engine: Engine, prompt: list[int], **settings):
    """Generate with `settings`: GenerationConfig fields and DraftPolicy fields mixed."""
    policy = DraftPolicy(**{k: v for k, v in settings.items() if k in POLICY})
    config = GenerationConfig(policy=policy, **{k: v for k, v in settings.items() if k not in POLICY})
    generation = engine.generate(prompt, config)
    events = list(generation.token_events())
    return events, generation.stats


def drafter_for(name: str, request, vocab: int):
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        return PromptLookupDrafter()
    model = request.getfixturevalue({"self": "target", "random": "random_drafter", "noisy": "noisy_drafter"}[name])
    return ModelDrafter(model, vocab, name=name)


@pytest.mark.parametrize("drafter_name", ["self", "random", "noisy", "ngram", "none"])
@pytest.mark.parametrize("num_draft", [1, 4, 7])
def test_greedy_output_equals_the_targets_own(request, tokenizer, vocab, target, drafter_name, num_draft):
    engine = Engine(target, drafter_for(drafter_name, request, vocab), eos_token_ids=[])
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=40, num_draft=num_draft)
        assert [e.token for e in events] == reference_greedy(target, prompt, 40)
        assert stats.generation_tokens == 40
        assert stats.host_syncs == stats.rounds  # one blocking sync per round
        if drafter_name == "self":  # a model drafting for itself is never wrong
            assert stats.accepted == stats.drafted
        if drafter_name == "random":
            assert stats.acceptance_rate < 0.5


# Measured costs, and costs fixed so that drafting barely pays (plain rounds,
# probes and catching up after them) or always pays (drafts grow and shrink).
COSTS = {"measured": None, "plain-heavy": (1.0, 0.05), "cheap": (0.0, 0.02)}


@pytest.mark.parametrize("costs", sorted(COSTS))
@pytest.mark.parametrize("drafter_name", ["self", "random", "noisy", "ngram", "none"])
def test_greedy_output_with_the_automatic_length_equals_the_targets_own(
        request, tokenizer, vocab, target, drafter_name, costs):
    engine = Engine(target, drafter_for(drafter_name, request, vocab), eos_token_ids=[])
    if COSTS[costs] is not None:
        engine.auto_draft().costs = FixedCosts(*COSTS[costs])
    lengths, probes = [], 0
    for text in PROMPTS * 2:  # the controller keeps what it learned from one answer to the next
        prompt = tokenizer.encode(text)
        generation = engine.generate(prompt, GenerationConfig(max_tokens=40, policy=DraftPolicy(num_draft=None)))
        rounds = list(generation)
        assert [t.token for r in rounds for t in r.tokens] == reference_greedy(target, prompt, 40)
        stats = generation.stats
        assert stats.host_syncs == stats.rounds + stats.timed_rounds
        assert sum(stats.draft_histogram) == stats.rounds == len(rounds)
        lengths += [r.num_draft for r in rounds]
        probes += sum(r.probe is not None for r in rounds)
    if drafter_name == "none":
        assert set(lengths) == {0}
    elif costs == "cheap":
        assert len(set(lengths)) > 1 and max(lengths) > 0
    else:  # a drafter as dear as the target (plain-heavy, or a tiny model on the clock) may be probed alone
        assert max(lengths) > 0 or probes > 0


def test_greedy_exact_on_more_random_targets(tokenizer, vocab):
    for seed in range(3):
        args = tiny.qwen2_args(vocab)
        target = tiny.build(args, seed=10 + seed)
        drafter = tiny.perturbed(target, args, noise=0.3, seed=seed)
        engine = Engine(target, ModelDrafter(drafter, vocab), eos_token_ids=[])
        prompt = tokenizer.encode(PROMPTS[seed])
        events, stats = run(engine, prompt, max_tokens=32, num_draft=4)
        assert [e.token for e in events] == reference_greedy(target, prompt, 32)
        assert 0 < stats.accepted < stats.drafted  # rounds with both outcomes were exercised


@pytest.mark.parametrize("p_min", [0.2, 0.6])
def test_greedy_exact_when_drafts_stop_on_low_confidence(tokenizer, vocab, target, noisy_drafter, p_min):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=40, num_draft=6, p_min=p_min)
        assert [e.token for e in events] == reference_greedy(target, prompt, 40)
        assert stats.host_syncs == stats.rounds  # the drafter's own checks are not verify syncs
        _, full = run(engine, prompt, max_tokens=40, num_draft=6)
        assert stats.drafted / stats.rounds < full.drafted / full.rounds  # drafts were cut short


class CountingDrafter(ModelDrafter):
    """Counts the rounds it was asked to draft."""

    calls = 0

    def draft(self, tokens, num_draft, sampling, key, p_min=0.0):
        self.calls += 1
        return super().draft(tokens, num_draft, sampling, key, p_min)


@pytest.mark.parametrize("lookup", [1, 3])
def test_greedy_exact_when_rounds_look_up_before_drafting(tokenizer, vocab, target, noisy_drafter, lookup):
    drafter = CountingDrafter(noisy_drafter, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    rounds, long_copies = 0, 0
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        events, stats = run(engine, prompt, max_tokens=40, num_draft=2, lookup=lookup, lookup_draft=6)
        assert [e.token for e in events] == reference_greedy(target, prompt, 40)
        assert stats.host_syncs == stats.rounds
        rounds += stats.rounds
        long_copies += sum(stats.accepted_histogram[3:])  # only a lookup proposes more than 2
    assert 0 < drafter.calls < rounds  # some rounds copied from the context, the rest drafted
    assert long_copies > 0


@pytest.mark.parametrize("num_draft", [None, 4])
def test_no_drafter_still_looks_up(tokenizer, target, num_draft):
    """`--drafter none --lookup N`: the context's copies are the only drafts."""
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    events, stats = run(engine, prompt, max_tokens=40, num_draft=num_draft, lookup=2)
    assert [e.token for e in events] == reference_greedy(target, prompt, 40)
    assert stats.drafted > 0


def test_lookup_needs_a_sane_match_and_draft_length():
    with pytest.raises(SpecmlxError, match="lookup match length"):
        GenerationConfig(policy=DraftPolicy(lookup=-1))
    with pytest.raises(SpecmlxError, match="lookup match length"):
        GenerationConfig(policy=DraftPolicy(lookup=9))
    with pytest.raises(SpecmlxError, match="lookup draft length"):
        GenerationConfig(policy=DraftPolicy(lookup=2, lookup_draft=0))


def test_draft_p_min_must_be_a_probability():
    with pytest.raises(SpecmlxError, match="p-min"):
        GenerationConfig(policy=DraftPolicy(p_min=1.0))
    with pytest.raises(SpecmlxError, match="p-min"):
        GenerationConfig(policy=DraftPolicy(p_min=-0.1))


def test_sources_describe_each_round(tokenizer, vocab, target, noisy_drafter):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    events, stats = run(engine, tokenizer.encode(PROMPTS[0]), max_tokens=40, num_draft=3)
    sources = [e.source for e in events]
    assert sources.count(Source.DRAFT) == stats.accepted
    # every round ends with one target token; a round left no budget to draft is TARGET
    own = [Source.BONUS, Source.CORRECTED, Source.TARGET]
    assert sum(sources.count(s) for s in own) == stats.rounds
    assert sources.count(Source.BONUS) == stats.accepted_histogram[3]
    assert sum(stats.accepted_histogram) == stats.rounds
    assert stats.mean_accepted == pytest.approx(40 / stats.rounds)


def test_caches_hold_exactly_the_committed_tokens_after_a_rejection(tokenizer, vocab, target, noisy_drafter):
    drafter = ModelDrafter(noisy_drafter, vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[1])
    generation = engine.generate(prompt, GenerationConfig(max_tokens=200, policy=DraftPolicy(num_draft=4)))
    rejected = False
    for event in generation.token_events():
        if event.source is Source.CORRECTED:
            rejected = True
            break  # stop right after a round that rejected a draft
    generation.close()
    # The premise: a round did reject (accepted fewer than it drafted), and it was the last.
    assert rejected
    stats = generation.stats
    assert stats.accepted < stats.drafted
    committed = engine.context
    assert engine.cache.length == len(committed) - 1
    for model, cache in [(target, engine.cache), (noisy_drafter, drafter.cache)]:
        n = cache.length
        assert n == len(committed) - 1  # everything but the token not yet scored
        fresh = make_prompt_cache(model)
        model(mx.array(committed[:n])[None], cache=fresh)
        tail = mx.array(committed[n:])[None]
        assert mx.allclose(model(tail, cache=cache), model(tail, cache=fresh), atol=1e-4).item()


def test_next_generation_reuses_the_cached_prefix(tokenizer, vocab, target, noisy_drafter, monkeypatch):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    first = tokenizer.encode(PROMPTS[0])
    events, _ = run(engine, first, max_tokens=12)
    follow_up = first + [e.token for e in events] + tokenizer.encode("\nprint(add(1, 2))")
    # The caches hold the first prompt and answer but its last token (never fed back).
    reused = engine.reusable(follow_up)
    assert reused == len(first) + len(events) - 1
    # Spy on the target's decoder, whoever calls it: the tokens of every target
    # forward in the follow-up, prefill chunks and rounds.
    fed, inner = [], target.model
    forward = type(inner).__call__

    def counting(self, inputs, *args, **kwargs):
        if self is inner:
            fed.append(inputs.shape[1])
        return forward(self, inputs, *args, **kwargs)

    monkeypatch.setattr(type(inner), "__call__", counting)
    events, stats = run(engine, follow_up, max_tokens=16)
    monkeypatch.undo()
    assert [e.token for e in events] == reference_greedy(target, follow_up, 16)
    assert stats.prompt_tokens == len(follow_up)
    # Each round feeds the last token and its draft; prefill fed only the
    # prompt past the reused prefix, and not its last token.
    prefilled = sum(fed) - stats.rounds - stats.drafted
    assert prefilled == len(follow_up) - 1 - reused


@pytest.mark.parametrize("sampling", [SamplingParams(temp=0.7), SamplingParams(temp=1.0, top_p=0.9, top_k=50)])
def test_seed_makes_sampling_reproducible(tokenizer, vocab, target, noisy_drafter, sampling):
    """With a fixed draft length: the automatic one follows wall time, and which
    draws a round makes depends on how many tokens it drafts."""
    prompt = tokenizer.encode(PROMPTS[2])
    outputs = []
    for seed in (1, 1, 2):
        engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
        events, _ = run(engine, prompt, max_tokens=30, sampling=sampling, seed=seed, num_draft=4)
        outputs.append([e.token for e in events])
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


def test_stops_at_eos_without_emitting_it(tokenizer, vocab, target):
    prompt = tokenizer.encode(PROMPTS[0])
    reference = reference_greedy(target, prompt, 30)
    eos = reference[9]
    cut = reference.index(eos)
    engine = Engine(target, ModelDrafter(target, vocab), eos_token_ids=[eos])
    events, stats = run(engine, prompt, max_tokens=30, num_draft=6)
    assert [e.token for e in events] == reference[:cut]
    assert stats.finish_reason == "eos"
    assert engine.context == prompt + reference[: cut + 1]
    assert engine.cache.length <= len(engine.context)


def test_a_requests_stop_tokens_end_it_as_eos_does(tokenizer, vocab, target):
    """A fill-in-the-middle answer's own end tokens: committed, not emitted, for this generation only."""
    prompt = tokenizer.encode(PROMPTS[0])
    reference = reference_greedy(target, prompt, 30)
    stop = reference[9]
    cut = reference.index(stop)
    engine = Engine(target, ModelDrafter(target, vocab), eos_token_ids=[])
    events, stats = run(engine, prompt, max_tokens=30, num_draft=6, stop_tokens=(reference[cut + 1], stop))
    assert [e.token for e in events] == reference[:cut]
    assert stats.finish_reason == "eos"
    assert engine.context == prompt + reference[: cut + 1]
    events, stats = run(engine, prompt, max_tokens=30, num_draft=6)  # the next generation has none
    assert [e.token for e in events] == reference and stats.finish_reason == "length"


@pytest.mark.parametrize("bad", [(-1,), (2, "3"), (1.0,)])
def test_stop_tokens_are_token_ids(bad):
    with pytest.raises(SpecmlxError, match="stop tokens must be token ids"):
        GenerationConfig(stop_tokens=bad)
    assert GenerationConfig(stop_tokens=[3, 3, 5]).stop_tokens == frozenset({3, 5})


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 13])
def test_max_tokens_is_never_overshot(tokenizer, vocab, target, max_tokens):
    engine = Engine(target, ModelDrafter(target, vocab), eos_token_ids=[])
    events, stats = run(engine, tokenizer.encode(PROMPTS[1]), max_tokens=max_tokens, num_draft=4)
    assert len(events) == max_tokens == stats.generation_tokens
    assert stats.finish_reason == "length"


def test_stop_string_ends_generation_and_is_not_emitted(tokenizer, vocab, target):
    prompt = tokenizer.encode(PROMPTS[0])
    full = tokenizer.decode(reference_greedy(target, prompt, 40))
    stop = full[17:20]
    assert stop and full.index(stop) == 17
    engine = Engine(target, ModelDrafter(target, vocab), tokenizer=tokenizer_wrapper(tokenizer), eos_token_ids=[])
    generation = engine.generate(prompt, GenerationConfig(max_tokens=40, stop=(stop,), policy=DraftPolicy(num_draft=5)))
    text = "".join(e.text for e in generation.token_events()) + generation.tail
    assert text == full[:17]
    assert generation.stats.finish_reason == "stop"


def test_event_text_streams_the_decoded_output(tokenizer, vocab, target, noisy_drafter):
    prompt = tokenizer.encode("naïve café 東京")
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), tokenizer=tokenizer_wrapper(tokenizer), eos_token_ids=[])
    generation = engine.generate(prompt, GenerationConfig(max_tokens=30))
    events = list(generation.token_events())
    assert "".join(e.text for e in events) + generation.tail == tokenizer.decode([e.token for e in events])


def test_profile_splits_timing_with_one_more_sync(tokenizer, vocab, target, noisy_drafter):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    events, stats = run(engine, prompt, max_tokens=20, profile=True)
    assert [e.token for e in events] == reference_greedy(target, prompt, 20)
    assert stats.host_syncs == 2 * stats.rounds
    assert stats.draft_s > 0 and stats.verify_s > 0


def test_quantized_target_through_the_same_path(tokenizer, vocab, target_args):
    target = tiny.build(target_args, seed=0)
    nn.quantize(target, group_size=64, bits=4)
    drafter = ModelDrafter(tiny.build(target_args, seed=0), vocab)
    engine = Engine(target, drafter, eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[2])
    events, stats = run(engine, prompt, max_tokens=24, num_draft=4)
    assert [e.token for e in events] == reference_greedy(target, prompt, 24)
    assert stats.accepted > 0


def test_sliding_window_target_stays_exact_past_its_window(tokenizer, vocab):
    """Gemma 3's sliding layers use rotating caches that cannot rewind when full."""
    args = tiny.gemma3_args(vocab, window=8)
    target = tiny.build(args, seed=2)
    drafter = tiny.perturbed(target, args, noise=0.2, seed=3)
    engine = Engine(target, ModelDrafter(drafter, vocab), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    assert len(prompt) > 8  # the window is full before the first round
    events, stats = run(engine, prompt, max_tokens=30, num_draft=4)
    assert [e.token for e in events] == reference_greedy(target, prompt, 30)
    assert 0 < stats.accepted < stats.drafted


def tokenizer_wrapper(tokenizer):
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    return TokenizerWrapper(tokenizer)


def test_a_prompt_and_max_tokens_past_the_context_window_are_refused(tokenizer, vocab):
    """Past its positions a model writes garbage: refused, naming both numbers and the room left."""
    args = tiny.qwen2_args(vocab, max_position_embeddings=48)
    engine = Engine(tiny.build(args, seed=0), NoDrafter(), eos_token_ids=[])
    # The last new token is never fed back: 40 + 9 - 1 = 48 positions hold 9 new tokens.
    assert engine.context_window == 48 and engine.room(40) == 9
    prompt = list(range(3, 43))  # 40 tokens
    with pytest.raises(SpecmlxError, match=r"the prompt \(40 tokens\) and max tokens \(10\) do not fit the "
                                           r"target's context window of 48 tokens; at most 9 new tokens fit"):
        engine.generate(prompt, GenerationConfig(max_tokens=10))
    assert len(list(engine.generate(prompt, GenerationConfig(max_tokens=9)).token_events())) == 9
    assert engine.cache.length <= 48


def test_a_target_whose_config_names_no_window_is_not_limited(vocab):
    args = tiny.qwen2_args(vocab, max_position_embeddings=None)  # as configs that do not say
    assert Engine(tiny.build(args, seed=0), NoDrafter(), eos_token_ids=[]).room(10**6) is None


def test_a_token_consumer_that_stops_early_ends_the_generation(tokenizer, vocab, target, noisy_drafter):
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    generation = engine.generate(tokenizer.encode(PROMPTS[0]), GenerationConfig(max_tokens=40))
    for i, _ in enumerate(generation.token_events()):
        if i == 2:
            break
    assert generation.stats is not None and generation.stats.finish_reason == "cancelled"
    assert engine.cache.length == len(engine.context) - 1  # only committed tokens are held
