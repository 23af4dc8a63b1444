"""Drafting with specmlx's own MTP head (the network: `specmlx.models.mtp`).

The head keeps a small KV cache of its own. Position j of that cache holds
(embed(token j+1), target hidden j), so it runs one behind the target. A
round feeds the positions verification has added since the last round, with
the target's real hidden states, then drafts k tokens, feeding back its own
features. Those k-1 speculative entries are dropped before the next round.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.stream import Stream
from ..errors import SpecmlxError
from ..hidden import embed, text_model
from ..sampling import SamplingParams
from .base import AlwaysMayPropose, Draft
from .labels import MTP
from .loop import Allowed, Scores, draft_loop
from .history import HiddenHistory, one_row
from ..models.mtp import MTPModel


class MTPDrafter(AlwaysMayPropose):
    drafts = True
    draft_model = None  # a head on the target's hidden states, not a language model of its own
    reads_target_cache = False

    def __init__(self, model: MTPModel, vocab_size: int, name: str = MTP) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.cache = Stream(model.make_cache())
        self.history = HiddenHistory()
        self.real = 0  # cache entries built from the target's own hidden states
        self.target: nn.Module | None = None
        self.head_rows: mx.array | None = None  # (draft vocab, H) rows of the target's head

    @property
    def fused_layers(self) -> tuple[int, ...]:
        return self.model.config.fused_layers

    def fresh(self) -> "MTPDrafter":
        """The same weights with no state: a drafter for another conversation."""
        return MTPDrafter(self.model, self.vocab_size, self.name)

    def adopt(self, source: "MTPDrafter | None", length: int) -> int:
        """Only the rows it copied: it needs one for every position the target's cache holds."""
        return self.history.adopt(None if source is None else source.history, length)

    def attach(self, target: nn.Module, cache: list) -> None:
        config = self.model.config
        if config.target_vocab_size != self.vocab_size:
            raise SpecmlxError(f"MTP drafter {self.name} was trained for a target with "
                               f"{config.target_vocab_size} logits, but this target has {self.vocab_size}")
        rows = head_rows(target, self.model.draft_ids)
        if rows.shape[-1] != config.target_hidden_size:
            raise SpecmlxError(f"MTP drafter {self.name} reads hidden states of width "
                               f"{config.target_hidden_size}, but the target's are {rows.shape[-1]} wide")
        count = len(text_model(target).layers)
        if config.fused_layers and config.fused_layers[-1] >= count:
            raise SpecmlxError(f"MTP drafter {self.name} fuses target layers {list(config.fused_layers)}, "
                               f"but this target has {count}")
        self.target, self.head_rows = target, rows
        mx.eval(rows)

    def held_bytes(self) -> int:
        return self.cache.held_bytes() + self.history.nbytes

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        return self.history.capture(start, end, prefix)  # its own cache is rebuilt from them, as `adopt`'s is

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        self.rewind(0)
        return self.history.restore(blocks, prefix)

    def bytes_per_token(self, target: nn.Module) -> int:
        """A row of the target's a position, and its own cache's entry j: (embed(token j+1), hidden j)."""
        hidden, cache = one_row(target), Stream(self.model.make_cache())
        self.model(embed(target, mx.array([[0]], dtype=mx.uint32)), hidden, cache)
        return hidden.nbytes + cache.per_position()

    def observe(self, start: int, hidden: mx.array, taps: mx.array | None = None) -> None:
        # A fused head keeps its input feature (the fusion), so drafting reads one row a position as before.
        if self.fused_layers:
            if taps is None:
                raise SpecmlxError(f"MTP drafter {self.name} fuses target layers {list(self.fused_layers)}: "
                                   "it needs what enters them")
            hidden = self.model.fused(taps, hidden)
        self.history.observe(start, hidden)

    def prefill(self, tokens: Sequence[int]) -> None:
        pass  # fed lazily by the first `draft`, in the round's one graph

    def logits(self, features: mx.array) -> mx.array:
        """Full-vocabulary logits: draft-vocabulary scores, -inf elsewhere."""
        scores = features @ self.head_rows.T
        full = mx.full((*scores.shape[:-1], self.vocab_size), -mx.inf, dtype=scores.dtype)
        return mx.put_along_axis(full, mx.broadcast_to(self.model.draft_ids, scores.shape), scores, axis=-1)

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0, allowed: Allowed | None = None) -> Draft:
        if num_draft == 0 or len(tokens) < 2 or self.history.length < len(tokens) - 1:
            return Draft.empty()
        # Feed positions fed..n-2: (token j+1, real hidden j). Entries past `real` were speculative.
        n = len(tokens)
        fed = min(self.real, n - 2)
        self.cache.rewind(fed)
        self.real = n - 1
        ids = mx.array(tokens[fed + 1 : n], dtype=mx.uint32)
        hidden = self.history.rows(fed, n - 1)
        return draft_loop(self._step, ids, hidden, num_draft, sampling, key, p_min, allowed)

    def _step(self, ids: mx.array, hidden: mx.array, greedy: bool) -> tuple[Scores, mx.array]:
        """Feed (embed(ids), hidden) rows; the head's features are the next step's hidden."""
        features = self.model(embed(self.target, ids)[None], hidden[None], self.cache)[0, -1:]
        if not greedy:
            return Scores(logits=self.logits(features[0])), features
        scores = features[0] @ self.head_rows.T  # over the draft vocabulary only: cheaper
        return Scores(token=self.model.draft_ids[mx.argmax(scores)], scores=scores), features

    def rewind(self, length: int) -> None:
        self.history.rewind(length)
        # Cache entry j needs token j+1 and a real hidden state at j.
        self.real = max(min(self.real, length - 1, self.history.length), 0)
        self.cache.rewind(min(self.cache.length, self.real))


def head_rows(target: nn.Module, ids: mx.array) -> mx.array:
    """The target's output-head rows for `ids`, dense (dequantized if need be)."""
    target = text_model(target)
    if getattr(target, "tie_word_embeddings", None) is False or hasattr(target, "lm_head"):
        layer = target.lm_head
        if isinstance(layer, nn.QuantizedLinear):
            return mx.dequantize(layer.weight[ids], layer.scales[ids], layer.biases[ids],
                                 group_size=layer.group_size, bits=layer.bits)
        return layer.weight[ids]
    return target.model.embed_tokens(ids)  # a tied head: embedding rows, dequantized by the layer
