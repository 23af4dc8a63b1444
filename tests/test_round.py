"""A plain round overlaps the next one's forward (`round.look_ahead`) and stays exact."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specmlx.cache import cache_length
from specmlx.drafters import ModelDrafter, NoDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy

from . import tiny
from .schedules import Alternating
from .drafters.test_mtp import assert_fed_the_fusion, fused_head
from .test_engine import PROMPTS, reference_greedy, run


def test_a_plain_round_feeds_its_token_to_the_target_before_it_is_read(tokenizer, target):
    """Between plain rounds the target's cache already holds every committed
    token (the next forward is under way), and what it holds is right."""
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    prompt = tokenizer.encode(PROMPTS[0])
    generation = engine.generate(prompt, GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=0)))
    emitted, ahead = [], []
    for event in generation:
        emitted += [t.token for t in event.tokens]
        ahead.append(cache_length(engine.cache) == len(engine.context))
    assert emitted == reference_greedy(target, prompt, 12)
    assert ahead == [True] * 11 + [False]  # the last round has no next one to start
    committed = engine.context
    fresh = make_prompt_cache(target)
    target(mx.array(committed[:-1])[None], cache=fresh)
    tail = mx.array(committed[-1:])[None]
    assert mx.allclose(target(tail, cache=engine.cache), target(tail, cache=fresh), atol=1e-4).item()


def test_an_end_in_an_overlapped_round_leaves_the_caches_right_for_the_next_prompt(tokenizer, vocab, target,
                                                                                   target_args):
    """The end of sequence lands in a round that looked ahead: the target's cache and the head's
    hidden states hold it (it is committed), and the next prompt, which extends the context, is
    answered as the target alone answers it."""
    drafter = MTPDrafter(tiny.mtp(target_args, seed=3), vocab)
    prompt = tokenizer.encode(PROMPTS[1])
    want = reference_greedy(target, prompt, 8)
    eos = want[5]
    engine = Engine(target, drafter, eos_token_ids=[eos])
    events, stats = run(engine, prompt, num_draft=0, max_tokens=8)
    assert [e.token for e in events] == want[: want.index(eos)] and stats.finish_reason == "eos"
    assert cache_length(engine.cache) == len(engine.context) == drafter.history.length
    follow = engine.context + tokenizer.encode(" and then")
    rest, _ = run(engine, follow, num_draft=0, max_tokens=6)
    assert [e.token for e in rest] == reference_greedy(target, follow, 6)


def recorded(drafter):
    """`drafter`, recording the tokens of every draft it proposes."""
    proposals, draft = [], drafter.draft

    def recording(*args, **kwargs):
        proposed = draft(*args, **kwargs)
        proposals.append(proposed.tokens.tolist())
        return proposed

    drafter.draft = recording
    return drafter, proposals


@pytest.mark.parametrize("kind", ["model", "mtp", "fused"])
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_exact_when_drafting_rounds_follow_a_look_ahead(monkeypatch, tokenizer, vocab, target,
                                                               target_args, noisy_drafter, kind, k):
    """A guess of "plain next" that proves wrong: the drafting round scores its
    draft after the looked-ahead row. The drafter sees what it sees without the
    guess (a drafter that reads hidden states is shown the looked-ahead one), so
    it proposes the same tokens."""
    runs = {}
    for guess in (True, False):
        monkeypatch.setattr("specmlx.decoding.schedule_for", lambda engine, policy: Alternating(k, guess))
        drafter, proposals = recorded({
            "model": lambda: ModelDrafter(noisy_drafter, vocab),
            "mtp": lambda: MTPDrafter(tiny.mtp(target_args, seed=3), vocab),
            "fused": lambda: MTPDrafter(fused_head(target_args, (0, 1)), vocab),  # fed taps of the look-ahead too
        }[kind]())
        engine = Engine(target, drafter, eos_token_ids=[])
        runs[guess] = []
        for text in PROMPTS:
            prompt = tokenizer.encode(text)
            rounds = list(engine.generate(prompt, GenerationConfig(max_tokens=30)))
            assert [t.token for r in rounds for t in r.tokens] == reference_greedy(target, prompt, 30)
            assert [r.num_draft > 0 for r in rounds[:4]] == [False, True, False, True]
            if kind == "fused":
                assert_fed_the_fusion(drafter, target, prompt + [t.token for r in rounds for t in r.tokens])
            runs[guess].append([(r.drafted, r.accepted) for r in rounds])
        runs[guess].append(proposals)
    assert runs[True] == runs[False]
    if kind == "model":  # the random head accepts nothing; the small model both accepts and rejects
        rounds = [r for prompt in runs[True][:-1] for r in prompt]
        assert any(a for _, a in rounds) and any(a < d for d, a in rounds)
