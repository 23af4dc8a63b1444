"""Hybrid targets (attention and Gated DeltaNet layers) in a single stream: greedy speculative
output is the target's own, whatever drafts, and a chat's next turn reuses what the caches hold."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.caches.recurrent import RENDERED_AGAIN

from . import tiny, tiny_hybrid

VOCAB = 64
PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3, 5, 9, 2]
BUILDS = {"qwen3_5": tiny_hybrid.tiny_qwen3_5, "qwen3_5_moe": tiny_hybrid.tiny_qwen3_5_moe,
          "qwen3_next": tiny_hybrid.tiny_qwen3_next,
          "nemotron_h": tiny_hybrid.tiny_nemotron_h, "granitemoehybrid": tiny_hybrid.tiny_granite_hybrid,
          "lfm2": tiny_hybrid.tiny_lfm2, "mamba2": tiny_hybrid.tiny_mamba2}


def greedy_alone(model, prompt: list[int], n: int, cache: list | None = None) -> list[int]:
    """The target alone, as mlx-lm runs it: its own caches (or `cache`), one token a step."""
    cache = make_prompt_cache(model) if cache is None else cache
    logits = model(mx.array([prompt]), cache=cache)[0, -1]
    out = []
    for _ in range(n):
        out.append(mx.argmax(logits).item())
        logits = model(mx.array([[out[-1]]]), cache=cache)[0, -1]
    return out


@pytest.fixture(scope="module", params=sorted(BUILDS))
def target(request):
    return BUILDS[request.param](VOCAB, seed=1)


def drafters(target):
    yield ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB, name="hybrid")
    yield ModelDrafter(tiny.tiny_qwen(VOCAB, seed=4), VOCAB, name="transformer")
    yield ModelDrafter(target, VOCAB, name="itself")
    yield PromptLookupDrafter()


@pytest.mark.parametrize("num_draft", [1, 4])
def test_greedy_output_is_the_target_alone_with_every_drafter(target, num_draft):
    want = greedy_alone(target, PROMPT, 40)
    for drafter in drafters(target):
        engine = Engine(target, drafter, eos_token_ids=[])
        generation = engine.generate(PROMPT, GenerationConfig(max_tokens=40, policy=DraftPolicy(num_draft=num_draft)))
        assert [e.token for e in generation.token_events()] == want, drafter.name


def test_a_drafter_of_itself_is_always_accepted(target):
    engine = Engine(target, ModelDrafter(target, VOCAB), eos_token_ids=[])
    generation = engine.generate(PROMPT, GenerationConfig(max_tokens=20, policy=DraftPolicy(num_draft=4)))
    list(generation)
    assert generation.stats.accepted == generation.stats.drafted > 0


def test_a_next_turn_continues_from_what_the_caches_hold(target):
    engine = Engine(target, ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB),
                    eos_token_ids=[])
    config = GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))
    first = [e.token for e in engine.generate(PROMPT, config).token_events()]
    held = engine.cache_length()
    assert held == len(PROMPT) + len(first) - 1
    turn = PROMPT + first[:-2] + [4, 8]  # the answer's end rendered anew: the last round's forward is rewound into
    engine.rewind(engine.reusable(turn))
    assert engine.cache_length() == held - 1
    second = [e.token for e in engine.generate(turn, config).token_events()]
    assert second == greedy_alone(target, turn, 12)


def test_a_next_turn_that_renders_the_prompts_end_anew_is_prefilled_from_its_checkpoint(target):
    """The answer's turn renders the prompt's last tokens anew (and drops reasoning): every cache,
    the drafter's too, rewinds to the checkpoint kept before them, not to nothing."""
    drafter = ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB)
    engine = Engine(target, drafter, eos_token_ids=[])
    config = GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))
    first = [e.token for e in engine.generate(PROMPT, config).token_events()]
    turn = PROMPT[:-2] + [4, 8] + first + [6]
    at = len(PROMPT) - min(RENDERED_AGAIN, len(PROMPT) // 2)
    assert engine.reusable(turn) == at  # what a server reports as cached
    engine.rewind(engine.reusable(turn))
    assert engine.cache_length() == drafter.cache.length == at
    second = [e.token for e in engine.generate(turn, config).token_events()]
    assert second == greedy_alone(target, turn, 12)


def test_a_turn_that_continued_past_its_checkpoint_point_keeps_one_where_it_started(target):
    """A next turn that reuses more than its own prompt's end (little was added) keeps its checkpoint
    where its prefill started, so the turn after it does not fall back to an older one."""
    engine = Engine(target, ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB),
                    eos_token_ids=[])
    config = GenerationConfig(max_tokens=10, policy=DraftPolicy(num_draft=3))
    first = [e.token for e in engine.generate(PROMPT, config).token_events()]
    turn = PROMPT + first + [6]
    start = engine.reusable(turn)
    assert start >= len(turn) - RENDERED_AGAIN  # past where its own checkpoint would go
    second = [e.token for e in engine.generate(turn, config).token_events()]
    third = turn[:-1] + [7] + second
    assert engine.reusable(third) == start
    assert [e.token for e in engine.generate(third, config).token_events()] == greedy_alone(target, third, 10)


def test_without_a_drafter(target):
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    assert [e.token for e in engine.generate(PROMPT, GenerationConfig(max_tokens=16)).token_events()] == \
        greedy_alone(target, PROMPT, 16)


def test_a_round_still_waits_once(target, monkeypatch):
    """The replay is lazy: it runs with the next round's graph, not in a wait of its own."""
    engine = Engine(target, ModelDrafter(tiny.perturbed(target, target.args, noise=0.3, seed=3), VOCAB),
                    eos_token_ids=[])
    waits = []
    evaluate = mx.eval
    monkeypatch.setattr(mx, "eval", lambda *a, **k: (waits.append(1), evaluate(*a, **k))[1])
    generation = engine.generate(PROMPT, GenerationConfig(max_tokens=24, policy=DraftPolicy(num_draft=3)))
    counts = [len(waits) for _ in generation]  # waits so far, at each round's event
    assert 0 < generation.stats.accepted < generation.stats.drafted
    assert all(b - a == 1 for a, b in zip(counts, counts[1:]))  # after the prefill's, one a round
    assert generation.stats.host_syncs == generation.stats.rounds
