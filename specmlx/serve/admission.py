"""Memory that never runs out: before a request's prefill, whether its whole context fits beside
what is held, asked by either runner, so that a long agent session gets its answer, waits, or
gets one clear refusal with the numbers, rather than the process running out of memory mid-round.
(A prompt that cannot fit even beside the weights alone is refused before it queues:
`Slots.refuse_past_memory`.)

A request's context reaches its prompt, its `max_tokens` and what a round writes past the last
token (`LOOKAHEAD`). Each position costs the target's KV and the drafter's state
(`Footprint.per_token`); a hybrid target's recurrent state costs a fixed amount a row. Rows
decoded together share the batch's cache, which is rectangular: every row as long as the
longest, with some left padding; every cache grows a step of positions at a time
(`Footprint.rows`).

What is free for a request (`Slots.free_bytes`) is the limit less what MLX holds that the request
and the running ones cannot reclaim: the weights and the runtime, and no idle slot's cache (an
idle slot is emptied, its blocks kept on disk first, when the room is needed). Then `admit`
decides: the whole context fits, and it runs; it does not fit beside the running requests, and it
waits for them; alone, its answer is cut to what fits (a length stop, as a `max_tokens` past the
context window is cut), and only a prompt that cannot fit at all is refused, in the words agents
read as a context to compact (`context_length_exceeded`; Anthropic's "prompt is too long").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlx_lm.models.cache import KVCache

from ..caches.batch import COMPACT_AT
from ..memory import size_text
from ..schedule.widths import BLOCKED
from .errors import APIError
from .jobs import Job

LOOKAHEAD = max(BLOCKED) + 1  # positions a round may write past the last token: the widest verify, and its first
PADDING = COMPACT_AT  # a batch's rows keep up to this much left padding
STEP = KVCache.step


@dataclass(frozen=True)
class Footprint:
    """What a row of context costs beside the weights: `per_token` bytes a position (the target's KV
    and the drafter's state), and `fixed` bytes a row (a hybrid's recurrent state and its checkpoint)."""

    per_token: int
    fixed: int = 0

    def rows(self, reaches: Sequence[int]) -> int:
        """Bytes rows reaching `reaches` positions hold together: one alone holds its own; in a batch
        each holds as many as the longest, with its padding."""
        if not reaches:
            return 0
        width = max(reaches) + (PADDING if len(reaches) > 1 else 0)
        width = -(-width // STEP) * STEP  # mlx-lm's caches grow a step of positions at a time
        return len(reaches) * (self.per_token * width + self.fixed)


@dataclass(frozen=True)
class Ask:
    """A request's claim on memory: its prompt's tokens and the most it may add."""

    prompt: int
    max_tokens: int

    @property
    def reach(self) -> int:
        return self.prompt + self.max_tokens + LOOKAHEAD


def admit(ask: Ask, running: Sequence[int], footprint: Footprint, free: int, held: int, limit: int) -> int | None:
    """The `max_tokens` to run `ask` with beside the rows reaching `running` positions, with `free`
    bytes for them all: its own when all fit; None to wait while others run; alone, cut to what fits.
    Raises `APIError` when not even its prompt fits alone (`held`, `limit`: the figures it names)."""
    if footprint.rows([*running, ask.reach]) <= free:
        return ask.max_tokens
    if running:
        return None
    width = (free - footprint.fixed) // max(1, footprint.per_token) // STEP * STEP  # a cache grows a step at a time
    fits = width - ask.prompt - LOOKAHEAD
    if fits >= 1:
        return min(ask.max_tokens, fits)
    raise too_long(ask.prompt, footprint, held, limit)


def too_long(prompt: int, footprint: Footprint, held: int, limit: int) -> APIError:
    """The refusal of a prompt whose context cannot fit beside `held` bytes under `limit`, in the words
    agents read as a conversation to compact."""
    need = footprint.rows([prompt + 1 + LOOKAHEAD])
    return APIError(400, f"prompt is too long for this machine's memory: its {prompt:,} tokens need about "
                         f"{size_text(need)} of cache beside the {size_text(held)} the model holds, and the "
                         f"limit is {size_text(limit)} (serve --memory-gb); shorten or compact the conversation",
                    "context_length_exceeded", "messages")


@dataclass(frozen=True)
class Claim:
    """A request as memory admits it: its job (its `max_tokens` cut to what fits, if `cut`), and the bytes
    the slot it takes must find beyond what the batch holds (`Slots.take`'s `need`)."""

    job: Job
    need: int = 0
    cut: bool = False
