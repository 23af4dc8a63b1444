"""A conversation's caches written to disk block by block and read back by another engine: the
restored caches equal the originals exactly (they are copies), and greedy generation that continues
from them is the target's alone, for a transformer and a hybrid (Qwen3.5: Gated DeltaNet layers)."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest

from specmlx.diskcache.blocks import BLOCK, chain
from specmlx.caches.snapshot import capture, capture_rows, restorable, restore, restore_rows
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.drafters.history import HiddenHistory
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.policy import DraftPolicy
from specmlx.caches.recurrent import RENDERED_AGAIN

from .. import tiny, tiny_hybrid
from ..test_engine_hybrid import greedy_alone
from ..diskcache.conftest import FP, store  # noqa: F401  (store: the fixture its tests share with the disk's)

VOCAB = 64
PROMPT = random.Random(0).choices(range(VOCAB), k=2 * BLOCK + 30)
CONFIG = GenerationConfig(max_tokens=12, policy=DraftPolicy(num_draft=3))
BUILDS = {"qwen2": tiny.tiny_qwen, "qwen3_5": tiny_hybrid.tiny_qwen3_5}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def target(request):
    return BUILDS[request.param](VOCAB, seed=1)


@pytest.fixture(scope="module")
def answered(target):
    """An engine that has answered PROMPT: its caches hold the prompt and the answer but its last token."""
    engine = Engine(target, NoDrafter(), eos_token_ids=[])
    answer = [e.token for e in engine.generate(PROMPT, CONFIG).token_events()]
    return engine, PROMPT + answer


def kept(engine: Engine, tokens: list[int]) -> list[dict]:
    """The caches as the blocks of the positions they hold."""
    return [capture(engine.cache, b.start, b.end) for b in chain(tokens[: engine.cache_length()])]


def held_arrays(cache: list, length: int) -> list[mx.array]:
    """What a cache holds for its first `length` positions: KV rows, a recurrent layer's whole state."""
    out = []
    for layer in cache:
        if hasattr(layer, "state_at"):
            out += [slot for slot in layer.cache if slot is not None]
        else:
            out += [layer.keys[..., :length, :], layer.values[..., :length, :]]
    return out


def test_a_cache_rebuilt_from_disk_equals_the_original(target, answered, store):
    engine, tokens = answered
    held = engine.cache_length()
    for block, arrays in zip(chain(tokens[:held]), kept(engine, tokens)):
        store.put("alice", FP, block, arrays)
    loaded = store.load("alice", FP, store.longest("alice", FP, tokens))
    assert len(loaded) == 3
    fresh = Engine(target, NoDrafter(), eos_token_ids=[])
    assert restore(fresh.cache, loaded) == held == fresh.cache_length()
    mine, theirs = held_arrays(fresh.cache, held), held_arrays(engine.cache, held)
    assert len(mine) == len(theirs) > 0
    assert all(a.dtype == b.dtype and a.shape == b.shape and mx.array_equal(a, b).item() for a, b in zip(mine, theirs))


@pytest.mark.parametrize("drafter", ["none", "ngram", "model"])
def test_greedy_generation_continuing_from_disk_is_the_target_alone(target, answered, store, drafter):
    engine, tokens = answered
    held = engine.cache_length()
    for block, arrays in zip(chain(tokens[:held]), kept(engine, tokens)):
        store.put("alice", FP, block, arrays)
    turn = tokens + [3, 1, 4, 1, 5]  # the next turn
    drafters = {"none": NoDrafter(), "ngram": PromptLookupDrafter(),
                "model": ModelDrafter(tiny.perturbed(target, target.args, noise=0.5, seed=3), VOCAB)}
    fresh = Engine(target, drafters[drafter], eos_token_ids=[])
    length = restore(fresh.cache, store.load("alice", FP, store.longest("alice", FP, turn)))
    fresh.context = turn[:length]
    assert fresh.reusable(turn) == length == held  # nothing of the kept prefix is prefilled again
    answer = [e.token for e in fresh.generate(turn, CONFIG).token_events()]
    assert answer == greedy_alone(target, turn, CONFIG.max_tokens)


def test_a_prompt_that_shares_whole_blocks_restores_them_where_every_layer_can(target, answered):
    """A branch after the first block: a KV cache restores that block; a recurrent layer holds no
    state at its end (only at the conversation's), so a hybrid restores nothing."""
    engine, tokens = answered
    blocks = kept(engine, tokens)
    fresh = Engine(target, NoDrafter(), eos_token_ids=[])
    hybrid = any(hasattr(layer, "state_at") for layer in fresh.cache)
    assert restorable(fresh.cache, blocks[:1]) == (0 if hybrid else 1)
    assert restorable(fresh.cache, blocks) == 3
    if hybrid:
        with pytest.raises(SpecmlxError, match="no state"):
            restore(fresh.cache, blocks[:1])
        return
    branch = tokens[:BLOCK] + [7] * 20
    fresh.context = branch[: restore(fresh.cache, blocks[:1])]
    answer = [e.token for e in fresh.generate(branch, CONFIG).token_events()]
    assert answer == greedy_alone(target, branch, CONFIG.max_tokens)


def test_blocks_out_of_order_are_refused(target, answered):
    engine, tokens = answered
    blocks = kept(engine, tokens)
    with pytest.raises(SpecmlxError, match="not a prefix"):
        restore(Engine(target, NoDrafter(), eos_token_ids=[]).cache, [blocks[0], blocks[2]])


def test_hidden_state_rows_come_back_as_they_were():
    """An MTP drafter's history: rows per position, kept and restored as KV rows are."""
    rows = mx.random.normal((300, 16), key=mx.random.key(0)).astype(mx.bfloat16)
    history = HiddenHistory()
    history.observe(0, rows[:100])
    history.observe(100, rows[100:])
    blocks = [capture_rows(history.rows(b.start, b.end)) for b in chain(list(range(300)))]
    again = HiddenHistory()
    again.observe(0, restore_rows(blocks))
    assert again.length == 300 and mx.array_equal(again.rows(0, 300), rows).item()


def test_a_next_turn_that_renders_the_prompts_end_anew_restores_up_to_the_checkpoint(target, answered):
    """A chat's next turn renders the prompt's last tokens anew (`recurrent.RENDERED_AGAIN`): a hybrid's
    state at the conversation's end is of no use to it, its checkpoint's is. A chain cut there (its
    last, partial block ending at the checkpoint) restores it, and greedy is the target's alone."""
    engine, tokens = answered
    at = len(PROMPT) - RENDERED_AGAIN
    blocks = [capture(engine.cache, b.start, b.end) for b in chain(tokens[:at])]
    fresh = Engine(target, NoDrafter(), eos_token_ids=[])
    assert restorable(fresh.cache, blocks) == len(blocks)
    turn = PROMPT[:at] + [9, 9, 2] + tokens[len(PROMPT):] + [6, 6]  # the end rendered anew, then the answer
    fresh.context = turn[: restore(fresh.cache, blocks)]
    assert fresh.reusable(turn) == at
    answer = [e.token for e in fresh.generate(turn, CONFIG).token_events()]
    assert answer == greedy_alone(target, turn, CONFIG.max_tokens)
