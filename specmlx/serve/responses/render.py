"""OpenAI's Responses API out: the answer as a `response` object, or as its stream of typed events.

The output is the answer's text and calls (`calls.py`) in order: text as a `message` item (one
`output_text` part), each call as a `function_call` item (its `call_id`, name and arguments as
JSON text), after a `reasoning` item of a thinking model's reasoning (`reasoning.py`: one
`reasoning_text` part, no summary; streamed as `response.reasoning_text.delta`s and `.done`). An answer `max_output_tokens` cut is `incomplete`, and so is its last message.

A stream sends `response.created` and `response.in_progress` (the response with no output yet),
then each item as `response.output_item.added`, its content (a message's
`response.content_part.added`, `response.output_text.delta`s, `.done` and
`response.content_part.done`; a call's whole arguments in one
`response.function_call_arguments.delta`, then `.done`: a call is handed out only once it
parses) and `response.output_item.done`, then `response.completed` (or `response.incomplete`)
with the whole response. Each event is an SSE `event: <type>` line and its `data:`, numbered by
`sequence_number`; an SSE comment keeps a quiet stream alive. A stream that cannot finish ends
with an `error` event and `response.failed`.

`speculative` and `timings` ride along as on every route (`reply.extras`): on the whole
response (the stream's last event's too). With `speculative.sources`, each stream piece's
tokens and their sources ride on its last event, or on the next event while a call is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar, Sequence

from ...events import TokenEvent
from ..calls import Call, Piece, Thought, new_id
from ..errors import APIError
from ..jobs import Admitted, Done
from ..reply import KEEPALIVE, Said, extras, token_sources, typed_event

# OpenAI's ids begin so: a response's, a message item's, a function_call item's (its call_id is `call_...`).
RESPONSE_ID, MESSAGE_ID, FUNCTION_CALL_ID, REASONING_ID = "resp_", "msg_", "fc_", "rs_"


def status_of(done: Done) -> str:
    return "incomplete" if done.stats.finish_reason == "length" else "completed"


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict:
    """A message item: its text as one part (None: not begun, no part yet)."""
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [] if text is None else [text_part(text)]}


def reasoning_part(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    """A reasoning item: its text as one `reasoning_text` part (None: not begun, no part yet), no summary."""
    return {"type": "reasoning", "id": item_id, "summary": [], "status": status,
            "content": [] if text is None else [reasoning_part(text)]}


# Each kind of streamed item: how it is made, its part, and its text's delta and done events.
STREAMED = {"message": (MESSAGE_ID, message_item, text_part, "response.output_text"),
            "reasoning": (REASONING_ID, reasoning_item, reasoning_part, "response.reasoning_text")}


def call_item(call: Call) -> dict:
    return {"type": "function_call", "id": new_id(FUNCTION_CALL_ID), "call_id": call.id, "name": call.name,
            "arguments": call.arguments, "status": "completed"}


def output_of(pieces: Sequence[Piece], status: str) -> list[dict]:
    """A whole answer's pieces as output items; only the last can be incomplete, as a stream closes them."""
    def item(piece: Piece, last: bool) -> dict:
        done = status if last else "completed"
        if isinstance(piece, Call):
            return call_item(piece)
        if isinstance(piece, Thought):
            return reasoning_item(new_id(REASONING_ID), piece.text, done)
        return message_item(new_id(MESSAGE_ID), piece, done)
    return [item(p, i == len(pieces) - 1) for i, p in enumerate(pieces)]


class Output:
    """A stream's output as it goes: the items done, the message or reasoning open at the end (its text
    streams into it until another kind, a call or the end closes it), the next event's number, and the
    tokens whose sources no event carried yet."""

    def __init__(self) -> None:
        self.done: list[dict] = []
        self.open: str | None = None  # the open item's id
        self.kind = "message"  # the open item's kind (`STREAMED`)
        self.text = ""  # the open item's text so far
        self.sequence = 0
        self.unsent: list[TokenEvent] = []

    def events(self, piece: Piece) -> list[dict]:
        if isinstance(piece, Call):
            closed = self.close("completed")  # the text before the call
            item, at = call_item(piece), len(self.done)
            self.done.append(item)
            where = {"item_id": item["id"], "output_index": at}
            return closed + [
                {"type": "response.output_item.added", "output_index": at,
                 "item": item | {"arguments": "", "status": "in_progress"}},
                {"type": "response.function_call_arguments.delta", **where, "delta": piece.arguments},
                {"type": "response.function_call_arguments.done", **where, "arguments": piece.arguments},
                {"type": "response.output_item.done", "output_index": at, "item": item}]
        kind, text = ("reasoning", piece.text) if isinstance(piece, Thought) else ("message", piece)
        prefix, item, part, events = STREAMED[kind]
        opened = []
        if self.open is None or self.kind != kind:
            opened = self.close("completed")
            self.open, self.kind, self.text = new_id(prefix), kind, ""
            opened += [{"type": "response.output_item.added", "output_index": len(self.done),
                        "item": item(self.open, None, "in_progress")},
                       {"type": "response.content_part.added", **self._where(), "part": part("")}]
        self.text += text
        logprobs = {"logprobs": []} if kind == "message" else {}
        return opened + [{"type": events + ".delta", **self._where(), "delta": text} | logprobs]

    def _where(self) -> dict:
        return {"item_id": self.open, "output_index": len(self.done), "content_index": 0}

    def close(self, status: str) -> list[dict]:
        """The open item's end, if one is open."""
        if self.open is None:
            return []
        _, made, part, events = STREAMED[self.kind]
        where, item = self._where(), made(self.open, self.text, status)
        logprobs = {"logprobs": []} if self.kind == "message" else {}
        self.done.append(item)
        self.open = None
        return [{"type": events + ".done", **where, "text": self.text} | logprobs,
                {"type": "response.content_part.done", **where, "part": part(self.text)},
                {"type": "response.output_item.done", "output_index": where["output_index"], "item": item}]

    def send(self, events: list[dict]) -> str:
        """The events as SSE, numbered in the order they go out."""
        out = []
        for e in events:
            e["sequence_number"], self.sequence = self.sequence, self.sequence + 1
            out.append(typed_event(e))
        return "".join(out)


