"""A streamed Anthropic Messages request, timed from outside: what the model answered, and what the
usage says of its prompt (tokens from memory, from disk, prefilled).

The request asks for each round's tokens (`speculative.sources`), so the first token's time is
known even while the answer writes a tool call (whose text is held back until it parses), and
answers compare token for token. No MLX here: the replay's process only sends and times.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Iterable

from ...errors import SpecmlxError
from .session import Request

HEADERS = {"anthropic-version": "2023-06-01"}
EVENTS_PER_TOKEN = 4  # a stream's events are bounded by its tokens: a round's piece and its blocks


@dataclass(frozen=True)
class Answered:
    """One turn's answer and its figures; times in seconds from the request's sending."""

    step: str
    thread: str
    wall_s: float  # to the stream's end
    first_s: float | None  # to the first token (None: no token came)
    last_s: float | None  # to the last token
    first_tokens: int  # tokens the first event handed out (a first round may hand out several)
    tokens: tuple[int, ...]
    prompt_tokens: int
    cached_tokens: int  # from memory or disk (`cache_read_input_tokens`)
    disk_tokens: int  # of those, from disk (`disk_read_input_tokens`; 0 from a server without it)
    rounds: int
    text: str

    @property
    def memory_tokens(self) -> int:
        return self.cached_tokens - self.disk_tokens

    @property
    def prefilled(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def decoded(self) -> int:
        """Tokens after the first event's: what decoding's rate counts."""
        return max(0, len(self.tokens) - self.first_tokens)

    @property
    def decode_s(self) -> float:
        return (self.last_s or 0.0) - (self.first_s or 0.0)

    @property
    def tokens_per_s(self) -> float | None:
        """Decoding's rate: the tokens after the first event over the time after it."""
        return self.decoded / self.decode_s if self.decoded and self.decode_s > 0 else None

    @property
    def tokens_per_round(self) -> float | None:
        return len(self.tokens) / self.rounds if self.rounds else None


def read_stream(lines: Iterable[tuple[float, str]], request: Request, deadline_s: float) -> Answered:
    """An answer from its SSE lines, each with its time since sending; past `deadline_s`, or past the
    events its max_tokens allows (keep-alive pings aside: the deadline bounds them), it is an error."""
    tokens: list[int] = []
    times: list[float] = []
    firsts, text, end, count = 0, [], None, 0
    limit = EVENTS_PER_TOKEN * request.body["max_tokens"] + 64
    for at, line in lines:
        if at > deadline_s or count > limit:
            raise SpecmlxError(f"{request.step}: the answer took more than {deadline_s:.0f} s or {limit} events")
        if not line.startswith("data: "):
            continue
        try:
            event = json.loads(line[len("data: "):])
        except ValueError:
            raise SpecmlxError(f"{request.step}: a stream line that is not JSON: {line[:120]}") from None
        got = event.get("speculative", {}).get("tokens")
        count += event.get("type") != "ping" or bool(got)
        if event.get("type") == "error":
            raise SpecmlxError(f"{request.step}: the server's error: {event.get('error', {}).get('message')}")
        if got:
            firsts = firsts or len(got)
            tokens += got
            times.append(at)
        text.append(said(event))
        if event.get("type") == "message_delta":
            end = (at, event)
    if end is None:
        raise SpecmlxError(f"{request.step}: the stream ended without its message_delta")
    return answered(request, end, tokens, times, firsts, "".join(text))


def said(event: dict) -> str:
    """What an event adds to the answer's text: text, or a tool call's name and arguments."""
    if event.get("type") == "content_block_start" and event["content_block"].get("type") == "tool_use":
        return f"[{event['content_block']['name']}] "
    delta = event.get("delta", {}) if event.get("type") == "content_block_delta" else {}
    return delta.get("text") or delta.get("partial_json") or ""


def answered(request: Request, end: tuple[float, dict], tokens: list[int], times: list[float], firsts: int,
             text: str) -> Answered:
    at, delta = end
    usage = delta.get("usage", {})
    cached = usage.get("cache_read_input_tokens", 0)
    return Answered(request.step, request.thread, at, times[0] if times else None, times[-1] if times else None,
                    firsts, tuple(tokens), usage.get("input_tokens", 0) + cached, cached,
                    usage.get("disk_read_input_tokens", 0), delta.get("speculative", {}).get("rounds", 0), text)


def send(url: str, request: Request, timeout_s: float) -> Answered:
    """POST the request to `url`'s /v1/messages and read its stream; any failure is one line."""
    import httpx

    began = time.perf_counter()
    try:
        with httpx.stream("POST", f"{url}/v1/messages", json=request.body, headers=HEADERS,
                          timeout=httpx.Timeout(timeout_s, connect=10)) as reply:
            if reply.status_code != 200:
                reply.read()
                raise SpecmlxError(f"{request.step}: HTTP {reply.status_code}: {reply.text[:300]}")
            timed = ((time.perf_counter() - began, line) for line in reply.iter_lines())
            return read_stream(timed, request, timeout_s)
    except httpx.HTTPError as err:
        raise SpecmlxError(f"{request.step}: {type(err).__name__}: {err}") from None
