"""Responses on the wire: OpenAI's chat and text completion objects and their stream chunks.

Two additions ride along, as fields OpenAI clients ignore: `speculative`
(what drafting did: rounds, drafted, accepted, mean accepted length, the
mean draft length chosen a round, acceptance rate, and each token's source
when asked) and `timings` (queue wait, prefill and decode time, as
llama.cpp's server reports them).

A chat whose calls are parsed (`calls.py`) carries them as OpenAI does: `message.tool_calls`
whole, `delta.tool_calls` streamed, and `finish_reason: "tool_calls"`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Sequence

from ..events import TokenEvent
from .calls import Call, CallReader, Piece
from .errors import APIError, sse_error
from .protocol import Done

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
# A stream that has nothing to send for a while sends this SSE comment (see `routes.stream`).
KEEPALIVE = ": keep-alive\n\n"


def finish_reason(done: Done, calls: CallReader | None) -> str | None:
    """OpenAI's finish reason; `tool_calls` for an answer that made calls and ended of its own accord
    (its end token or a stop string), not one max_tokens cut."""
    reason = done.stats.finish_reason
    return "tool_calls" if calls is not None and calls.made and reason in ("eos", "stop") else FINISH.get(reason)


def cut_short(done: Done) -> bool:
    """Whether max_tokens ended the answer (a call it cuts short is dropped: `CallReader.finish`)."""
    return done.stats.finish_reason == "length"


def delta(piece: Piece) -> list[dict]:
    """A stream's deltas for a piece of the answer: its text, or a call's two."""
    if isinstance(piece, Call):
        return [{"tool_calls": [d]} for d in piece.deltas()]
    return [{"content": piece}]


@dataclass(frozen=True)
class Reply:
    """One response's identity: chat (`chat.completion`) or text (`text_completion`)."""

    chat: bool
    model: str
    prompt_tokens: int
    sources: bool  # report each token's source
    calls: CallReader | None = None  # this answer's calls are parsed: the reader's state is this response's
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    def _object(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": ("chatcmpl-" if self.chat else "cmpl-") + self.id, "object": kind,
                "created": self.created, "model": self.model}

    def _choice(self, text: str | None, finish: str | None, chunk: bool, role: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if chunk:
            delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                "finish_reason": finish}

    # -- whole responses -------------------------------------------------------

    def whole(self, events: Sequence[TokenEvent], done: Done) -> dict:
        text = "".join(e.text for e in events) + done.tail
        choice = self._choice(text, FINISH.get(done.stats.finish_reason), chunk=False)
        if self.calls is not None:
            pieces = self.calls.feed(text) + self.calls.finish(cut_short(done))
            content = "".join(p for p in pieces if isinstance(p, str))
            made = [p.whole() for p in pieces if isinstance(p, Call)]
            choice = self._choice(content or None, finish_reason(done, self.calls), chunk=False)
            if made:
                choice["message"]["tool_calls"] = made
        out = self._object(chunk=False) | {"choices": [choice], "usage": self.usage(done)}
        return out | self.extras(done, events)

    def usage(self, done: Done) -> dict:
        generated = done.stats.generation_tokens
        # As OpenAI counts a prediction: its tokens that appear in the answer, and the rest of them.
        s = done.stats
        predicted = {"accepted_prediction_tokens": s.prediction_accepted,
                     "rejected_prediction_tokens": max(s.prediction_tokens - s.prediction_accepted, 0)}
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": generated,
                "total_tokens": self.prompt_tokens + generated,
                "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
                "completion_tokens_details": predicted}

    def extras(self, done: Done, events: Sequence[TokenEvent] = ()) -> dict:
        return extras(done, self.sources, events)

    # -- stream chunks (each an SSE `data:` line) -----------------------------

    def first(self) -> str:
        """The opening chunk: the assistant's role, no text yet (as OpenAI streams a chat)."""
        return sse(self._object(chunk=True) | {"choices": [self._choice("", None, True, role=True)]}) if self.chat else ""

    def piece(self, events: Sequence[TokenEvent], usage_field: bool) -> str:
        """Chunks for tokens of one or more rounds: their text (with calls, what is known to be text and the
        calls they complete: maybe nothing yet), and their sources when asked, on the last chunk."""
        text = "".join(e.text for e in events)
        if self.calls is None:
            chunks = [self._chunk(self._choice(text, None, True), usage_field)]
        else:
            deltas = [d for p in self.calls.feed(text) for d in delta(p)] or ([{}] if self.sources else [])
            chunks = [self._chunk(self._delta(d), usage_field) for d in deltas]
        if self.sources:
            chunks[-1]["speculative"] = token_sources(events)
        return "".join(sse(out) for out in chunks)

    def _chunk(self, choice: dict, usage_field: bool) -> dict:
        return self._object(chunk=True) | {"choices": [choice]} | ({"usage": None} if usage_field else {})

    @staticmethod
    def _delta(delta: dict) -> dict:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}

    def last(self, done: Done, include_usage: bool) -> str:
        """The finishing chunk (the held-back tail, the finish reason, what drafting did),
        then a usage chunk with no choices if asked, then `[DONE]`."""
        text = done.tail if done.tail or not self.chat else None
        before = ""
        if self.calls is not None:  # the tail's text and calls go first, then a chunk that only finishes
            deltas = [d for p in self.calls.feed(done.tail) + self.calls.finish(cut_short(done)) for d in delta(p)]
            before, text = "".join(sse(self._chunk(self._delta(d), include_usage)) for d in deltas), None
        out = self._object(chunk=True) | {
            "choices": [self._choice(text, finish_reason(done, self.calls), True)]} | self.extras(done)
        if include_usage:
            out["usage"] = None
        tail = sse(self._object(chunk=True) | {"choices": [], "usage": self.usage(done)}) if include_usage else ""
        return before + sse(out) + tail + DONE

    keepalive = KEEPALIVE

    @staticmethod
    def failed(error: APIError) -> str:
        """The stream's end when the answer cannot finish: the error, then `[DONE]`."""
        return sse_error(error) + DONE


DONE = "data: [DONE]\n\n"


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
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"
