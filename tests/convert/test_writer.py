"""Shard writing: sizes, names, index, and which tensors get quantized."""

import json

import mlx.core as mx
import numpy as np

from specmlx.convert.options import OutputFormat
from specmlx.convert.writer import INDEX_NAME, ShardWriter


def test_single_shard_is_model_safetensors(tmp_path):
    writer = ShardWriter(tmp_path, OutputFormat("float32"))
    writer.add("a.weight", np.ones((4, 4), np.float32))
    writer.add("b.bias", np.zeros(4, np.float32))
    assert [p.name for p in writer.close()] == ["model.safetensors"]
    loaded = mx.load(str(tmp_path / "model.safetensors"))
    assert set(loaded) == {"a.weight", "b.bias"} and loaded["a.weight"].dtype == mx.float32
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert index["metadata"]["total_size"] == 16 * 4 + 4 * 4


def test_splits_at_the_byte_limit(tmp_path):
    writer = ShardWriter(tmp_path, OutputFormat("float16"), max_shard_bytes=100)
    for i in range(5):
        writer.add(f"t{i}.weight", np.full((5, 5), i, np.float32))  # 50 bytes each in float16
    files = writer.close()
    assert [p.name for p in files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not list(tmp_path.glob("*partial*"))
    merged = {}
    for f in files:
        merged |= mx.load(str(f))
    assert sorted(merged) == [f"t{i}.weight" for i in range(5)]
    assert merged["t3.weight"].dtype == mx.float16 and merged["t3.weight"][0, 0].item() == 3


def test_quantizes_only_2d_weights_that_fit_groups(tmp_path):
    writer = ShardWriter(tmp_path, OutputFormat("float32", q_bits=4, q_group_size=32))
    writer.add("lin.weight", np.ones((8, 64), np.float32))
    writer.add("odd.weight", np.ones((8, 40), np.float32))
    writer.add("norm.weight", np.ones(64, np.float32))
    writer.add("lin.bias", np.ones(8, np.float32))
    writer.close()
    loaded = mx.load(str(tmp_path / "model.safetensors"))
    assert set(loaded) == {"lin.weight", "lin.scales", "lin.biases", "odd.weight", "norm.weight", "lin.bias"}
    assert loaded["lin.weight"].dtype == mx.uint32 and loaded["odd.weight"].dtype == mx.float32
