"""A separate small language model, sharing the target's tokenizer, as drafter."""

from __future__ import annotations

from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn

from ..caches.stream import kv_bytes_per_token, make_cache
from ..caches.snapshot import capture, leading, restorable, restore
from ..caches.replay import recording
from ..vocab import fit_vocab
from ..sampling import SamplingParams
from .base import AlwaysMayPropose, Draft
from .loop import Allowed, Scores, draft_loop


class ModelDrafter(AlwaysMayPropose):
    """Drafts autoregressively with its own KV cache, building one lazy graph.

    `vocab_size` is the target's logit width: drafter logits are cut or padded
    to it so that q and p range over the same ids.
    """
    drafts = True
    reads_target_cache = False

    def __init__(self, model: nn.Module, vocab_size: int, name: str = "model") -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.name = name
        self.cache = make_cache(model, name=f"drafter {name}")

    def fresh(self) -> "ModelDrafter":
        """The same weights with an empty cache: a drafter for another conversation."""
        return ModelDrafter(self.model, self.vocab_size, self.name)

    @property
    def draft_model(self) -> nn.Module:
        return self.model

    def adopt(self, source: "ModelDrafter | None", length: int) -> int:
        """What it lacks of the `length` tokens it prefills itself: it covers them all."""
        if source is not None:
            self.cache.copy_prefix(source.cache, length)
        return length

    def held_bytes(self) -> int:
        return self.cache.held_bytes()

    def capture(self, start: int, end: int, prefix: str) -> dict[str, mx.array]:
        # It may hold fewer positions than the target (it prefills lazily): then it keeps none.
        return capture(self.cache, start, end, prefix) if end <= self.cache.length else {}

    def restore(self, blocks: Sequence[Mapping[str, mx.array]], prefix: str) -> int:
        count = restorable(self.cache, blocks[: leading(blocks, prefix)], prefix)
        if count:
            return restore(self.cache, blocks[:count], prefix)
        self.cache.clear()  # it prefills itself
        return 0

    def bytes_per_token(self, target: nn.Module) -> int:
        return kv_bytes_per_token(self.model)

    def prefill(self, tokens: Sequence[int]) -> None:
        self.cache.rewind(min(self.cache.length, len(tokens) - 1))
        self.cache.prefill_prompt(self.model, tokens)  # from what it holds: a recurrent cache may hold fewer

    def draft(
        self, tokens: Sequence[int], num_draft: int, sampling: SamplingParams, key: mx.array,
        p_min: float = 0.0, allowed: Allowed | None = None,
    ) -> Draft:
        if num_draft == 0:
            return Draft.empty()
        # Everything the cache has not seen: the last token, plus the final
        # draft of the previous round when all of it was accepted.
        unseen = mx.array(tokens[self.cache.length :], dtype=mx.uint32)
        return draft_loop(self._step, unseen, None, num_draft, sampling, key, p_min, allowed)

    def _step(self, fed: mx.array, state: None, greedy: bool) -> tuple[Scores, None]:
        with recording(self.model, self.cache):  # a recurrent drafter's rewind replays what was accepted
            logits = self.model(fed[None], cache=self.cache)[0, -1]
        return Scores(fit_vocab(logits, self.vocab_size)), None

    def rewind(self, length: int) -> None:
        self.cache.rewind(length)
