"""Gemma 4 "assistant" drafters (model_type `gemma4_assistant`): the network and its files.

An assistant is four Gemma 4 decoder layers that compute queries only: every
layer attends over the *target's* keys and values of the same layer type
(the last cache-owning target layer of that type), so it has no KV cache of
its own. One step maps concat(target_embed(token) * sqrt(backbone), h) to
the next drafted token and the next h:

    pre_projection -> 4 x (Q-only attention, GeGLU MLP, layer_scalar)
    -> model.norm -> (post_projection: next h, tied embedding: logits)

E2B/E4B assistants score only the tokens of the top-k of `num_centroids`
clusters (`masked_embedding`); see `CentroidHead`.

On disk: the Hugging Face layout (config.json with a nested `text_config`,
*.safetensors). `specmlx.convert.gemma4_assistant` writes the same layout in one
dtype with `token_ordering` as int32, and this module reads both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.rope_utils import initialize_rope

from ..errors import SpecmlxError
from .weights import load_into, read_config, read_weights

MODEL_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
SLIDING, FULL = "sliding_attention", "full_attention"
ORDERING = "masked_embedding.token_ordering"

# mlx-lm's gemma4_text defaults, used when a config leaves rope_parameters out.
DEFAULT_ROPE = {
    FULL: {"rope_type": "proportional", "rope_theta": 1_000_000.0, "partial_rotary_factor": 0.25},
    SLIDING: {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 1.0},
}
# The assistant's text config must describe a plain decoder; HF refuses anything else.
PLAIN_DECODER = {"hidden_size_per_layer_input": 0, "enable_moe_block": False,
                 "use_double_wide_mlp": False, "vocab_size_per_layer_input": 0}


@dataclass(frozen=True)
class AssistantTextConfig:
    """The Gemma 4 text config nested in an assistant's config (`text_config`)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    sliding_window: int
    vocab_size: int
    global_head_dim: int | None = None
    num_key_value_heads: int = 1  # the target's K/V heads; the assistant has no K/V of its own
    num_global_key_value_heads: int | None = None
    attention_k_eq_v: bool = False
    rms_norm_eps: float = 1e-6
    rope_traditional: bool = False
    max_position_embeddings: int = 131072
    rope_parameters: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: DEFAULT_ROPE)
    model_type: str = "gemma4_text"

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layer_types)

    def head_dim_for(self, layer_type: str) -> int:
        return self.global_head_dim if layer_type == FULL and self.global_head_dim else self.head_dim

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> "AssistantTextConfig":
        for key, required in PLAIN_DECODER.items():
            if raw.get(key) not in (None, required):
                raise SpecmlxError(f"an assistant's text_config must have {key}={required!r}, got {raw[key]!r}")
        layer_types = raw.get("layer_types")
        if not layer_types:
            raise SpecmlxError("an assistant's text_config has no layer_types")
        unknown = set(layer_types) - {SLIDING, FULL}
        if unknown:
            raise SpecmlxError(f"unknown layer types in an assistant's config: {sorted(unknown)}")
        if raw.get("num_hidden_layers") not in (None, len(layer_types)):
            raise SpecmlxError(f"num_hidden_layers is {raw['num_hidden_layers']} "
                               f"but layer_types lists {len(layer_types)} layers")
        optional = ("global_head_dim", "num_key_value_heads", "num_global_key_value_heads",
                    "attention_k_eq_v", "rms_norm_eps", "rope_traditional", "max_position_embeddings",
                    "model_type")
        try:
            return AssistantTextConfig(
                hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"],
                num_attention_heads=raw["num_attention_heads"], head_dim=raw["head_dim"],
                layer_types=tuple(layer_types), sliding_window=raw["sliding_window"],
                vocab_size=raw["vocab_size"], rope_parameters=raw.get("rope_parameters") or DEFAULT_ROPE,
                **{k: raw[k] for k in optional if raw.get(k) is not None},
            )
        except KeyError as err:
            raise SpecmlxError(f"an assistant's text_config lacks {err.args[0]!r}") from None


