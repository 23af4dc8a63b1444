"""Hugging Face sources: a local safetensors directory converts through mlx-lm; the hub fails clearly offline."""

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from specmlx.convert import convert
from specmlx.hub import is_repo_id
from specmlx.errors import SpecmlxError


def test_local_hf_directory(converted_tiny, tmp_path):
    # A converted tiny model is itself an HF-layout directory (config.json, safetensors, tokenizer).
    _, hf_dir = converted_tiny("qwen2")
    out = convert(hf_dir, tmp_path / "from-hf", dtype="float16", progress=False)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    model, tokenizer = load(str(out))
    original, _ = load(str(hf_dir))
    ids = mx.array([tokenizer.encode("def hello(name):")])
    got, expected = np.array(model(ids).astype(mx.float32)), np.array(original(ids))
    np.testing.assert_allclose(got, expected, atol=0.05 * np.abs(expected).max())
    assert model.model.embed_tokens.weight.dtype == mx.float16


def test_local_hf_directory_quantized(converted_tiny, tmp_path):
    _, hf_dir = converted_tiny("gemma3")
    out = convert(hf_dir, tmp_path / "q", q_bits=4, q_group_size=32, progress=False)
    assert json.loads((out / "config.json").read_text())["quantization"]["bits"] == 4
    model, tokenizer = load(str(out))
    assert np.isfinite(np.array(model(mx.array([tokenizer.encode("hello")])))).all()


def test_directory_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecmlxError, match="not a Hugging Face model directory"):
        convert(tmp_path / "empty", tmp_path / "out", progress=False)


def test_unsupported_model_type(converted_tiny, tmp_path):
    _, hf_dir = converted_tiny("qwen2")
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in hf_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "model_type": "no_such_model"}))
    with pytest.raises(SpecmlxError, match="cannot convert"):
        convert(broken, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("source, expected", [("Qwen/Qwen2.5-0.5B", True), ("org/model.gguf", False), ("a/b/c", False)])
def test_repo_id_shape(source, expected):
    assert is_repo_id(source) is expected


def test_missing_local_path(tmp_path):
    with pytest.raises(SpecmlxError, match="no such file or directory"):
        convert(str(tmp_path / "nope" / "model.gguf"), tmp_path / "out", progress=False)


def test_hub_repo_offline_gives_one_line(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    result = subprocess.run(
        [sys.executable, "-m", "specmlx.convert", "someorg/some-model", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "cannot download 'someorg/some-model'" in lines[0] and "offline" in lines[0]
    assert not (tmp_path / "out").exists()
