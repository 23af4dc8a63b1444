"""From a validated request to a `Job`: prompt token ids, generation settings, drafter.

Everything a request can get wrong is refused here, before it waits in the
queue: an unknown model or drafter, a value the engine cannot honour, a
prompt and `max_tokens` past the context window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Hashable

from ..drafters import NGRAM, NONE
from ..engine import GenerationConfig
from ..errors import SpecmlxError
from ..policy import DraftPolicy
from ..sampling import SamplingParams
from .errors import APIError
from .protocol import ChatRequest, CompletionRequest, Job, Sampling

DEFAULT = "default"  # the `speculative.drafter` that means the server's own choice


@dataclass(frozen=True)
class Defaults:
    """What a request leaves unset: from the server's command line."""

    model: str  # the served model's id
    drafter: str  # a loaded drafter's name
    policy: DraftPolicy = DraftPolicy()
    sampling: SamplingParams = SamplingParams()
    max_tokens: int = 512


# Text longer than this many characters per token of the window is encoded by a head of that length
# first; when the head alone is past the window, the rest is never encoded (a 4 MB prompt takes seconds).
HEAD_CHARS_PER_TOKEN = 8
# Tokens a cut through a word can add to the head beyond what the whole text has at that point.
HEAD_CUT_SLACK = 64


def refuse_past_window(tokenizer: Any, text: str, window: int | None, param: str) -> None:
    """Refuse text that cannot fit the context window, from a bounded head of it."""
    if window is None or len(text) <= HEAD_CHARS_PER_TOKEN * window:
        return
    head = HEAD_CHARS_PER_TOKEN * window
    tokens = len(tokenizer.encode(text[:head]))
    if tokens > window + HEAD_CUT_SLACK:
        raise APIError(400, f"this model's context window is {window} tokens, but the prompt is longer (its first "
                       f"{head} characters alone are {tokens} tokens)", "context_length_exceeded", param)


def chat_prompt(tokenizer: Any, request: ChatRequest, window: int | None = None) -> list[int]:
    if not getattr(tokenizer, "has_chat_template", False):
        raise APIError(400, "this model has no chat template: use /v1/completions", "no_chat_template", "messages")
    refuse_past_window(tokenizer, "".join(m.text() for m in request.messages), window, "messages")
    # OpenAI's newer `developer` role is the system message of older templates.
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in request.messages]
    try:
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    except Exception as err:  # noqa: BLE001 - templates raise their own errors (e.g. roles out of order)
        raise APIError(400, f"the chat template refused these messages: {err}", "invalid_messages",
                       "messages") from None


def completion_prompt(tokenizer: Any, request: CompletionRequest, vocab: int, window: int | None = None) -> list[int]:
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})", "invalid_value",
                           "prompt")
        return list(prompt)
    text = prompt if isinstance(prompt, str) else "".join(prompt)
    refuse_past_window(tokenizer, text, window, "prompt")
    return list(tokenizer.encode(text))


def policy(spec, defaults: Defaults) -> DraftPolicy:
    """The request's draft policy: the server's, with what `speculative` sets."""
    changes: dict[str, Any] = {}
    if spec.auto and spec.num_draft is not None:
        raise APIError(400, "speculative.auto and speculative.num_draft both set the draft length: choose one",
                       "invalid_value", "speculative.num_draft")
    if spec.auto is not None:
        changes["num_draft"] = None if spec.auto else (defaults.policy.num_draft if defaults.policy.num_draft
                                                       is not None else defaults.policy.start)
    if spec.num_draft is not None:
        changes["num_draft"] = spec.num_draft
    if spec.max_draft is not None:
        changes["max_draft"] = spec.max_draft
    if spec.lookup is not None:
        changes["lookup"] = spec.lookup
    try:
        return dataclasses.replace(defaults.policy, **changes)
    except SpecmlxError as err:
        raise APIError(400, str(err), "invalid_value", "speculative") from None


def make_job(request: Sampling, prompt: list[int], defaults: Defaults, loaded: list[str],
             room: int | None, window: int | None, owner: Hashable = None) -> Job:
    if request.model != defaults.model:
        raise APIError(404, f"the model {request.model!r} does not exist: this server serves {defaults.model!r}",
                       "model_not_found", "model")
    refused = request.unsupported()
    if refused is not None:
        raise APIError(400, refused[1], "unsupported_parameter", refused[0])
    if not prompt:
        raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
    drafter = request.speculative.drafter or DEFAULT
    drafter = defaults.drafter if drafter == DEFAULT else drafter
    if drafter not in loaded:
        raise APIError(400, f"no drafter {drafter!r} is loaded; choose from {', '.join([DEFAULT, *loaded])}",
                       "invalid_value", "speculative.drafter")
    limit = request.token_limit()
    if room is not None and (room < 1 or limit is not None and limit > room):
        asked = f"{len(prompt)} in the prompt" + (f" and {limit} to generate" if limit else "")
        raise APIError(400, f"this model's context window is {window} tokens, but the request needs more "
                       f"({asked})", "context_length_exceeded", "messages" if hasattr(request, "messages")
                       else "prompt")
    if limit is None:
        limit = defaults.max_tokens if room is None else min(defaults.max_tokens, room)
    base = defaults.sampling
    try:
        sampling = SamplingParams(
            base.temp if request.temperature is None else request.temperature,
            base.top_p if request.top_p is None else request.top_p,
            base.top_k if request.top_k is None else request.top_k,
            base.min_p if request.min_p is None else request.min_p)
    except SpecmlxError as err:
        raise APIError(400, str(err), "invalid_value") from None
    config = GenerationConfig(max_tokens=limit, sampling=sampling, policy=policy(request.speculative, defaults),
                              seed=request.seed, stop=request.stops())
    return Job(tuple(prompt), config, drafter, owner)


BUILTIN_DRAFTERS = (NGRAM, NONE)  # cheap enough that every server offers them
