"""The MTP layers Qwen3.5 and Qwen3-Next checkpoints ship (`mtp.*`), as a drafter's network.

One step (vLLM's `qwen3_next_mtp.py`, mlx-vlm's `qwen3_5_mtp`): features =
norm(layers(fc(concat(pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden))))),
where `hidden` is the target's final-normed hidden state and the layers are the target's own
full-attention decoder layers (mlx-lm's classes, so gates, partial rotary and MoE are the
target's). The target's own head turns the features into logits, and the features stand in
for the target's next hidden state when steps are chained.

The weights live in the target's directory, under `mtp.` (mlx-lm's loaders drop them), in the
same convention as the directory's other weights: Hugging Face's zero-centred norms where the
checkpoint is in Hugging Face's layout, mlx-lm's where it is an MLX conversion.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import qwen3_5, qwen3_next
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from ..errors import SpecmlxError
from ..hidden import text_model

PREFIX = "mtp."
MODEL_TYPES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
# Norms Hugging Face stores zero-centred (weight - 1); mlx-lm's RMSNorm wants the weight itself.
_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight",
          "norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")
_EXPERT = re.compile(r"(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.(weight|scales|biases)$")


@dataclass(frozen=True)
class NativeMTPConfig:
    """What a drafter built on these layers checks against its target (`drafters.mtp.MTPDrafter.attach`)."""

    target_hidden_size: int
    target_vocab_size: int
    num_layers: int
    fused_layers: tuple[int, ...] = ()  # it reads the final hidden state alone


class NativeMTP(nn.Module):
    """Qwen3.5 / Qwen3-Next MTP layers; `args` are the target's text model's mlx-lm args."""

    def __init__(self, args: Any, num_layers: int) -> None:
        super().__init__()
        width, eps = args.hidden_size, args.rms_norm_eps
        self.config = NativeMTPConfig(width, args.vocab_size, num_layers)
        layer = qwen3_next.Qwen3NextDecoderLayer if isinstance(args, qwen3_next.ModelArgs) else qwen3_5.DecoderLayer
        full = args.full_attention_interval - 1  # an index whose layer is full attention
        self.pre_fc_norm_embedding = nn.RMSNorm(width, eps=eps)
        self.pre_fc_norm_hidden = nn.RMSNorm(width, eps=eps)
        self.fc = nn.Linear(2 * width, width, bias=False)
        self.layers = [layer(args, full) for _ in range(num_layers)]
        self.norm = nn.RMSNorm(width, eps=eps)
        self._draft_ids = mx.arange(args.vocab_size, dtype=mx.int32)  # the whole vocabulary

    @property
    def draft_ids(self) -> mx.array:
        return self._draft_ids

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and the target's hidden states at t -> features at t+1."""
        x = mx.concatenate([self.pre_fc_norm_embedding(embeddings), self.pre_fc_norm_hidden(hidden)], axis=-1)
        x = self.fc(x)
        cache = cache or [None] * len(self.layers)
        mask = create_attention_mask(x, cache[0])
        for layer, c in zip(self.layers, cache):
            x = layer(x, mask, c)
        return self.norm(x)

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]


def mtp_layer_count(config: dict) -> int:
    """How many MTP layers a `config.json` declares (Qwen3.5 under `text_config`); 0 for none."""
    text = config.get("text_config", config)
    return int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0)


def mtp_weights(folder: Path) -> dict[str, mx.array]:
    """Every `mtp.*` tensor in the directory's safetensors files, names as stored."""
    found: dict[str, mx.array] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update({k: v for k, v in mx.load(str(file)).items() if k.startswith(PREFIX)})
    return found


def has_native_mtp(folder: Path) -> bool:
    """Whether a model directory holds MTP layers of an architecture this module builds."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if config.get("model_type") not in MODEL_TYPES or mtp_layer_count(config) == 0:
        return False
    return any(k.startswith(PREFIX) for file in folder.glob("*.safetensors") for k in _shapes(file))


def _shapes(file: Path) -> dict[str, list[int]]:
    """A safetensors file's tensor shapes by name, from its header alone (no tensor is read)."""
    with open(file, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def hf_layout(folder: Path) -> bool:
    """mlx-lm's own test: a short convolution still in Hugging Face's layout (kernel last, wider than 1)."""
    for file in sorted(folder.glob("*.safetensors")):
        for k, shape in _shapes(file).items():
            if "conv1d.weight" in k:
                return shape[-1] != 1
    return False


def sanitize(weights: dict[str, mx.array], shift_norms: bool) -> dict[str, mx.array]:
    """`mtp.*` tensors -> this module's names: the prefix dropped, zero-centred norms shifted where
    `shift_norms`, and experts stacked as mlx-lm's `switch_mlp` (fused `gate_up_proj` or one per expert)."""
    out = {}
    for key, value in weights.items():
        key = key[len(PREFIX):] if key.startswith(PREFIX) else key
        if shift_norms and key.endswith(_NORMS) and value.ndim == 1:
            value = value + 1.0
        out[key] = value
    for key in [k for k in out if k.endswith(".experts.gate_up_proj")]:
        base = key[: -len(".experts.gate_up_proj")]
        gate, up = mx.split(out.pop(key), 2, axis=-2)
        out[f"{base}.switch_mlp.gate_proj.weight"], out[f"{base}.switch_mlp.up_proj.weight"] = gate, up
        out[f"{base}.switch_mlp.down_proj.weight"] = out.pop(f"{base}.experts.down_proj")
    groups: dict[tuple[str, str, str], dict[int, str]] = {}
    for key in out:
        if match := _EXPERT.fullmatch(key):
            base, expert, projection, suffix = match.groups()
            groups.setdefault((base, projection, suffix), {})[int(expert)] = key
    for (base, projection, suffix), keys in groups.items():
        out[f"{base}.switch_mlp.{projection}.{suffix}"] = mx.stack([out.pop(keys[e]) for e in sorted(keys)])
    return out


def load_native_mtp(folder: Path, target: nn.Module) -> NativeMTP:
    """The MTP layers in a target's directory, built to the loaded `target`'s own args (and
    quantized as its layers are)."""
    try:
        config = json.loads((folder / "config.json").read_text())
        weights = sanitize(mtp_weights(folder), shift_norms=hf_layout(folder))
    except (OSError, ValueError) as err:
        raise SpecmlxError(f"{folder}: cannot read its MTP layers ({err})") from None
    model = NativeMTP(text_model(target).args, mtp_layer_count(config))
    quantization = config.get("quantization")
    if quantization and any(k.endswith(".scales") for k in weights):
        nn.quantize(model, group_size=quantization["group_size"], bits=quantization["bits"],
                    class_predicate=lambda path, _: f"{path}.scales" in weights)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as err:
        raise SpecmlxError(f"{folder}: its MTP layers do not match its config ({err})") from None
    mx.eval(model.parameters())
    return model
