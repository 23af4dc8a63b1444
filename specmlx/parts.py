"""What a generation reads of an engine, as protocols: the round and the generation
name these, never the engine itself, so the engine can start them without a circle.

`Parts` is what one round scores with: the target and its caches, the drafter, the
peers it keeps in step with, and the one host sync and rewind every round goes
through. `GenerationParts` adds what a whole generation needs around its rounds: the
tokenizer and end tokens, the committed context and its prefill, a request's
grammar and the automatic draft length. `Engine` is both.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import mlx.core as mx
import mlx.nn as nn

from .config import GenerationConfig
from .drafters import Drafter
from .grammar import Constraint, Grammar
from .peers import Peers
from .policy import DraftPolicy
from .schedule import AutoDraft
from .stats import StatsRecorder
from .vision.images import Images


class Parts(Protocol):
    """A target, its caches and a drafter, as a round reads them."""

    target: nn.Module
    cache: list[Any]
    drafter: Drafter
    peers: Peers

    @property
    def reads_hidden(self) -> bool:
        """Whether the drafter is shown the target's hidden states."""

    @property
    def fused_layers(self) -> tuple[int, ...]:
        """Target layers whose input the drafter reads besides the final hidden state."""

    def cache_length(self) -> int:
        """How many positions the target's cache holds."""

    def rewind(self, length: int) -> None:
        """Both caches hold the first `length` committed tokens at most."""

    def sync(self, rec: StatsRecorder, *arrays: mx.array, keep: tuple[mx.array, ...] = ()) -> list:
        """Evaluate `arrays` and bring them to the host: a round's blocking waits all go through here."""


class GenerationParts(Parts, Protocol):
    """Parts, and what a generation needs around its rounds."""

    tokenizer: Any
    eos_token_ids: frozenset[int]
    context: list[int]

    def check(self, prompt: Sequence[int], config: GenerationConfig) -> None:
        """Refuse a prompt this engine cannot answer."""

    def prefill(self, prompt: list[int], drafter: bool = True, images: Images | None = None) -> None:
        """Bring the caches to hold prompt[:-1]; `prompt` becomes the context, grown by the rounds.
        `images`: the prompt's images, fed in place of their tokens."""

    def constrain(self, grammar: Grammar | None) -> Constraint | None:
        """A generation's place in `grammar` (None without one)."""

    def auto_draft(self, drafter: Drafter | None = None, policy: DraftPolicy = DraftPolicy()) -> AutoDraft:
        """The drafter's automatic draft length, with what it has measured."""
