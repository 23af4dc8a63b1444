"""Prompts: JSONL prompt files, and text or messages as the target's token ids.

The one place a prompt becomes token ids, for every front end (generate,
serve, bench, train, the chat app), so the bench measures and train trains on
exactly the ids a user's request gets. Messages go through the tokenizer's
chat template as mlx-lm's server sends them, `apply_chat_template(messages,
add_generation_prompt=True)`, which tokenizes inside the template call.
Rendering to text and encoding that again is not always the same: a tokenizer
whose own `encode` rewrites text (mlx-lm's NewlineTokenizer turns "\\n" into
"<n>") gives other ids for the template's text.

A leaf: it imports nothing of specmlx but errors, so train need not import
the bench to read or encode prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .errors import SpecmlxError

# A chat: {"role": ..., "content": ...} dicts, oldest first (an assistant's may carry `tool_calls`).
Messages = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class PromptRow:
    """One line of a prompts file."""

    id: str
    kind: str  # "code", "edit", "prose", ...: free text, for grouping figures
    prompt: str
    prediction: str = ""  # what the answer is expected to be, mostly (an edited file): optional
    schema: str = ""  # a JSON schema the answer must match, as JSON text: optional
    tools: tuple[Mapping[str, Any], ...] = ()  # OpenAI's function tools, rendered by the chat template: optional


@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt ready to decode: its row's id and kind, and its token ids."""

    id: str
    kind: str
    tokens: tuple[int, ...]
    prediction: tuple[int, ...] = ()  # the row's prediction as the model would write it
    schema: str = ""  # the row's JSON schema, as JSON text


def packaged_prompts_path() -> Path:
    """The project's own prompt set (code, edits that copy their input, prose), shipped as
    package data in a checkout and a wheel alike: the bench's default, and what train never trains on."""
    return Path(__file__).resolve().parent / "bench" / "prompts.jsonl"


# -- files --------------------------------------------------------------------


def read_prompts(path: Path, limit: int | None = None) -> list[PromptRow]:
    """The rows of a JSONL prompts file (the first `limit` of them): `{"prompt": ...}`
    objects, `id` (default "pLINE") and `kind` optional, blank lines skipped.
    Bad input is a SpecmlxError naming the file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SpecmlxError(f"{path}: no such prompts file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecmlxError(f"{path}: cannot read prompts ({err})") from None
    rows: list[PromptRow] = []
    first_seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = _parse_row(line, f"{path}:{number}", f"p{number}")
        if row.id in first_seen:
            raise SpecmlxError(f"{path}:{number}: prompt id {row.id!r} is already used on line {first_seen[row.id]}")
        first_seen[row.id] = number
        rows.append(row)
    if not rows:
        raise SpecmlxError(f"{path}: no prompts in this file")
    return rows[:limit] if limit is not None else rows


def _parse_row(line: str, where: str, default_id: str) -> PromptRow:
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecmlxError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise SpecmlxError(f"{where}: expected a JSON object with id, kind and prompt")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise SpecmlxError(f"{where}: missing or empty \"prompt\" string")
    prediction = data.get("prediction", "")
    if not isinstance(prediction, str):
        raise SpecmlxError(f"{where}: \"prediction\" must be a string")
    schema = data.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise SpecmlxError(f"{where}: \"schema\" must be a JSON object (a JSON schema)")
    row_id = str(data.get("id", default_id))
    return PromptRow(id=row_id, kind=str(data.get("kind", "")), prompt=prompt, prediction=prediction,
                     schema=json.dumps(schema) if schema is not None else "",
                     tools=_parse_tools(data.get("tools"), f"{where}: prompt {row_id}"))


def _parse_tools(tools: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    """A row's `tools`: absent, or a non-empty list of OpenAI function tools
    (`{"type": "function", "function": {"name": ..., "parameters": {...}}}`)."""
    if tools is None:
        return ()
    if not isinstance(tools, list) or not tools or not all(_is_function_tool(t) for t in tools):
        raise SpecmlxError(f"{where}: \"tools\" must be a non-empty list of function tools "
                           "({\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}})")
    return tuple(tools)


def _is_function_tool(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return (isinstance(function, dict) and tool.get("type") == "function"
            and isinstance(function.get("name"), str) and bool(function["name"])
            and isinstance(function.get("parameters", {}), dict))


def write_prompts(rows: Sequence[PromptRow], path: Path) -> None:
    """`rows` as a prompts file `read_prompts` reads back the same, written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".partial")
    temp.write_text("".join(json.dumps({"id": r.id, "kind": r.kind, "prompt": r.prompt}
                                       | ({"prediction": r.prediction} if r.prediction else {})
                                       | ({"schema": json.loads(r.schema)} if r.schema else {})
                                       | ({"tools": [dict(t) for t in r.tools]} if r.tools else {})) + "\n"
                            for r in rows), encoding="utf-8")
    temp.replace(path)


