"""A request's prompt: its messages through the model's chat template, or its text, token ids or
fill-in-the-middle prompt (`fim.py`), as token ids, refused (400) where the model cannot read it or it
cannot fit the context window. Encoding a long prompt takes seconds: serving calls these off the event loop.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any

from ..prompting import encode_chat, encode_text, has_chat_template
from .errors import APIError
from .fim import FimLayout
from .openai.protocol import TEMPLATE_OWN, ChatRequest, CompletionRequest
from .tools import template_messages, template_tools

# Text longer than this many characters per token of the window is encoded by a head of that length
# first; when the head alone is past the window, the rest is never encoded (a 4 MB prompt takes seconds).
HEAD_CHARS_PER_TOKEN = 8
# Tokens a cut through a word can add to the head beyond what the whole text has at that point.
HEAD_CUT_SLACK = 64


def refuse_past_window(tokenizer: Any, text: str, window: int | None, param: str, what: str = "prompt") -> None:
    """Refuse text (the request's `what`) that cannot fit the context window, from a bounded head of it."""
    if window is None or len(text) <= HEAD_CHARS_PER_TOKEN * window:
        return
    head = HEAD_CHARS_PER_TOKEN * window
    tokens = len(tokenizer.encode(text[:head]))
    if tokens > window + HEAD_CUT_SLACK:
        raise APIError(400, f"this model's context window is {window} tokens, but the {what} is longer (its first "
                       f"{head} characters alone are {tokens} tokens)", "context_length_exceeded", param)


@functools.cache
def template_own() -> frozenset[str]:
    """What a request's `chat_template_kwargs` may not set: what the server hands the template itself, and
    every parameter of transformers' `apply_chat_template` (padding to a length, truncation, the
    tokenizer's own options...), which would reach past the template into the encoding."""
    from transformers import PreTrainedTokenizerBase

    parameters = inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters
    return TEMPLATE_OWN | {name for name, p in parameters.items() if p.kind is not p.VAR_KEYWORD and name != "self"}


def chat_prompt(tokenizer: Any, request: ChatRequest, window: int | None = None, images: bool = False) -> list[int]:
    """The messages through the chat template; with `images` (a model that reads them), an image part is
    the template's image item (its tokens widened later, `images.placed`), else it is refused."""
    if not has_chat_template(tokenizer):
        raise APIError(400, "this model has no chat template: use /v1/completions", "no_chat_template", "messages")
    if taken := sorted(template_own() & set(request.chat_template_kwargs or {})):
        raise APIError(400, f"{taken[0]} is the server's to set in the chat template", "invalid_value",
                       f"chat_template_kwargs.{taken[0]}")
    tools = template_tools(request, tokenizer)
    messages = template_messages(request, tokenizer, images)
    text = "".join(m.written() for m in request.messages) + (json.dumps(tools) if tools else "")
    refuse_past_window(tokenizer, text, window, "messages")
    try:
        return encode_chat(tokenizer, messages, tools=tools, template_kwargs=request.template_kwargs())
    except Exception as err:  # noqa: BLE001 - templates raise their own errors (e.g. roles out of order)
        raise APIError(400, f"the chat template refused these messages: {err}", "invalid_messages",
                       "messages") from None


def completion_prompt(tokenizer: Any, request: CompletionRequest, vocab: int, window: int | None = None,
                      fim: FimLayout | None = None) -> list[int]:
    if request.suffix is not None:
        return infill_prompt(tokenizer, request, window, fim)
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})", "invalid_value",
                           "prompt")
        return list(prompt)
    text = prompt if isinstance(prompt, str) else "".join(prompt)
    refuse_past_window(tokenizer, text, window, "prompt")
    return encode_text(tokenizer, text)


def infill_prompt(tokenizer: Any, request: CompletionRequest, window: int | None, fim: FimLayout | None) -> list[int]:
    """Fill in the middle: `prompt` before the gap and `suffix` after it, in the model's FIM layout."""
    if fim is None:
        raise APIError(400, "this model has no fill-in-the-middle tokens, so it cannot complete between a prompt "
                       "and a suffix", "unsupported_parameter", "suffix")
    prompt = request.prompt
    if prompt and isinstance(prompt, list) and isinstance(prompt[0], int):
        raise APIError(400, "with a suffix the prompt must be text, not token ids", "invalid_value", "prompt")
    text = prompt if isinstance(prompt, str) else "".join(prompt)
    refuse_past_window(tokenizer, request.suffix, window, "suffix", "suffix")
    refuse_past_window(tokenizer, text + request.suffix, window, "prompt")
    return fim.prompt(text, request.suffix)
