"""Anthropic's Messages API out: the answer as a `message` object, or as its stream of typed events.

The content is the answer's text and calls (`calls.py`) in order, as `text` and `tool_use` blocks,
after a `thinking` block of its reasoning (`reasoning.py`) where the request enabled thinking (none
where it did not: the template's switch was off too, `translate.thinks`). A thinking block's
signature is empty: nothing here can vouch for it, and a later turn's thinking is dropped anyway.
A stream sends `message_start` once a slot holds the prompt (its usage splits the prompt into input
and cache reads), then each block as `content_block_start`, its deltas (`text_delta`, or one
`input_json_delta` with a call's whole arguments: a call is handed out only once it parses) and
`content_block_stop` (a thinking block streams `thinking_delta`s, then its `signature_delta`), then `message_delta` (the stop reason and the usage, cumulative) and `message_stop`; `ping` keeps a quiet stream alive. Each
event is an SSE `event: <type>` line and its `data:`.

`speculative` and `timings` ride along as on every route (`reply.extras`): on the whole
message, and on the stream's `message_delta`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from ..calls import Call, Piece, Thought
from ..errors import APIError
from ..jobs import Admitted, Done
from ..reply import Said, extras, made_calls, token_sources, typed_event
from .errors import error_body

TOOL_USE_ID = "toolu_"  # Anthropic's calls' ids begin so
STOP_REASONS = {"eos": "end_turn", "stop": "stop_sequence", "length": "max_tokens"}


def stop_reason(said: Said, done: Done, window_bound: bool = False) -> str | None:
    """Anthropic's stop reason; `tool_use` for an answer that made calls and ended of its own accord
    (its end token or a stop sequence), not one max_tokens cut; `model_context_window_exceeded` for one
    the window (`serving.within_window`) or memory (`admission.py`) cut before the max_tokens asked."""
    reason = done.stats.finish_reason
    if reason == "length" and (window_bound or done.memory_bound):
        return "model_context_window_exceeded"
    return "tool_use" if made_calls(said, done) else STOP_REASONS.get(reason)


def block(piece: Piece) -> dict:
    """A piece of the answer as a whole message's content block."""
    if isinstance(piece, Call):
        return {"type": "tool_use", "id": piece.id, "name": piece.name, "input": json.loads(piece.arguments)}
    if isinstance(piece, Thought):  # no signature: nothing here can vouch for a thought, and none is checked
        return {"type": "thinking", "thinking": piece.text, "signature": ""}
    return {"type": "text", "text": piece}


PING = typed_event({"type": "ping"})
# A streamed block of text or thinking: how it opens, and its deltas' type and field.
OPENED = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""}}
DELTAS = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking")}


