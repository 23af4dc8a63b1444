"""Serving: a validated request into a job for the worker, and the one place that builds a server.

Everything a request can get wrong is refused here, before it waits in the
queue: an unknown drafter, a value the engine cannot honour, a prompt that
leaves no room in the context window (a `max_tokens` past the room is cut to
it), a `suffix` for a model without fill-in-the-middle tokens (`fim.py`). Any
model name is answered by the served target (`aliases.py`). `build` makes a
server of loaded models (its slots, worker and FastAPI app): the command line,
the bench and the tests all serve what it makes.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from fastapi import FastAPI

from ..drafters import Drafter
from ..engine import GenerationConfig
from ..errors import SpecmlxError
from ..grammar import Grammar, grammar_tokenizer
from ..loading import LoadedModel
from ..mlx_thread import MLXThread
from ..policy import AUTO, DraftPolicy, part
from ..prompting import encode_chat, encode_text, has_chat_template, plain_encoder
from ..sampling import SamplingParams
from ..vocab import vocab_size
from . import routes
from .aliases import Aliases
from .calls import CALL_ID, CallReader, call_reader
from .errors import APIError, install
from .fim import FimLayout, find_layout, stop_tokens
from .limits import Access, guard
from .mirror import NO_MIRROR, Mirror
from .protocol import ChatRequest, CompletionRequest, Job, Sampling, Sink, within_window
from .slots import Slots, slots_for
from .tools import forced_calls, has_tools, parses_calls, template_messages, template_tools
from .worker import Ticket, Worker

DEFAULT = "default"  # the `speculative.drafter` that means the server's own choice
MAX_BATCH = 8  # requests decoded at once by default: an editor's autocomplete, chat and an agent's calls


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


def refuse_past_window(tokenizer: Any, text: str, window: int | None, param: str, what: str = "prompt") -> None:
    """Refuse text (the request's `what`) that cannot fit the context window, from a bounded head of it."""
    if window is None or len(text) <= HEAD_CHARS_PER_TOKEN * window:
        return
    head = HEAD_CHARS_PER_TOKEN * window
    tokens = len(tokenizer.encode(text[:head]))
    if tokens > window + HEAD_CUT_SLACK:
        raise APIError(400, f"this model's context window is {window} tokens, but the {what} is longer (its first "
                       f"{head} characters alone are {tokens} tokens)", "context_length_exceeded", param)


def chat_prompt(tokenizer: Any, request: ChatRequest, window: int | None = None) -> list[int]:
    if not has_chat_template(tokenizer):
        raise APIError(400, "this model has no chat template: use /v1/completions", "no_chat_template", "messages")
    tools = template_tools(request, tokenizer)
    messages = template_messages(request, tokenizer)
    text = "".join(m.text() for m in request.messages) + (json.dumps(tools) if tools else "")
    refuse_past_window(tokenizer, text, window, "messages")
    try:
        return encode_chat(tokenizer, messages, tools=tools)
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


def grammar_of(request: Sampling, tokenizer: Any) -> Grammar | None:
    """What the answer must match: the calls `tool_choice` demands (`tools.py`), or what `response_format`
    asks: nothing, any JSON object, or a JSON schema's instances. Refused (400) before the request waits:
    a schema llguidance cannot compile, or a model whose tokenizer it cannot read (it needs the fast one)."""
    calls = forced_calls(request, tokenizer) if isinstance(request, ChatRequest) else None
    fmt = request.response_format
    if calls is None and (fmt is None or fmt.type == "text"):
        return None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise APIError(400, "this model's tokenizer cannot be read by the grammar engine, so structured output "
                       "is not available", "unsupported_parameter", "tool_choice" if calls else "response_format")
    if calls is not None:
        return calls
    if fmt.type == "json_object":
        return Grammar.json_object()
    if fmt.json_schema is None:
        raise APIError(400, "a json_schema response format needs its json_schema", "missing_required_parameter",
                       "response_format.json_schema")
    try:
        return Grammar.json_schema(fmt.json_schema.schema_)
    except SpecmlxError as err:
        raise APIError(400, str(err), "invalid_value", "response_format.json_schema.schema") from None


def policy(spec, defaults: Defaults) -> DraftPolicy:
    """The request's draft policy: the server's, with the parts `speculative` names, in
    `DraftPolicy`'s grammar (so `auto` with `num_draft` is refused as everywhere else)."""
    parts = []
    if spec.auto:
        parts.append(AUTO)
    elif spec.auto is False and spec.num_draft is None and defaults.policy.auto:
        parts.append(str(defaults.policy.start))  # not automatic: the length the server's would start at
    for name in ("num_draft", "max_draft", "lookup"):
        if getattr(spec, name) is not None:
            parts.append(part(name, getattr(spec, name)))
    try:
        return DraftPolicy.parse("+".join(parts), base=defaults.policy) if parts else defaults.policy
    except SpecmlxError as err:  # the schema bounds each field: what clashes is a length with auto
        raise APIError(400, str(err), "invalid_value",
                       "speculative.num_draft" if spec.num_draft is not None else "speculative") from None


def make_job(request: Sampling, prompt: list[int], defaults: Defaults, loaded: list[str],
             room: int | None, window: int | None, owner: Hashable = None,
             prediction: tuple[int, ...] = (), stop_tokens: frozenset[int] = frozenset(),
             grammar: Grammar | None = None) -> Job:
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
    if room is not None and room < 1:
        raise APIError(400, f"this model's context window is {window} tokens, and the prompt ({len(prompt)} "
                       "tokens) leaves no room for an answer", "context_length_exceeded",
                       "messages" if hasattr(request, "messages") else "prompt")
    limit = within_window(request, room)[0].token_limit()
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
                              seed=request.seed, stop=request.stops(), stop_tokens=stop_tokens,
                              prediction=prediction, continues_text=isinstance(request, CompletionRequest),
                              grammar=grammar)
    return Job(tuple(prompt), config, drafter, owner)


