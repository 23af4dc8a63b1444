"""What DFlash2 adds to a DFlash drafter (`dflash.py`), as z-lab's reference (`dflash/model.py`) and
mlx-vlm 0.7.10 (`drafters/dflash2`) run it.

- Each decoder sublayer (attention, MLP) is wrapped in a grouped dynamic causal convolution along the
  block: before the sublayer, its input is convolved with a learned kernel plus one the input itself
  predicts; after it, its output likewise with a second pair. Causal: a block position mixes only the
  positions before it.
- A candidate selector chains the block's proposals. At each position the head's top-k tokens are
  the candidates, each scored by its logit plus a low-rank term between the token proposed before it,
  the position's hidden state and the candidate. A proposal thus depends on the one before it, and
  its distribution is over its candidates alone.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def _convolve(hidden: mx.array, dynamic: mx.array, base: mx.array, group: int) -> mx.array:
    """(B, L, H) rows convolved along L, causally: out[t] = sum over o < K of (base[o] + dynamic[t, o])
    * rows[t - o], both kernels per channel group ((K, H) learned, (B, L, K, H / group) predicted)."""
    batch, length, width = hidden.shape
    groups = width // group
    blocks = hidden.reshape(batch, length, groups, group)
    dynamic = dynamic.reshape(batch, length, base.shape[0], groups, 1)
    out = mx.zeros_like(blocks)
    for offset in range(base.shape[0]):
        shifted = blocks if offset == 0 else mx.concatenate([mx.zeros_like(blocks[:, :offset]), blocks[:, :-offset]],
                                                            axis=1)
        out = out + (base[offset].reshape(1, 1, groups, group).astype(hidden.dtype) + dynamic[:, :, offset]) * shifted
    return out.reshape(hidden.shape)


class DynamicConv(nn.Module):
    def __init__(self, width: int, kernel: int, group: int) -> None:
        super().__init__()
        self.kernel, self.group = kernel, group
        self.base_kernel = mx.zeros((2, kernel, width))  # before the sublayer, after it
        self.kernel_projection = nn.Linear(width, 2 * kernel * (width // group), bias=False)

    def prepare(self, hidden: mx.array) -> tuple[mx.array, mx.array]:
        """The sublayer's input convolved, and the kernel its output will be."""
        dynamic = self.kernel_projection(hidden).reshape(*hidden.shape[:-1], 2, self.kernel, -1)
        return _convolve(hidden, dynamic[..., 0, :, :], self.base_kernel[0], self.group), dynamic[..., 1, :, :]

    def finish(self, hidden: mx.array, dynamic: mx.array) -> mx.array:
        return _convolve(hidden, dynamic, self.base_kernel[1], self.group)


class CandidateSelector(nn.Module):
    def __init__(self, vocab: int, width: int, rank: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Embedding(vocab, rank)
        self.successor_codebook = nn.Embedding(vocab, rank)
        self.hidden_projection = nn.Linear(width, rank, bias=False)

    def __call__(self, logits: mx.array, hidden: mx.array, previous: mx.array) -> mx.array:
        """(V,) logits of one position, its (H,) hidden state and the (1,) token before it -> the (V,)
        scores the choice is made from: its top-k candidates' logits plus their pairing with `previous`
        through the hidden state, -inf on every other token."""
        candidates = mx.argpartition(logits, -self.top_k)[-self.top_k:]
        pairing = self.predecessor_codebook(previous.reshape(-1))[0] * self.hidden_projection(hidden)
        scores = logits[candidates] + (self.successor_codebook(candidates) * pairing).sum(axis=-1)
        return mx.put_along_axis(mx.full(logits.shape, -mx.inf, dtype=scores.dtype), candidates, scores, axis=-1)
