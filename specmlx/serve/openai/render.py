"""OpenAI's chat completions and completions out: the answer as a `chat.completion` or `text_completion`
object, or as its stream chunks.

`speculative` and `timings` ride along as on every route (`reply.extras`).

A chat whose calls are parsed (`calls.py`) carries them as OpenAI does: `message.tool_calls`
whole, `delta.tool_calls` streamed, and `finish_reason: "tool_calls"`. A thinking model's reasoning
(`reasoning.py`) comes apart from its content, under the two names clients read it by:
`reasoning_content` (DeepSeek's, vLLM's and llama.cpp's) and `reasoning` (mlx_lm.server's).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from ..calls import Call, Piece, Thought
from ..errors import APIError
from ..jobs import Admitted, Done
from ..reply import KEEPALIVE, Said, extras, made_calls, sse, token_sources

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}
DONE = "data: [DONE]\n\n"


def finish_reason(said: Said, done: Done) -> str | None:
    """OpenAI's finish reason; `tool_calls` for an answer that made calls and ended of its own accord."""
    return "tool_calls" if made_calls(said, done) else FINISH.get(done.stats.finish_reason)


def delta(piece: Piece) -> list[dict]:
    """A stream's deltas for a piece of the answer: its text, its reasoning, or a call's two."""
    if isinstance(piece, Call):
        return [{"tool_calls": [d]} for d in piece.deltas()]
    if isinstance(piece, Thought):
        return [reasoning(piece.text)]
    return [{"content": piece}]


def reasoning(text: str) -> dict:
    """Reasoning under both names clients read it by."""
    return {"reasoning_content": text, "reasoning": text}


@dataclass(frozen=True)
class CompletionReply:
    """One completion: a chat's (`chat.completion`) or a text's (`text_completion`); `include_usage`: a stream
    ends with a usage chunk (`stream_options.include_usage`)."""

    chat: bool
    model: str
    prompt_tokens: int
    sources: bool  # report each token's source
    include_usage: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    keepalive: ClassVar[str] = KEEPALIVE
    opens_admitted: ClassVar[bool] = False

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

    def whole(self, said: Said, done: Done) -> dict:
        choice = self._choice(said.text, FINISH.get(done.stats.finish_reason), chunk=False)
        if said.parsed:
            content = "".join(p for p in said.pieces if isinstance(p, str))
            made = [p.whole() for p in said.pieces if isinstance(p, Call)]
            thought = "".join(p.text for p in said.pieces if isinstance(p, Thought))
            choice = self._choice(content or None, finish_reason(said, done), chunk=False)
            if thought:
                choice["message"] |= reasoning(thought)
            if made:
                choice["message"]["tool_calls"] = made
        out = self._object(chunk=False) | {"choices": [choice], "usage": self.usage(done, said.thought)}
        return out | extras(done, self.sources, said.tokens)

    def usage(self, done: Done, thought: int = 0) -> dict:
        """OpenAI's usage; `thought`: the answer's reasoning tokens (`completion_tokens_details.reasoning_tokens`)."""
        generated = done.stats.generation_tokens
        # As OpenAI counts a prediction: its tokens that appear in the answer, and the rest of them.
        s = done.stats
        predicted = {"accepted_prediction_tokens": s.prediction_accepted,
                     "rejected_prediction_tokens": max(s.prediction_tokens - s.prediction_accepted, 0),
                     "reasoning_tokens": thought}
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": generated,
                "total_tokens": self.prompt_tokens + generated,
                # `disk_tokens`, ours: how many of the cached ones the prompt cache on disk held.
                "prompt_tokens_details": {"cached_tokens": done.cached_tokens, "disk_tokens": done.disk_tokens},
                "completion_tokens_details": predicted}

    # -- stream chunks (each an SSE `data:` line) -----------------------------

    def first(self, admitted: Admitted | None = None) -> str:
        """The opening chunk: the assistant's role, no text yet (as OpenAI streams a chat)."""
        return sse(self._object(chunk=True) | {"choices": [self._choice("", None, True, role=True)]}) if self.chat else ""

    def piece(self, said: Said) -> str:
        """Chunks for tokens of one or more rounds: their text (with calls, what is known to be text and the
        calls they complete: maybe nothing yet), and their sources when asked, on the last chunk."""
        if not said.parsed:
            chunks = [self._chunk(self._choice(said.text, None, True))]
        else:
            deltas = [d for p in said.pieces for d in delta(p)] or ([{}] if self.sources else [])
            chunks = [self._chunk(self._delta(d)) for d in deltas]
        if self.sources:
            chunks[-1]["speculative"] = token_sources(said.tokens)
        return "".join(sse(out) for out in chunks)

    def _chunk(self, choice: dict) -> dict:
        return self._object(chunk=True) | {"choices": [choice]} | ({"usage": None} if self.include_usage else {})

    @staticmethod
    def _delta(delta: dict) -> dict:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}

    def last(self, said: Said, done: Done) -> str:
        """The finishing chunk (the held-back tail, the finish reason, what drafting did),
        then a usage chunk with no choices if asked, then `[DONE]`."""
        text = said.text if said.text or not self.chat else None
        before = ""
        if said.parsed:  # the tail's text and calls go first, then a chunk that only finishes
            deltas = [d for p in said.pieces for d in delta(p)]
            before, text = "".join(sse(self._chunk(self._delta(d))) for d in deltas), None
        out = self._object(chunk=True) | {
            "choices": [self._choice(text, finish_reason(said, done), True)]} | extras(done, self.sources)
        tail = ""
        if self.include_usage:
            out["usage"] = None
            tail = sse(self._object(chunk=True) | {"choices": [], "usage": self.usage(done, said.thought)})
        return before + sse(out) + tail + DONE

    @staticmethod
    def failed(error: APIError) -> str:
        """The stream's end when the answer cannot finish: the error, then `[DONE]`."""
        return f"data: {json.dumps(error.body())}\n\n" + DONE
