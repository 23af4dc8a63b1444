"""A job's records: what the worker runs for a request, and what it hands back.

A request becomes a `Job` (`serving.py`); the worker hands what it runs back
to the request's `Sink` as `Item`s: `Admitted` once its prompt is accounted, each
round's `RoundEvent`, then `Done` or `Failed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Union

from ..config import GenerationConfig
from ..events import RoundEvent
from ..stats import GenerationStats
from .errors import APIError


@dataclass(frozen=True)
class Job:
    """What to generate: prompt token ids, how, with which loaded drafter, and for whom
    (the caller's API key's id: a request reuses only its own owner's caches)."""

    prompt: tuple[int, ...]
    config: GenerationConfig  # its `prediction` holds the request's, as tokens
    drafter: str
    owner: Hashable = None
    shareable: int | None = None  # prompt tokens a later request may share, if not all (a FIM prompt's: its prefix's)


@dataclass(frozen=True)
class Admitted:
    """A job's prompt is accounted, before its first round: how many of its tokens a slot held (from
    memory or disk) and, of those, how many the prompt cache on disk held. Anthropic's stream opens
    with that split (`message_start`)."""

    cached_tokens: int
    disk_tokens: int


@dataclass(frozen=True)
class Done:
    """A finished generation: its stats, the text the detokenizer held to the
    end, how many prompt tokens a slot already held (from memory or disk), and the wait in the queue."""

    stats: GenerationStats
    tail: str
    cached_tokens: int
    queue_s: float
    disk_tokens: int = 0  # of `cached_tokens`, how many the prompt cache on disk held
    memory_bound: bool = False  # its max_tokens was cut to what memory holds (`admission.py`)


@dataclass(frozen=True)
class Failed:
    error: APIError


Item = Union[Admitted, RoundEvent, Done, Failed]
Sink = Callable[[Item], None]  # called on the MLX thread: for each round, then once at the end
