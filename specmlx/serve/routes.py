"""The HTTP routes: OpenAI's chat, completions, responses and models, Anthropic's messages, and a health check.

Routes only speak HTTP: FastAPI parses the body into its API's request (`openai/`, `anthropic/`,
`responses/`), the API key is checked, and serving (`serving.py`) makes the request's answer: a job
and the reply that renders it. The route queues the job; the worker runs it on the MLX thread,
and its rounds come back through an asyncio queue, are read once (`reply.Feed`) and rendered by
the reply, streamed as Server-Sent Events or answered whole.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
from typing import Any, Callable

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..events import RoundEvent, TokenEvent
from .anthropic.protocol import CountTokensRequest, MessagesRequest
from .errors import APIError
from .jobs import Admitted, Done, Failed
from .openai.protocol import ChatRequest, CompletionRequest
from .responses.protocol import ResponsesRequest
from .serving import Answer, Serving
from .ledger import Ticket

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
    """The server's `Serving`, which the builder put on the app's state."""
    return request.app.state.serving


def given_key(request: Request) -> str | None:
    """The key a request sends: as a Bearer token (OpenAI's clients), or in `x-api-key` (Anthropic's)."""
    scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return bearer.strip()
    return request.headers.get("x-api-key")


def authorized(request: Request) -> None:
    """Let the request in, or 401; `request.state.owner` is then its key's `owner_of` (None without keys)."""
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
    request.state.owner = owner_of(keys[matches.index(True)])


def owner_of(key: str) -> str:
    """Whose caches a key's requests reuse: a digest of the key, the same across restarts and
    whatever the order of `--api-key`s (the prompt cache on disk is read by it), never the key."""
    return hashlib.sha256(b"specmlx owner\0" + key.encode()).hexdigest()[:32]


open_routes = APIRouter()
api = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])


def include(app: FastAPI) -> None:
    """Every route: /health for anyone, /v1 behind the API key."""
    app.include_router(open_routes)
    app.include_router(api)


@open_routes.api_route("/health", methods=["GET", "HEAD"])  # HEAD: what uptime monitors and load balancers send
async def health(request: Request) -> dict:
    return serving(request).health()


@api.get("/models")
async def models(request: Request) -> dict:
    return serving(request).models()


@api.get("/models/{model:path}")
async def model(model: str, request: Request) -> dict:
    return serving(request).model(model)


# Prompts are encoded on a worker thread: a long one takes seconds, and every stream and /health
# would wait for it on the event loop.
@api.post("/chat/completions")
async def chat(body: ChatRequest, request: Request):
    return await respond(request, serving(request).chat, body)


@api.post("/completions")
async def completions(body: CompletionRequest, request: Request):
    return await respond(request, serving(request).completions, body)


# Anthropic's messages: answered as the chat of the same conversation.
@api.post("/messages")
async def messages(body: MessagesRequest, request: Request):
    interleaved = "interleaved-thinking" in request.headers.get("anthropic-beta", "")
    return await respond(request, serving(request).messages, body, interleaved)


# OpenAI's Responses API: answered as the chat of the same conversation.
@api.post("/responses")
async def responses(body: ResponsesRequest, request: Request):
    return await respond(request, serving(request).responses, body)


@api.post("/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict:
    return await run_in_threadpool(serving(request).count_tokens, body)


async def respond(request: Request, answer_of: Callable[..., Answer], body: Any, *args: Any):
    """Make the request's answer off the event loop, queue its job and answer it: streamed or whole."""
    answer = await run_in_threadpool(answer_of, body, request.state.owner, *args)
    queue: asyncio.Queue = asyncio.Queue()
    # A wrong request (400, 404) raised above; a full queue (429) raises here, before any byte is sent.
    ticket = serving(request).worker.submit(answer.job, Mailbox(queue, asyncio.get_running_loop()).post)
    if answer.stream:
        return StreamingResponse(stream(answer, queue, ticket), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await whole(answer, queue, ticket, request)


def split(items: list) -> tuple[list[TokenEvent], Done | Failed | None]:
    """A batch from the worker: its rounds' tokens, and the end if it came."""
    return ([t for i in items if isinstance(i, RoundEvent) for t in i.tokens],
            next((i for i in items if isinstance(i, (Done, Failed))), None))


async def stream(answer: Answer, queue: asyncio.Queue, ticket: Ticket):
    """The answer as the reply's events. A reply that opens with the prompt's cache split (Anthropic's
    `message_start`) opens once the worker admitted the job (`Admitted`): keepalives until then."""
    loop, reply, feed = asyncio.get_running_loop(), answer.reply, answer.feed
    opened = not reply.opens_admitted
    try:
        if opened:
            yield reply.first()
        sent = loop.time()
        while True:
            try:
                items = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                items = []
            while not queue.empty():
                items += queue.get_nowait()
            if not opened:
                admitted = next((i for i in items if isinstance(i, Admitted)), None)
                if admitted is not None or any(isinstance(i, (Done, Failed)) for i in items):
                    yield reply.first(admitted)
                    opened, sent = True, loop.time()
            events, end = split(items)
            piece = reply.piece(feed.piece(events)) if events else ""  # nothing while a tool call is being written
            if piece or loop.time() - sent >= KEEPALIVE_S:
                yield piece or reply.keepalive
                sent = loop.time()
            if isinstance(end, Done):
                yield reply.last(feed.last(end), end)
                return
            if isinstance(end, Failed):
                yield reply.failed(end.error)
                return
    finally:  # the client left (or the answer is complete): stop within one round
        ticket.cancel()


async def whole(answer: Answer, queue: asyncio.Queue, ticket: Ticket, request: Request) -> JSONResponse:
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
                return JSONResponse(answer.reply.whole(answer.feed.whole(events, end), end))
            if isinstance(end, Failed):
                raise end.error
    finally:  # whatever ended the wait, the generation stops within one round
        ticket.cancel()