class Blocks:
    """A stream's content blocks: how many were started, and which kind the last is if it is still open,
    text or thinking (each streams into its block until another kind, a call or the end closes it)."""

    def __init__(self) -> None:
        self.started = 0
        self.open: str | None = None

    def events(self, piece: Piece) -> list[dict]:
        if isinstance(piece, Call):
            closed = self.close()  # the text before the call
            index = self.started
            self.started += 1
            start = {"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}}
            return closed + [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": piece.arguments}},
                {"type": "content_block_stop", "index": index}]
        kind, text = ("thinking", piece.text) if isinstance(piece, Thought) else ("text", piece)
        opened = []
        if self.open != kind:
            opened = self.close()
            self.open, self.started = kind, self.started + 1
            opened.append({"type": "content_block_start", "index": self.started - 1, "content_block": OPENED[kind]})
        delta, field = DELTAS[kind]
        return opened + [{"type": "content_block_delta", "index": self.started - 1,
                          "delta": {"type": delta, field: text}}]

    def close(self) -> list[dict]:
        """The open block's end, if one is open (a thinking block's signature first, empty as in `block`)."""
        if self.open is None:
            return []
        signed = [{"type": "content_block_delta", "index": self.started - 1,
                   "delta": {"type": "signature_delta", "signature": ""}}] if self.open == "thinking" else []
        self.open = None
        return signed + [{"type": "content_block_stop", "index": self.started - 1}]


@dataclass(frozen=True)
class MessageReply:
    """One Messages response: whole (`whole`) or streamed (`first`, `piece`s, `last`), as `routes.py`
    hands them the answer."""

    model: str
    input_tokens: int
    sources: bool  # report each token's source
    window_bound: bool = False  # max_tokens was cut to the window's room
    thinking: bool = False  # the request enabled thinking: the answer's reasoning is shown, as thinking blocks
    blocks: Blocks = field(default_factory=Blocks)  # a stream's, as it goes
    id: str = field(default_factory=lambda: "msg_" + uuid.uuid4().hex[:24])

    keepalive: ClassVar[str] = PING
    opens_admitted: ClassVar[bool] = True  # message_start carries the cache split, as Anthropic's does

    def _message(self, content: list[dict], stop: str | None, stop_sequence: str | None, usage: dict) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop, "stop_sequence": stop_sequence, "usage": usage}

    def _usage(self, cached: int, output: int, disk: int = 0) -> dict:
        """Anthropic's usage: the prompt is `input_tokens` plus the `cache_read_input_tokens` a kept cache held
        (nothing is written on request: the slots keep every prompt); `disk_read_input_tokens`, ours: how
        many of those the prompt cache on disk held."""
        return {"input_tokens": self.input_tokens - cached, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached, "disk_read_input_tokens": disk, "output_tokens": output}

    def _shown(self, said: Said) -> list[Piece]:
        """The answer's pieces, its reasoning only where the request enabled thinking."""
        return [p for p in said.pieces if self.thinking or not isinstance(p, Thought)]

    def whole(self, said: Said, done: Done) -> dict:
        stop = stop_reason(said, done, self.window_bound)
        message = self._message([block(p) for p in self._shown(said)], stop, done.stats.stop or None,
                                self._usage(done.cached_tokens, done.stats.generation_tokens, done.disk_tokens))
        return message | extras(done, self.sources, said.tokens)

    def first(self, admitted: Admitted | None = None) -> str:
        """`message_start`: the message with no content yet, and a ping, as Anthropic opens a stream. Sent
        once the job is `admitted`, its usage splits the prompt into input and cache reads as Anthropic's
        does (clients read the split there: the SDK keeps only known fields of `message_delta`'s usage)."""
        cached, disk = (0, 0) if admitted is None else (admitted.cached_tokens, admitted.disk_tokens)
        usage = self._usage(cached, 0, disk)
        return typed_event({"type": "message_start", "message": self._message([], None, None, usage)}) + PING

    def piece(self, said: Said) -> str:
        """Events for tokens of one or more rounds: the blocks and deltas they complete (maybe none yet),
        and their sources when asked, on the last event (a ping if there is none)."""
        out = [e for p in self._shown(said) for e in self.blocks.events(p)]
        if self.sources:
            out = out or [{"type": "ping"}]
            out[-1]["speculative"] = token_sources(said.tokens)
        return "".join(typed_event(e) for e in out)

    def last(self, said: Said, done: Done) -> str:
        """The tail's blocks, the open block's end, `message_delta` (why it stopped, the usage, cumulative as
        Anthropic's, what drafting did) and `message_stop`."""
        out = [e for p in self._shown(said) for e in self.blocks.events(p)] + self.blocks.close()
        delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason(said, done, self.window_bound),
                                                    "stop_sequence": done.stats.stop or None},
                 "usage": self._usage(done.cached_tokens, done.stats.generation_tokens, done.disk_tokens)}
        return "".join(typed_event(e) for e in out) + typed_event(delta | extras(done, self.sources)) + \
            typed_event({"type": "message_stop"})

    @staticmethod
    def failed(error: APIError) -> str:
        """The stream's end when the answer cannot finish: Anthropic's `error` event."""
        return f"event: error\ndata: {json.dumps(error_body(error.status, error.message))}\n\n"
