"""The replay bench's agent session (`session.json`) and the requests a replay of it sends.

The session is one coding agent's, in the shape Claude Code sends to Anthropic's `/v1/messages`:
a system prompt, tool schemas, and steps. A `turn` step belongs to a thread (`main`, or a
subagent's, which starts a conversation of its own with the same system prompt and tools) and
holds the user's message (text or tool results) and the assistant's recorded answer; a
`restart` step marks where the server is stopped and started again.

A turn's request is its thread's recorded history so far plus the turn's user message, so every
configuration sends the same prompts: what the served model answers is measured and compared,
never fed back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ...errors import SpecmlxError

SESSION_PATH = Path(__file__).resolve().parent / "session.json"
MAIN = "main"  # the parent agent's thread; every other thread is a subagent's
TURN, RESTART = "turn", "restart"


@dataclass(frozen=True)
class Request:
    """One turn's request: the Messages body sent for step `step` of thread `thread`."""

    step: str
    thread: str
    body: dict


@dataclass(frozen=True)
class Restart:
    """Stop the server here and start it again on the same cache directory."""


Plan = list[Union[Request, Restart]]


def read_session(path: Path = SESSION_PATH) -> dict:
    """The session, its shape checked: a bad file is one line, not a KeyError mid-replay."""
    try:
        session = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SpecmlxError(f"cannot read the session {path}: {err}") from None
    missing = [key for key in ("model", "system", "tools", "steps") if key not in session]
    if missing:
        raise SpecmlxError(f"{path}: the session has no {', '.join(missing)}")
    for i, step in enumerate(session["steps"]):
        check_step(step, f"{path}: steps[{i}]")
    return session


def check_step(step: dict, where: str) -> None:
    kind = step.get("kind")
    if kind == RESTART:
        return
    if kind != TURN:
        raise SpecmlxError(f"{where}: kind is {kind!r}, not {TURN!r} or {RESTART!r}")
    for key, role in (("user", "user"), ("assistant", "assistant")):
        if step.get(key, {}).get("role") != role or not step[key].get("content"):
            raise SpecmlxError(f"{where}: a turn needs its {key} message (role {role!r}, with content)")
    if not step.get("id") or not step.get("thread"):
        raise SpecmlxError(f"{where}: a turn needs an id and a thread")


def body(session: dict, messages: list[dict], max_tokens: int) -> dict:
    """A streamed greedy Messages request over the session's system prompt and tools, as Claude Code sends
    it (the system prompt a text block marked for caching); each round's tokens come back (`sources`)."""
    return {"model": session["model"], "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "system": [{"type": "text", "text": session["system"], "cache_control": {"type": "ephemeral"}}],
            "tools": session["tools"], "messages": messages, "speculative": {"sources": True}}


def plan(session: dict, max_tokens: int, turns: int | None = None) -> Plan:
    """The replay: each turn's request, in order, and the restarts between them; `turns`: the first
    that many requests only (a restart is kept only where a request follows it)."""
    history: dict[str, list[dict]] = {}
    out: Plan = []
    for step in session["steps"]:
        if turns is not None and sum(isinstance(p, Request) for p in out) >= turns:
            break
        if step["kind"] == RESTART:
            out.append(Restart())
            continue
        past = history.setdefault(step["thread"], [])
        out.append(Request(step["id"], step["thread"], body(session, [*past, step["user"]], max_tokens)))
        past += [step["user"], step["assistant"]]
    while out and isinstance(out[-1], Restart):
        out.pop()
    return out
