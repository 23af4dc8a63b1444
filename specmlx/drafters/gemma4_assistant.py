"""Drafting with a Gemma 4 assistant (the network: `specmlx.models.gemma4_assistant`).

The assistant has no cache: every step attends over the target's own KV
cache, read in place, and conditions on the target's final hidden state at
the last scored position. A round at committed length n (token n-1, the
bonus, not yet scored) therefore:

- reads, per layer type, K/V for positions 0..n-2 from the last target layer
  of that type that owns a cache. Sliding layers: only the last
  `sliding_window + 1` of them, what HF's flipped window mask keeps (see
  `HF_WINDOW_EXTRA`); specmlx's target caches keep the whole context and
  apply the window by masking, so the slice is taken here;
- starts from h = the target's hidden row n-2 and the bonus token n-1;
- runs k steps, each feeding the drafted token and the assistant's projected
  state back, with K/V and the query position unchanged (every reference
  holds them constant within a round: nothing is appended between steps).

Rejections need no repair: the engine trims the target cache and `rewind`
cuts the hidden-state history.
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import gemma4_text

from ..errors import SpecmlxError
from ..hidden import embed
from ..sampling import SamplingParams
from ..vocab import fit_vocab
from .base import AlwaysMayPropose, Draft
from .loop import Allowed, Scores, draft_loop
from ..models.gemma4_assistant import SLIDING, Gemma4AssistantModel
from .history import HiddenHistory, one_row

# Where the query sits. The sources disagree by one (research notes A5): HF
# transformers and mlx-swift-lm use the bonus token's position, i.e. the
# number of valid target KV entries; vLLM and mlx-vlm use the last verified
# position, one less. We follow HF, whose assistant code shipped with the
# checkpoints; `position_lag=1` gives the vLLM/mlx-vlm convention. Exactness
# does not depend on it, only acceptance (keys carry RoPE, so it shifts every
# query-key distance by one).
HF_POSITION_LAG = 0
# Sliding layers read one key more than the window, as HF does: its assistant
# flips a bidirectional window mask that allows |distance| <= sliding_window
# from the newest key, so sliding_window + 1 keys. mlx-vlm keeps
# sliding_window (one fewer once its rotating cache is full).
HF_WINDOW_EXTRA = 1


class Gemma4AssistantDrafter(AlwaysMayPropose):
    drafts = True
    fused_layers = ()  # it reads the final hidden state and the target's K/V only
    draft_model = None
    reads_target_cache = True

    def __init__(
        self, model: Gemma4AssistantModel, vocab_size: int, name: str = "gemma4-assistant",
        position_lag: int = HF_POSITION_LAG,
    ) -> None:
        self.model = model
        self.vocab_size = vocab_size  # the target's logit width
        self.name = name
        self.position_lag = position_lag
        self.history = HiddenHistory()
        self.target: nn.Module | None = None
        self.sources: dict[str, object] = {}  # layer type -> the target's cache object to read
        self.embed_scale = model.config.backbone_hidden_size ** 0.5  # Gemma's input scaling

    def fresh(self) -> "Gemma4AssistantDrafter":
        """The same weights with no state: a drafter for another conversation."""
        return Gemma4AssistantDrafter(self.model, self.vocab_size, self.name, self.position_lag)

    def adopt(self, source: "Gemma4AssistantDrafter | None", length: int) -> int:
        """Only the rows it copied: it needs one for every position the target's cache holds."""
        return self.history.adopt(None if source is None else source.history, length)

    # -- wiring -----------------------------------------------------------------

    def attach(self, target: nn.Module, cache: list) -> None:
        text = getattr(target, "language_model", target)  # mlx-lm's multimodal gemma4 wraps the text model
        inner = getattr(text, "model", None)
        if not isinstance(inner, gemma4_text.Gemma4TextModel):
            kind = getattr(target, "model_type", type(target).__name__)
            raise SpecmlxError(f"Gemma 4 assistant {self.name} drafts only for Gemma 4 text targets, not {kind}")
        config, mine = inner.config, self.model.config
        if config.hidden_size != mine.backbone_hidden_size:
            raise SpecmlxError(
                f"Gemma 4 assistant {self.name} was trained on a target of width {mine.backbone_hidden_size}, "
                f"but this target's hidden size is {config.hidden_size}; pick the assistant made for this target")
        if mine.text.vocab_size > self.vocab_size:
            raise SpecmlxError(f"Gemma 4 assistant {self.name} has {mine.text.vocab_size} tokens, "
                               f"more than the target's {self.vocab_size}")
        self.sources = {t: self._owner_cache(inner, cache, t) for t in set(self.model.layer_types)}
        self.target = text

    def _owner_cache(self, inner: nn.Module, cache: list, layer_type: str):
        """The cache of the last target layer of `layer_type` that owns one (shared layers reuse it)."""
        owners = len(inner.layers) - inner.config.num_kv_shared_layers
        found = [i for i in range(owners) if inner.layers[i].layer_type == layer_type]
        if not found:
            raise SpecmlxError(f"Gemma 4 assistant {self.name} needs a {layer_type} layer in the target")
        i = found[-1]
        theirs, ours = inner.layers[i].self_attn, self.model.config.text
        if theirs.head_dim != ours.head_dim_for(layer_type) or ours.num_attention_heads % theirs.n_kv_heads:
            raise SpecmlxError(
                f"Gemma 4 assistant {self.name} does not fit this target's {layer_type} layers "
                f"(head dim {ours.head_dim_for(layer_type)} vs {theirs.head_dim}, "
                f"{ours.num_attention_heads} query heads vs {theirs.n_kv_heads} K/V heads)")
        if i >= len(cache) or not hasattr(cache[i], "offset"):
            raise SpecmlxError(f"the target's cache has no entry for layer {i}")
        return cache[i]

    def held_bytes(self) -> int:
        return self.history.nbytes

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        return self.history.capture(start, end, prefix)

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        return self.history.restore(blocks, prefix)

    def bytes_per_token(self, target: nn.Module) -> int:
        return one_row(target).nbytes  # a row a position; it reads the target's KV cache, keeping none

    def observe(self, start: int, hidden: mx.array, taps: mx.array | None = None) -> None:
        self.history.observe(start, hidden)

    def prefill(self, tokens: Sequence[int]) -> None:
        pass  # nothing of its own: the target's prefill filled everything it reads

    def rewind(self, length: int) -> None:
        self.history.rewind(length)

    # -- drafting ---------------------------------------------------------------

    def target_kv(self, length: int) -> dict[str, tuple[mx.array, mx.array]]:
        """Lazy views of the target's K/V for positions 0..length-1, per layer type.

        Later writes (the verify pass) land at positions >= length and replace
        the cache's arrays functionally, so these views stay as they were.
        """
        window = self.model.config.text.sliding_window
        kv = {}
        for layer_type, c in self.sources.items():
            if isinstance(c.keys, (tuple, list)):
                raise SpecmlxError("Gemma 4 assistants cannot read a quantized target KV cache")
            start = max(0, length - window - HF_WINDOW_EXTRA) if layer_type == SLIDING else 0
            kv[layer_type] = (c.keys[..., start:length, :], c.values[..., start:length, :])
        return kv

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0, allowed: Allowed | None = None) -> Draft:
        scored = len(tokens) - 1  # target positions with K/V and a hidden row
        if (num_draft == 0 or scored < 1 or self.history.length < scored
                or any(c.offset < scored for c in self.sources.values())):
            return Draft.empty()
        kv = self.target_kv(scored)
        position = scored - self.position_lag  # constant for the whole round
        h = self.history.rows(scored - 1, scored)[None]  # (1, 1, backbone)
        first = mx.array([tokens[-1]], dtype=mx.uint32)
        step = functools.partial(self._step, kv, position)
        return draft_loop(step, first, h, num_draft, sampling, key, p_min, allowed)

    def _step(self, kv: dict, position: int, token: mx.array, h: mx.array, greedy: bool) -> tuple[Scores, mx.array]:
        """Feed the token and the assistant's projected state; K/V and the position stay fixed."""
        x = mx.concatenate([embed(self.target, token[None]) * self.embed_scale, h], axis=-1)
        out, h = self.model(x, kv, position)
        out = out[0, -1]
        # No final-logit softcap: HF's and mlx-vlm's assistants take raw
        # logits from the tied head (the cap belongs to the target's head).
        logits = self.model.logits(out)  # lazy: greedy drafting reads it only for a p-min
        if greedy:
            return Scores(token=self.model.greedy(out), scores=logits), h
        return Scores(logits=fit_vocab(logits, self.vocab_size)), h
