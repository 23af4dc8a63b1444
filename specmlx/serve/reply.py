"""One answer, fed to the dialect that renders it.

The worker hands a request its answer a round at a time (`routes.py`). `Feed` reads it once for every
dialect: each stretch of tokens becomes a `Said`: its text, that text as the answer says it (text
pieces, a thinking model's reasoning apart: `reasoning.py`, and calls, a call only once it parses:
`calls.py`), and the tokens it came from, whose
sources a reply reports when asked. A `Reply` renders what is said in its API's shape: OpenAI's chat
and completions (`openai/render.py`), Anthropic's messages (`anthropic/render.py`), OpenAI's
responses (`responses/render.py`).

`speculative` and `timings` ride along on every dialect's answer (`extras`), as fields their clients
ignore: what drafting did (rounds, drafted, accepted, mean accepted length, the mean draft length
chosen a round, acceptance rate, and each token's source when asked) and the queue wait, prefill and
decode time, as llama.cpp's server reports them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..events import TokenEvent
from .calls import CallReader, Piece, merged
from .reasoning import ReasoningReader
from .errors import APIError
from .jobs import Admitted, Done

# A stream that has nothing to send for a while sends this SSE comment (see `routes.stream`).
KEEPALIVE = ": keep-alive\n\n"


@dataclass(frozen=True)
class Said:
    """A stretch of the answer: its `text`, that text as `pieces` (text, reasoning and calls, in order),
    the `tokens` it came from, and the answer's calls so far (`made`; `parsed`: its text is read into
    pieces at all, for reasoning or calls)."""

    text: str
    pieces: tuple[Piece, ...]
    tokens: tuple[TokenEvent, ...]
    parsed: bool
    made: int
    thought: int = 0  # the answer's tokens so far that were reasoning (its end marker among them)


class Feed:
    """One answer as it comes: `piece` for each stretch of tokens, then `last` at its end; or `whole`.
    Its text is read for reasoning first (`reasoning`, a thinking model's), then what is not reasoning
    for calls (`calls`, where they are parsed)."""

    def __init__(self, calls: CallReader | None = None, reasoning: ReasoningReader | None = None) -> None:
        self.calls = calls  # this answer's calls are parsed: the reader's state is this answer's
        self.reasoning = reasoning
        self.thought = 0  # reasoning tokens so far (`Said.thought`)

    def piece(self, events: Sequence[TokenEvent]) -> Said:
        return self._said([e.text for e in events], events, None)

    def last(self, done: Done) -> Said:
        """What the detokenizer held to the end, and what the calls' reader held back."""
        return self._said([done.tail], (), done)

    def whole(self, events: Sequence[TokenEvent], done: Done) -> Said:
        return self._said([e.text for e in events] + [done.tail], events, done)

    def _said(self, texts: list[str], events: Sequence[TokenEvent], end: Done | None) -> Said:
        text = "".join(texts)
        if self.calls is None and self.reasoning is None:
            return Said(text, tuple(merged([text])), tuple(events), False, 0)
        parts: list[Piece] = [text] if self.reasoning is None else self._read(texts, len(events), end)
        if self.calls is None:
            return Said(text, tuple(merged(parts)), tuple(events), True, 0, self.thought)
        pieces = [p for part in parts for p in (self.calls.feed(part) if isinstance(part, str) else [part])]
        pieces += self.calls.finish(cut_short(end)) if end is not None else []
        return Said(text, tuple(merged(pieces)), tuple(events), True, self.calls.made, self.thought)

    def _read(self, texts: list[str], tokens: int, end: Done | None) -> list[Piece]:
        """The reasoning split out, a token's text at a time: a token read inside the block was reasoning."""
        parts: list[Piece] = []
        for i, text in enumerate(texts):
            self.thought += i < tokens and self.reasoning.thinking
            parts += self.reasoning.feed(text)
        return parts + (self.reasoning.finish() if end is not None else [])


class Reply(Protocol):
    """An answer in one API's shape: whole (`whole`), or streamed (`first`, a `piece` for each stretch,
    then `last`, or `failed`), each stream part a string of Server-Sent Events."""

    keepalive: str  # what a quiet stream sends
    opens_admitted: bool  # its first events report the prompt's cache split: sent once the job is `Admitted`

    def first(self, admitted: Admitted | None = None) -> str: ...

    def piece(self, said: Said) -> str: ...

    def last(self, said: Said, done: Done) -> str: ...

    def failed(self, error: APIError) -> str: ...

    def whole(self, said: Said, done: Done) -> dict: ...


def cut_short(done: Done) -> bool:
    """Whether max_tokens ended the answer (a call it cuts short is dropped: `CallReader.finish`)."""
    return done.stats.finish_reason == "length"


def made_calls(said: Said, done: Done) -> bool:
    """Whether the answer made calls and ended of its own accord (its end token or a stop string), not one
    max_tokens cut: its finish is the dialect's word for calls."""
    return said.made > 0 and done.stats.finish_reason in ("eos", "stop")


def extras(done: Done, sources: bool, events: Sequence[TokenEvent] = ()) -> dict:
    """What drafting did (each token's source too if `sources`, and there are `events`), and the timings."""
    s = done.stats
    speculative = {"drafter": s.drafter, "num_draft": "auto" if s.auto else s.num_draft,
                   "rounds": s.rounds, "drafted": s.drafted, "accepted": s.accepted,
                   "mean_accepted_length": round(s.mean_accepted, 4),
                   "mean_num_draft": round(s.mean_chosen, 4),
                   "acceptance_rate": round(s.acceptance_rate, 4)}
    if sources and events:
        speculative |= token_sources(events)
    timings = {"queue_ms": round(1000 * done.queue_s, 1), "prompt_ms": round(1000 * s.prefill_s, 1),
               "predicted_ms": round(1000 * s.decode_s, 1),
               "predicted_per_second": round(s.generation_tps, 3)}
    return {"speculative": speculative, "timings": timings}


def token_sources(events: Sequence[TokenEvent]) -> dict:
    """A stream piece's `speculative`: its tokens and where each came from."""
    return {"tokens": [e.token for e in events], "sources": [e.source.value for e in events]}


def sse(obj: dict) -> str:
    """An SSE `data:` line: OpenAI's chat and completion chunks."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def typed_event(data: dict) -> str:
    """An SSE event named by its data's type: Anthropic's and the Responses API's streams."""
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
