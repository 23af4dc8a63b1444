"""Block drafters (DFlash, and its DFlash2 and DSpark variants: `dflash2.py`, `dspark.py`): a few decoder
layers that propose a whole block of tokens in one forward, conditioned on the target's hidden states.

The context: at every committed position but the last, what leaves the target's layers
`target_layer_ids` (concatenated), projected by `fc` and normed (`hidden_norm`). Each drafter layer
projects that one context row to its keys and values, which it keeps (`cache`); nothing else is
kept, so a rejected draft leaves nothing to cut. The block: the last committed token, then
`block_size - 1` mask tokens, embedded by the target's table; each layer's queries, from the
block, attend over the context and the whole block at once (not causally, unless the checkpoint
says so; a sliding-window layer sees only nearby positions). The final norm, then the target's own head, give logits at every mask position at once:
the block's proposals.

A checkpoint as published: `config.json` (the backbone's fields, `dflash_config` with
`target_layer_ids`, `mask_token_id` and the block size) and safetensors, names with or without
`model.`; a converted directory keeps the same layout and may be quantized (mlx-lm's layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache
from mlx_lm.models.rope_utils import initialize_rope

from ..errors import SpecmlxError
from .dflash2 import CandidateSelector, DynamicConv
from .dspark import ConfidenceHead, Markov
from .weights import load_into, read_config, read_weights

DFLASH, DFLASH2, DSPARK = "DFlash", "DFlash2", "DSpark"
# How a checkpoint names its variant: DFlash2 in its architectures, DSpark by its projector type or a
# Markov head (as mlx-vlm tells them apart).
DFLASH2_ARCHITECTURE = "DFlash2DraftModel"
FULL, SLIDING = "full_attention", "sliding_attention"
# Settings mlx-vlm runs and this module does not yet: a drafter naming one is refused, not run wrong.
UNSUPPORTED = ("attention_sink_bias", "draft_window_size")
DFLASH2_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


@dataclass(frozen=True)
class BlockConfig:
    """What a block drafter's `config.json` says, flattened from `dflash_config`."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int  # the verify width it was trained for: the last committed token and block_size - 1 proposals
    num_target_layers: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000_000.0
    rope_scaling: Mapping[str, Any] | None = None
    max_position_embeddings: int = 262_144
    causal: bool | None = None  # a block's positions see only those before them; unsaid: sliding layers only (z-lab's rule)
    sliding_window: int | None = None  # a sliding layer's queries see keys less than this many positions away
    runtime_block_size: int | None = None  # the block it is run at, when the checkpoint says so
    input_embedding_scale: float = 1.0  # on the target's embedding rows, unscaled (z-lab's reference)
    output_multiplier: float = 1.0  # on the target's head's output, then its own softcap, if any
    final_logit_softcapping: float | None = None
    kind: str = DFLASH
    # DFlash2: a grouped dynamic causal convolution around each sublayer, and a candidate selector
    # chaining each position's choice to the token proposed before it (`dflash2.py`)
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0
    # DSpark: a low-rank Markov term on each position's logits from the token before it (`dflash2.Markov`);
    # `anchored`: the last committed token's own position proposes the first token (mlx-vlm's
    # `sample_from_anchor`); an optional confidence head, loaded and unused in drafting
    markov_rank: int = 0
    anchored: bool = False
    confidence_head: bool = False
    confidence_with_markov: bool = True
    rope_traditional: bool = False  # interleaved RoPE pairs (DSpark's `rope_is_neox_style: false`)
    layer_types: tuple[str, ...] = field(default_factory=tuple)
    attention_bias: bool = False
    unsupported: tuple[str, ...] = ()  # settings it names that this module does not run (`UNSUPPORTED`)

    @property
    def proposals(self) -> int:
        """Tokens one block forward proposes: its runtime block's, within the trained one."""
        return min(self.runtime_block_size or self.block_size, self.block_size) - 1

    @staticmethod
    def from_dict(raw: Mapping[str, Any], folder: Path | str = "") -> "BlockConfig":
        flat = dict(raw)
        block = flat.pop("dflash_config", None)
        if not isinstance(block, Mapping):
            raise SpecmlxError(f"{folder}: config.json has no dflash_config: not a block drafter")
        kind = block_kind(raw)
        rope = flat.pop("rope_parameters", None)
        if isinstance(rope, Mapping):
            rope = dict(rope)
            flat.setdefault("rope_theta", rope.pop("rope_theta", 10_000_000.0))
            flat["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
        layer_ids = tuple(int(i) for i in block.get("target_layer_ids", flat.get("target_layer_ids", ())))
        try:
            config = BlockConfig(
                hidden_size=int(flat["hidden_size"]), intermediate_size=int(flat["intermediate_size"]),
                num_hidden_layers=int(flat["num_hidden_layers"]), num_attention_heads=int(flat["num_attention_heads"]),
                num_key_value_heads=int(flat["num_key_value_heads"]),
                head_dim=int(flat.get("head_dim") or flat["hidden_size"] // flat["num_attention_heads"]),
                vocab_size=int(flat["vocab_size"]), target_layer_ids=layer_ids,
                mask_token_id=int(block.get("mask_token_id", flat.get("mask_token_id", -1))),
                # DSpark's block counts its proposals, and the last committed token beside them unless it says so
                block_size=int(block.get("block_size", flat.get("block_size", 16)))
                + (kind == DSPARK and not flat.get("dspark_bonus_anchor", False)),
                num_target_layers=int(block.get("num_target_layers", flat.get("num_target_layers",
                                                                                max(layer_ids, default=-1) + 1))),
                rms_norm_eps=float(flat.get("rms_norm_eps", 1e-6)),
                rope_theta=float(flat.get("rope_theta", 10_000_000.0)), rope_scaling=flat.get("rope_scaling"),
                max_position_embeddings=int(flat.get("max_position_embeddings", 262_144)),
                causal=_flag(block.get("causal", flat.get("dflash_query_causal", flat.get("is_causal")))),
                sliding_window=_count(block.get("swa_window_size", flat.get("sliding_window"))),
                runtime_block_size=None if block.get("runtime_block_size") is None else int(block["runtime_block_size"]),
                input_embedding_scale=float(block.get("input_embedding_scale", flat.get("input_embedding_scale", 1.0))),
                output_multiplier=float(block.get("output_multiplier", flat.get("output_multiplier", 1.0))),
                final_logit_softcapping=_number(block.get("final_logit_softcapping", flat.get("final_logit_softcapping"))),
                layer_types=tuple(flat.get("layer_types") or ()), attention_bias=bool(flat.get("attention_bias", False)),
                unsupported=tuple(k for k in UNSUPPORTED if block.get(k, flat.get(k))), kind=kind,
                **{k: int(block.get(k, flat.get(k, 0))) for k in DFLASH2_FIELDS},
                markov_rank=int(block.get("markov_rank", flat.get("markov_rank", 0))) if kind == DSPARK else 0,
                anchored=kind == DSPARK and bool(block.get("sample_from_anchor", True)),
                confidence_head=kind == DSPARK and bool(block.get("enable_confidence_head", False)),
                confidence_with_markov=bool(block.get("confidence_head_with_markov", True)),
                rope_traditional=not flat.get("rope_is_neox_style", True),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SpecmlxError(f"{folder}: config.json lacks or mistypes a block drafter's field ({err})") from None
        config.check(folder)
        return config

    def check(self, folder: Path | str = "") -> None:
        """One line for what this module cannot run, before any weight loads."""
        if not self.target_layer_ids or list(self.target_layer_ids) != sorted(set(self.target_layer_ids)):
            raise SpecmlxError(f"{folder}: target_layer_ids must ascend without repeats, got {list(self.target_layer_ids)}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise SpecmlxError(f"{folder}: mask_token_id {self.mask_token_id} is outside its vocabulary of {self.vocab_size}")
        if self.proposals < 1:
            raise SpecmlxError(f"{folder}: a block of {self.proposals + 1} proposes nothing")
        if self.unsupported:
            raise SpecmlxError(f"{folder}: {', '.join(self.unsupported)} are not supported yet")
        kinds = set(self.layer_types) - {FULL, SLIDING}
        if kinds or self.attention_bias:
            raise SpecmlxError(f"{folder}: drafter layers {sorted(kinds)} and attention biases are not supported yet "
                               f"(attention_bias {self.attention_bias})")
        if len(self.layer_types) not in (0, self.num_hidden_layers):
            raise SpecmlxError(f"{folder}: layer_types names {len(self.layer_types)} layers of {self.num_hidden_layers}")
        if SLIDING in self.layer_types and not (self.sliding_window or 0) > 0:
            raise SpecmlxError(f"{folder}: sliding-window drafter layers need a sliding_window above 0")
        if self.kind == DFLASH2:
            if any(getattr(self, k) <= 0 for k in DFLASH2_FIELDS) or self.hidden_size % self.conv_group_size:
                raise SpecmlxError(f"{folder}: a DFlash2 drafter needs {', '.join(DFLASH2_FIELDS)} above 0, its "
                                   "hidden size a multiple of its convolution's group")
            if not self.selector_top_k <= self.vocab_size:
                raise SpecmlxError(f"{folder}: selector_top_k {self.selector_top_k} exceeds its vocabulary")
        if self.kind == DSPARK and self.markov_rank <= 0:
            raise SpecmlxError(f"{folder}: a DSpark drafter needs a markov_rank above 0")

    def sliding(self, layer: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer] == SLIDING


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def block_kind(raw: Mapping[str, Any]) -> str:
    """Which block drafter a `config.json` describes, as mlx-vlm tells them apart."""
    block = raw.get("dflash_config") or {}
    if DFLASH2_ARCHITECTURE in (raw.get("architectures") or ()):
        return "DFlash2"
    if block.get("projector_type") == "dspark" or int(raw.get("markov_rank") or block.get("markov_rank") or 0) > 0:
        return "DSpark"
    return DFLASH


class Attention(nn.Module):
    """A drafter layer's attention: the block's queries over the context's keys and the block's own.
    A sliding layer's query sees only keys less than `sliding_window` positions away, before it and,
    unless causal, after it; causal unless the checkpoint says (z-lab's reference: `causal` unsaid is
    true of sliding layers alone). Its cache keeps every context row; the window is a mask."""

    def __init__(self, config: BlockConfig, layer: int) -> None:
        super().__init__()
        heads, kv_heads, dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
        sliding = config.sliding(layer)
        self.heads, self.kv_heads, self.scale = heads, kv_heads, dim**-0.5
        self.causal = sliding if config.causal is None else config.causal
        self.window = config.sliding_window if sliding else None
        self.q_proj = nn.Linear(config.hidden_size, heads * dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * dim, bias=False)
        self.o_proj = nn.Linear(heads * dim, config.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(dim, eps=config.rms_norm_eps)
        self.k_norm = nn.RMSNorm(dim, eps=config.rms_norm_eps)

    def _heads(self, x: mx.array, count: int) -> mx.array:
        batch, length, _ = x.shape
        return x.reshape(batch, length, count, -1).transpose(0, 2, 1, 3)

    def _mask(self, length: int, keys: int) -> mx.array | None:
        """Which keys each of the block's `length` queries sees, the last `length` of `keys` being the block's."""
        if not self.causal and self.window is None:
            return None
        query = mx.arange(keys - length, keys)[:, None]
        key = mx.arange(keys)[None]
        seen = key <= query if self.causal else mx.ones((length, keys), dtype=mx.bool_)
        if self.window is not None:
            seen = seen & (query - key < self.window) & (key - query < self.window)
        return seen

    def __call__(self, x: mx.array, context: mx.array, rope: nn.Module, cache: KVCache) -> mx.array:
        """`x` (B, L, H) the block's normed rows; `context` (B, S, H) rows new to `cache`, whose keys
        and values it keeps; the block's are used and dropped."""
        batch, length, _ = x.shape
        start = cache.offset + context.shape[1]  # the block's first position: right after the context's
        queries = rope(self.q_norm(self._heads(self.q_proj(x), self.heads)), offset=start)
        new_keys = rope(self.k_norm(self._heads(self.k_proj(context), self.kv_heads)), offset=cache.offset)
        keys, values = cache.update_and_fetch(new_keys, self._heads(self.v_proj(context), self.kv_heads))
        block_keys = rope(self.k_norm(self._heads(self.k_proj(x), self.kv_heads)), offset=start)
        keys = mx.concatenate([keys, block_keys], axis=2)
        values = mx.concatenate([values, self._heads(self.v_proj(x), self.kv_heads)], axis=2)
        out = mx.fast.scaled_dot_product_attention(queries, keys, values, scale=self.scale,
                                                   mask=self._mask(length, keys.shape[2]))
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(batch, length, -1))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, config: BlockConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer)
        self.mlp = MLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        if config.kind == DFLASH2:  # each sublayer wrapped by its convolution: before it, and after it
            self.attention_conv = DynamicConv(config.hidden_size, config.conv_kernel_size, config.conv_group_size)
            self.mlp_conv = DynamicConv(config.hidden_size, config.conv_kernel_size, config.conv_group_size)

    def __call__(self, x: mx.array, context: mx.array, rope: nn.Module, cache: KVCache) -> mx.array:
        if "attention_conv" not in self:
            h = x + self.self_attn(self.input_layernorm(x), context, rope, cache)
            return h + self.mlp(self.post_attention_layernorm(h))
        normed, kernel = self.attention_conv.prepare(self.input_layernorm(x))
        h = x + self.attention_conv.finish(self.self_attn(normed, context, rope, cache), kernel)
        normed, kernel = self.mlp_conv.prepare(self.post_attention_layernorm(h))
        return h + self.mlp_conv.finish(self.mlp(normed), kernel)


class BlockModel(nn.Module):
    """The drafter's own weights; the target lends the embedding table and the head."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        self.config = config
        self.fc = nn.Linear(len(config.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = [Layer(config, i) for i in range(config.num_hidden_layers)]
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rope = initialize_rope(config.head_dim, config.rope_theta, config.rope_traditional, config.rope_scaling,
                                    config.max_position_embeddings)
        if config.kind == DFLASH2:
            self.candidate_selector = CandidateSelector(config.vocab_size, config.hidden_size, config.selector_rank,
                                                        config.selector_top_k)
        if config.kind == DSPARK:
            self.markov_head = Markov(config.vocab_size, config.markov_rank)
            if config.confidence_head:  # an adaptive block size's estimate elsewhere; loaded, not used here
                self.confidence_head = ConfidenceHead(
                    config.hidden_size + config.markov_rank * config.confidence_with_markov)

    def position(self, logits: mx.array, hidden: mx.array, previous: mx.array) -> mx.array:
        """One block position's logits over the vocabulary, given its hidden state and the token proposed
        before it (the last committed one first): the block's own for DFlash; for DFlash2 its selector's
        scores of its candidates, given that token (-inf elsewhere)."""
        if "candidate_selector" in self:
            return self.candidate_selector(logits, hidden, previous)
        if "markov_head" in self:
            return self.markov_head(logits, previous)
        return logits

    def block(self, anchor: int, proposals: int) -> list[int]:
        """The block's tokens: the last committed one, then masks, one for each proposal (DSpark's
        anchored block proposes its first token from the last committed one's own position)."""
        return [anchor] + [self.config.mask_token_id] * (proposals - self.config.anchored)

    def proposing(self, hidden: mx.array, count: int) -> mx.array:
        """The first `count` rows of a block's (L, H) hidden states that propose tokens."""
        first = 0 if self.config.anchored else 1
        return hidden[first : first + count]

    def make_cache(self) -> list[KVCache]:
        return [KVCache() for _ in self.layers]

    def context(self, taps: mx.array) -> mx.array:
        """(..., T, H) what leaves the target's tapped layers at some positions -> (..., H) context rows."""
        return self.hidden_norm(self.fc(taps.reshape(*taps.shape[:-2], -1)))

    def logits(self, projected: mx.array) -> mx.array:
        """What the target's output projection gave its hidden states (`hidden.output_head`) -> its logits."""
        config = self.config
        logits = projected * config.output_multiplier if config.output_multiplier != 1.0 else projected
        if config.final_logit_softcapping:
            logits = mx.tanh(logits / config.final_logit_softcapping) * config.final_logit_softcapping
        return logits

    def __call__(self, block: mx.array, context: mx.array, cache: list[KVCache]) -> mx.array:
        """`block` (B, L, H) the embedded block, `context` (B, S, H) rows `cache` has not seen (it keeps
        them): the final-normed hidden state at each block position."""
        h = block
        for layer, layer_cache in zip(self.layers, cache):
            h = layer(h, context, self.rope, layer_cache)
        return self.norm(h)


def is_block_dir(folder: Path) -> bool:
    """A block drafter's directory: its `config.json` carries `dflash_config`."""
    try:
        return isinstance(read_config(folder).get("dflash_config"), Mapping)
    except SpecmlxError:
        return False


# Tensors a checkpoint may carry that the target lends instead (rotary buffers are recomputed).
LENT = ("embed_tokens.", "lm_head.")
CODEBOOKS = ("_codebook",)  # DFlash2's, stored without `.weight`


def sanitize(weights: Mapping[str, mx.array]) -> dict[str, mx.array]:
    """Checkpoint names -> this module's: without `model.`, without what the target lends, DFlash2's
    codebooks as embedding tables (`.weight`, as z-lab's loader maps them)."""
    out = {}
    for name, value in weights.items():
        name = name.removeprefix("model.")
        if name.startswith(LENT) or "rotary_emb" in name:
            continue
        out[f"{name}.weight" if name.endswith(CODEBOOKS) else name] = value
    return out


def load_block_drafter(folder: str | Path) -> BlockModel:
    """A block drafter from its checkpoint or a converted (and maybe quantized) directory."""
    folder = Path(folder)
    raw = read_config(folder)
    model = BlockModel(BlockConfig.from_dict(raw, folder))
    return load_into(model, sanitize(read_weights(folder)), raw.get("quantization"), folder, "block drafter weights")
