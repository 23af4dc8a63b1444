"""A batch's recurrent layers: after every round, each row's state (and its attention rows) is what a
fresh single-row prefill of its committed tokens gives, whatever each row drafted and kept; and the
mixers replayed once for all rows do stop each row at its own length."""

from __future__ import annotations

from unittest import mock

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache

from specmlx.batch import Batch, Member
from specmlx.caches.batch import BatchCache
from specmlx.caches.batch_recurrent import BY_LENGTH, BatchRecurrentCache
from specmlx.caches.stream import make_cache, prefill
from specmlx.drafters import ModelDrafter, PromptLookupDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.hidden import inner_model
from specmlx.policy import DraftPolicy

from .. import tiny
from .test_recurrent import BUILDS, PROMPT, VOCAB, layer_states


def mixer_of(model):
    """The first recurrent mixer of `model`: the sub-module of a layer that holds a short convolution."""
    for layer in inner_model(model).layers:
        for _, module in layer.items():
            if hasattr(module, "items") and any("conv" in name for name, _ in module.items()):
                return module
    raise AssertionError("no recurrent mixer")


def stops_each_row_at_its_length(mixer) -> bool:
    """Rows right-padded to one width under `lengths` and its mask end in the states each row's own
    positions give alone."""
    x = mx.random.normal((3, 5, 64), key=mx.random.key(0))
    lengths = [5, 2, 0]
    batch = ArraysCache(2)
    batch.prepare(lengths=lengths)
    mixer(x, batch.make_mask(5), batch)
    for row, n in enumerate(lengths):
        alone = ArraysCache(2)
        if n:
            mixer(x[row : row + 1, :n], None, alone)
        for got, want in zip(batch.cache, alone.cache):
            if got is None:
                continue
            want = mx.zeros_like(got[row]) if want is None else want[0]
            if not mx.allclose(got[row], want, atol=1e-5).item():
                return False
    return True


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_the_mixers_replayed_once_for_all_rows_stop_each_row_at_its_own_length(name):
    """What `BY_LENGTH` rests on, read off mlx-lm: Nemotron-H's Mamba-2 mixer does not (its state update
    is not told the lengths), so its rows replay in groups."""
    mixer = mixer_of(BUILDS[name](VOCAB, seed=1))
    listed = f"{type(mixer).__module__}.{type(mixer).__qualname__}" in BY_LENGTH
    assert stops_each_row_at_its_length(mixer) == listed
    assert listed == (name != "nemotron_h")


def held_states(cache: list) -> list[mx.array]:
    """`layer_states`, of a cache whose KV layers may hold nothing."""
    return layer_states([c for c in cache if getattr(c, "keys", True) is not None])


def test_a_slots_cache_moves_in_and_out_holding_what_it_held():
    """What the server's slots do with a row (`serve/batching.py`): its single-row cache, recurrent layers
    included, moves into the batch (left empty) and back; a slot with nothing (a one-token prompt) too."""
    target = BUILDS["qwen3_5"](VOCAB, seed=1)
    lengths = (9, 0, 4)
    slots = [make_cache(target) for _ in lengths]
    for cache, n in zip(slots, lengths):
        prefill(target, cache, PROMPT[:n])
    held = [held_states(cache) for cache in slots]
    batch = BatchCache(len(slots[0]))
    for cache, n in zip(slots, lengths):
        batch.move_in(cache, n)
        assert cache.length == 0 and not held_states(cache)
    batch.move_out(1, slots[1])
    assert slots[1].length == 0 and all(not mx.any(s).item() for s in held_states(slots[1]))
    for i in (0, 2):
        batch.move_out(0, slots[i])
        assert slots[i].length == lengths[i]
        assert all(mx.array_equal(a, b).item() for a, b in zip(held_states(slots[i]), held[i], strict=True))
    slots[0].rewind(lengths[0])  # its slot's engine goes on from it: the next turn feeds the rest
    prefill(target, slots[0], PROMPT[lengths[0] : 15])
    fresh = make_cache(target)
    prefill(target, fresh, PROMPT[:15])
    assert all(mx.allclose(a, b, atol=1e-5).item() for a, b in zip(held_states(slots[0]), held_states(fresh),
                                                                  strict=True))


def row_cache(batch: Batch, row: int) -> list:
    """Row `row` of the batch's cache as single-row layers, read without changing the batch."""
    cache = batch.cache
    out = []
    for layer, fresh in zip(cache.layers, make_cache(batch.target)):
        if isinstance(layer, BatchRecurrentCache):
            fresh.hold(layer.row(row), cache.lengths[row])
        else:
            start = cache.padding[row]
            fresh.update_and_fetch(layer.keys[row : row + 1, :, start : cache.size],
                                   layer.values[row : row + 1, :, start : cache.size])
        out.append(fresh)
    return out


def assert_rows_hold_their_committed_tokens(batch: Batch) -> None:
    for row, member in enumerate(batch.members):
        tokens = member.tokens[: batch.cache.lengths[row]]
        assert len(tokens) == len(member.tokens) - 1
        fresh = make_cache(batch.target)
        prefill(batch.target, fresh, tokens)
        for got, want in zip(layer_states(row_cache(batch, row)), layer_states(fresh), strict=True):
            assert got.shape == want.shape
            assert mx.allclose(got, want, atol=1e-5, rtol=1e-4).item(), f"row {row}"


def members(target) -> list[Member]:
    """Rows of different prompts and draft lengths: a drafter close to the target (some drafts
    rejected), the target itself (all accepted), prompt lookup and a plain transformer."""
    near = tiny.perturbed(target, target.args, noise=0.2, seed=3)
    rows = [(ModelDrafter(near, VOCAB), PROMPT, 4), (ModelDrafter(target, VOCAB), PROMPT[:7], 2),
            (PromptLookupDrafter(), PROMPT[4:], 3), (ModelDrafter(near, VOCAB), PROMPT[:1], 3),
            (ModelDrafter(tiny.tiny_qwen(VOCAB, seed=4), VOCAB), PROMPT[2:13], 1)]
    return [Member(Engine(target, drafter, eos_token_ids=[]), prompt,
                   GenerationConfig(max_tokens=10 + 4 * i, policy=DraftPolicy(num_draft=k)))
            for i, (drafter, prompt, k) in enumerate(rows)]


def run_checked(target) -> list[list[int]]:
    """Rows joining one a round and leaving as they finish, every row checked after every round;
    returns each round's kept drafts per row."""
    batch, waiting, kept = Batch(target, len(make_cache(target)), max_rows=4), members(target), []
    while waiting or batch.members:
        if waiting and not batch.full:
            batch.add(waiting.pop(0))
        events = batch.step()
        kept.append([event.accepted for _, event in events if event.drafted])
        assert_rows_hold_their_committed_tokens(batch)
    return kept


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_after_every_round_each_row_holds_a_fresh_prefill_of_its_committed_tokens(name):
    kept = run_checked(BUILDS[name](VOCAB, seed=1))
    assert any(len(set(ks)) >= 2 for ks in kept)  # rows of one round kept different lengths


@pytest.mark.parametrize("name", ["qwen3_5", "nemotron_h"])  # one replay for all rows; one a group
def test_a_restore_one_position_late_is_told_apart(name):
    keep = BatchRecurrentCache.keep

    def late(self, dropped):
        keep(self, [max(d - 1, 0) for d in dropped])

    with mock.patch.object(BatchRecurrentCache, "keep", late), pytest.raises(AssertionError, match="row"):
        run_checked(BUILDS[name](VOCAB, seed=1))
