"""The HTTP routes: OpenAI's chat, completions, responses and models, Anthropic's messages, and a health check.

Routes only speak HTTP: the body is parsed (`protocol.py`, `anthropic.py`, `responses.py`), the API key
checked, the request handed to serving (`serving.py`), which queues its job;
the worker runs it on the MLX thread, and its tokens come back through an
asyncio queue to be rendered (`render.py`, `anthropic_render.py`, `responses_render.py`), streamed
as Server-Sent Events or whole. A Messages or Responses request is a chat request in another shape:
it takes the chat path from its prompt to its answer's calls.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from typing import TYPE_CHECKING, Union

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..events import RoundEvent, TokenEvent
from .anthropic import CountTokensRequest, MessagesRequest, to_chat
from .anthropic_render import TOOL_USE_ID, MessageReply
from .errors import APIError
from .protocol import ChatRequest, CompletionRequest, Done, Failed, Sampling, within_window
from .render import Reply
from .responses import ResponsesRequest, echoed, in_responses_terms
from .responses import to_chat as responses_chat
from .responses_render import ResponseReply

if TYPE_CHECKING:
    from .serving import Serving
    from .worker import Ticket

# The answer's shape: OpenAI's chat or text completion, Anthropic's message, OpenAI's response.
AnyReply = Union[Reply, MessageReply, ResponseReply]

# How often a whole (not streamed) request checks that its client is still there, tokens flowing or not.
DISCONNECT_POLL_S = 0.5
# A stream that has nothing to send for this long (queued, or a long prefill) sends an SSE comment,
# so that clients and proxies with read timeouts do not give up on it.
KEEPALIVE_S = 10.0


class Mailbox:
    """Hands the worker's items to the event loop, a batch per wake-up: a round's tokens
    arrive together, and waking the loop (and a core) once per token would slow the round."""

    def __init__(self, queue: asyncio.Queue, loop: asyncio.AbstractEventLoop) -> None:
        self.queue, self.loop = queue, loop
        self._held: list = []
        self._lock = threading.Lock()

    def post(self, item) -> None:  # on the MLX thread
        with self._lock:
            self._held.append(item)
            wake = len(self._held) == 1
        if wake:
            try:
                self.loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the event loop is gone: nobody listens any more
                pass

    def _deliver(self) -> None:  # on the event loop
        with self._lock:
            held, self._held = self._held, []
        self.queue.put_nowait(held)


def serving(request: Request) -> Serving:
    return request.app.state.serving


def given_key(request: Request) -> str | None:
    """The key a request sends: as a Bearer token (OpenAI's clients), or in `x-api-key` (Anthropic's)."""
    scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return bearer.strip()
    return request.headers.get("x-api-key")


def authorized(request: Request) -> None:
    """Let the request in, or 401; `request.state.owner` is then the index of its key (None without keys)."""
    keys = serving(request).access.api_keys
    request.state.owner = None
    if not keys:
        return
    given = given_key(request)
    # Every key is compared, so the time taken tells nothing of which one nearly matched.
    matches = [hmac.compare_digest((given or "").encode(), key.encode()) for key in keys]
    if given is None or not any(matches):
        raise APIError(401, "missing or incorrect API key: send Authorization: Bearer KEY (or x-api-key: KEY)",
                       "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    request.state.owner = matches.index(True)


open_routes = APIRouter()
api = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])


def include(app: FastAPI) -> None:
    """Every route: /health for anyone, /v1 behind the API key."""
    app.include_router(open_routes)
    app.include_router(api)


@open_routes.get("/health")
async def health(request: Request) -> dict:
    s = serving(request)
    return {"status": "ok", "model": s.defaults.model, "waiting": s.worker.waiting}


@api.get("/models")
async def models(request: Request) -> dict:
    return {"object": "list", "data": [serving(request).model_card()]}


@api.get("/models/{model:path}")
async def model(model: str, request: Request) -> dict:
    s = serving(request)
    s.aliases.answering(model)
    return s.model_card()


# Prompts are encoded on a worker thread: a long one takes seconds, and every stream and /health
# would wait for it on the event loop.
@api.post("/chat/completions")
async def chat(body: ChatRequest, request: Request):
    prompt = await run_in_threadpool(serving(request).chat_prompt, body)
    return await answer(body, prompt, request, chat=True)


@api.post("/completions")
async def completions(body: CompletionRequest, request: Request):
    prompt = await run_in_threadpool(serving(request).completion_prompt, body)
    return await answer(body, prompt, request, chat=False)


# Anthropic's messages: translated to the chat request of the same conversation (`anthropic.py`).
@api.post("/messages")
async def messages(body: MessagesRequest, request: Request):
    s = serving(request)
    interleaved = "interleaved-thinking" in request.headers.get("anthropic-beta", "")
    chat = await run_in_threadpool(to_chat, body, interleaved)
    prompt = await run_in_threadpool(s.chat_prompt, chat)
    chat, window_bound = within_window(chat, s.worker.slots.room(len(prompt)))
    reply = MessageReply(s.aliases.answering(body.model), len(prompt), chat.speculative.sources,
                         s.call_reader(chat, TOOL_USE_ID), window_bound)
    return await respond(chat, prompt, request, reply)


# OpenAI's Responses API: translated to the chat request of the same conversation (`responses.py`).
@api.post("/responses")
async def responses(body: ResponsesRequest, request: Request):
    s = serving(request)
    chat = await run_in_threadpool(responses_chat, body)
    try:  # the chat path's refusals name chat's fields
        prompt = await run_in_threadpool(s.chat_prompt, chat)
        reply = ResponseReply(s.aliases.answering(body.model), len(prompt), chat.speculative.sources, echoed(body),
                              s.call_reader(chat))
        return await respond(chat, prompt, request, reply)
    except APIError as err:
        raise in_responses_terms(err) from None


@api.post("/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict:
    s = serving(request)
    s.aliases.answering(body.model)
    chat = await run_in_threadpool(to_chat, body)
    return {"input_tokens": len(await run_in_threadpool(s.chat_prompt, chat))}


async def answer(body: Sampling, prompt: list[int], request: Request, chat: bool):
    s = serving(request)
    reply = Reply(chat, s.aliases.answering(body.model), len(prompt), body.speculative.sources,
                  s.call_reader(body) if isinstance(body, ChatRequest) else None)
    usage = bool(body.stream_options and body.stream_options.include_usage)
    return await respond(body, prompt, request, reply, usage)


async def respond(body: Sampling, prompt: list[int], request: Request, reply: AnyReply,
                  usage: bool = False):
    """Queue the request and answer it through `reply`: streamed (with a usage chunk if `usage`) or whole."""
    s = serving(request)
    queue: asyncio.Queue = asyncio.Queue()
    prediction, grammar = await run_in_threadpool(s.guides, body)
    # A wrong request (400, 404) or a full queue (429) raises here, before any byte is sent.
    ticket = s.submit(body, prompt, request.state.owner, Mailbox(queue, asyncio.get_running_loop()).post,
                      prediction, grammar)
    if body.stream:
        return StreamingResponse(stream(reply, queue, ticket, usage), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await whole(reply, queue, ticket, request)


def split(items: list) -> tuple[list[TokenEvent], Done | Failed | None]:
    """A batch from the worker: its rounds' tokens, and the end if it came."""
    return ([t for i in items if isinstance(i, RoundEvent) for t in i.tokens],
            next((i for i in items if not isinstance(i, RoundEvent)), None))