@dataclass(frozen=True)
class AssistantConfig:
    backbone_hidden_size: int  # the target's hidden size
    text: AssistantTextConfig
    use_ordered_embeddings: bool = False
    num_centroids: int = 2048
    centroid_intermediate_top_k: int = 32
    tie_word_embeddings: bool = True
    model_type: str = "gemma4_assistant"

    def __post_init__(self) -> None:
        if self.use_ordered_embeddings:
            vocab, clusters = self.text.vocab_size, self.num_centroids
            if clusters <= 0 or vocab % clusters:
                raise SpecmlxError(f"{clusters} centroids do not split a vocabulary of {vocab}")
            if not 0 < self.centroid_intermediate_top_k <= clusters:
                raise SpecmlxError(f"centroid top-k {self.centroid_intermediate_top_k} "
                                   f"is not in 1..{clusters}")

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> "AssistantConfig":
        """Parse an assistant's config.json (HF layout: top level plus `text_config`).

        A config with no `text_config` is read as the flat form, text fields at the top.
        """
        if raw.get("model_type") not in MODEL_TYPES:
            raise SpecmlxError(f"model_type {raw.get('model_type')!r} is not a Gemma 4 assistant")
        text = raw.get("text_config") or {k: v for k, v in raw.items() if k != "model_type"}
        if "backbone_hidden_size" not in raw:
            raise SpecmlxError("a Gemma 4 assistant's config lacks backbone_hidden_size")
        top = ("use_ordered_embeddings", "num_centroids", "centroid_intermediate_top_k", "tie_word_embeddings")
        return AssistantConfig(
            backbone_hidden_size=raw["backbone_hidden_size"], text=AssistantTextConfig.from_dict(text),
            model_type=raw["model_type"], **{k: raw[k] for k in top if raw.get(k) is not None},
        )


class QueryOnlyAttention(nn.Module):
    """Gemma 4 attention with the keys and values supplied by the target.

    Scale 1.0 as in Gemma 4 itself (q_norm does the normalising); the target's
    keys are already k_norm'ed and rotated, its values v_norm'ed, so only the
    query is normalised and rotated here. GQA: the fused kernel repeats K/V heads.
    """

    def __init__(self, text: AssistantTextConfig, layer_type: str) -> None:
        super().__init__()
        self.heads = text.num_attention_heads
        self.head_dim = text.head_dim_for(layer_type)
        width = self.heads * self.head_dim
        self.q_proj = nn.Linear(text.hidden_size, width, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=text.rms_norm_eps)
        self.o_proj = nn.Linear(width, text.hidden_size, bias=False)
        rope = dict(text.rope_parameters.get(layer_type, {}))
        self.rope = initialize_rope(
            dims=self.head_dim, base=rope.get("rope_theta", 10_000.0), traditional=text.rope_traditional,
            scaling_config=rope, max_position_embeddings=text.max_position_embeddings,
        )

    def __call__(self, x: mx.array, keys: mx.array, values: mx.array, position: int) -> mx.array:
        B, L, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(B, L, self.heads, self.head_dim)).transpose(0, 2, 1, 3)
        q = self.rope(q, offset=position)
        out = mx.fast.scaled_dot_product_attention(
            q, keys.astype(q.dtype), values.astype(q.dtype), scale=1.0)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.gelu_approx(self.gate_proj(x)) * self.up_proj(x))


class AssistantLayer(nn.Module):
    """A Gemma 4 decoder layer (sandwich norms, GeGLU) around `QueryOnlyAttention`."""

    def __init__(self, text: AssistantTextConfig, layer_type: str) -> None:
        super().__init__()
        self.layer_type = layer_type
        self.self_attn = QueryOnlyAttention(text, layer_type)
        self.mlp = MLP(text.hidden_size, text.intermediate_size)
        norm = lambda: nn.RMSNorm(text.hidden_size, eps=text.rms_norm_eps)  # noqa: E731
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()
        self.layer_scalar = mx.ones((1,))

    def __call__(self, x: mx.array, keys: mx.array, values: mx.array, position: int) -> mx.array:
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), keys, values, position))
        x = x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        return x * self.layer_scalar


