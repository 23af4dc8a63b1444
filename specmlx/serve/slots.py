"""Conversations' KV caches, kept between requests: a few engines sharing one set of weights.

Each slot is an `Engine` (the target's cache and context) with its own
instance of every loaded drafter (`Drafter.fresh`: same weights, own state).
A request goes to the slot whose context it continues, so a chat's next turn
is prefilled only past what that slot already holds; two clients taking turns
each keep their own slot. Only the MLX thread touches slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.utils import common_prefix_len

from ..distributed import Lockstep
from ..drafters import Drafter
from ..engine import Engine

# A request continues a slot's conversation when it shares at least this share of
# what the slot holds; below it (a common system prompt only) it takes another slot.
CONTINUES = 0.5


@dataclass
class Slot:
    engine: Engine
    drafters: dict[str, Drafter]  # name -> this slot's own instance
    used: int = 0  # when it last served a request (a counter, for LRU)

    def held_bytes(self) -> int:
        caches = [self.engine.cache] + [getattr(d, "cache", None) or [] for d in self.drafters.values()]
        return sum(layer.nbytes for cache in caches for layer in cache
                   if getattr(layer, "keys", None) is not None)


@dataclass
class Slots:
    """Up to `count` conversations, their caches holding at most `max_bytes` between requests."""

    target: nn.Module
    tokenizer: Any
    drafters: dict[str, Drafter]  # the loaded drafters by name; the first is the default
    count: int = 2
    max_bytes: int = 4 << 30
    lockstep: Lockstep | None = None  # a sharded target: every slot's engine keeps step with the other ranks
    _slots: list[Slot] = field(default_factory=list)
    _clock: int = 0
    _emptied: set[int] = field(default_factory=set)  # slots trimmed since `emptied` was last asked

    def __post_init__(self) -> None:
        self._slots = [self._new() for _ in range(self.count)]

    @property
    def context_window(self) -> int | None:
        return self._slots[0].engine.context_window

    def room(self, prompt_tokens: int) -> int | None:
        return self._slots[0].engine.room(prompt_tokens)

    def _new(self) -> Slot:
        # Every slot gets fresh instances: the loaded ones stay empty templates, so emptying a slot frees its caches.
        own = {name: d.fresh() for name, d in self.drafters.items()}
        return Slot(Engine(self.target, next(iter(own.values())), self.tokenizer, lockstep=self.lockstep), own)

    def take(self, prompt: Sequence[int], drafter: str) -> Slot:
        """The slot for `prompt`, drafting with `drafter`: the one whose conversation
        it continues, else an empty one, else the least recently used."""
        shared = [common_prefix_len(s.engine.context, prompt) for s in self._slots]
        best = max(range(len(self._slots)), key=lambda i: (shared[i], self._slots[i].used))
        held = len(self._slots[best].engine.context)
        if not (shared[best] and shared[best] >= CONTINUES * held):
            empty = [s for s in self._slots if not s.engine.context]
            best = self._slots.index(empty[0] if empty else min(self._slots, key=lambda s: s.used))
        slot = self._slots[best]
        self._clock += 1
        slot.used = self._clock
        slot.engine.use(slot.drafters[drafter])
        return slot

    def trim(self, keep: Slot | None = None) -> None:
        """Empty the least recently used slots until the caches fit `max_bytes`."""
        while sum(s.held_bytes() for s in self._slots) > self.max_bytes:
            idle = [s for s in self._slots if s is not keep and s.held_bytes()]
            if not idle:
                return
            oldest = min(idle, key=lambda s: s.used)
            self._emptied.add(self._slots.index(oldest))
            self._slots[self._slots.index(oldest)] = self._new()
            mx.clear_cache()

    def index(self, slot: Slot) -> int:
        return self._slots.index(slot)

    def emptied(self) -> list[int]:
        """The slots trimmed since the last call: a sharded target's other ranks drop them too."""
        out, self._emptied = sorted(self._emptied), set()
        return out

    def contexts(self) -> list[int]:
        """How many tokens each slot holds (for tests and the health route)."""
        return [len(s.engine.context) for s in self._slots]
