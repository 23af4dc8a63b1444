"""The batch's cache against the single-row cache each row would have alone.

Four rows of different lengths (the first empty: a one-token prompt leaves
its slot's cache empty after prefill) are fed different numbers of tokens,
right-padded to one width, keep different shares of them, and are fed again.
At every step each row's logits and keys must equal those of its own
`KVCache` fed the same tokens, and the host mirrors must equal what mlx-lm's
`BatchKVCache` holds (read with a sync, as the batch itself never does).

Equal means bit for bit on mlx-cpu's reference BLAS. OpenBLAS, which the
suite preloads (`conftest.py`), picks its kernels by the matrices' shapes,
so a row's floats in a batch of four differ from the same row's alone by a
few ULPs (at most 1e-6 here); a misplaced row differs by whole units.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from specmlx.caches import batch as batch_cache
from specmlx.caches.batch import BatchCache, RowRef
from specmlx.blas import describe
from specmlx.caches.stream import Stream, make_cache
from specmlx.errors import SpecmlxError
from specmlx.hidden import decoder, head
from tests import tiny

VOCAB = 32
TOLERANCE = 1e-5 if describe().startswith("OpenBLAS") else 0.0
PROMPTS = ([], [1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12, 13, 14, 15], [3])
FED = ([6, 7, 8], [16], [4, 5, 6, 7], [1, 2])  # a width of 4: rows padded by 1, 3, 0 and 2
# Of what each row was fed: what is left over (1, 3, 2, 3) differs per row, so every row but
# the first is rolled, and afterwards every row has left padding (9, 6, 1, 10).
KEPT = (3, 1, 2, 1)
NEXT = ([9], [2, 3], [5], [8, 8, 8])


@functools.cache
def target():
    return tiny.build(tiny.qwen2_args(VOCAB), seed=0)


def single(tokens: list[int]) -> list[KVCache]:
    """A row's own cache, as its slot's engine would hold it."""
    cache = make_cache(target())
    if tokens:
        decoder(target(), mx.array(tokens)[None], cache)
    return cache


def feed_alone(cache: list[KVCache], tokens: list[int]) -> mx.array:
    return head(target(), decoder(target(), mx.array(tokens)[None], cache)[0])


def feed_batch(cache: BatchCache, feeds: list[list[int]]) -> list[mx.array]:
    """One forward of every row's tokens, right-padded; each row's logits at its own positions."""
    width = max(map(len, feeds))
    rows = mx.array([f + [0] * (width - len(f)) for f in feeds])
    hidden = decoder(target(), rows, cache.layers)
    cache.grown(width)
    return [head(target(), hidden[i, : len(f)]) for i, f in enumerate(feeds)]


def joined() -> BatchCache:
    cache = BatchCache(len(make_cache(target())))
    for prompt in PROMPTS:
        cache.join(single(prompt), len(prompt))
    return cache


def fed_and_kept() -> tuple[BatchCache, list[list[KVCache]]]:
    """The batch after one forward of FED and a keep of KEPT; each row's own cache, the same."""
    cache, alone = joined(), [single(p) for p in PROMPTS]
    feed_batch(cache, list(FED))
    cache.keep([len(p) + k for p, k in zip(PROMPTS, KEPT)])
    for own, prompt, fed, kept in zip(alone, PROMPTS, FED, KEPT):
        feed_alone(own, fed)
        for layer in own:
            layer.trim(len(fed) - kept)
    return cache, alone


def assert_mirrors(cache: BatchCache) -> None:
    for layer in cache.layers:
        assert layer.offset.tolist() == cache.lengths, "offsets"
        assert layer.left_padding.tolist() == cache.padding, "left padding"
        assert layer._idx == cache.size, "positions held"


def assert_same(batch: list[mx.array], alone: list[mx.array]) -> None:
    """Each row's array equals its alone counterpart (to the BLAS's `TOLERANCE`)."""
    for i, (b, a) in enumerate(zip(batch, alone)):
        assert b.shape == a.shape, f"row {i}: shape {b.shape}, alone {a.shape}"
        diff = mx.abs(b - a).max().item()
        assert diff <= TOLERANCE, f"row {i}: max |diff| {diff}"


def test_joined_rows_mirror_the_batch_cache_and_are_right_aligned():
    cache = joined()
    assert cache.lengths == [len(p) for p in PROMPTS]
    assert cache.padding == [9 - len(p) for p in PROMPTS]
    assert cache.size == 9
    assert_mirrors(cache)


def test_a_right_padded_forward_gives_each_row_its_own_logits():
    cache, alone = joined(), [single(p) for p in PROMPTS]
    batch = feed_batch(cache, list(FED))
    assert_mirrors(cache)
    assert_same(batch, [feed_alone(own, fed) for own, fed in zip(alone, FED)])


