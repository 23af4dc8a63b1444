"""What every network of a checkpoint's own MTP layers shares (`native_mtp.py` loads them): the
prefix their tensors are stored under, and what a drafter checks of them against its target."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..hidden import head

PREFIX = "mtp."


@dataclass(frozen=True)
class NativeMTPConfig:
    """What a drafter built on these layers checks against its target (`drafters.mtp.MTPDrafter.attach`)."""

    target_hidden_size: int
    target_vocab_size: int
    num_layers: int
    fused_layers: tuple[int, ...] = ()  # it reads the final hidden state alone


class WholeVocabulary:
    """Layers that score every token: `draft_ids` all of them, `logits` by the target's own head
    (an architecture with a head of its own overrides it)."""

    config: NativeMTPConfig

    @property
    def draft_ids(self) -> mx.array:
        return mx.arange(self.config.target_vocab_size, dtype=mx.int32)

    def logits(self, target: nn.Module, features: mx.array) -> mx.array:
        return head(target, features)
