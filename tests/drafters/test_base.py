"""What each drafter says it can do (the `Drafter` protocol's capabilities), kind by kind."""

from __future__ import annotations

import mlx.core as mx
import pytest

from specmlx.caches.stream import prefill
from specmlx.distributed import Follower
from specmlx.drafters import Drafter, ModelDrafter, NoDrafter, PromptLookupDrafter, drafts_blocks, missing_members
from specmlx.drafters.block import BlockDrafter
from specmlx.drafters.gemma4_assistant import Gemma4AssistantDrafter
from specmlx.drafters.mtp import MTPDrafter

from .. import tiny, tiny_block

VOCAB = 64
HIDDEN = 64  # the tiny targets' hidden size


def drafters() -> dict[str, Drafter]:
    """One drafter of every kind, by the name the tests call it."""
    args = tiny.qwen2_args(VOCAB)
    return {
        "model": ModelDrafter(tiny.build(args, seed=1), VOCAB), "mtp": MTPDrafter(tiny.mtp(args, seed=2), VOCAB),
        "gemma4": Gemma4AssistantDrafter(tiny.gemma4_assistant(tiny.gemma4_args(VOCAB), seed=3), VOCAB),
        "block": BlockDrafter(tiny_block.tiny_dflash(VOCAB, seed=4)[0], VOCAB, "dflash"),
        "ngram": PromptLookupDrafter(), "none": NoDrafter(), "follower": Follower("mtp"),
    }


def test_only_a_block_drafter_drafts_a_whole_draft_in_one_forward():
    assert [name for name, d in drafters().items() if drafts_blocks(d)] == ["block"]


def test_only_a_model_drafter_has_a_draft_model_that_a_batch_can_share():
    kinds = drafters()
    assert kinds["model"].draft_model is kinds["model"].model
    assert [name for name, d in kinds.items() if d.draft_model is not None] == ["model"]


def test_only_a_gemma4_assistant_reads_the_target_cache_in_place():
    assert [name for name, d in drafters().items() if d.reads_target_cache] == ["gemma4"]


def test_a_model_drafter_adopts_a_copy_of_another_instances_cache_and_covers_every_token():
    source = drafters()["model"]
    prefill(source.model, source.cache, list(range(1, 11)))
    mine = source.fresh()
    assert mine.adopt(source, 6) == 6 and mine.cache.length == 6
    for ours, theirs in zip(mine.cache, source.cache):
        assert ours.keys is not theirs.keys  # its own buffers: the source may be rewound or freed
        assert mx.array_equal(ours.keys[..., :6, :], theirs.keys[..., :6, :])
    alone = source.fresh()
    assert alone.adopt(None, 6) == 6 and alone.cache.length == 0  # its prefill feeds what it lacks


@pytest.mark.parametrize("kind", ["mtp", "gemma4"])
def test_a_drafter_reading_hidden_states_covers_only_the_rows_it_adopted(kind):
    source = drafters()[kind]
    rows = mx.random.normal((5, HIDDEN), key=mx.random.key(0))
    source.observe(0, rows)
    mine = source.fresh()
    assert mine.adopt(source, 8) == 5 and mine.history.length == 5
    assert mx.array_equal(mine.history.rows(0, 5), rows)
    assert source.fresh().adopt(source, 3) == 3
    assert source.fresh().adopt(None, 8) == 0


def test_a_block_drafter_covers_only_the_context_rows_it_adopted():
    """It keeps a row a position, projected from what leaves the layers it reads (taps, not hidden)."""
    source = drafters()["block"]
    taps = mx.random.normal((5, len(tiny_block.TAPPED), HIDDEN), key=mx.random.key(0))
    source.observe(0, None, taps)
    mine = source.fresh()
    assert mine.adopt(source, 8) == 5 and mx.allclose(mine.history.rows(0, 5), source.model.context(taps)).item()
    assert source.fresh().adopt(source, 3) == 3 and source.fresh().adopt(None, 8) == 0


@pytest.mark.parametrize("kind", ["ngram", "none", "follower"])
def test_a_drafter_that_holds_nothing_covers_every_token(kind):
    assert drafters()[kind].adopt(None, 7) == 7


def test_every_kind_has_every_member_of_its_protocol():
    assert {name: missing_members(d) for name, d in drafters().items()} == {name: [] for name in drafters()}


def test_a_drafter_with_a_model_of_its_own_needs_what_a_batch_reads_of_it():
    """A batch's shared forward reads its logit width and its KV cache (`ModelDrafting`)."""
    model = drafters()["model"]
    del model.vocab_size, model.cache
    assert missing_members(model) == ["vocab_size", "cache"]


@pytest.mark.parametrize("kind", ["ngram", "none", "follower"])
def test_a_drafter_that_holds_nothing_takes_no_memory(kind):
    assert drafters()[kind].held_bytes() == 0 and drafters()[kind].bytes_per_token(None) == 0
