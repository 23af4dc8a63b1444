"""`specmlx convert` on a block drafter (DFlash) as published: to a dtype, its tensors as they were; to
4 bits, its decoder layers quantized (mlx-lm's layout) and loaded back so; an already quantized one is
one line."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from specmlx.convert import convert
from specmlx.drafters.block import BlockDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.errors import SpecmlxError
from specmlx.models.dflash import load_block_drafter
from specmlx.policy import DraftPolicy

from .. import tiny_block, tiny_hybrid
from ..test_engine_hybrid import greedy_alone

VOCAB = 64


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    model, raw = tiny_block.tiny_dflash(VOCAB, seed=2)
    return model, tiny_block.save_dflash(model, raw, tmp_path_factory.mktemp("published") / "dflash")


def test_a_dtype_keeps_every_tensor(published, tmp_path):
    model, path = published
    out = convert(path, tmp_path / "out", dtype="float32", progress=False)
    loaded = load_block_drafter(out)
    want = dict(tree_flatten(model.parameters()))
    got = dict(tree_flatten(loaded.parameters()))
    assert got.keys() == want.keys() and all(mx.array_equal(got[k], want[k]).item() for k in got)
    assert "model.layers.0.mlp.up_proj.weight" not in mx.load(str(out / "model.safetensors"))


def test_four_bits_quantize_the_layers_and_draft_exactly(published, tmp_path):
    _, path = published
    out = convert(path, tmp_path / "q4", dtype="float32", quantize=True, q_bits=4, progress=False)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4 and "dflash_config" in config
    loaded = load_block_drafter(out)
    assert isinstance(loaded.layers[0].self_attn.q_proj, nn.QuantizedLinear)
    assert isinstance(loaded.fc, nn.Linear) and not isinstance(loaded.fc, nn.QuantizedLinear)
    target = tiny_hybrid.tiny_qwen3_5(VOCAB, seed=1, layers=tiny_block.LAYERS)
    prompt = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3]
    engine = Engine(target, BlockDrafter(loaded, VOCAB, "dflash"), eos_token_ids=[])
    generation = engine.generate(prompt, GenerationConfig(max_tokens=16, policy=DraftPolicy(num_draft=4)))
    assert [e.token for e in generation.token_events()] == greedy_alone(target, prompt, 16)
    assert generation.stats.drafted > 0
    with pytest.raises(SpecmlxError, match="already quantized; convert from the original checkpoint"):
        convert(out, tmp_path / "again", dtype="float32", progress=False)


def test_a_hub_id_converts_its_snapshot_as_a_drafter_and_refuses_before_downloading(published, tmp_path, monkeypatch):
    """`specmlx convert z-lab/Qwen3.5-4B-DFlash`: the snapshot (here a folder: nothing downloads) is read as
    the drafter it is, not handed to mlx-lm; a destination that exists, or a checksum (GGUF's alone), is
    refused before anything downloads."""
    from specmlx.convert import api

    _, path = published
    asked = []
    monkeypatch.setattr(api, "download", lambda repo: asked.append(repo) or path)
    out = convert("z-lab/Qwen3.5-4B-DFlash", tmp_path / "out", dtype="float32", progress=False)
    assert load_block_drafter(out).config.target_layer_ids == tiny_block.TAPPED and asked == ["z-lab/Qwen3.5-4B-DFlash"]
    with pytest.raises(SpecmlxError, match="already exists"):
        convert("z-lab/Qwen3.5-4B-DFlash", out, progress=False)
    with pytest.raises(SpecmlxError, match="--sha256 applies to a GGUF file source only"):
        convert("z-lab/Qwen3.5-4B-DFlash", tmp_path / "other", sha256="0" * 64, progress=False)
    assert asked == ["z-lab/Qwen3.5-4B-DFlash"]  # neither refusal downloaded
