"""Tensor names and layouts: llama.cpp's changes to HF tensors are undone exactly."""

import numpy as np
import pytest

from specmlx.convert.gguf_config import ModelShape
from specmlx.convert.gguf_tensors import hf_name, to_hf_layout, unpermute_rope_rows
from specmlx.errors import SpecmlxError

QWEN = ModelShape("qwen2", num_layers=2, num_heads=4, num_kv_heads=2, tied_embeddings=False)
LLAMA = ModelShape("llama", num_layers=2, num_heads=4, num_kv_heads=2, tied_embeddings=False)
GEMMA = ModelShape("gemma3", num_layers=2, num_heads=4, num_kv_heads=1, tied_embeddings=True)


def llama_cpp_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.LlamaModel.permute, as written there."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


@pytest.mark.parametrize("shape", [(64, 32), (64,)])
def test_unpermute_inverts_llama_cpp_permute(shape):
    hf = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(hf, 4), 4), hf)


def test_llama_q_and_k_use_their_own_head_counts():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((64, 16)), rng.standard_normal((32, 16))
    assert np.array_equal(to_hf_layout(LLAMA, "model.layers.0.self_attn.q_proj.weight", llama_cpp_permute(q, 4)), q)
    assert np.array_equal(to_hf_layout(LLAMA, "model.layers.0.self_attn.k_proj.weight", llama_cpp_permute(k, 2)), k)


def test_qwen2_tensors_are_untouched():
    q = np.arange(12.0).reshape(4, 3)
    assert to_hf_layout(QWEN, "model.layers.0.self_attn.q_proj.weight", q) is q


def test_gemma_norms_lose_the_plus_one():
    w = np.array([1.5, 0.25], np.float32)
    for name in ("model.norm.weight", "model.layers.1.self_attn.q_norm.weight", "model.layers.0.post_feedforward_layernorm.weight"):
        assert np.allclose(to_hf_layout(GEMMA, name, w), [0.5, -0.75])
    assert to_hf_layout(GEMMA, "model.layers.0.mlp.up_proj.weight", w) is w


@pytest.mark.parametrize(
    "shape, gguf_name, expected",
    [
        (QWEN, "token_embd.weight", "model.embed_tokens.weight"),
        (QWEN, "output.weight", "lm_head.weight"),
        (QWEN, "output_norm.weight", "model.norm.weight"),
        (QWEN, "blk.1.attn_k.bias", "model.layers.1.self_attn.k_proj.bias"),
        (QWEN, "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"),
        (QWEN, "blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
        (GEMMA, "blk.0.ffn_norm.weight", "model.layers.0.pre_feedforward_layernorm.weight"),
        (GEMMA, "blk.0.post_attention_norm.weight", "model.layers.0.post_attention_layernorm.weight"),
        (GEMMA, "blk.1.post_ffw_norm.weight", "model.layers.1.post_feedforward_layernorm.weight"),
        (GEMMA, "blk.1.attn_k_norm.weight", "model.layers.1.self_attn.k_norm.weight"),
    ],
)
def test_hf_names(shape, gguf_name, expected):
    assert hf_name(shape, gguf_name) == expected


@pytest.mark.parametrize("name", ["blk.0.ssm_conv1d.weight", "blk.7.attn_q.weight", "rope_freqs.weight"])
def test_unexpected_tensor_is_an_error(name):
    with pytest.raises(SpecmlxError, match="unexpected tensor"):
        hf_name(QWEN, name)
