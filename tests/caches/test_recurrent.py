"""Recurrent layers rewound exactly: after any round, every layer of a hybrid target (and of a
hybrid drafter) holds what a fresh prefill of the committed tokens gives."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.caches.stream import make_cache, prefill
from specmlx.drafters import ModelDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.policy import DraftPolicy
from specmlx.caches.recurrent import RENDERED_AGAIN, RecurrentCache
from specmlx.caches.replay import recording

from .. import tiny, tiny_hybrid

VOCAB = 64
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3
BUILDS = {"qwen3_5": tiny_hybrid.tiny_qwen3_5, "qwen3_5_moe": tiny_hybrid.tiny_qwen3_5_moe,
          "qwen3_next": tiny_hybrid.tiny_qwen3_next,
          "nemotron_h": tiny_hybrid.tiny_nemotron_h, "granitemoehybrid": tiny_hybrid.tiny_granite_hybrid,
          "lfm2": tiny_hybrid.tiny_lfm2, "mamba2": tiny_hybrid.tiny_mamba2}


def layer_states(cache: list) -> list[mx.array]:
    """Every array a layer holds for the positions it holds: a KV layer's rows, a recurrent layer's slots."""
    out = []
    for layer in cache:
        if isinstance(layer, RecurrentCache):
            out += [slot for slot in layer.cache if slot is not None]
        else:
            out += [layer.keys[..., : layer.offset, :], layer.values[..., : layer.offset, :]]
    return out


def assert_holds(model, cache: list, tokens: list[int]) -> None:
    """`cache` holds what a fresh prefill of `tokens` gives, within float32 tolerance."""
    assert cache.length == len(tokens)
    fresh = make_cache(model)
    prefill(model, fresh, tokens)
    for got, want in zip(layer_states(cache), layer_states(fresh), strict=True):
        assert got.shape == want.shape
        assert mx.allclose(got, want, atol=1e-5, rtol=1e-4).item()


@pytest.fixture(scope="module", params=sorted(BUILDS))
def pair(request):
    target = BUILDS[request.param](VOCAB, seed=1)
    noise = 0.2 if request.param == "lfm2" else 0.5  # its tied head is more sensitive to noise on its weights
    drafter = tiny.perturbed(target, target.args, noise=noise, seed=3)  # agrees often, not always
    return target, drafter


def test_every_layer_holds_a_fresh_prefill_of_the_committed_tokens_after_each_round(pair):
    target, drafter = pair
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    tokens, partial = list(PROMPT), 0
    for event in engine.generate(PROMPT, GenerationConfig(max_tokens=48, policy=DraftPolicy(num_draft=4))):
        tokens += [t.token for t in event.tokens]
        partial += 0 < event.accepted < event.drafted
        assert_holds(target, engine.cache, tokens[: engine.cache_length()])
        assert_holds(drafter, engine.drafter.cache, tokens[: engine.drafter.cache.length])
    assert partial  # rounds that kept some drafts and rejected others: the replay ran


def test_a_rewind_inside_a_recorded_forward_equals_a_prefill(pair):
    target, _ = pair
    cache = make_cache(target)
    prefill(target, cache, PROMPT)
    block = [11, 12, 13, 14, 15]
    with recording(target, cache):
        target(mx.array([block]), cache=cache)
    for keep in (4, 2, 0):  # each rewind still reaches inside the same forward
        cache.rewind(len(PROMPT) + keep)
        assert_holds(target, cache, PROMPT + block[:keep])


def test_a_state_one_position_late_is_told_apart(pair):
    """The check above can fail: the state after one more position is not the fresh prefill's."""
    target, _ = pair
    cache = make_cache(target)
    prefill(target, cache, PROMPT)
    with recording(target, cache):
        target(mx.array([[11, 12, 13]]), cache=cache)
    cache.rewind(len(PROMPT) + 2)
    recurrent = [layer for layer in cache if isinstance(layer, RecurrentCache)]
    for layer in recurrent:
        layer.offset -= 1  # a restore one position late, counted as the earlier one
    for layer in cache:
        if not isinstance(layer, RecurrentCache):
            layer.trim(1)
    with pytest.raises(AssertionError):
        assert_holds(target, cache, PROMPT + [11])


def test_a_rewind_below_what_was_recorded_drops_everything(pair):
    """An unrecorded forward (a prefill) cannot be rewound into: the cache holds nothing, and the
    caller feeds it again."""
    target, _ = pair
    cache = make_cache(target)
    prefill(target, cache, PROMPT)
    cache.rewind(len(PROMPT) - 3)
    assert cache.length == 0
    prefill(target, cache, PROMPT[:-3])
    assert_holds(target, cache, PROMPT[:-3])


