"""A plain round overlaps the next one's forward (`round.look_ahead`) and stays exact."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.mtp import MTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.sampling import SamplingParams

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
        ahead.append(engine.cache.length == len(engine.context))
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
    assert engine.cache.length == len(engine.context) == drafter.history.length
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


def spied(monkeypatch, name):
    """`specmlx.generation.<name>`, recording what each call returned."""
    import specmlx.generation as generation
    calls, real = [], getattr(generation, name)

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(generation, name, spy)
    return calls


def generate(target, drafter, prompt, num_draft, lookup=0, sampling=None):
    config = GenerationConfig(max_tokens=30, policy=DraftPolicy(num_draft=num_draft, lookup=lookup),
                              **({} if sampling is None else {"sampling": sampling, "seed": 3}))
    generation = Engine(target, drafter, eos_token_ids=[]).generate(prompt, config)
    rounds = list(generation)
    return [t.token for r in rounds for t in r.tokens], rounds, generation.stats


@pytest.mark.parametrize("sampling", [None, SamplingParams(temp=0.8)])
def test_a_round_sure_to_be_followed_by_an_empty_one_looks_ahead_at_a_fixed_length(monkeypatch, tokenizer,
                                                                                   target, sampling):
    """A lookup of 2 tokens or more at k = 4: a round knows before its graph is built whether the next
    lookup can match whatever token it commits. Where it cannot, the next forward starts first, and
    that next round does propose nothing (the rule never guesses); output, rounds and stats are those
    without the overlap."""
    monkeypatch.setattr("specmlx.generation.GUESS_AFTER", 10**6)  # the rule alone, no guess on a run of empties
    runs = {}
    for overlap in (True, False):
        sure = None
        if not overlap:
            monkeypatch.setattr("specmlx.generation.overlaps", lambda state, plan: False)
        else:
            sure = spied(monkeypatch, "proposes_nothing_next")
        runs[overlap] = []
        for text in PROMPTS:
            prompt = tokenizer.encode(text)
            tokens, rounds, stats = generate(target, NoDrafter(), prompt, 4, lookup=2, sampling=sampling)
            if sampling is None:
                assert tokens == reference_greedy(target, prompt, 30)
            assert stats.host_syncs == stats.rounds == len(rounds)
            runs[overlap].append((tokens, [(r.drafted, r.accepted) for r in rounds]))
            if overlap:
                said, sure[:] = list(sure), []
                assert len(said) in (len(rounds) - 1, len(rounds))  # asked before each round leaving room for more
                assert all(not rounds[i + 1].drafted for i, yes in enumerate(said[: len(rounds) - 1]) if yes)
                runs["sure"] = runs.get("sure", 0) + sum(said)
    assert runs[True] == runs[False]
    assert runs["sure"] > 0
    rounds = [r for _, prompt in runs[True] for r in prompt]
    assert any(not d for d, _ in rounds) and (sampling is not None or any(d for d, _ in rounds))  # greedy copies too


def test_a_run_of_empty_lookups_guesses_the_next_empty_and_stays_exact(monkeypatch, tokenizer, target):
    """Prompt lookup from one token on: no round is sure to find nothing, so after `GUESS_AFTER` empty
    rounds in a row the next forward starts on a guess; a lookup that then matches scores its copy
    after the looked-ahead row, and the output is the target's."""
    monkeypatch.setattr("specmlx.generation.GUESS_AFTER", 1)
    import specmlx.round as round_
    started, start = [], round_.start_ahead
    monkeypatch.setattr(round_, "start_ahead", lambda *a, **k: started.append(1) or start(*a, **k))
    wrong = 0
    for text in PROMPTS:
        prompt = tokenizer.encode(text)
        tokens, rounds, _ = generate(target, PromptLookupDrafter(), prompt, 4)
        assert tokens == reference_greedy(target, prompt, 30)
        guessed = [i for i in range(1, len(rounds) - 1) if not rounds[i - 1].drafted and not rounds[i].drafted]
        wrong += sum(1 for i in guessed if rounds[i + 1].drafted)
        assert len(started) == len(guessed)
        started.clear()
    assert wrong > 0  # a guess proved wrong somewhere, and that round stayed exact


def test_a_model_drafter_at_a_fixed_length_does_not_look_ahead(monkeypatch, tokenizer, vocab, target, noisy_drafter):
    """It may propose after any token, so no round is sure the next proposes nothing."""
    import specmlx.round as round_
    started, start = [], round_.start_ahead
    monkeypatch.setattr(round_, "start_ahead", lambda *a, **k: started.append(1) or start(*a, **k))
    prompt = tokenizer.encode(PROMPTS[1])
    tokens, rounds, stats = generate(target, ModelDrafter(noisy_drafter, vocab), prompt, 3, lookup=2)
    assert tokens == reference_greedy(target, prompt, 30)
    assert started == [] and stats.host_syncs == stats.rounds


@pytest.mark.parametrize("guess", [True, False])
def test_a_round_says_whether_its_first_row_was_scored_ahead(monkeypatch, tokenizer, vocab, target, noisy_drafter,
                                                             guess):
    """The schedule is told which drafting rounds scored their drafts alone (`Round.ahead`): their time
    is no measure of their width (`schedule.auto`)."""
    schedule = Alternating(2, guess)
    monkeypatch.setattr("specmlx.decoding.schedule_for", lambda engine, policy: schedule)
    engine = Engine(target, ModelDrafter(noisy_drafter, vocab), eos_token_ids=[])
    list(engine.generate(tokenizer.encode(PROMPTS[0]), GenerationConfig(max_tokens=12)))
    assert [d.ahead for d in schedule.done[:4]] == [False, guess, False, guess]  # plain rounds look ahead
