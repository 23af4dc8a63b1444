"""Serving: each route's request into its answer, one method a route: a job for the worker, and the reply
that renders it (`routes.py` queues the job and streams or awaits the reply).

Everything a request can get wrong is refused here, before it waits in the
queue: an unknown drafter, a value the engine cannot honour, a prompt that
leaves no room in the context window (a `max_tokens` past the room is cut to
it: `make_job`, the window's one check), a `suffix` for a model without
fill-in-the-middle tokens (`fim.py`). Anthropic's messages and OpenAI's
responses are translated into the chat request of the same conversation
(`chat.py`) and take the chat path from the prompt to the answer's calls. Each
request's model name is answered once, by the served target (`aliases.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable

from ..config import GenerationConfig
from ..errors import SpecmlxError
from ..grammar import Grammar
from ..policy import AUTO, DraftPolicy, part
from ..sampling import SamplingParams
from ..vision.images import Images
from ..vision.tower import VisionTower
from .aliases import Aliases
from .anthropic.protocol import CountTokensRequest, MessagesRequest
from .anthropic.render import TOOL_USE_ID, MessageReply
from .anthropic.translate import thinks
from .anthropic.translate import to_chat as messages_chat
from .calls import CALL_ID, CallReader, call_reader
from .errors import APIError
from .fim import FimLayout, stop_tokens
from .images import placed
from .jobs import Job
from .limits import Access
from .openai.protocol import ChatRequest, CompletionRequest, Sampling
from .openai.render import CompletionReply
from .prompts import chat_prompt, completion_prompt, refuse_past_window
from .reasoning import opens_thinking, reasoning_reader
from .reply import Feed, Reply
from .responses.errors import in_responses_terms
from .responses.protocol import ResponsesRequest
from .responses.render import ResponseReply
from .responses.translate import echoed
from .responses.translate import to_chat as responses_chat
from .tools import forced_calls, has_tools, json_after_thought, parses_calls
from .worker import Worker

DEFAULT = "default"  # the `speculative.drafter` that means the server's own choice


@dataclass(frozen=True)
class Defaults:
    """What a request leaves unset: from the server's command line."""

    model: str  # the served model's id
    drafter: str  # a loaded drafter's name
    policy: DraftPolicy = DraftPolicy()
    sampling: SamplingParams = SamplingParams()
    max_tokens: int = 512


def grammar_of(request: Sampling, tokenizer: Any, prompt: list[int] | None = None) -> Grammar | None:
    """What the answer must match: the calls `tool_choice` demands (`tools.py`; after the reasoning a
    `prompt` that opens a think block leaves the model in), or what `response_format` asks: nothing,
    any JSON object, or a JSON schema's instances. Refused (400) before the request waits: a schema
    llguidance cannot compile, or a model whose tokenizer it cannot read (it needs the fast one)."""
    thinking = prompt is not None and getattr(tokenizer, "has_thinking", False) and opens_thinking(tokenizer, prompt)
    calls = forced_calls(request, tokenizer, thinking) if isinstance(request, ChatRequest) else None
    fmt = request.response_format
    if calls is None and (fmt is None or fmt.type == "text"):
        return None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise APIError(400, "this model's tokenizer cannot be read by the grammar engine, so structured output "
                       "is not available", "unsupported_parameter", "tool_choice" if calls else "response_format")
    if calls is not None:
        return calls
    if fmt.type == "json_schema" and fmt.json_schema is None:
        raise APIError(400, "a json_schema response format needs its json_schema", "missing_required_parameter",
                       "response_format.json_schema")
    schema = fmt.json_schema.schema_ if fmt.type == "json_schema" else {"type": "object"}
    try:  # a thinking model reasons first, then answers in the format
        return json_after_thought(schema, tokenizer) if thinking else Grammar.json_schema(schema)
    except SpecmlxError as err:
        param = "response_format.json_schema.schema" if fmt.type == "json_schema" else "response_format"
        raise APIError(400, str(err), "invalid_value", param) from None


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
             grammar: Grammar | None = None, images: Images | None = None) -> Job:
    """The request's job for a prompt that leaves `room` for an answer in a `window` of tokens: the server's
    `defaults` where it leaves a field unset; refused (400) where it cannot be run as asked."""
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
    limit = within_window(request, room)  # the window's one check: refused above, cut here
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
                              grammar=grammar, images=images)
    return Job(tuple(prompt), config, drafter, owner)


def within_window(request: Sampling, room: int | None) -> int | None:
    """The request's token limit cut to the `room` the window leaves after the prompt (None: unset). Clients
    ask for more than any window holds (Claude Code tens of thousands of tokens, OpenCode 32,000): llama.cpp
    and Ollama answer until the window is full, and so does this server. A prompt that leaves no room at all
    is refused before this (`make_job`)."""
    limit = request.token_limit()
    return limit if room is None or limit is None else min(limit, room)


def window_bound(request: Sampling, job: Job) -> bool:
    """Whether the job's token limit is the window's room, not the request's (cut by `make_job`)."""
    limit = request.token_limit()
    return limit is not None and job.config.max_tokens < limit


@dataclass(frozen=True)
class Answer:
    """A request ready to queue: its job, the reply that renders its answer in the request's API, the feed
    that reads the answer once for the reply, and whether it streams."""

    job: Job
    reply: Reply
    feed: Feed
    stream: bool


