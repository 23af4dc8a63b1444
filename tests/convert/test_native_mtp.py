"""`specmlx convert` keeps the MTP layers a Qwen3.5 checkpoint ships (mlx-lm drops them), and says so:
converted from Hugging Face's layout, they load as the layers they were, and draft exactly."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from specmlx.convert import convert
from specmlx.drafters.native_mtp import NativeMTPDrafter
from specmlx.engine import Engine, GenerationConfig
from specmlx.loading import load_pair
from specmlx.policy import DraftPolicy

from .. import tiny_hybrid
from ..test_engine_hybrid import greedy_alone


@pytest.fixture(scope="module")
def source(tmp_path_factory, tokenizer, vocab):
    target = tiny_hybrid.tiny_qwen3_5(vocab, seed=1)
    mtp = tiny_hybrid.tiny_native_mtp(target, seed=2, guesses=True)
    path = tiny_hybrid.save_qwen3_5_hf(target, mtp, vocab, tokenizer, tmp_path_factory.mktemp("hf") / "q35")
    return target, mtp, path


def test_the_mtp_layers_are_kept_as_they_were(source, tmp_path, capsys):
    target, mtp, path = source
    out = convert(path, tmp_path / "out", dtype="float32", progress=False)
    assert "kept the checkpoint's MTP layers" in capsys.readouterr().err
    loaded, drafter = load_pair(str(out), "mtp")
    assert isinstance(drafter, NativeMTPDrafter)
    want = dict(tree_flatten(mtp.parameters()))
    for name, value in tree_flatten(drafter.model.parameters()):
        assert mx.allclose(value, want[name], atol=1e-6), name
    prompt = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3]
    assert greedy_alone(loaded.model, prompt, 8) == greedy_alone(target, prompt, 8)


def drafts_exactly(out):
    """The converted directory's target and its `mtp` drafter: greedy output the target's own, with drafts."""
    loaded, drafter = load_pair(str(out), "mtp")
    prompt = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3]
    generation = Engine(loaded.model, drafter, eos_token_ids=[]).generate(
        prompt, GenerationConfig(max_tokens=24, policy=DraftPolicy(num_draft=3)))
    assert [e.token for e in generation.token_events()] == greedy_alone(loaded.model, prompt, 24)
    assert generation.stats.drafted > 0
    return drafter


def test_quantized_they_draft_exactly(source, tmp_path):
    _, _, path = source
    out = convert(path, tmp_path / "q", q_bits=4, q_group_size=32, progress=False)
    drafter = drafts_exactly(out)
    assert "scales" in dict(drafter.model.fc.parameters())


def test_a_nemotron_h_conversion_that_kept_them_is_converted_again_with_them(tmp_path, tokenizer, vocab):
    """An MLX Nemotron-H directory with `mtp.safetensors` (what this converter writes), quantized anew."""
    from ..test_loading import save_with_mtp

    target = tiny_hybrid.tiny_nemotron_h_moe(vocab, seed=1)
    mtp = tiny_hybrid.tiny_nemotron_h_mtp(target, seed=2, guesses=True)
    path = save_with_mtp(target, mtp, tiny_hybrid.nemotron_h_moe_config(vocab), tokenizer, tmp_path / "nemotron")
    out = convert(path, tmp_path / "q", q_bits=8, q_group_size=32, progress=False)
    drafter = drafts_exactly(out)
    assert "scales" in dict(drafter.model.layers[0].eh_proj.parameters())


def test_deepseek_v3s_mtp_layer_in_hugging_faces_form_is_kept(tmp_path, tokenizer, vocab):
    """`model.layers.{N}.*` in, `mtp.*` in this module's names out (`mtp.safetensors`): the same layer."""
    from ..test_loading import hugging_faces_deepseek_v3_mtp, save_with_mtp

    target = tiny_hybrid.tiny_deepseek_v3(vocab, seed=1)
    mtp = tiny_hybrid.tiny_deepseek_v3_mtp(target, seed=2, guesses=True)
    path = save_with_mtp(target, mtp, tiny_hybrid.deepseek_v3_config(vocab), tokenizer, tmp_path / "deepseek")
    mx.save_safetensors(str(path / "mtp.safetensors"), hugging_faces_deepseek_v3_mtp(mtp, 2))
    out = convert(path, tmp_path / "out", dtype="float32", progress=False)
    _, drafter = load_pair(str(out), "mtp")
    want = dict(tree_flatten(mtp.parameters()))
    for name, value in tree_flatten(drafter.model.parameters()):
        assert mx.allclose(value, want[name], atol=1e-5), name


@pytest.mark.parametrize("model_type, declared, name, dropped", [
    ("glm_moe_dsa", 1, "model.layers.2.enorm.weight", "glm_moe_dsa"),  # GLM-5: DeepSeek's place, not built here
    ("glm_moe_dsa", 0, "model.layers.2.enorm.weight", None),  # no MTP layer declared: a layer of the target
    ("other", 0, "mtp.layers.0.enorm.weight", "other"),
    ("deepseek_v3", 1, "model.layers.2.enorm.weight", None)])  # built here: kept, not dropped
def test_mtp_layers_of_an_architecture_it_does_not_build_are_named_as_dropped(tmp_path, model_type, declared, name,
                                                                               dropped):
    from specmlx.convert.native_mtp import ships_other_mtp

    config = {"model_type": model_type, "num_hidden_layers": 2, "num_nextn_predict_layers": declared}
    (tmp_path / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(tmp_path / "model.safetensors"), {name: mx.ones((4,)), "model.norm.weight": mx.ones((4,))})
    assert ships_other_mtp(tmp_path) == dropped
