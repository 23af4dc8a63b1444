"""What every network of a checkpoint's own MTP layers shares (`native_mtp.py` loads them): the
prefix their tensors are stored under, and what a drafter checks of them against its target."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

PREFIX = "mtp."


@dataclass(frozen=True)
class NativeMTPConfig:
    """What a drafter built on these layers checks against its target (`drafters.mtp.MTPDrafter.attach`)."""

    target_hidden_size: int
    target_vocab_size: int
    num_layers: int
    fused_layers: tuple[int, ...] = ()  # it reads the final hidden state alone


class WholeVocabulary:
    """`draft_ids` of layers that score every token (through the target's own head)."""

    config: NativeMTPConfig

    @property
    def draft_ids(self) -> mx.array:
        return mx.arange(self.config.target_vocab_size, dtype=mx.int32)