def test_a_prompts_prefill_keeps_a_checkpoint_before_its_last_tokens_and_a_rewind_lands_there(pair):
    """A chat's next turn renders the prompt's end anew: the rewind reaches the checkpoint kept
    `RENDERED_AGAIN` before it, holding what a fresh prefill does, not nothing."""
    target, _ = pair
    cache = make_cache(target)
    cache.prefill_prompt(target, PROMPT)
    at = len(PROMPT) - RENDERED_AGAIN
    with recording(target, cache):
        target(mx.array([[11, 12, 13]]), cache=cache)  # a round after it
    cache.rewind(len(PROMPT) - 2)
    assert cache.length == at
    assert_holds(target, cache, PROMPT[:at])
    cache.rewind(at - 1)  # below the checkpoint: it is dropped with the positions it holds
    assert cache.length == 0


def test_a_checkpoint_and_the_recurrent_states_count_in_what_the_cache_holds(pair):
    target, _ = pair
    kept, plain = make_cache(target), make_cache(target)
    for cache in (kept, plain):
        prefill(target, cache, PROMPT)
    layer = next(c for c in kept if isinstance(c, RecurrentCache))
    state = sum(s.nbytes for s in layer.cache if s is not None)
    attention = sum(c.keys.nbytes + c.values.nbytes for c in plain if not isinstance(c, RecurrentCache))
    assert plain.held_bytes() > attention  # the recurrent states are counted
    layer.checkpoint()
    assert kept.held_bytes() == plain.held_bytes()  # the checkpoint is the state held now: counted once
    for cache in (kept, plain):
        prefill(target, cache, [11, 12])
    assert kept.held_bytes() == plain.held_bytes() + state


def test_marks_stay_few_over_many_rounds(pair):
    target, drafter = pair
    engine = Engine(target, ModelDrafter(drafter, VOCAB), eos_token_ids=[])
    list(engine.generate(PROMPT, GenerationConfig(max_tokens=40, policy=DraftPolicy(num_draft=3))))
    for cache in (engine.cache, engine.drafter.cache):
        assert max(len(layer._marks) for layer in cache if isinstance(layer, RecurrentCache)) <= 3


def test_a_generation_that_ends_inside_a_round_leaves_the_committed_tokens(pair):
    """An end token among the accepted drafts ends the generation there: the caches rewind inside
    the round's own forward, past the round's rewind."""
    target, drafter = pair
    engine = Engine(target, ModelDrafter(target, VOCAB), eos_token_ids=[])  # a drafter of itself: all accepted
    config = GenerationConfig(max_tokens=24, policy=DraftPolicy(num_draft=4))
    alone = [e.token for e in engine.generate(PROMPT, config).token_events()]
    end = next(t for t in alone[2:] if t not in alone[:2])  # first emitted mid-answer
    engine = Engine(target, ModelDrafter(target, VOCAB), eos_token_ids=[end])
    out = [e.token for e in engine.generate(PROMPT, config).token_events()]
    assert out == alone[: alone.index(end)]  # the end token itself is not emitted
    committed = PROMPT + alone[: alone.index(end) + 1]
    assert len(PROMPT) + len(out) <= engine.cache_length() <= len(committed)
    assert_holds(target, engine.cache, committed[: engine.cache_length()])
    assert_holds(target, engine.drafter.cache, committed[: engine.drafter.cache.length])


@pytest.mark.parametrize("build", ["qwen3_5_9b", "nemotron_h_8b"])
def test_what_a_cache_holds_after_rounds_is_what_dropping_it_frees_without_the_cycle_collector(build, monkeypatch):
    """Marks keep states and records, and `held_bytes` counts them (a server's memory cap reads it);
    the records keep their cache only weakly, so dropping an engine frees its recurrent layers at once.
    At real state shapes (the rewind bench's models, narrowed), so that the states dwarf the rest."""
    import gc

    from specmlx.bench import rewind as shapes

    monkeypatch.setattr(shapes, "VOCAB", VOCAB)
    mx.random.seed(0)
    target = getattr(shapes, build)(hidden=64, **({"layers": 4} if build == "qwen3_5_9b" else {}))
    engine = Engine(target, ModelDrafter(target, VOCAB), eos_token_ids=[])
    list(engine.generate(PROMPT, GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))))
    mx.eval([c.state for c in (*engine.cache, *engine.drafter.cache)])  # the last rewind's replay is lazy
    held = engine.cache.held_bytes() + engine.drafter.cache.held_bytes()
    assert max(len(layer._marks) for layer in engine.cache if isinstance(layer, RecurrentCache)) >= 2
    gc.collect()
    gc.disable()
    try:
        before = mx.get_active_memory()
        del engine
        freed = before - mx.get_active_memory()
    finally:
        gc.enable()
    assert abs(freed - held) <= 0.02 * held
