"""Drafting a whole block at once (DFlash; the network: `specmlx.models.dflash`).

At committed length n (token n-1 not yet scored) the drafter's cache holds the context rows of
positions 0..n-2: what left the target's tapped layers there, projected. A round feeds the rows
verification added since the last, and in the same forward runs the block [token n-1, mask, ...,
mask]: the hidden state at each mask position gives, through the target's head, the distribution of
the token there. The first `num_draft` of them are proposed; each is drawn from its own position's
distribution (the argmax at temperature 0), which verification then uses as q, so output stays
exact. The block's own keys and values are never kept: a rejection leaves only context rows to
cut, and those are the target's, never speculative.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.stream import Stream
from ..errors import SpecmlxError
from ..hidden import embed, output_head, text_model
from ..models.dflash import BlockModel
from ..sampling import SamplingParams
from .base import AlwaysMayPropose, Draft
from .history import HiddenHistory
from .loop import Allowed, Scores, draft_loop


class BlockDrafter(AlwaysMayPropose):
    drafts = True
    draft_model = None  # it runs on the target's hidden states and head, not as a language model of its own
    reads_target_cache = False

    def __init__(self, model: BlockModel, vocab_size: int, name: str) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.cache = Stream(model.make_cache())
        self.history = HiddenHistory()  # context rows (projected), one a committed position
        self.target: nn.Module | None = None

    @property
    def fused_layers(self) -> tuple[int, ...]:
        """What leaves target layer i enters layer i + 1: the taps read it there."""
        return tuple(i + 1 for i in self.model.config.target_layer_ids)

    @property
    def proposals(self) -> int:
        """The most tokens one block proposes."""
        return self.model.config.proposals

    def fresh(self) -> "BlockDrafter":
        return BlockDrafter(self.model, self.vocab_size, self.name)

    def attach(self, target: nn.Module, cache: list) -> None:
        config, text = self.model.config, text_model(target)
        count = len(text.layers)
        width = embed(target, mx.array([0], dtype=mx.uint32)).shape[-1]
        if width != config.hidden_size:
            raise SpecmlxError(f"block drafter {self.name} reads hidden states of width {config.hidden_size}, "
                               f"but the target's are {width} wide")
        if count != config.num_target_layers:
            raise SpecmlxError(f"block drafter {self.name} reads target layers {list(config.target_layer_ids)} of "
                               f"{config.num_target_layers}, but this target has {count}")
        if config.target_layer_ids[-1] + 1 >= count:
            raise SpecmlxError(f"block drafter {self.name} reads what leaves layer {config.target_layer_ids[-1]}, the "
                               "target's last: specmlx taps what enters a layer, and none follows it")
        if config.vocab_size != self.vocab_size:
            raise SpecmlxError(f"block drafter {self.name} was trained for a vocabulary of {config.vocab_size}, "
                               f"but this target's is {self.vocab_size}")
        self.target = target

    def observe(self, start: int, hidden: mx.array, taps: mx.array | None = None) -> None:
        if taps is None:
            raise SpecmlxError(f"block drafter {self.name} reads target layers "
                               f"{list(self.model.config.target_layer_ids)}: it needs what leaves them")
        self.history.observe(start, self.model.context(taps))

    def prefill(self, tokens: Sequence[int]) -> None:
        pass  # fed lazily by the first `draft`, in the round's one graph

    def draft(self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
              p_min: float = 0.0, allowed: Allowed | None = None) -> Draft:
        n, count = len(tokens), min(num_draft, self.proposals)
        if count <= 0 or n < 2 or self.history.length < n - 1:
            return Draft.empty()
        # The rows it has not fed, and the last one again at least: a forward needs a new row, and
        # feeding one it holds gives its cache what it held (the same prompt asked again feeds nothing new).
        fed = min(self.cache.length, n - 2)
        self.cache.rewind(fed)
        ids = mx.array(self.model.block(tokens[-1], self.proposals), dtype=mx.uint32)
        rows = embed(self.target, ids)
        scale = self.model.config.input_embedding_scale
        hidden = self.model((rows * scale if scale != 1.0 else rows)[None], self.history.rows(fed, n - 1)[None],
                            self.cache)
        rows = self.model.proposing(hidden[0], count)
        logits = self.model.logits(output_head(self.target, rows))

        def position(previous: mx.array, i: int, greedy: bool) -> tuple[Scores, int]:
            """Position i's distribution: the block's (DFlash), or chained to the token drafted before it (DFlash2)."""
            return Scores(logits=self.model.position(logits[i], rows[i], previous)), i + 1

        return replace(draft_loop(position, ids[:1], 0, count, sampling, key, p_min, allowed), blocked=True)

    def rewind(self, length: int) -> None:
        self.history.rewind(length)
        self.cache.rewind(self.history.length)

    def adopt(self, source: "BlockDrafter | None", length: int) -> int:
        """Only the rows it copied: its cache is rebuilt from them as it drafts."""
        return self.history.adopt(None if source is None else source.history, length)

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        return self.history.capture(start, end, prefix)

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        self.rewind(0)
        return self.history.restore(blocks, prefix)

    def held_bytes(self) -> int:
        return self.cache.held_bytes() + self.history.nbytes

    def bytes_per_token(self, target: nn.Module) -> int:
        """A context row a position, and its keys and values in every drafter layer."""
        config = self.model.config
        taps = mx.zeros((1, len(config.target_layer_ids), config.hidden_size),
                        dtype=embed(target, mx.array([0], dtype=mx.uint32)).dtype)
        row, cache = self.model.context(taps), Stream(self.model.make_cache())
        self.model(row[None], row[None], cache)
        return row.nbytes + cache.per_position()
