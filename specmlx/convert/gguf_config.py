"""Build an HF-style `config.json` for mlx-lm from GGUF metadata.

Only architectures whose tensors and hyperparameters are mapped here are accepted; anything
else is refused by name rather than converted into a model that loads but computes garbage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specmlx.convert.gguf_file import GGUFFile
from specmlx.convert.gguf_tokenizer import GGUFVocab
from specmlx.errors import SpecmlxError

SUPPORTED_ARCHS = ("gemma3", "llama", "qwen2")

# HF names of each architecture, as mlx-lm's model registry (model_type) expects them.
_HF_NAMES = {
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "llama": ("llama", "LlamaForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
}

# llama.cpp hard-codes these for Gemma 3 instead of storing them in the file.
GEMMA3_SLIDING_WINDOW_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10_000.0


@dataclass(frozen=True)
class ModelShape:
    """What the tensor mapping needs to know about the model."""

    arch: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    tied_embeddings: bool


def check_arch(gf: GGUFFile) -> None:
    """Refuse, by name, an architecture this converter does not map."""
    if gf.arch not in SUPPORTED_ARCHS:
        raise SpecmlxError(
            f"{gf.path.name}: unsupported architecture {gf.arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})"
        )


def model_shape(gf: GGUFFile) -> ModelShape:
    """Layer and head counts, and whether the output head is the embedding matrix."""
    check_arch(gf)
    return ModelShape(
        arch=gf.arch,
        num_layers=int(gf.require(".block_count")),
        num_heads=int(gf.require(".attention.head_count")),
        num_kv_heads=int(gf.get(".attention.head_count_kv") or gf.require(".attention.head_count")),
        tied_embeddings="output.weight" not in gf.tensor_names(),
    )


def hf_config(gf: GGUFFile, shape: ModelShape, vocab: GGUFVocab) -> dict:
    """The `config.json` mlx-lm builds the model from (without dtype or quantization keys)."""
    model_type, class_name = _HF_NAMES[shape.arch]
    embed = _tensor_shape(gf, "token_embd.weight")  # numpy order: (vocab, hidden)
    hidden = int(gf.require(".embedding_length"))
    if embed[1] != hidden:
        raise SpecmlxError(f"{gf.path.name}: token_embd is {embed}, but embedding_length is {hidden}")
    config = {
        "architectures": [class_name],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(gf.require(".feed_forward_length")),
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "rms_norm_eps": _f32(gf.require(".attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(gf.get(".rope.freq_base", 10_000.0)),
        # The embedding row count, not the tokenizer's: llama.cpp pads the vocabulary to it.
        "vocab_size": int(embed[0]),
        "max_position_embeddings": int(gf.get(".context_length", 4096)),
        "tie_word_embeddings": shape.tied_embeddings,
        "bos_token_id": vocab.bos_id,
        "eos_token_id": _eos(vocab),
    }
    head_dim = gf.get(".attention.key_length")
    if head_dim is not None:
        config["head_dim"] = int(head_dim)
    scaling = _rope_scaling(gf)
    if scaling is not None:
        config["rope_scaling"] = scaling
    if shape.arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in gf.tensor_names()
        config["mlp_bias"] = False
    if shape.arch == "gemma3":
        config.update(_gemma3_extras(gf, config))
    return config


def _gemma3_extras(gf: GGUFFile, config: dict) -> dict:
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    # Queries are scaled by 1/sqrt(head_dim), except in the 27B (62 layers), which uses
    # hidden/heads; llama.cpp recognizes it by its layer count too.
    scalar = config["hidden_size"] // config["num_attention_heads"] if config["num_hidden_layers"] == 62 else head_dim
    return {
        "head_dim": head_dim,
        "query_pre_attn_scalar": scalar,
        "sliding_window": int(gf.require(".attention.sliding_window")),
        "sliding_window_pattern": GEMMA3_SLIDING_WINDOW_PATTERN,
        "rope_local_base_freq": GEMMA3_LOCAL_ROPE_BASE,
        "hidden_activation": "gelu_pytorch_tanh",
    }


def _rope_scaling(gf: GGUFFile) -> dict | None:
    if "rope_freqs.weight" in gf.tensor_names():
        raise SpecmlxError(
            f"{gf.path.name}: per-frequency rope scaling (rope_freqs, as in Llama 3.1) is not supported"
        )
    kind = gf.get(".rope.scaling.type")
    if kind in (None, "none"):
        return None
    if kind != "linear":
        raise SpecmlxError(f"{gf.path.name}: rope scaling {kind!r} is not supported (only linear)")
    return {"rope_type": "linear", "factor": _f32(gf.require(".rope.scaling.factor"))}


def _eos(vocab: GGUFVocab) -> int | list[int] | None:
    # HF generation configs list every end-of-turn token (Qwen: <|im_end|>, <|endoftext|>);
    # mlx-lm stops on all ids in config.json's eos_token_id.
    ids = vocab.end_of_turn_ids()
    if not ids:
        return None
    return ids[0] if len(ids) == 1 else ids


def _tensor_shape(gf: GGUFFile, name: str) -> tuple[int, ...]:
    for tensor in gf.reader.tensors:
        if tensor.name == name:
            return tuple(int(d) for d in reversed(tensor.shape.tolist()))
    raise SpecmlxError(f"{gf.path.name}: GGUF has no tensor {name!r}")


def _f32(value: float) -> float:
    # GGUF stores float32; its shortest repr (1e-06, not 9.99999997e-07) is what HF configs hold.
    return float(str(np.float32(value)))
