"""What DSpark adds to a block drafter (`dflash.py`), as mlx-vlm 0.7.10 runs it (`drafters/dspark`).

- A low-rank Markov term: each block position's logits gain `markov_w2(markov_w1(previous))`, the
  token proposed before it (the last committed one first), so a proposal depends on the one before.
- Its block is anchored (`sample_from_anchor`): the last committed token's own position proposes the
  first token, and the block holds one mask fewer (`BlockModel.block`).
- A confidence head, which an adaptive block size reads elsewhere: loaded with the weights, unused here.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


class Markov(nn.Module):
    def __init__(self, vocab: int, rank: int) -> None:
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)

    def __call__(self, logits: mx.array, previous: mx.array) -> mx.array:
        """(V,) logits of one position, and the (1,) token before it -> its logits given that token."""
        return logits + self.markov_w2(self.markov_w1(previous.reshape(-1)))[0]


class ConfidenceHead(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, 1, bias=True)
