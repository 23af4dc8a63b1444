"""specmlx's own MTP drafter: a small head on the target's hidden states (EAGLE-style).

One step: features = fc(concat(enorm(embed(token)), hnorm(hidden))), one or two
decoder layers (mlx-lm's Qwen2 block), a final norm, and logits from the
target's own output head restricted to a draft vocabulary (`draft_ids`, the
tokens that matter in practice). The final-normed output stands in for the
target's next hidden state, so the next step feeds it back.

On disk: `config.json` (model_type `specmlx_mtp`) and `model.safetensors`.
The embedding and head rows are the target's and are not stored.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import qwen2
from mlx_lm.models.base import create_attention_mask
from mlx_lm.models.cache import KVCache

from ..errors import SpecmlxError

MODEL_TYPE = "specmlx_mtp"


@dataclass(frozen=True)
class MTPConfig:
    target_hidden_size: int
    target_vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_layers: int = 1
    draft_vocab_size: int = 16384
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    target_model_type: str = ""
    # EAGLE-3-style input: what enters these target layers, fused with the final hidden
    # state, in place of that state alone (empty: the final hidden state alone).
    fused_layers: tuple[int, ...] = ()
    model_type: str = MODEL_TYPE

    def block_args(self) -> qwen2.ModelArgs:
        return qwen2.ModelArgs(
            model_type="qwen2", hidden_size=self.hidden_size, num_hidden_layers=self.num_layers,
            intermediate_size=self.intermediate_size, num_attention_heads=self.num_attention_heads,
            rms_norm_eps=self.rms_norm_eps, vocab_size=self.draft_vocab_size,
            num_key_value_heads=self.num_key_value_heads, rope_theta=self.rope_theta,
        )


class MTPModel(nn.Module):
    def __init__(self, config: MTPConfig) -> None:
        super().__init__()
        if config.hidden_size != config.target_hidden_size:
            raise SpecmlxError("an MTP drafter's width must equal its target's: it reuses the target's head")
        self.config = config
        self.enorm = nn.RMSNorm(config.target_hidden_size, eps=config.rms_norm_eps)
        self.hnorm = nn.RMSNorm(config.target_hidden_size, eps=config.rms_norm_eps)
        self.fc = nn.Linear(2 * config.target_hidden_size, config.hidden_size, bias=False)
        self.layers = [qwen2.TransformerBlock(config.block_args()) for _ in range(config.num_layers)]
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        if config.fused_layers:
            width = config.target_hidden_size
            self.fuse = nn.Linear((len(config.fused_layers) + 1) * width, width, bias=False)
        # Draft vocabulary -> target ids; a buffer (underscore: not a parameter, never cast or trained).
        self._draft_ids = mx.arange(config.draft_vocab_size, dtype=mx.int32)

    @property
    def draft_ids(self) -> mx.array:
        return self._draft_ids

    def set_draft_ids(self, ids: mx.array) -> None:
        if ids.shape != (self.config.draft_vocab_size,):
            raise SpecmlxError(f"draft ids must have shape ({self.config.draft_vocab_size},), got {ids.shape}")
        self._draft_ids = ids.astype(mx.int32)

    def __call__(self, embeddings: mx.array, hidden: mx.array, cache: list[Any] | None = None) -> mx.array:
        """(B, L, H) embeddings of tokens t+1 and hidden states at t -> features at t+1."""
        x = self.fc(mx.concatenate([self.enorm(embeddings), self.hnorm(hidden)], axis=-1))
        cache = cache or [None] * len(self.layers)
        mask = create_attention_mask(x, cache[0])
        for layer, c in zip(self.layers, cache):
            x = layer(x, mask, c)
        return self.norm(x)

    def fused(self, taps: mx.array, hidden: mx.array) -> mx.array:
        """The head's input feature from (..., T, H) taps and the (..., H) final hidden state.
        Each tap is RMS-normalized first: the residual stream grows by orders of magnitude with depth."""
        scaled = mx.fast.rms_norm(taps, None, self.config.rms_norm_eps)
        return self.fuse(mx.concatenate([scaled.reshape(*taps.shape[:-2], -1), hidden], axis=-1))

    def _loaded_from(self, other: "MTPModel") -> "MTPModel":
        self.update(other.parameters())
        self.set_draft_ids(other.draft_ids)
        return self

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]


def save_mtp(model: MTPModel, folder: Path, quantization: dict | None = None) -> None:
    """Write `config.json` and `model.safetensors`; `quantization` ({"bits", "group_size"})
    quantizes the linear layers first (the way small heads are shipped)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = asdict(model.config)
    if quantization:
        model = MTPModel(model.config)._loaded_from(model)
        nn.quantize(model, group_size=quantization["group_size"], bits=quantization["bits"],
                    class_predicate=lambda _, m: isinstance(m, nn.Linear))
        config["quantization"] = dict(quantization)
    weights = dict(tree_flatten(model.parameters()))
    weights["draft_ids"] = model.draft_ids
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "mlx"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def is_mtp_dir(folder: Path) -> bool:
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type") == MODEL_TYPE
    except (OSError, ValueError):
        return False


def load_mtp(folder: Path, dequantize: bool = False) -> MTPModel:
    try:
        raw = json.loads((folder / "config.json").read_text())
        config = MTPConfig(**{f.name: raw[f.name] for f in fields(MTPConfig) if f.name in raw})
        config = replace(config, fused_layers=tuple(config.fused_layers))  # a JSON list
        weights = mx.load(str(folder / "model.safetensors"))
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise SpecmlxError(f"{folder}: not a readable specmlx MTP drafter ({err})") from None
    model = MTPModel(config)
    quantization = raw.get("quantization")
    if quantization:
        nn.quantize(model, group_size=quantization["group_size"], bits=quantization["bits"],
                    class_predicate=lambda _, m: isinstance(m, nn.Linear))
    ids = weights.pop("draft_ids", None)
    if ids is None:
        raise SpecmlxError(f"{folder}: the MTP drafter has no draft_ids")
    model.set_draft_ids(ids)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as err:
        raise SpecmlxError(f"{folder}: MTP drafter weights do not match its config ({err})") from None
    if quantization and dequantize:
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)
    mx.eval(model.parameters())
    return model
