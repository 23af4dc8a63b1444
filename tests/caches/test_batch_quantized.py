"""A batch's quantized keys and values (`--kv-bits`) against the single-row quantized cache each row would have
alone: the rows and steps of `test_batch.py` (joins of different lengths, an empty one among them, a ragged keep,
a compaction, a row leaving), each row's logits equal to its own alone, the packed rows it takes back its own.

Negative control: the same batch kept in float (mlx-lm's `BatchKVCache`) gives rows logits that differ from
their quantized alone by far more than the tolerance, so the comparison sees the quantization.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache, QuantizedKVCache

from specmlx.caches import batch as batch_cache
from specmlx.caches.batch import BatchCache
from specmlx.caches.batch_quantized import BatchQuantizedKVCache
from specmlx.caches.kinds import KVBits
from specmlx.caches.stream import make_cache
from specmlx.errors import SpecmlxError
from specmlx.hidden import decoder, head
from tests import tiny

from .test_batch import FED, KEPT, NEXT, PROMPTS, TOLERANCE, VOCAB

KV = KVBits(4, 32)  # the tiny model's heads are 32 wide


@functools.cache
def target():
    return tiny.build(tiny.qwen2_args(VOCAB, hidden=128), seed=0, sharpness=1.0)


def single(tokens: list[int], kv: KVBits | None = KV) -> list:
    cache = make_cache(target(), kv=kv)
    if tokens:
        decoder(target(), mx.array(tokens)[None], cache)
    return cache


def feed_alone(cache: list, tokens: list[int]) -> mx.array:
    return head(target(), decoder(target(), mx.array(tokens)[None], cache)[0])


def feed_batch(cache: BatchCache, feeds: list[list[int]]) -> list[mx.array]:
    width = max(map(len, feeds))
    hidden = decoder(target(), mx.array([f + [0] * (width - len(f)) for f in feeds]), cache.layers)
    cache.grown(width)
    return [head(target(), hidden[i, : len(f)]) for i, f in enumerate(feeds)]


def joined(kv: KVBits | None = KV) -> BatchCache:
    cache = BatchCache(len(make_cache(target())))
    for prompt in PROMPTS:
        cache.join(single(prompt, kv), len(prompt))
    return cache


def fed_and_kept(kv: KVBits | None = KV) -> tuple[BatchCache, list[list]]:
    cache, alone = joined(kv), [single(p) for p in PROMPTS]
    feed_batch(cache, list(FED))
    cache.keep([len(p) + k for p, k in zip(PROMPTS, KEPT)])
    for own, fed, kept in zip(alone, FED, KEPT):
        feed_alone(own, fed)
        for layer in own:
            layer.trim(len(fed) - kept)
    return cache, alone


def differences(batch: list[mx.array], alone: list[mx.array]) -> list[float]:
    assert [b.shape for b in batch] == [a.shape for a in alone]
    return [mx.abs(b - a).max().item() for b, a in zip(batch, alone)]


def assert_mirrors(cache: BatchCache) -> None:
    for layer in cache.layers:
        assert type(layer) is BatchQuantizedKVCache and (layer.bits, layer.group_size) == (KV.bits, KV.group_size)
        for part in layer.parts:  # the three parts move alike
            assert part.offset.tolist() == cache.lengths and part.left_padding.tolist() == cache.padding
            assert part._idx == cache.size


@pytest.mark.parametrize("compact_at", [batch_cache.COMPACT_AT, 1])
def test_after_a_ragged_keep_each_row_reads_its_own_quantized_cache(monkeypatch, compact_at):
    monkeypatch.setattr(batch_cache, "COMPACT_AT", compact_at)
    cache, alone = joined(), [single(p) for p in PROMPTS]
    assert max(differences(feed_batch(cache, list(FED)), [feed_alone(o, f) for o, f in zip(alone, FED)])) <= TOLERANCE
    cache.keep([len(p) + k for p, k in zip(PROMPTS, KEPT)])
    for own, fed, kept in zip(alone, FED, KEPT):
        for layer in own:
            layer.trim(len(fed) - kept)
    assert_mirrors(cache)
    assert min(cache.padding) == (0 if compact_at == 1 else 1)
    got = feed_batch(cache, list(NEXT))
    assert_mirrors(cache)
    assert max(differences(got, [feed_alone(o, n) for o, n in zip(alone, NEXT)])) <= TOLERANCE


def test_a_float_batch_is_not_its_rows_quantized_alone():
    """The negative control: the same rows and steps, the batch kept in float."""
    cache, alone = fed_and_kept(kv=None)
    assert all(type(layer) is BatchKVCache for layer in cache.layers)
    assert min(differences(feed_batch(cache, list(NEXT)), [feed_alone(o, n) for o, n in zip(alone, NEXT)])) > 1e-3


def test_a_row_that_leaves_takes_back_its_own_packed_rows():
    """What it takes back is its packed rows, not a dequantized copy: it reads on alone as it read in the batch."""
    cache, alone = fed_and_kept()
    out = cache.leave(2)
    for got, own in zip(out, alone[2]):
        assert type(got) is QuantizedKVCache and got.offset == own.offset == len(PROMPTS[2]) + KEPT[2]
        assert (got.bits, got.group_size) == (KV.bits, KV.group_size)
        assert len(got.keys) == len(got.values) == 3 and got.keys[0].dtype == mx.uint32
        assert got.keys[0].shape[2] == got.offset
    assert_mirrors(cache)
    nexts = [n for i, n in enumerate(NEXT) if i != 2]
    rest = [a for i, a in enumerate(alone) if i != 2]
    assert max(differences(feed_batch(cache, nexts), [feed_alone(o, n) for o, n in zip(rest, nexts)])) <= TOLERANCE
    assert max(differences([feed_alone(out, [5])], [feed_alone(alone[2], [5])])) <= TOLERANCE


def test_the_last_row_to_leave_leaves_an_empty_batch_that_takes_rows_again():
    cache = joined()
    for prompt in PROMPTS:
        assert cache.leave(0)[0].offset == len(prompt)
    assert (cache.rows, cache.size, cache.nbytes) == (0, 0, 0)
    cache.join(single([1, 2, 3]), 3)
    assert_mirrors(cache)


def test_the_batch_holds_what_its_bits_say():
    """4 bits and a float32 scale and bias a group of 32: 24 bytes a head's position, against 128 in float."""
    quantized, plain = joined(), joined(kv=None)
    assert quantized.nbytes / plain.nbytes == pytest.approx(24 / 128)


def test_rows_of_another_setting_are_refused_in_one_line():
    cache = joined()
    with pytest.raises(SpecmlxError, match="kinds"):
        cache.join(single([1, 2], KVBits(8, 32)), 2)
    with pytest.raises(SpecmlxError, match="kinds"):
        cache.join(single([1, 2], None), 2)
