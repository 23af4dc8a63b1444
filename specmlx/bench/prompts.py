"""Benchmark prompts: JSONL rows of `id`, `kind` and `prompt`, chat-wrapped.

Read before any model loads, so a bad file costs a second, not a minute.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecmlxError


def default_prompts_path() -> Path:
    """The project's own prompt set, shipped with the package: code, edits that copy their input, prose."""
    return Path(__file__).resolve().parent / "prompts.jsonl"


@dataclass(frozen=True)
class PromptRow:
    """One line of the prompts file."""

    id: str
    kind: str
    prompt: str


@dataclass(frozen=True)
class BenchPrompt:
    """A prompt ready to decode: its row and its token ids."""

    id: str
    kind: str
    tokens: tuple[int, ...]


def read_prompts(path: Path, limit: int | None = None) -> list[PromptRow]:
    """The rows of a JSONL prompts file (the first `limit` of them)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SpecmlxError(f"{path}: no such prompts file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecmlxError(f"{path}: cannot read prompts ({err})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            rows.append(_parse_row(line, f"{path}:{number}"))
    if not rows:
        raise SpecmlxError(f"{path}: no prompts in this file")
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise SpecmlxError(f"{path}: prompt id {duplicate!r} appears more than once")
    return rows[:limit] if limit is not None else rows


def _parse_row(line: str, where: str) -> PromptRow:
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecmlxError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise SpecmlxError(f"{where}: expected a JSON object with id, kind and prompt")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise SpecmlxError(f"{where}: missing or empty \"prompt\" string")
    return PromptRow(id=str(data.get("id", where)), kind=str(data.get("kind", "")), prompt=prompt)


def encode_prompts(rows: list[PromptRow], tokenizer: Any, chat: bool) -> list[BenchPrompt]:
    """Token ids of each prompt: a user turn in the chat template (with the
    generation prompt), or the plain text for a tokenizer without one."""
    encoded = []
    for row in rows:
        if chat:
            # Render, then encode: what tokenize=True does inside, without its
            # return type (a list or a BatchEncoding) varying across versions.
            messages = [{"role": "user", "content": row.prompt}]
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
        else:
            ids = tokenizer.encode(row.prompt)
        tokens = tuple(int(t) for t in ids)
        if not tokens:
            raise SpecmlxError(f"prompt {row.id}: encodes to no tokens")
        encoded.append(BenchPrompt(row.id, row.kind, tokens))
    return encoded
