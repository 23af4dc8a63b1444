"""A scripted engine for UI tests where the model does not matter.

It speaks the Engine's interface (generate, drafter, context, tokenizer) and
emits given (text, source) tokens, one `RoundEvent` a round as the real
Generation does, optionally slowly or endlessly, and records every call so
tests can check what the app asked for.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

from mlx_lm.utils import common_prefix_len

from specmlx.engine import GenerationConfig
from specmlx.events import RoundEvent, Source, TokenEvent
from specmlx.stats import GenerationStats

DEMO_ANSWER = (
    "Here is a function that checks whether a number is prime:\n\n"
    "```python\ndef is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
    "    for i in range(2, int(n ** 0.5) + 1):\n        if n % i == 0:\n            return False\n"
    "    return True\n```\n\nIt tries every divisor up to the square root of `n`."
)
ROUNDS = (4, 2, 4, 1, 3, 0, 4, 4, 2, 3)  # accepted drafts per round, repeated


def script(text: str = DEMO_ANSWER, num_draft: int = 4) -> list[tuple[str, Source]]:
    """Split text into word-like tokens; give them sources round by round as
    an engine would: accepted drafts, then one token of the target's own."""
    pieces = re.findall(r"\s*\w+|\s*[^\w\s]|\s+", text)
    out, i, r = [], 0, 0
    while i < len(pieces):
        accepted = ROUNDS[r % len(ROUNDS)]
        r += 1
        for _ in range(accepted):
            if i < len(pieces):
                out.append((pieces[i], Source.DRAFT))
                i += 1
        if i < len(pieces):
            out.append((pieces[i], Source.BONUS if accepted == num_draft else Source.CORRECTED))
            i += 1
    return out


class FakeDrafter:
    """Looks like a model drafter to the session; drafts nothing itself."""

    def __init__(self, name: str = "fake-0.5b") -> None:
        self.name = name

    def prefill(self, tokens: Sequence[int]) -> None:
        pass

    def draft(self, *args):
        raise AssertionError("the fake engine never asks its drafter")

    def rewind(self, length: int) -> None:
        pass


@dataclass
class Call:
    prompt: list[int]
    config: GenerationConfig
    drafter: Any
    generation: "FakeGeneration"


class FakeGeneration:
    """Rounds of the script: each ends with a token of the target's own, or where
    the script or `max_tokens` ends. `emitted` and `rounds` are what was yielded."""

    def __init__(self, engine: "FakeEngine", prompt: list[int], config: GenerationConfig) -> None:
        self.engine, self.prompt, self.config = engine, prompt, config
        self.emitted: list[TokenEvent] = []
        self.rounds: list[RoundEvent] = []
        self.stats: GenerationStats | None = None
        self.tail = ""
        self.closed = False
        self._rounds = self._run()

    def _run(self):
        tokens, i, pending = list(self.engine.tokens), 0, []
        try:
            more = lambda: self.engine.endless or i < len(tokens)  # noqa: E731
            while more() and len(self.emitted) < self.config.max_tokens:  # a round ends at max_tokens
                if self.engine.gate is not None:
                    self.engine.gate.acquire()
                elif self.engine.delay:
                    time.sleep(self.engine.delay)
                text, source = tokens[i % len(tokens)]
                pending.append(TokenEvent(1000 + i, text, source))
                i += 1
                ends = source is not Source.DRAFT or len(self.emitted) + len(pending) >= self.config.max_tokens
                if ends or not more():
                    yield self._round(pending)
                    pending = []
            self.tail = self.engine.tail
        finally:
            self.stats = self.engine.stats_for(self.rounds, self.config, self.closed)
            self.engine.context = self.prompt + [e.token for e in self.emitted]

    def _round(self, tokens: list[TokenEvent]) -> RoundEvent:
        accepted = sum(t.source is Source.DRAFT for t in tokens)
        k = self.engine.draft_length(self.config)
        event = RoundEvent(tuple(tokens), k, max(k, accepted) if k else 0, accepted)
        self.emitted.extend(tokens)
        self.rounds.append(event)
        return event

    def __iter__(self):
        return self

    def __next__(self) -> RoundEvent:
        return next(self._rounds)

    def token_events(self):
        for event in self:
            yield from event.tokens

    def close(self) -> None:
        self.closed = self.stats is None
        self._rounds.close()
        if self.stats is None:  # closed before it started
            self.stats = self.engine.stats_for(self.rounds, self.config, True)


class FakeEngine:
    def __init__(
        self, tokenizer: Any, tokens: Sequence[tuple[str, Source]] | None = None, *, drafter: Any = None,
        delay: float = 0.0, endless: bool = False, tail: str = "", tps: float = 42.0,
    ) -> None:
        self.tokenizer = tokenizer
        self.tokens = list(tokens if tokens is not None else script())
        self.drafter = drafter if drafter is not None else FakeDrafter()
        self.delay, self.endless, self.tail, self.tps = delay, endless, tail, tps
        self.gate: threading.Semaphore | None = None  # when set: each token waits for a release
        self.context: list[int] = []
        self.calls: list[Call] = []
        self.threads: set[int] = set()

        self.context_window: int | None = None  # no limit unless a test sets one

    def reusable(self, prompt: Sequence[int]) -> int:
        return min(common_prefix_len(self.context, list(prompt)), len(prompt) - 1)

    def use(self, drafter: Any) -> None:
        self.drafter = drafter

    def room(self, prompt_tokens: int) -> int | None:
        return None if self.context_window is None else self.context_window - prompt_tokens + 1  # as Engine.room

    def generate(self, prompt: Sequence[int], config: GenerationConfig = GenerationConfig()) -> FakeGeneration:
        self.threads.add(threading.get_ident())
        generation = FakeGeneration(self, list(prompt), config)
        self.calls.append(Call(list(prompt), config, self.drafter, generation))
        return generation

    def draft_length(self, config: GenerationConfig) -> int:
        """What every round of the script drafts: the policy's start, or 0 for no drafter."""
        return config.policy.start if getattr(self.drafter, "name", "") != "none" else 0

    def stats_for(self, events: list[RoundEvent], config: GenerationConfig, cancelled: bool) -> GenerationStats:
        """Counts as the engine would make them from its rounds; a fixed speed keeps snapshots stable."""
        rounds, tokens = len(events), sum(len(e.tokens) for e in events)
        accepted = sum(e.accepted for e in events)
        k = self.draft_length(config)
        histogram = [0] * (config.policy.start + 1)
        return GenerationStats(
            drafter=self.drafter.name, num_draft=config.policy.start, prompt_tokens=0,
            generation_tokens=tokens, rounds=rounds, drafted=sum(e.drafted for e in events), accepted=accepted,
            accepted_histogram=tuple(histogram), target_forwards=rounds, host_syncs=rounds,
            prefill_s=0.0, decode_s=tokens / self.tps, draft_s=0.0, verify_s=0.0, profiled=False,
            finish_reason="cancelled" if cancelled else ("length" if tokens >= config.max_tokens else "eos"),
            draft_histogram=tuple(rounds if i == k else 0 for i in range(len(histogram))),
            plain_rounds=rounds if k == 0 else 0, auto=config.policy.auto,
        )