@pytest.mark.parametrize("compact_at", [batch_cache.COMPACT_AT, 1])
def test_after_a_ragged_keep_the_next_forward_gives_each_row_its_own_logits(monkeypatch, compact_at):
    """`compact_at=1`: the padding every row has is dropped at once (the compaction's path)."""
    monkeypatch.setattr(batch_cache, "COMPACT_AT", compact_at)
    cache, alone = fed_and_kept()
    assert cache.lengths == [len(p) + k for p, k in zip(PROMPTS, KEPT)]
    assert min(cache.padding) == (0 if compact_at == 1 else 1)
    assert_mirrors(cache)
    batch = feed_batch(cache, list(NEXT))
    assert_mirrors(cache)
    assert_same(batch, [feed_alone(own, fed) for own, fed in zip(alone, NEXT)])


def test_keep_every_row_the_same_is_a_trim_and_rolls_nothing():
    cache = joined()
    feed_batch(cache, [[1, 2]] * len(PROMPTS))
    keys = cache.layers[0].keys
    cache.keep([len(p) + 1 for p in PROMPTS])
    assert cache.layers[0].keys is keys  # no copy: every row dropped the same
    assert cache.padding == [9 - len(p) for p in PROMPTS]
    assert_mirrors(cache)


def test_keep_refuses_more_than_a_row_holds():
    cache = joined()
    with pytest.raises(SpecmlxError):
        cache.keep([len(p) + (i == 1) for i, p in enumerate(PROMPTS)])


def test_a_row_that_leaves_takes_back_exactly_its_own_cache():
    cache, alone = fed_and_kept()
    out = cache.leave(2)
    assert len(out) == len(alone[2])
    for got, own in zip(out, alone[2]):
        assert type(got) is KVCache and got.offset == own.offset == len(PROMPTS[2]) + KEPT[2]
        assert_same([got.keys, got.values], [own.keys[..., : own.offset, :], own.values[..., : own.offset, :]])
    assert cache.lengths == [len(p) + k for i, (p, k) in enumerate(zip(PROMPTS, KEPT)) if i != 2]
    assert_mirrors(cache)
    rest = [a for i, a in enumerate(alone) if i != 2]
    nexts = [n for i, n in enumerate(NEXT) if i != 2]
    assert_same(feed_batch(cache, nexts), [feed_alone(own, fed) for own, fed in zip(rest, nexts)])


def test_the_last_row_to_leave_leaves_an_empty_batch():
    cache = joined()
    for prompt in PROMPTS:  # the first row leaves each time: the last to leave is not empty
        out = cache.leave(0)
        assert out[0].offset == len(prompt)
    assert (cache.rows, cache.size, cache.padding, cache.nbytes) == (0, 0, [], 0)
    cache.join(single([1, 2, 3]), 3)
    assert_mirrors(cache)


def test_a_slot_cache_moved_in_is_emptied_and_moved_out_holds_its_row_again():
    cache, prompt = joined(), PROMPTS[2]
    slot, alone = single(prompt), single(prompt)
    cache.move_in(slot, len(prompt))
    assert all(layer.keys is None and layer.offset == 0 for layer in slot)  # its rows live in the batch
    assert cache.lengths[-1] == len(prompt)
    cache.move_out(cache.rows - 1, slot)
    assert cache.lengths == [len(p) for p in PROMPTS]
    for got, own in zip(slot, alone):
        assert type(got) is KVCache and got.offset == own.offset == len(prompt)
        assert_same([got.keys, got.values], [own.keys[..., : own.offset, :], own.values[..., : own.offset, :]])
    assert_same([feed_alone(slot, [4])], [feed_alone(alone, [4])])


def test_a_row_view_reads_the_rows_keys_from_position_0():
    cache, alone = fed_and_kept()
    ref = RowRef(3)
    views = cache.view(ref)
    for view, own in zip(views, alone[3]):
        assert view.offset == own.offset
        assert_same([view.keys, view.values], [own.keys[..., : own.offset, :], own.values[..., : own.offset, :]])
    cache.leave(0)  # rows move up as others leave; the batch moves the reference with them
    ref.index = 2
    for view, own in zip(views, alone[3]):
        assert view.offset == own.offset
        assert_same([view.keys], [own.keys[..., : own.offset, :]])


def test_join_takes_only_the_first_length_tokens_of_a_slots_cache():
    cache = joined()
    cache.join(single([1, 2, 3, 4, 5, 6, 7]), 4)  # a slot that holds more than the row's context
    assert cache.lengths[-1] == 4
    assert_mirrors(cache)
    [got] = feed_batch(cache, [[1]] * 4 + [[9, 9]])[-1:]
    assert_same([got], [feed_alone(single([1, 2, 3, 4]), [9, 9])])


def test_join_refuses_a_target_whose_layers_are_not_plain_kv_caches():
    """A chunked window (Llama 4's) drops its oldest rows, which no batch form does."""
    from mlx_lm.models.cache import ChunkedKVCache

    cache = BatchCache(1)
    with pytest.raises(SpecmlxError, match="can be batched"):
        cache.join(Stream([ChunkedKVCache(chunk_size=8)]), 0)