class CentroidHead(nn.Module):
    """E2B/E4B's sparse head: score `num_centroids` clusters, keep the top k.

    Cluster c owns the ids `token_ordering[c*n : (c+1)*n]` (n = vocab / clusters),
    so k*n candidate ids are scored against the tied embedding instead of the
    whole vocabulary. The ordering is a buffer (underscore: not a parameter),
    so casting or quantizing the model's parameters never touches it.
    """

    def __init__(self, config: AssistantConfig) -> None:
        super().__init__()
        text = config.text
        self.top_k = config.centroid_intermediate_top_k
        self.per_cluster = text.vocab_size // config.num_centroids
        self.centroids = nn.Linear(text.hidden_size, config.num_centroids, bias=False)
        self._token_ordering = mx.arange(text.vocab_size, dtype=mx.int32)

    @property
    def token_ordering(self) -> mx.array:
        return self._token_ordering

    def set_token_ordering(self, ordering: mx.array) -> None:
        if ordering.shape != self._token_ordering.shape:
            raise SpecmlxError(f"token_ordering must have shape {self._token_ordering.shape}, got {ordering.shape}")
        self._token_ordering = ordering.astype(mx.int32)

    def candidates(self, h: mx.array) -> mx.array:
        """(..., k*n) int32 ids of the top-k clusters' tokens."""
        scores = self.centroids(h)
        top = mx.argpartition(scores, kth=-self.top_k, axis=-1)[..., -self.top_k :]
        clusters = self._token_ordering.reshape(-1, self.per_cluster)
        return clusters[top].reshape(*h.shape[:-1], self.top_k * self.per_cluster)


