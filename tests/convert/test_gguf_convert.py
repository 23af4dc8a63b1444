"""End to end: a tiny GGUF converts into a directory mlx-lm loads, with the reference's logits."""

import json

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm import load

from specmlx.convert import convert
from specmlx.convert import writer as writer_module

from .reference import GGUFWeights, forward

PROMPT = "def hello(name): return the world  at\n\n the inn"


def logits(model, ids):
    return np.array(model(mx.array([ids]))[0].astype(mx.float32))


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gemma3"])
def test_logits_match_numpy_reference(converted_tiny, arch):
    gguf_path, out = converted_tiny(arch)
    model, tokenizer = load(str(out))
    ids = tokenizer.encode(PROMPT)
    assert len(ids) > 8  # longer than gemma's sliding window of 4
    expected = forward(GGUFWeights(gguf_path), [ids])[0]
    np.testing.assert_allclose(logits(model, ids), expected, atol=2e-4 * np.abs(expected).max())


def test_output_files(converted_tiny):
    _, out = converted_tiny("qwen2")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not [n for n in names if "partial" in n]
    config = json.loads((out / "config.json").read_text())
    assert config["torch_dtype"] == "float32" and "quantization" not in config


def test_tied_model_has_no_lm_head(tiny_gguf, tmp_path):
    out = convert(tiny_gguf("qwen2", tied=True), tmp_path / "tied", progress=False)
    weights = mx.load(str(out / "model.safetensors"))
    assert "lm_head.weight" not in weights
    model, tokenizer = load(str(out))
    assert np.isfinite(logits(model, tokenizer.encode("hello"))).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes(converted_tiny, tmp_path, dtype):
    gguf_path, reference_dir = converted_tiny("qwen2")
    out = convert(gguf_path, tmp_path / dtype, dtype=dtype, progress=False)
    model, tokenizer = load(str(out))
    assert model.model.embed_tokens.weight.dtype == getattr(mx, dtype)
    full, _ = load(str(reference_dir))
    ids = tokenizer.encode(PROMPT)
    expected = logits(full, ids)
    np.testing.assert_allclose(logits(model, ids), expected, atol=0.05 * np.abs(expected).max())


def test_quantized_output(converted_tiny, tmp_path):
    gguf_path, reference_dir = converted_tiny("qwen2")
    out = convert(gguf_path, tmp_path / "q8", quantize=True, q_bits=8, q_group_size=32, progress=False)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    model, tokenizer = load(str(out))
    assert isinstance(model.model.layers[0].mlp.up_proj, nn.QuantizedLinear)
    full, _ = load(str(reference_dir))
    ids = tokenizer.encode(PROMPT)
    expected = logits(full, ids)
    np.testing.assert_allclose(logits(model, ids), expected, atol=0.05 * np.abs(expected).max())


def test_many_shards_load(converted_tiny, tmp_path, monkeypatch):
    gguf_path, reference_dir = converted_tiny("gemma3")
    monkeypatch.setattr(writer_module, "DEFAULT_SHARD_BYTES", 64 << 10)
    out = convert(gguf_path, tmp_path / "sharded", progress=False)
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(shards) > 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    model, tokenizer = load(str(out))
    full, _ = load(str(reference_dir))
    ids = tokenizer.encode(PROMPT)
    np.testing.assert_array_equal(logits(model, ids), logits(full, ids))


def test_generates(converted_tiny):
    from mlx_lm import generate

    _, out = converted_tiny("qwen2")
    model, tokenizer = load(str(out))
    text = generate(model, tokenizer, prompt="hello", max_tokens=5)
    assert isinstance(text, str)
