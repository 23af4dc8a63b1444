"""config.json from GGUF metadata, and the refusal of architectures that are not mapped."""

import pytest

from specmlx.convert.gguf_config import hf_config, model_shape
from specmlx.convert.gguf_file import open_gguf
from specmlx.convert.gguf_tokenizer import read_vocab
from specmlx.errors import SpecmlxError


def config_of(path):
    gf = open_gguf(path)
    return hf_config(gf, model_shape(gf), read_vocab(gf))


def test_qwen2_config(tiny_gguf):
    config = config_of(tiny_gguf("qwen2"))
    assert config["model_type"] == "qwen2"
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (64, 2, 128)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["rms_norm_eps"] == 1e-6 and config["rope_theta"] == 10000.0
    assert config["vocab_size"] % 32 == 0  # the embedding rows, padding included
    assert config["max_position_embeddings"] == 256
    assert config["tie_word_embeddings"] is False
    # eos first, then the other end-of-turn control tokens llama.cpp stops on
    assert config["eos_token_id"] == [2, 0]


def test_tied_when_output_is_absent(tiny_gguf):
    assert config_of(tiny_gguf("qwen2", tied=True))["tie_word_embeddings"] is True


def test_llama_config(tiny_gguf):
    config = config_of(tiny_gguf("llama"))
    assert config["model_type"] == "llama" and config["attention_bias"] is False


def test_gemma3_config(tiny_gguf):
    config = config_of(tiny_gguf("gemma3"))
    assert config["model_type"] == "gemma3_text"
    assert config["head_dim"] == 32 and config["query_pre_attn_scalar"] == 32
    assert config["sliding_window"] == 4 and config["sliding_window_pattern"] == 6
    assert config["rope_local_base_freq"] == 10000.0
    assert config["eos_token_id"] == [1, 5]  # <eos>, <end_of_turn>
    assert config["tie_word_embeddings"] is True


@pytest.mark.parametrize("arch", ["phi3", "mamba", "qwen3"])
def test_refuses_unknown_architecture(tiny_gguf, arch):
    gf = open_gguf(tiny_gguf("qwen2", arch_name=arch))
    with pytest.raises(SpecmlxError, match=f"unsupported architecture '{arch}'"):
        model_shape(gf)
