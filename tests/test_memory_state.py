"""The state figures of `memory_state`, read from configs, against what tiny models of the same
configs allocate: mlx-lm's caches after a forward, a recorded forward's record, the MTP layers' cache."""

from __future__ import annotations

import dataclasses
import gc

import mlx.core as mx
import pytest
from mlx_lm.models import granitemoehybrid, mamba2, nemotron_h, qwen3_5, qwen3_5_moe

from specmlx import memory_state
from specmlx.caches.stream import make_cache
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.memory_state import KEPT_FORWARDS, shapes, state_bytes
from specmlx.caches.replay import recording

from . import tiny_hybrid

VOCAB = 64


def as_config(args, model_type: str) -> dict:
    config = {k: v for k, v in dataclasses.asdict(args).items() if v is not None}
    return config | {"model_type": model_type}


def qwen_config(dtype: str | None = None, layers: int = 8, mtp: int = 0) -> dict:
    config = tiny_hybrid.qwen3_5_config(VOCAB, layers)
    config["text_config"]["mtp_num_hidden_layers"] = mtp
    return config | ({"torch_dtype": dtype} if dtype else {})


def build(config: dict):
    """The tiny model a config describes, with mlx-lm's own classes."""
    mx.random.seed(0)
    kind = config["model_type"]
    if kind in ("qwen3_5", "qwen3_5_moe"):
        module = qwen3_5 if kind == "qwen3_5" else qwen3_5_moe
        return module.Model(module.ModelArgs.from_dict(config))
    module = {"nemotron_h": nemotron_h, "granitemoehybrid": granitemoehybrid, "mamba2": mamba2}[kind]
    return module.Model(module.ModelArgs.from_dict(config))


CONFIGS = {
    "qwen3_5": lambda: qwen_config(),
    "qwen3_5 bfloat16": lambda: qwen_config("bfloat16"),
    "qwen3_5_moe": lambda: tiny_hybrid.qwen3_5_moe_config(VOCAB, 8),
    "nemotron_h": lambda: as_config(tiny_hybrid.nemotron_h_args(VOCAB, "M-M*MM*-"), "nemotron_h"),
    "nemotron_h bfloat16": lambda: as_config(tiny_hybrid.nemotron_h_args(VOCAB, "M-M*MM*-"), "nemotron_h")
    | {"torch_dtype": "bfloat16"},
    "granitemoehybrid": lambda: as_config(tiny_hybrid.granite_hybrid_args(VOCAB), "granitemoehybrid"),
    "mamba2": lambda: as_config(tiny_hybrid.mamba2_args(VOCAB), "mamba2"),
}


@pytest.fixture(params=sorted(CONFIGS))
def pair(request):
    config = CONFIGS[request.param]()
    model = build(config)
    if config.get("torch_dtype") == "bfloat16":
        model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    return config, model


def forward(model, cache, n: int, record: bool = False):
    tokens = mx.array([[i % VOCAB for i in range(n)]], dtype=mx.uint32)
    if record:
        with recording(model, cache):
            out = model(tokens, cache=cache)
    else:
        out = model(tokens, cache=cache)
    mx.eval(out, [c.state for c in cache])


def recurrent_nbytes(cache) -> int:
    return sum(a.nbytes for c in cache if hasattr(c, "reachable") for a in c.cache if a is not None)


def test_attention_kv_and_recurrent_state_are_what_the_caches_hold(pair):
    config, model = pair
    cache = make_cache(model)
    forward(model, cache, 5)
    s = shapes(config)
    assert s.kv_per_token == cache.per_position()  # the attention layers only
    assert s.recurrent == recurrent_nbytes(cache) > 0


def held_after(model, n: int, record: bool) -> int:
    """Memory a cache holds after a forward of `n` positions on top of a 4-position prefill."""
    cache = make_cache(model)
    forward(model, cache, 4)
    gc.collect()
    before = mx.get_active_memory()
    forward(model, cache, n, record)
    gc.collect()
    held = mx.get_active_memory() - before
    del cache
    gc.collect()
    return held


def test_a_recorded_forward_keeps_one_state_and_its_record(pair):
    """What recording adds: the state at its start (the mark a rewind restores) and the record of its
    positions. Measured as memory in use, so allocation rounding may add a little, never remove."""
    config, model = pair
    n = 512
    added = held_after(model, n, record=True) - held_after(model, n, record=False)
    s = shapes(config)
    expected = s.recurrent + n * s.record_per_token
    assert expected <= added <= 1.01 * expected + (16 << 10)  # and a few allocations rounded up


def test_the_native_mtp_layers_cache_is_what_their_drafter_reports():
    for config, target, mtp in [
        (qwen_config(layers=4, mtp=1), tiny_hybrid.tiny_qwen3_5(VOCAB, 0), None),
        (tiny_hybrid.nemotron_h_moe_config(VOCAB) | {"model_type": "nemotron_h"}, tiny_hybrid.tiny_nemotron_h_moe(VOCAB, 0), None),
    ]:
        layers = (tiny_hybrid.tiny_nemotron_h_mtp(target, 2) if config["model_type"] == "nemotron_h"
                  else tiny_hybrid.tiny_native_mtp(target, 2))
        assert shapes(config).mtp_kv_per_token == NativeMTPDrafter(layers, VOCAB).bytes_per_token(target) > 0


def test_the_figure_adds_context_rewind_and_mtp_layers():
    s = shapes(qwen_config(mtp=1))
    kept = KEPT_FORWARDS * (s.recurrent + 5 * s.record_per_token) + s.recurrent  # and the checkpoint
    assert state_bytes(qwen_config(mtp=1), context=100, num_draft=4) == (
        (s.kv_per_token + s.mtp_kv_per_token) * 100 + s.recurrent + kept)
    assert state_bytes(qwen_config(mtp=1), context=100, num_draft=4, rows=3) == 3 * state_bytes(
        qwen_config(mtp=1), context=100, num_draft=4)
    assert s.mtp_kv_per_token > 0 and shapes(qwen_config()).mtp_kv_per_token == 0


def test_an_architecture_it_does_not_read_adds_nothing():
    assert shapes({"model_type": "qwen2", "hidden_size": 64}) is None
    assert state_bytes({"model_type": "qwen2"}) == 0 == state_bytes({})
    assert state_bytes({"model_type": "qwen3_5", "text_config": {"hidden_size": 64}}) == 0  # mlx-lm refuses it at load
    assert memory_state.CONTEXT > 0


def test_what_an_engines_caches_hold_after_rounds_is_within_the_figure(pair):
    """After a generation (marks, records and the prompt's checkpoint held), the caches hold at most
    what `state_bytes` counts for their length, and at least the state and checkpoint."""
    from specmlx.drafters import ModelDrafter
    from specmlx.engine import Engine, GenerationConfig
    from specmlx.policy import DraftPolicy

    from . import tiny

    config, model = pair
    engine = Engine(model, ModelDrafter(tiny.perturbed(model, model.args, noise=0.3, seed=3), VOCAB), eos_token_ids=[])
    prompt = [(5 * i) % VOCAB for i in range(40)]
    list(engine.generate(prompt, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=4))))
    s = shapes(config)
    held = engine.cache.held_bytes()
    assert s.kv_per_token * engine.cache.length + 2 * s.recurrent <= held
    assert held <= state_bytes(config, context=engine.cache.length, num_draft=4)