@dataclass(frozen=True)
class Serving:
    """What the routes hand requests to, one method a route. It lives on `app.state` and routes read it
    from each request: FastAPI caches facts about endpoint functions in process-wide caches, so an
    endpoint that closed over the worker would keep the models in memory after the server is gone.
    The methods that read a request encode its prompt (seconds for a long one): the routes call them
    off the event loop."""

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
    vision: VisionTower | None = None  # the target's vision tower, if it reads images

    @property
    def context_window(self) -> int | None:
        return self.worker.slots.context_window

    # -- the routes ------------------------------------------------------------

    def health(self) -> dict:
        return {"status": "ok", "model": self.defaults.model, "waiting": self.worker.waiting}

    def models(self) -> dict:
        return {"object": "list", "data": [self._model_card()]}

    def model(self, name: str) -> dict:
        self.aliases.answering(name)
        return self._model_card()

    def chat(self, body: ChatRequest, owner: Hashable) -> Answer:
        prompt, images = self._chat_prompt(body, owner)
        model = self.aliases.answering(body.model)
        reply = CompletionReply(True, model, len(prompt), body.speculative.sources, include_usage(body))
        return Answer(self._job(body, prompt, owner, images), reply, self._feed(body, prompt), body.stream)

    def completions(self, body: CompletionRequest, owner: Hashable) -> Answer:
        prompt = completion_prompt(self.tokenizer, body, self.vocab, self.context_window, self.fim)
        model = self.aliases.answering(body.model)
        reply = CompletionReply(False, model, len(prompt), body.speculative.sources, include_usage(body))
        job = self._job(body, prompt, owner)
        if body.suffix is not None and self.fim is not None:  # autocomplete: keep only what the next keystroke shares
            job = replace(job, shareable=self.fim.shareable(prompt))
        return Answer(job, reply, Feed(), body.stream)

    def messages(self, body: MessagesRequest, owner: Hashable, interleaved: bool = False) -> Answer:
        """Anthropic's messages, as the chat of the same conversation (`anthropic/translate.py`);
        `interleaved`: the client asked for interleaved thinking."""
        chat = messages_chat(body, interleaved, self.vision is not None)
        prompt, images = self._chat_prompt(chat, owner)
        model = self.aliases.answering(body.model)
        job = self._job(chat, prompt, owner, images)
        reply = MessageReply(model, len(prompt), chat.speculative.sources, window_bound(chat, job), thinks(body))
        return Answer(job, reply, self._feed(chat, prompt, TOOL_USE_ID), chat.stream)

    def responses(self, body: ResponsesRequest, owner: Hashable) -> Answer:
        """OpenAI's responses, as the chat of the same conversation (`responses/translate.py`)."""
        chat = responses_chat(body, self.vision is not None)
        try:  # the chat path's refusals name chat's fields
            prompt, images = self._chat_prompt(chat, owner)
            model = self.aliases.answering(body.model)
            job = self._job(chat, prompt, owner, images)
        except APIError as err:
            raise in_responses_terms(err) from None
        reply = ResponseReply(model, len(prompt), chat.speculative.sources, echoed(body))
        return Answer(job, reply, self._feed(chat, prompt), chat.stream)

    def count_tokens(self, body: CountTokensRequest) -> dict:
        self.aliases.answering(body.model)
        return {"input_tokens": len(self._chat_prompt(messages_chat(body, images=self.vision is not None))[0])}

    # -- what the routes share -------------------------------------------------

    def _model_card(self) -> dict:
        # What the model can do under Zed's names (its settings' `available_models[].capabilities`, an
        # object of booleans that can grow); Ollama's /api/show names tool calling `tools` too.
        return {"id": self.defaults.model, "object": "model", "created": self.started, "owned_by": "specmlx",
                "drafters": list(self.loaded), "default_drafter": self.defaults.drafter,
                "context_window": self.context_window,
                "capabilities": {"tools": has_tools(self.tokenizer), "images": self.vision is not None}}

    def _chat_prompt(self, request: ChatRequest, owner: Hashable = None) -> tuple[list[int], Images | None]:
        """The chat's prompt tokens, its images' rows in place, and its images (None without), for `owner`."""
        tokens = chat_prompt(self.tokenizer, request, self.context_window, images=self.vision is not None)
        return placed(tokens, request, self.vision, owner)

    def _feed(self, request: ChatRequest, prompt: list[int], id_prefix: str = CALL_ID) -> Feed:
        """How a chat's answer is read: its reasoning apart (a thinking model's), then its calls."""
        return Feed(self._call_reader(request, id_prefix), reasoning_reader(self.tokenizer, prompt))

    def _call_reader(self, request: ChatRequest, id_prefix: str = CALL_ID) -> CallReader | None:
        """A reader of the answer's calls, if they are parsed (tools, and a choice other than `none`); new
        calls' ids begin with `id_prefix`."""
        if not parses_calls(request, self.tokenizer):
            return None
        return call_reader(self.tokenizer, [tool.model_dump(exclude_none=True) for tool in request.tools], id_prefix)

    def _job(self, request: Sampling, prompt: list[int], owner: Hashable, images: Images | None = None) -> Job:
        """The request's job, refused in one line if it is wrong: its prediction as tokens and its grammar
        (a schema compiles in a millisecond, a large one in more), then the rest (`make_job`)."""
        prediction, grammar = self._prediction_tokens(request), grammar_of(request, self.tokenizer, prompt)
        slots = self.worker.slots
        job = make_job(request, prompt, self.defaults, list(self.loaded), slots.room(len(prompt)),
                       slots.context_window, owner, prediction,
                       stop_tokens(self.fim, getattr(request, "suffix", None)), grammar, images)
        slots.refuse_past_memory(job)
        return job

    def _prediction_tokens(self, request: Sampling) -> tuple[int, ...]:
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


def include_usage(body: Sampling) -> bool:
    """Whether a stream ends with a usage chunk (OpenAI's `stream_options.include_usage`)."""
    return bool(body.stream_options and body.stream_options.include_usage)
