"""Rewindable caches."""

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache

from specmlx.caches.stream import make_cache, prefill
from specmlx.errors import SpecmlxError

from .. import tiny


def test_rewind_is_an_offset_move(target):
    cache = make_cache(target)
    prefill(target, cache, list(range(1, 40)))
    keys = cache[0].keys
    cache.rewind(30)
    assert cache.length == 30
    assert cache[0].keys is keys  # nothing copied or recomputed
    cache.rewind(35)  # rewinding forward is a no-op
    assert cache.length == 30


def test_prefill_in_chunks_equals_one_pass(target, monkeypatch):
    tokens = list(range(1, 50))
    one = make_cache(target)
    prefill(target, one, tokens)
    monkeypatch.setattr("specmlx.caches.stream.PREFILL_STEP", 7)
    chunked = make_cache(target)
    prefill(target, chunked, tokens)
    probe = mx.array([[3]])
    assert mx.allclose(target(probe, cache=one), target(probe, cache=chunked), atol=1e-4).item()


def test_sliding_window_caches_become_full_caches(vocab):
    model = tiny.build(tiny.gemma3_args(vocab, window=8), seed=0)
    assert all(isinstance(c, KVCache) for c in make_cache(model))


class CompositeModel(nn.Module):
    """Stands in for a layer that runs attention and a state-space mixer side by side (Falcon-H1):
    its cache is a list of caches, which nothing here rewinds."""

    model_type = "falcon_h1"
    layers = [None]

    def make_cache(self):
        return [CacheList(KVCache(), ArraysCache(size=2))]


def test_a_cache_that_cannot_rewind_is_refused_up_front():
    with pytest.raises(SpecmlxError, match=r"target x \(falcon_h1\) uses caches that cannot be rewound \(CacheList\)"):
        make_cache(CompositeModel(), name="target x")


class IndexedModel(CompositeModel):
    """A layer that keeps its latent KV and an indexer's keys, both trimmable (DeepSeek-V3.2, GLM-5)."""

    model_type = "glm_moe_dsa"

    def make_cache(self):
        return [CacheList(KVCache(), KVCache())]


def test_a_layer_of_several_trimmable_caches_is_refused_up_front_too():
    with pytest.raises(SpecmlxError, match=r"^target \(glm_moe_dsa\) uses caches that cannot be rewound \(CacheList\)"):
        make_cache(IndexedModel(), name="target")


def test_a_cache_takes_rows_without_copying_and_clears_to_nothing(target):
    source = make_cache(target)
    prefill(target, source, list(range(1, 12)))
    cache = make_cache(target)
    cache.take_rows(source)
    assert cache.length == 11
    assert all(mine.keys is theirs.keys and mine.values is theirs.values for mine, theirs in zip(cache, source))
    cache.clear()
    assert all(layer.keys is None and layer.values is None and layer.offset == 0 for layer in cache)
    assert source.length == 11  # the arrays it let go of are still the source's


def test_a_hybrids_state_bytes_are_what_its_recurrent_layers_hold_after_a_prefill():
    """Read from shapes alone, and equal to what a real prefill allocates; a transformer holds none."""
    from specmlx.caches.stream import recurrent_bytes
    from specmlx.caches.recurrent import RecurrentCache

    from .. import tiny_hybrid

    model = tiny_hybrid.tiny_qwen3_5(64, seed=1)
    cache = make_cache(model)
    prefill(model, cache, [1, 2, 3, 4, 5, 6])
    held = sum(s.nbytes for c in cache if isinstance(c, RecurrentCache) for s in c.cache if s is not None)
    assert recurrent_bytes(model) == held > 0
    assert recurrent_bytes(tiny.tiny_qwen(64, seed=1)) == 0


def test_the_default_slot_count_counts_a_hybrids_state_and_checkpoint_per_slot():
    from specmlx.serve.slots import TOKENS_PER_SLOT, default_count

    from .. import tiny_hybrid

    from specmlx.caches.recurrent import RecurrentCache

    model = tiny_hybrid.tiny_qwen3_5(64, seed=1)
    cache = make_cache(model)
    prefill(model, cache, [1, 2, 3, 4])  # what a slot's layers allocate: keys and values a position, a state
    state = sum(s.nbytes for c in cache if isinstance(c, RecurrentCache) for s in c.cache if s is not None)
    per_token = sum(c.keys.nbytes // c.keys.shape[2] * 2 for c in cache if not isinstance(c, RecurrentCache))
    budget = (per_token * TOKENS_PER_SLOT + 2 * state) * 5  # and a checkpoint: a second state
    assert default_count([model], budget) == 5
    assert default_count([model], budget - 1) == 4


def test_a_streams_kinds_are_read_once_when_it_is_made(monkeypatch):
    """Once the engine's and its drafter's streams are made, no round reads a layer's kind again: a
    generation of a hybrid (rewinds, replays, a prefill's checkpoint) runs with every way of reading
    one broken, and answers as the target alone."""
    from specmlx.caches import kinds, recurrent, stream
    from specmlx.drafters import ModelDrafter
    from specmlx.engine import Engine, GenerationConfig
    from specmlx.policy import DraftPolicy

    from ..test_engine_hybrid import VOCAB, greedy_alone
    from ..tiny_hybrid import tiny_qwen3_5

    target, prompt = tiny_qwen3_5(VOCAB, seed=1), [3, 1, 4, 1, 5, 9, 2, 6] * 3
    engine = Engine(target, ModelDrafter(tiny_qwen3_5(VOCAB, seed=4), VOCAB), eos_token_ids=[])
    expected = greedy_alone(target, prompt, 16)

    def read_again(layer):
        raise AssertionError("a layer's kind was read again")

    for module in (kinds, stream):
        monkeypatch.setattr(module, "kind_of", read_again)
    for module in (kinds, recurrent):
        monkeypatch.setattr(module, "is_recurrent", read_again)
    run = engine.generate(prompt, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=3)))
    assert [e.token for e in run.token_events()] == expected
    assert 0 < run.stats.accepted < run.stats.drafted  # rounds rewound both streams


def test_a_streams_layers_are_fixed_once_it_is_made(target):
    """What it read of its layers stays true: it refuses to gain, lose or swap one."""
    cache = make_cache(target)
    for change in (lambda: cache.append(KVCache()), lambda: cache.__setitem__(0, KVCache()), cache.pop,
                   lambda: cache.extend([KVCache()]), lambda: cache.__delitem__(0)):
        with pytest.raises(TypeError, match="fixed when it is made"):
            change()
    assert len(cache) == len(target.layers) and type(cache[:1]) is list