@dataclass(frozen=True)
class Serving:
    """What the routes hand requests to. It lives on `app.state` and routes read it from each
    request: FastAPI caches facts about endpoint functions in process-wide caches, so an endpoint
    that closed over the worker would keep the models in memory after the server is gone."""

    worker: Worker
    defaults: Defaults
    access: Access
    tokenizer: Any
    vocab: int
    loaded: tuple[str, ...]
    started: int
    fim: FimLayout | None  # the model's fill-in-the-middle layout, if it has one
    encode_plain: Callable[[str], list[int]]  # text as the model writes it (`plain_encoder`)
    aliases: Aliases  # any model name a request gives: the served target answers it

    @property
    def context_window(self) -> int | None:
        return self.worker.slots.context_window

    def model_card(self) -> dict:
        # What the model can do under Zed's names (its settings' `available_models[].capabilities`, an
        # object of booleans that can grow); Ollama's /api/show names tool calling `tools` too.
        return {"id": self.defaults.model, "object": "model", "created": self.started, "owned_by": "specmlx",
                "drafters": list(self.loaded), "default_drafter": self.defaults.drafter,
                "context_window": self.context_window, "capabilities": {"tools": has_tools(self.tokenizer)}}

    # Encoding a long prompt takes seconds: the routes call these off the event loop.
    def chat_prompt(self, request: ChatRequest) -> list[int]:
        return chat_prompt(self.tokenizer, request, self.context_window)

    def completion_prompt(self, request: CompletionRequest) -> list[int]:
        return completion_prompt(self.tokenizer, request, self.vocab, self.context_window, self.fim)

    def call_reader(self, request: ChatRequest, id_prefix: str = CALL_ID) -> CallReader | None:
        """A reader of the answer's calls, if they are parsed (tools, and a choice other than `none`); new
        calls' ids begin with `id_prefix`."""
        if not parses_calls(request, self.tokenizer):
            return None
        return call_reader(self.tokenizer, [tool.model_dump(exclude_none=True) for tool in request.tools], id_prefix)

    def guides(self, request: Sampling) -> tuple[tuple[int, ...], Grammar | None]:
        """The request's prediction as tokens and its grammar, refused in one line if either is wrong.
        A schema compiles in a millisecond, a large one in more."""
        return self.prediction_tokens(request), grammar_of(request, self.tokenizer)

    def prediction_tokens(self, request: Sampling) -> tuple[int, ...]:
        """The request's prediction as the tokens the model would write (none without one)."""
        if not request.prediction:
            return ()
        text, window = request.prediction.text(), self.context_window
        refuse_past_window(self.tokenizer, text, window, "prediction", "prediction")  # a few MB take seconds
        tokens = tuple(self.encode_plain(text))
        if window is not None and len(tokens) > window:  # no answer is longer: it bounds the work it costs
            raise APIError(400, f"the prediction is {len(tokens)} tokens, longer than this model's context window "
                           f"of {window}", "context_length_exceeded", "prediction")
        return tokens

    def submit(self, request: Sampling, prompt: list[int], owner: Hashable, sink: Sink,
               prediction: tuple[int, ...] = (), grammar: Grammar | None = None) -> Ticket:
        """Queue the request's job, its items to `sink`; refused (`APIError`) before it waits if it is
        wrong or the queue is full. `prediction` and `grammar`: the request's, from `guides`."""
        slots = self.worker.slots
        job = make_job(request, prompt, self.defaults, list(self.loaded), slots.room(len(prompt)),
                       slots.context_window, owner, prediction,
                       stop_tokens(self.fim, getattr(request, "suffix", None)), grammar)
        return self.worker.submit(job, sink)


