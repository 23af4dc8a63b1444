"""Drafting with the MTP layers a checkpoint ships (`specmlx.models.native_mtp`).

It runs as specmlx's own MTP head does (`drafters.mtp`): its KV cache runs one behind the
target, each round first feeds the positions verification added with the target's real hidden
states, and k > 1 drafts chain its own features. Two things differ: its logits score the whole
vocabulary (the target's head, or the layers' own), and it is built to the target it ships with.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ..errors import SpecmlxError
from ..hidden import embed
from .labels import MTP
from .loop import Scores
from .mtp import MTPDrafter


class NativeMTPDrafter(MTPDrafter):
    def __init__(self, model: nn.Module, vocab_size: int, name: str = MTP) -> None:
        super().__init__(model, vocab_size, name)

    def fresh(self) -> "NativeMTPDrafter":
        return NativeMTPDrafter(self.model, self.vocab_size, self.name)

    def attach(self, target: nn.Module, cache: list) -> None:
        if self.model.config.target_vocab_size != self.vocab_size:
            raise SpecmlxError(f"MTP layers {self.name} score {self.model.config.target_vocab_size} tokens, "
                               f"but this target has {self.vocab_size} logits")
        self.target = target

    def logits(self, features: mx.array) -> mx.array:
        """The layers' logits (the target's own head, or their own), cut to the target's logit width."""
        return self.model.logits(self.target, features)[..., : self.vocab_size]

    def _step(self, ids: mx.array, hidden: mx.array, greedy: bool) -> tuple[Scores, mx.array]:
        """Feed (embed(ids), hidden) rows; the features are the next step's hidden, and the layers'
        `logits` score them in either mode (no cheaper argmax: the whole vocabulary is drafted)."""
        features = self.model(embed(self.target, ids)[None], hidden[None], self.cache)[0, -1:]
        return Scores(logits=self.logits(features[0])), features
