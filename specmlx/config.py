"""How to generate: one request's settings (`GenerationConfig`), a leaf the engine, the
generation, the round and every front end read, importing none of them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from .drafters.prediction import Prediction
from .errors import SpecmlxError
from .grammar import Grammar
from .policy import DraftPolicy
from .sampling import SamplingParams
from .text import TextStream

if TYPE_CHECKING:
    from .vision.images import Images

RANDOM_SEED = -1  # as llama.cpp's: a fresh random seed each generation, as no seed at all
MAX_SEED = 2**64 - 1  # MLX's random keys take an unsigned 64-bit seed


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: how many tokens, how to sample, and how rounds draft
    (`policy`). `stop_tokens` end it as the model's end of sequence does (committed,
    not emitted): a fill-in-the-middle answer's own end tokens. `profile` adds one host
    sync per round so that drafting and verification are timed apart; leave it off to
    measure speed. `grammar`: what the answer must match (`grammar.py`), the target's
    distribution restricted to it. `prediction`: the tokens the caller expects the output to be
    (OpenAI's predicted outputs), copied as drafts where the output agrees with them
    (`drafters.prediction`). `continues_text`: the answer continues the prompt's text (a
    completion, not a chat's answer), so its text keeps its leading space (`text.TextStream`).
    `images`: the prompt's images (`vision.images`), which its prefill feeds in place of their tokens."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_tokens: frozenset[int] = frozenset()
    profile: bool = False
    prediction: tuple[int, ...] = ()
    grammar: Grammar | None = None
    continues_text: bool = False
    images: Images | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise SpecmlxError(f"max tokens must be >= 1, got {self.max_tokens}")
        if self.seed is not None and not RANDOM_SEED <= self.seed <= MAX_SEED:
            raise SpecmlxError(f"the seed must be {RANDOM_SEED} (a random one) or 0..{MAX_SEED}, got {self.seed}")
        object.__setattr__(self, "stop_tokens", frozenset(self.stop_tokens))  # any collection of ids
        object.__setattr__(self, "prediction", tuple(self.prediction))
        if any(not isinstance(t, int) or t < 0 for t in self.prediction):
            raise SpecmlxError("a prediction must be token ids, whole numbers >= 0")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_tokens):
            raise SpecmlxError(f"stop tokens must be token ids, whole numbers >= 0, got {set(self.stop_tokens)}")

    def follow_prediction(self, prompt_tokens: int) -> Prediction | None:
        """A generation's own place in `prediction`, after a prompt of this length (None without one)."""
        return Prediction(self.prediction, prompt_tokens) if self.prediction else None

    def end_tokens(self, eos: frozenset[int]) -> frozenset[int]:
        """What ends the answer: the model's end of sequence `eos`, and this request's stop tokens."""
        return eos | self.stop_tokens

    def text_stream(self, tokenizer: Any) -> TextStream:
        """The answer's text, as this request's stop strings and `continues_text` want it."""
        return TextStream(tokenizer, self.stop, self.continues_text)

    def key(self) -> mx.array:
        """The generation's random key: from the seed, or a fresh random one."""
        seed = self.seed if self.seed not in (None, RANDOM_SEED) else random.SystemRandom().getrandbits(63)
        return mx.random.key(seed)