@dataclass(frozen=True)
class Built:
    """A server ready to run: its FastAPI app, and the worker behind it (to stop, close and watch)."""

    app: FastAPI
    worker: Worker


def build(mlx: MLXThread, target: LoadedModel, drafters: Sequence[Drafter], *,
          policy: DraftPolicy = DraftPolicy(), sampling: SamplingParams = SamplingParams(), max_tokens: int = 512,
          access: Access = Access(), slots: int | None = None, cache_bytes: int = 4 << 30, max_queue: int = 32,
          mirror: Mirror = NO_MIRROR, max_batch: int = MAX_BATCH) -> Built:
    """A server of models `mlx` loaded: `slots` kept conversations (None: as many as `cache_bytes`
    holds), caches within `cache_bytes`, a worker on `mlx`, and the app. The first drafter is the
    default; `policy`, `sampling` and `max_tokens` are what a request leaves unset. `mirror`: who
    else keeps the slots and runs each job (a sharded target's other ranks; none by default).
    `max_batch`: requests decoded at once (one at a time with a mirror); each needs a slot, so
    the default slot count is at least that."""
    named = {d.name: d for d in drafters}
    if slots is None:  # every slot keeps its drafters' caches and hidden states as well as the target's cache
        slots = max(mlx.call(slots_for, target.model, drafters, cache_bytes), max_batch)
    pool = mlx.call(Slots, target.model, target.tokenizer, named, slots, cache_bytes, mirror)
    worker = Worker(pool, max_queue, mlx, max_batch=max_batch)
    defaults = Defaults(target.name, drafters[0].name, policy, sampling, max_tokens)
    app = FastAPI(title="specmlx", docs_url=None, redoc_url=None, openapi_url=None)
    install(app)
    guard(app, access)
    app.state.serving = Serving(worker, defaults, access, target.tokenizer, vocab_size(target.model),
                                tuple(named), int(time.time()), find_layout(target.tokenizer),
                                plain_encoder(target.tokenizer), Aliases(target.name))
    routes.include(app)
    if getattr(target.tokenizer, "backend_tokenizer", None) is not None:
        # The grammar engine's view of the vocabulary takes a second or two: made now, beside loading,
        # so that the first request with a response_format does not wait for it.
        eos = frozenset(target.tokenizer.eos_token_ids)  # the slots' engines end answers at these
        threading.Thread(target=grammar_tokenizer, args=(target.tokenizer, vocab_size(target.model), eos),
                         name="grammar-vocabulary", daemon=True).start()
    return Built(app, worker)
