"""Each kind of layer's verbs (`specmlx/caches/kinds.py`), for the quantized KV kind beside the plain one: a
prefix copied holds the same packed rows, a span kept and restored holds the same arrays, and a span kept at
one setting never restores into a cache of another (8 bits, 4 bits, float)."""

from __future__ import annotations

import random

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from specmlx.caches.kinds import KVBits, kind_of
from specmlx.caches.snapshot import capture, restorable, restore
from specmlx.caches.stream import Stream, make_cache, prefill
from specmlx.errors import SpecmlxError

from .. import tiny

VOCAB = 64
PROMPT = random.Random(1).choices(range(VOCAB), k=70)
SETTINGS = {"float": None, "8 bits": KVBits(8, 32), "4 bits": KVBits(4, 32)}


@pytest.fixture(scope="module")
def target():
    return tiny.tiny_qwen(VOCAB, seed=1, hidden=128)


def filled(target, kv: KVBits | None) -> list:
    cache = make_cache(target, kv=kv)
    prefill(target, cache, PROMPT)
    return cache


def arrays(cache: list, length: int) -> list[mx.array]:
    """Every layer's rows of its first `length` positions (each part of a quantized one)."""
    return [part[..., :length, :] for layer in cache for part in kind_of(layer).parts(layer)]


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_prefix_copied_and_a_span_restored_hold_the_same_rows(target, name):
    kv = SETTINGS[name]
    source = filled(target, kv)
    copied = make_cache(target, kv=kv)
    assert copied.copy_prefix(source, 50) == 50 == copied.length
    assert all(mx.array_equal(a, b) for a, b in zip(arrays(copied, 50), arrays(source, 50)))
    blocks = [capture(source, 0, 32), capture(source, 32, 60)]
    fresh = make_cache(target, kv=kv)
    assert restorable(fresh, blocks) == 2 and restore(fresh, blocks) == 60
    assert all(mx.array_equal(a, b) for a, b in zip(arrays(fresh, 60), arrays(source, 60)))
    assert len(tree_flatten(blocks[0])) == 1 + 2 * len(source) * (1 if kv is None else 3)


def test_a_span_kept_at_one_setting_restores_into_no_other(target):
    kept = {name: [capture(filled(target, kv), 0, 32)] for name, kv in SETTINGS.items()}
    for name, kv in SETTINGS.items():
        cache = make_cache(target, kv=kv)
        for other, blocks in kept.items():
            assert restorable(cache, blocks) == (1 if other == name else 0), (name, other)
        with pytest.raises(SpecmlxError, match="do not hold this cache's layers"):
            restore(cache, kept["4 bits" if name != "4 bits" else "float"])
    assert make_cache(target, kv=SETTINGS["8 bits"]).copy_prefix(filled(target, None), 20) == 0


def test_a_chunked_window_is_counted_and_emptied_but_never_copied_nor_kept():
    """Llama 4's `ChunkedKVCache` keeps keys and values whose rows need not start at position 0: its bytes
    count (the memory check reads them), it empties as a KV layer does, and no prefix of it is copied
    or kept on disk."""
    from mlx_lm.models.cache import ChunkedKVCache

    layer = ChunkedKVCache(chunk_size=8)
    layer.update_and_fetch(mx.zeros((1, 2, 5, 32)), mx.zeros((1, 2, 5, 32)))
    cache = Stream([layer])
    assert cache.held_bytes() == layer.keys.nbytes + layer.values.nbytes > 0
    assert cache.per_position() == 2 * 2 * 32 * 4
    assert not cache.copyable and not cache.keepable
    cache.clear()
    assert layer.keys is None and cache.held_bytes() == 0