async def stream(reply: AnyReply, queue: asyncio.Queue, ticket: Ticket, usage: bool):
    loop = asyncio.get_running_loop()
    try:
        yield reply.first()
        sent = loop.time()
        while True:
            try:
                items = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                items = []
            while not queue.empty():
                items += queue.get_nowait()
            events, end = split(items)
            piece = reply.piece(events, usage) if events else ""  # nothing while a tool call is being written
            if piece or loop.time() - sent >= KEEPALIVE_S:
                yield piece or reply.keepalive
                sent = loop.time()
            if isinstance(end, Done):
                yield reply.last(end, usage)
                return
            if isinstance(end, Failed):
                yield reply.failed(end.error)
                return
    finally:  # the client left (or the answer is complete): stop within one round
        ticket.cancel()


async def whole(reply: AnyReply, queue: asyncio.Queue, ticket: Ticket, request: Request) -> JSONResponse:
    events: list[TokenEvent] = []
    loop = asyncio.get_running_loop()
    check_at = loop.time() + DISCONNECT_POLL_S
    try:
        while True:
            try:
                items = await asyncio.wait_for(queue.get(), max(0.0, check_at - loop.time()))
            except asyncio.TimeoutError:
                items = []
            if loop.time() >= check_at:  # on a timer: while tokens flow, a gap between them may never come
                if await request.is_disconnected():
                    raise APIError(499, "the client closed the request", "client_closed")
                check_at = loop.time() + DISCONNECT_POLL_S
            got, end = split(items)
            events += got
            if isinstance(end, Done):
                return JSONResponse(reply.whole(events, end))
            if isinstance(end, Failed):
                raise end.error
    finally:  # whatever ended the wait, the generation stops within one round
        ticket.cancel()