class _Trunk(nn.Module):
    def __init__(self, text: AssistantTextConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = [AssistantLayer(text, t) for t in text.layer_types]
        self.norm = nn.RMSNorm(text.hidden_size, eps=text.rms_norm_eps)


class Gemma4AssistantModel(nn.Module):
    def __init__(self, config: AssistantConfig) -> None:
        super().__init__()
        self.config = config
        text = config.text
        self.model = _Trunk(text)
        self.pre_projection = nn.Linear(2 * config.backbone_hidden_size, text.hidden_size, bias=False)
        self.post_projection = nn.Linear(text.hidden_size, config.backbone_hidden_size, bias=False)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        if config.use_ordered_embeddings:
            self.masked_embedding = CentroidHead(config)

    @property
    def layer_types(self) -> tuple[str, ...]:
        return self.config.text.layer_types

    def __call__(
        self, inputs: mx.array, kv: Mapping[str, tuple[mx.array, mx.array]], position: int
    ) -> tuple[mx.array, mx.array]:
        """(B, L, 2*backbone) inputs, the target's (K, V) per layer type -> (h, next h).

        `h` is the final-normed state at the assistant's width (logits come from
        it); `next h` is its projection to the target's width, fed to the next step.
        """
        x = self.pre_projection(inputs)
        for layer in self.model.layers:
            keys, values = kv[layer.layer_type]
            x = layer(x, keys, values, position)
        h = self.model.norm(x)
        return h, self.post_projection(h)

    # -- output head ----------------------------------------------------------

    def head_rows(self, ids: mx.array) -> mx.array:
        """Output-head rows for `ids` (..., n) -> (..., n, hidden), dequantized."""
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens(ids)  # plain rows: Gemma scales only its *input* embedding
        layer = self.lm_head
        if isinstance(layer, nn.QuantizedLinear):
            return mx.dequantize(layer.weight[ids], layer.scales[ids], layer.biases[ids],
                                 group_size=layer.group_size, bits=layer.bits)
        return layer.weight[ids]

    def candidate_logits(self, h: mx.array) -> tuple[mx.array, mx.array]:
        """Centroid head: (candidate ids, their logits), both (..., k*n)."""
        ids = self.masked_embedding.candidates(h)
        logits = (self.head_rows(ids) @ h[..., :, None])[..., 0]
        return ids, logits

    def logits(self, h: mx.array) -> mx.array:
        """Logits over the assistant's whole vocabulary.

        With the centroid head, tokens outside the chosen clusters get -inf,
        not HF's min(selected) - 1: a sampled draft then never lands on one of
        the ~98% of ids the head did not score, and q stays exactly the
        distribution the draft is drawn from either way.
        """
        if not self.config.use_ordered_embeddings:
            if self.config.tie_word_embeddings:
                return self.model.embed_tokens.as_linear(h)
            return self.lm_head(h)
        ids, scores = self.candidate_logits(h)
        full = mx.full((*scores.shape[:-1], self.config.text.vocab_size), -mx.inf, dtype=scores.dtype)
        return mx.put_along_axis(full, ids, scores, axis=-1)

    def greedy(self, h: mx.array) -> mx.array:
        """The argmax of `logits(h)`, without building full-vocabulary logits for the centroid head."""
        if not self.config.use_ordered_embeddings:
            return mx.argmax(self.logits(h), axis=-1)
        ids, scores = self.candidate_logits(h)
        best = mx.argmax(scores, axis=-1, keepdims=True)
        return mx.take_along_axis(ids, best, axis=-1)[..., 0]

    # -- files ------------------------------------------------------------------

    def weights(self) -> dict[str, mx.array]:
        """Every tensor as stored on disk, `token_ordering` (int32) included."""
        out = dict(nn.utils.tree_flatten(self.parameters()))
        if self.config.use_ordered_embeddings:
            out[ORDERING] = self.masked_embedding.token_ordering
        return out


def is_gemma4_assistant_dir(folder: Path) -> bool:
    try:
        return read_config(folder).get("model_type") in MODEL_TYPES
    except SpecmlxError:
        return False


TOP_LEVEL = ("model.", "pre_projection.", "post_projection.", "masked_embedding.", "lm_head.")


def sanitize(weights: Mapping[str, mx.array], config: AssistantConfig) -> dict[str, mx.array]:
    """Checkpoint names -> this module's names.

    Drops a tied `lm_head.weight` and rotary buffers, casts `token_ordering`
    (int64 in HF checkpoints) to int32, and maps the prefixes other exports
    use for the trunk (`model.language_model.`, `language_model.model.`, or
    none at all) to `model.`.
    """
    out = {}
    for name, value in weights.items():
        if "rotary_emb" in name or (name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        for prefix in ("model.language_model.", "language_model.model.", "language_model."):
            if name.startswith(prefix):
                name = "model." + name[len(prefix):]
                break
        if not name.startswith(TOP_LEVEL):
            name = "model." + name
        if name == ORDERING:
            value = value.astype(mx.int32)
        out[name] = value
    return out


def load_gemma4_assistant(folder: str | Path) -> Gemma4AssistantModel:
    """An assistant from an HF checkpoint or a converted MLX directory (also quantized)."""
    folder = Path(folder)
    raw = read_config(folder)
    config = AssistantConfig.from_dict(raw)
    weights = sanitize(read_weights(folder), config)
    model = Gemma4AssistantModel(config)
    ordering = weights.pop(ORDERING, None)
    if config.use_ordered_embeddings:
        if ordering is None:
            raise SpecmlxError(f"{folder}: the assistant uses ordered embeddings but has no {ORDERING}")
        model.masked_embedding.set_token_ordering(ordering)
    return load_into(model, weights, raw.get("quantization"), folder, "assistant weights")
