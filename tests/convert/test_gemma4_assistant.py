"""Gemma 4 assistant checkpoints (HF layout) -> MLX drafter directories."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest

from specmlx.convert.gemma4_assistant import convert_gemma4_assistant
from specmlx.models.gemma4_assistant import (
    AssistantConfig, is_gemma4_assistant_dir, load_gemma4_assistant, sanitize,
)
from specmlx.errors import SpecmlxError

from .. import tiny

VOCAB = 64


@pytest.fixture(scope="module")
def target_args():
    return tiny.gemma4_args(VOCAB)


@pytest.fixture(scope="module")
def model(target_args):
    return tiny.gemma4_assistant(target_args, seed=11, ordered=True)


def write_hf_checkpoint(folder: Path, model, target_args, prefix: str = "model.") -> Path:
    """The layout Google's checkpoints use: a tied `lm_head.weight` stored anyway,
    `token_ordering` as int64, bfloat16 weights, two shards."""
    folder.mkdir(parents=True)
    weights = {k: v.astype(mx.bfloat16) for k, v in model.weights().items()}
    weights["masked_embedding.token_ordering"] = model.masked_embedding.token_ordering.astype(mx.int64)
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    weights = {(prefix + k[len("model."):] if k.startswith("model.") else k): v for k, v in weights.items()}
    names = sorted(weights)
    half = len(names) // 2
    mx.save_safetensors(str(folder / "model-00001-of-00002.safetensors"), {k: weights[k] for k in names[:half]})
    mx.save_safetensors(str(folder / "model-00002-of-00002.safetensors"), {k: weights[k] for k in names[half:]})
    config = tiny.gemma4_assistant_config(target_args, ordered=True)
    config["torch_dtype"] = "bfloat16"
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def outputs(model):
    mx.random.seed(0)
    kv = {
        "sliding_attention": (mx.random.normal((1, 2, 8, 16)), mx.random.normal((1, 2, 8, 16))),
        "full_attention": (mx.random.normal((1, 2, 12, 32)), mx.random.normal((1, 2, 12, 32))),
    }
    h, following = model(mx.random.normal((1, 1, 128)), kv, 12)
    return h, following, model.logits(h[0, 0]), model.greedy(h[0, 0])


def test_round_trip_keeps_every_tensor(tmp_path, model, target_args):
    source = write_hf_checkpoint(tmp_path / "hf", model, target_args)
    assert is_gemma4_assistant_dir(source)
    reference = load_gemma4_assistant(source)  # the HF layout loads directly too
    reference.set_dtype(mx.float32)
    out = convert_gemma4_assistant(source, tmp_path / "mlx", dtype="float32", progress=False)
    assert is_gemma4_assistant_dir(out)
    stored = mx.load(str(out / "model.safetensors"))
    assert "lm_head.weight" not in stored
    assert stored["masked_embedding.token_ordering"].dtype == mx.int32
    assert mx.array_equal(stored["masked_embedding.token_ordering"], model.masked_embedding.token_ordering)
    assert all(v.dtype == mx.float32 for k, v in stored.items() if "ordering" not in k)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float32"
    assert (out / "tokenizer_config.json").is_file()
    again = load_gemma4_assistant(out)
    for a, b in zip(outputs(again), outputs(reference)):
        assert mx.array_equal(a, b)
    # bfloat16 on disk, so the converted model is the original up to that rounding
    for a, b in zip(outputs(again)[:2], outputs(model)[:2]):
        assert mx.allclose(a, b, atol=0.1)


def test_half_precision_output(tmp_path, model, target_args):
    source = write_hf_checkpoint(tmp_path / "hf", model, target_args)
    out = convert_gemma4_assistant(source, tmp_path / "mlx", dtype="float16", progress=False)
    stored = mx.load(str(out / "model.safetensors"))
    assert stored["masked_embedding.centroids.weight"].dtype == mx.float16
    assert stored["masked_embedding.token_ordering"].dtype == mx.int32
    assert load_gemma4_assistant(out).masked_embedding.token_ordering.dtype == mx.int32


def test_other_trunk_prefixes_are_accepted(model, target_args):
    config = AssistantConfig.from_dict(tiny.gemma4_assistant_config(target_args, ordered=True))
    names = set(model.weights())
    for prefix in ("model.language_model.", "language_model.model.", ""):
        renamed = {(prefix + k[len("model."):] if k.startswith("model.") else k): v
                   for k, v in model.weights().items()}
        renamed["model.layers.0.self_attn.rotary_emb.inv_freq"] = mx.zeros((4,))
        assert set(sanitize(renamed, config)) == names


def test_output_is_atomic_and_not_overwritten(tmp_path, model, target_args):
    source = write_hf_checkpoint(tmp_path / "hf", model, target_args)
    out = tmp_path / "mlx"
    convert_gemma4_assistant(source, out, progress=False)
    with pytest.raises(SpecmlxError, match="already exists"):
        convert_gemma4_assistant(source, out, progress=False)
    (source / "model-00002-of-00002.safetensors").unlink()  # tensors missing
    with pytest.raises(SpecmlxError, match="assistant weights do not match its config"):
        convert_gemma4_assistant(source, out, force=True, progress=False)
    assert is_gemma4_assistant_dir(out)  # the old output is untouched
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bad_sources_are_refused(tmp_path, model, target_args):
    with pytest.raises(SpecmlxError, match="not a directory"):
        convert_gemma4_assistant(tmp_path / "missing", tmp_path / "out", progress=False)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "gemma4_text"}))
    assert not is_gemma4_assistant_dir(plain)
    with pytest.raises(SpecmlxError, match="not a Gemma 4 assistant"):
        convert_gemma4_assistant(plain, tmp_path / "out", progress=False)
    source = write_hf_checkpoint(tmp_path / "hf", model, target_args)
    with pytest.raises(SpecmlxError, match="unknown dtype"):
        convert_gemma4_assistant(source, tmp_path / "out", dtype="int8", progress=False)
    assert not (tmp_path / "out").exists()
