"""Map GGUF tensors to the HF names and layouts mlx-lm's model files expect, one at a time.

Three things differ between a llama.cpp tensor and its HF original:
- the name (`blk.3.attn_q.weight` vs `model.layers.3.self_attn.q_proj.weight`);
- for `llama`, the rows of attn_q/attn_k, which llama.cpp's converter permutes so that its
  interleaved rope applies (HF rotates halves); qwen2 and gemma3 use halves in both;
- for `gemma3`, every RMSNorm weight, which llama.cpp stores as (1 + w) where HF stores w.

The reader already gives data in numpy order (GGUF lists dimensions reversed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import gguf
import numpy as np

from specmlx.convert.gguf_config import ModelShape
from specmlx.convert.gguf_file import GGUFFile
from specmlx.errors import SpecmlxError

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_norm": "post_attention_layernorm",
}
# Gemma 3 has four norms per block; its ffn_norm comes before the MLP, not after attention.
_GEMMA3_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
_GLOBAL = re.compile(r"^(\w+)\.(weight|bias)$")


@dataclass(frozen=True)
class PlannedTensor:
    """One GGUF tensor and the HF name it is written under."""

    gguf_name: str
    hf_name: str
    n_elements: int


def plan_tensors(gf: GGUFFile, shape: ModelShape) -> list[PlannedTensor]:
    """Every tensor of the file with its HF name; unknown names and unreadable types are errors."""
    plan = []
    for tensor in gf.reader.tensors:
        if tensor.tensor_type not in _READABLE_TYPES:
            raise SpecmlxError(
                f"{gf.path.name}: tensor {tensor.name} has type {tensor.tensor_type.name}, which gguf cannot dequantize"
            )
        plan.append(PlannedTensor(tensor.name, hf_name(shape, tensor.name), int(tensor.n_elements)))
    return plan


def hf_name(shape: ModelShape, gguf_name: str) -> str:
    """The HF parameter name of a llama.cpp tensor name."""
    if match := _BLOCK.match(gguf_name):
        layer, part, kind = match.groups()
        names = _GEMMA3_BLOCK_NAMES if shape.arch == "gemma3" else _BLOCK_NAMES
        if part in names and int(layer) < shape.num_layers:
            return f"model.layers.{layer}.{names[part]}.{kind}"
    elif (match := _GLOBAL.match(gguf_name)) and match.group(1) in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[match.group(1)]}.{match.group(2)}"
    raise SpecmlxError(f"unexpected tensor {gguf_name!r} for architecture {shape.arch!r}")


def iter_hf_tensors(gf: GGUFFile, shape: ModelShape, plan: list[PlannedTensor]) -> Iterator[tuple[str, np.ndarray]]:
    """Yield `(hf_name, float32 array)` per tensor, dequantized and in HF layout; one in memory at a time."""
    by_name = {t.name: t for t in gf.reader.tensors}
    for item in plan:
        tensor = by_name[item.gguf_name]
        try:
            data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except Exception as exc:  # a corrupt block can fail in numpy in many ways
            raise SpecmlxError(f"{gf.path.name}: cannot dequantize {tensor.name}: {exc}") from exc
        yield item.hf_name, to_hf_layout(shape, item.hf_name, data.astype(np.float32, copy=False))


def to_hf_layout(shape: ModelShape, hf_name: str, data: np.ndarray) -> np.ndarray:
    """Undo llama.cpp's changes to one tensor (see the module docstring)."""
    if shape.arch == "llama":
        if ".q_proj." in hf_name:
            return unpermute_rope_rows(data, shape.num_heads)
        if ".k_proj." in hf_name:
            return unpermute_rope_rows(data, shape.num_kv_heads)
    if shape.arch == "gemma3" and hf_name.endswith("norm.weight"):
        return data - 1.0
    return data


def unpermute_rope_rows(data: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's `permute`: rows (head, pair, 2) back to (head, 2, half)."""
    rows = data.shape[0]
    return data.reshape(n_head, rows // n_head // 2, 2, *data.shape[1:]).swapaxes(1, 2).reshape(data.shape)


_READABLE_TYPES = {
    gguf.GGMLQuantizationType.F32,
    gguf.GGMLQuantizationType.F16,
    *gguf.quants._type_traits,  # every type gguf's numpy dequantizer implements
}