# -- token ids ----------------------------------------------------------------


def has_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` can encode messages: mlx-lm's TokenizerWrapper says so itself
    (its own renderers count); a bare Hugging Face tokenizer, if it has a template."""
    flag = getattr(tokenizer, "has_chat_template", None)
    return bool(getattr(tokenizer, "chat_template", None) if flag is None else flag)


def encode_chat(tokenizer: Any, messages: Messages, add_generation_prompt: bool = True,
                tools: Sequence[Mapping[str, Any]] | None = None,
                template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """`messages` in the tokenizer's chat template, as token ids; with the header
    the assistant's answer follows (`add_generation_prompt`), or ending with the last message;
    `tools` (OpenAI's function tools) rendered as the template renders them; `template_kwargs`, what
    else the template reads (`enable_thinking`...).
    A template's refusal (roles out of order, say) propagates: callers word it for their users."""
    extra = dict(template_kwargs or {}) | ({"tools": [dict(t) for t in tools]} if tools else {})
    ids = tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
                                        **extra)
    if isinstance(ids, Mapping):  # a bare tokenizer's BatchEncoding (transformers 5); mlx-lm's wrapper gives the ids
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text, with the special tokens the tokenizer adds to a text (a BOS, for many)."""
    return [int(t) for t in tokenizer.encode(text)]


def plain_encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    """Text as text, nothing added (no BOS), and special tokens written in it kept as text
    (transformers' `split_special_tokens`): a file that holds `<|im_end|>` is not read as its
    end token. On a copy of the fast backend, set once: switching the shared one per call would
    race the server's other encodes, which run on other threads. Building it takes a moment
    (the whole vocabulary): make one per tokenizer and keep it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a tokenizer without a fast backend splits no special tokens it cannot see
        return lambda text: [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(backend.to_str())
    plain.encode_special_tokens = True
    # The batch call lets go of Python's lock while it works (a single `encode` holds it, stalling every thread).
    return lambda text: plain.encode_batch([text], add_special_tokens=False)[0].ids


def encode_output(tokenizer: Any, text: str) -> list[int]:
    """Text as the model would write it after a prompt (`plain_encoder`, made for this one text)."""
    return plain_encoder(tokenizer)(text)


def encode_prompts(rows: Sequence[PromptRow], tokenizer: Any, chat: bool) -> list[EncodedPrompt]:
    """Each row's prompt as a user turn in the chat template, with the row's tools rendered as the
    server's chat route renders a request's (`encode_chat`), or as plain text for a tokenizer
    without one (`chat` False; a row with tools is refused then)."""
    encoded = []
    plain = plain_encoder(tokenizer) if any(row.prediction for row in rows) else None
    for row in rows:
        if row.tools and not chat:
            raise SpecmlxError(f"prompt {row.id}: has tools, but the tokenizer has no chat template to render them")
        if chat:
            ids = encode_chat(tokenizer, [{"role": "user", "content": row.prompt}], tools=row.tools or None)
        else:
            ids = encode_text(tokenizer, row.prompt)
        if not ids:
            raise SpecmlxError(f"prompt {row.id}: encodes to no tokens")
        prediction = tuple(plain(row.prediction)) if row.prediction else ()
        encoded.append(EncodedPrompt(row.id, row.kind, tuple(ids), prediction, row.schema))
    return encoded
