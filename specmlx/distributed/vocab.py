"""The embedding table and output head split by vocabulary rows across the ranks.

mlx-lm's `shard()` splits the decoder layers but keeps the embeddings and the
head whole on every rank; with Qwen's 152k-token vocabulary they are a quarter
of a 1.5B model. Here each rank keeps V/N rows of each:
- a lookup takes the rows this rank holds, zeros elsewhere, and sums across
  ranks: each row lives on exactly one rank, so the sum is exact;
- the head computes this rank's V/N logits and gathers them: each logit is the
  same dot product a whole head computes.
Quantized tables split the same way (their scales and biases are per row).
Every rank must then compute the head whenever rank 0 does, and a drafter that
reads the target's own embeddings or head (an MTP head) cannot be used with it.
"""

from __future__ import annotations

import copy

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map

from ..hidden import text_model


def rows_of(module: nn.Module, start: int, end: int) -> nn.Module:
    """A copy of a row-major table layer (embedding or linear, plain or quantized) holding rows start..end-1."""
    part = copy.copy(module)
    # Made contiguous: a slice alone is a view that keeps the whole table's buffer alive.
    part.update(tree_map(lambda p: mx.contiguous(p[start:end]), module.parameters()))
    return part


class VocabShard(nn.Module):
    """This rank's rows of the token table, used both ways: as the input embedding and,
    for a tied model, as the output head. `rows` of the table are held, padded to equal parts."""

    def __init__(self, table: nn.Module, group) -> None:
        super().__init__()
        vocab = table.weight.shape[0]
        self.vocab, self.size = vocab, group.size()
        self.part = -(-vocab // self.size)  # rows per rank; the last rank's part may be short
        self.start = group.rank() * self.part
        self.table = rows_of(table, self.start, min(self.start + self.part, vocab))
        self._group = group

    def __call__(self, ids: mx.array) -> mx.array:
        local = ids.astype(mx.int32) - self.start
        held = (local >= 0) & (local < self.table.weight.shape[0])
        rows = self.table(mx.where(held, local, 0))
        return mx.distributed.all_sum(mx.where(held[..., None], rows, 0), group=self._group)

    def as_linear(self, x: mx.array) -> mx.array:
        return self._gather(self.table.as_linear(x))

    def _gather(self, logits: mx.array) -> mx.array:
        """(..., rows held) -> (..., vocab): every rank's logits, in rank order."""
        short = self.part - logits.shape[-1]
        if short:
            logits = mx.pad(logits, [(0, 0)] * (logits.ndim - 1) + [(0, short)])
        lead = logits.shape[:-1]
        flat = logits.reshape(-1, self.part).T  # all_gather joins along the first axis
        whole = mx.distributed.all_gather(flat, group=self._group)[: self.vocab]
        return whole.T.reshape(*lead, self.vocab)


class HeadShard(VocabShard):
    """This rank's rows of an untied output head."""

    def __call__(self, x: mx.array) -> mx.array:
        return self._gather(self.table(x))


def shard_vocab(model: nn.Module, group) -> None:
    """Split `model`'s embeddings (and untied head) by vocabulary rows, in place, before they are evaluated."""
    inner = text_model(model)
    inner.model.embed_tokens = VocabShard(inner.model.embed_tokens, group)
    if hasattr(inner, "lm_head"):
        inner.lm_head = HeadShard(inner.lm_head, group)
