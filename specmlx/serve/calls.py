"""Calls in an answer: the model's text split into what it says and the tool calls it makes.

The answer arrives as text, a round's tokens at a time. A call lies between the markers of the
model's syntax (`<tool_call>` and `</tool_call>` for Qwen2.5, from mlx-lm's tokenizer wrapper),
and what lies between them is read by mlx-lm's parser for that syntax (`tokenizer.tool_parser`),
as mlx-lm's server reads it. Text that could be the start of a marker is held back until it is
known not to be one, so no part of a call is ever streamed as text.

A call is handed out whole when its end marker arrives: only then is it known to parse. One that
does not parse, or that the answer's own end (its end token, a stop string) cuts short, is handed
out as the text it was, with a line in the log: a model's slip is its answer's text, never a 500.
One that max_tokens cuts short is dropped (with a line in the log): the answer is a length stop,
with no call and none of the call's syntax. White space just before a call, or
after the last one at the answer's end, is the syntax's (Qwen's template writes a new line between
calls), not text.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from ..log import note


@dataclass(frozen=True)
class Call:
    """A parsed call: its place among the answer's calls, its id, and its function's name and arguments
    (JSON text, OpenAI's form)."""

    index: int
    id: str
    name: str
    arguments: str

    def whole(self) -> dict:
        """As a whole answer's `message.tool_calls` holds it."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def deltas(self) -> list[dict]:
        """As a stream sends it: the call's id and name, then its arguments."""
        return [{"index": self.index, "id": self.id, "type": "function",
                 "function": {"name": self.name, "arguments": ""}},
                {"index": self.index, "function": {"arguments": self.arguments}}]


@dataclass(frozen=True)
class Thought:
    """A stretch of the answer's reasoning (`reasoning.py`): shown apart from its text, never read for calls."""

    text: str


Piece = Union[str, Call, Thought]


CALL_ID = "call_"  # OpenAI's calls' ids begin so; Anthropic's `toolu_`


def new_id(prefix: str = CALL_ID) -> str:
    return prefix + uuid.uuid4().hex[:24]


class CallReader:
    """One answer's calls, read as its text arrives (`feed`, then `finish` at its end). `parse` is
    mlx-lm's parser for the syntax (the text between the markers, and the request's tools). A call the
    parser gives no id gets a new one beginning with `id_prefix`."""

    def __init__(self, start: str, end: str, parse: Callable[[str, Any], Any], tools: Any = None,
                 id_prefix: str = CALL_ID) -> None:
        self.start, self.end, self.parse, self.tools, self.id_prefix = start, end, parse, tools, id_prefix
        self.made = 0  # calls handed out
        self._held = ""  # text not yet handed out: a possible marker's start, or a call's text so far
        self._inside = False  # past a start marker
        self._after_call = False  # the last piece handed out was a call
        self._gap = ""  # the white space before the current call: text again if the call is not one

    def feed(self, text: str) -> list[Piece]:
        """The pieces `text` completes: text to show, and calls, in order."""
        self._held += text
        pieces: list[Piece] = []
        while True:
            if self._inside:
                at = self._held.find(self.end)
                if at < 0:
                    return merged(pieces)
                pieces += self._read(self._held[:at])
                self._held, self._inside = self._held[at + len(self.end):], False
                continue
            at = self._held.find(self.start)
            if at >= 0:  # the white space before a call is the syntax's (a new line between calls)
                before = self._held[:at].rstrip()
                self._gap = self._held[len(before):at]
                pieces.append(self._text(before))
                self._held, self._inside = self._held[at + len(self.start):], True
                continue
            # Held back: what may begin a marker, and white space, which a call may follow.
            cut = len(self._held) - partial(self._held, self.start)
            cut = len(self._held[:cut].rstrip())
            pieces.append(self._text(self._held[:cut]))
            self._held = self._held[cut:]
            return merged(pieces)

    def finish(self, length: bool = False) -> list[Piece]:
        """What is left at the answer's end: a call the end cut short as the text it was (dropped if `length`,
        max_tokens, cut it: it was being written as a call, and is neither a call nor text), and what was held
        back as text (but white space after the last call, the syntax's)."""
        held, self._held = self._held, ""
        if self._inside and length:
            note(f"a tool call was cut short by max_tokens ({len(held)} characters): dropped")
            held = ""
        elif self._inside:
            note(f"a tool call was cut short by the answer's end ({len(held)} characters): returned as text")
            held = self._gap + self.start + held
        elif self._after_call and not held.strip():
            held = ""
        self._inside = False
        return merged([held])

    def _text(self, text: str) -> str:
        self._after_call = self._after_call and not text
        return text

    def _read(self, body: str) -> list[Piece]:
        """A call's text as calls (a parser may read several from one), or as text if it does not parse."""
        try:
            parsed = self.parse(body, self.tools)
            items = parsed if isinstance(parsed, list) else [parsed]
            found = [self._call(item, self.made + k, self.id_prefix) for k, item in enumerate(items)]
        except Exception as err:  # noqa: BLE001 - parsers raise what their syntax meets; a slip is text
            note(f"a tool call did not parse ({type(err).__name__}: {err}): returned as text")
            return [self._text(self._gap + self.start + body + self.end)]
        self.made += len(found)
        self._after_call = True
        return found

    @staticmethod
    def _call(parsed: Any, index: int, id_prefix: str) -> Call:
        if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
            raise ValueError("no function name")
        arguments = parsed.get("arguments", {})
        if isinstance(arguments, str):
            json.loads(arguments)  # JSON text already: it must parse
        elif isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        else:
            raise ValueError(f"arguments are a {type(arguments).__name__}, not an object")
        given = parsed.get("id")
        return Call(index, given if isinstance(given, str) and given else new_id(id_prefix), parsed["name"], arguments)


def partial(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (held back: the marker may follow)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def merged(pieces: Sequence[Piece]) -> list[Piece]:
    """Adjacent texts joined, and adjacent thoughts; empty ones dropped."""
    out: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and out and isinstance(out[-1], str):
            out[-1] += piece
        elif isinstance(piece, Thought) and out and isinstance(out[-1], Thought):
            out[-1] = Thought(out[-1].text + piece.text)
        elif piece != "":
            out.append(piece)
    return out


def call_reader(tokenizer: Any, tools: Any = None, id_prefix: str = CALL_ID) -> CallReader:
    """A reader of the model's syntax (its tokenizer wrapper's markers and parser)."""
    return CallReader(tokenizer.tool_call_start, tokenizer.tool_call_end, tokenizer.tool_parser, tools, id_prefix)