@dataclass(frozen=True)
class ResponseReply:
    """One Responses answer: whole (`whole`) or streamed (`first`, `piece`s, `last`), as `routes.py` hands
    them the answer. `echo`: the request's settings, which the response object repeats."""

    model: str
    input_tokens: int
    sources: bool  # report each token's source
    echo: dict  # `translate.echoed`
    output: Output = field(default_factory=Output)  # a stream's, as it goes
    id: str = field(default_factory=lambda: new_id(RESPONSE_ID))
    created_at: int = field(default_factory=lambda: int(time.time()))

    keepalive: ClassVar[str] = KEEPALIVE
    opens_admitted: ClassVar[bool] = False

    def _response(self, status: str, output: list[dict], done: Done | None, thought: int = 0) -> dict:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.id, "object": "response", "created_at": self.created_at, "status": status, "error": None,
                "incomplete_details": incomplete, "model": self.model, "output": output,
                "usage": None if done is None else self.usage(done, thought)} | self.echo

    def usage(self, done: Done, thought: int = 0) -> dict:
        """The Responses API's usage; `thought`: the answer's reasoning tokens."""
        output = done.stats.generation_tokens
        return {"input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": done.cached_tokens, "cache_write_tokens": 0,
                                         "disk_tokens": done.disk_tokens},  # ours: of the cached, from disk
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": thought},
                "total_tokens": self.input_tokens + output}

    def whole(self, said: Said, done: Done) -> dict:
        status = status_of(done)
        return self._response(status, output_of(said.pieces, status), done, said.thought) | extras(
            done, self.sources, said.tokens)

    def first(self, admitted: Admitted | None = None) -> str:
        """`response.created` and `response.in_progress`: the response with no output yet."""
        opening = self._response("in_progress", [], None)
        return self.output.send([{"type": "response.created", "response": opening},
                                 {"type": "response.in_progress", "response": opening}])

    def piece(self, said: Said) -> str:
        """Events for tokens of one or more rounds: the items and deltas they complete (maybe none yet)."""
        out = [e for p in said.pieces for e in self.output.events(p)]
        return self.output.send(self._sourced(out, said.tokens))

    def last(self, said: Said, done: Done) -> str:
        """The tail's items, the open message's end, and `response.completed` (or `.incomplete`): the whole
        response, with what drafting did."""
        status = status_of(done)
        out = [e for p in said.pieces for e in self.output.events(p)] + self.output.close(status)
        whole = self._response(status, self.output.done, done, said.thought) | extras(done, self.sources)
        return self.output.send(self._sourced(out + [{"type": f"response.{status}", "response": whole}], ()))

    def _sourced(self, out: list[dict], events: Sequence[TokenEvent]) -> list[dict]:
        """`out` with the sources of the tokens no event carried yet on its last event (when asked)."""
        if self.sources:
            self.output.unsent += events
            if out and self.output.unsent:
                out[-1]["speculative"] = token_sources(self.output.unsent)
                self.output.unsent = []
        return out

    def failed(self, error: APIError) -> str:
        """The stream's end when the answer cannot finish: OpenAI's `error` event, then `response.failed`."""
        # The response's error takes one of OpenAI's codes; the error event carries ours.
        code = "rate_limit_exceeded" if error.status == 429 else "server_error"
        failed = self._response("failed", self.output.done, None) | {"error": {"code": code, "message": error.message}}
        return self.output.send([{"type": "error", "code": error.code, "message": error.message,
                                  "param": error.param}, {"type": "response.failed", "response": failed}])
