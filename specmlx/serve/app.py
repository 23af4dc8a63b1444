"""The HTTP routes: OpenAI's chat, completions and models, and a health check.

Handlers only translate: a request becomes a `Job` (`jobs.py`), the worker
runs it on the MLX thread, and its tokens come back through an asyncio queue
to be rendered (`render.py`), streamed as Server-Sent Events or whole.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
import time
from dataclasses import dataclass

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..events import TokenEvent
from ..vocab import vocab_size
from .errors import APIError, install, sse_error
from .jobs import Defaults, chat_prompt, completion_prompt, make_job
from .limits import BodyLimit
from .render import DONE, Reply
from .schemas import ChatRequest, CompletionRequest, Sampling
from .worker import Done, Failed, Worker

# How often a whole (not streamed) request checks that its client is still there.
DISCONNECT_POLL_S = 0.5


@dataclass(frozen=True)
class Access:
    """Who may call: `api_key` (None: anyone on the bound address) and the largest body accepted."""

    api_key: str | None = None
    max_body_bytes: int = 4 << 20


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


def build_app(worker: Worker, defaults: Defaults, access: Access = Access()) -> FastAPI:
    app = FastAPI(title="specmlx", docs_url=None, redoc_url=None, openapi_url=None)
    install(app)
    app.add_middleware(BodyLimit, max_bytes=access.max_body_bytes)
    app.state.worker = worker
    tokenizer = worker.slots.tokenizer
    vocab = vocab_size(worker.slots.target)
    loaded = list(worker.slots.drafters)
    started = int(time.time())

    def authorized(request: Request) -> None:
        if access.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, key = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), access.api_key.encode()):
            raise APIError(401, "missing or incorrect API key: send Authorization: Bearer KEY", "invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": defaults.model, "waiting": worker.waiting}

    api = APIRouter(prefix="/v1", dependencies=[Depends(authorized)])

    def model_card() -> dict:
        return {"id": defaults.model, "object": "model", "created": started, "owned_by": "specmlx",
                "drafters": loaded, "default_drafter": defaults.drafter,
                "context_window": worker.slots.context_window}

    @api.get("/models")
    async def models() -> dict:
        return {"object": "list", "data": [model_card()]}

    @api.get("/models/{model:path}")
    async def model(model: str) -> dict:
        if model != defaults.model:
            raise APIError(404, f"the model {model!r} does not exist: this server serves {defaults.model!r}",
                           "model_not_found", "model")
        return model_card()

    @api.post("/chat/completions")
    async def chat(body: ChatRequest, request: Request):
        return await answer(body, chat_prompt(tokenizer, body), request, chat=True)

    @api.post("/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await answer(body, completion_prompt(tokenizer, body, vocab), request, chat=False)

    async def answer(body: Sampling, prompt: list[int], request: Request, chat: bool):
        job = make_job(body, prompt, defaults, loaded, worker.slots.room(len(prompt)), worker.slots.context_window)
        reply = Reply(chat, defaults.model, len(prompt), body.speculative.sources)
        queue: asyncio.Queue = asyncio.Queue()
        ticket = worker.submit(job, Mailbox(queue, asyncio.get_running_loop()).post)  # a full queue raises 429 here, before any byte is sent
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(stream(reply, queue, ticket, usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await whole(reply, queue, ticket, request)

    async def stream(reply: Reply, queue: asyncio.Queue, ticket, usage: bool):
        try:
            yield reply.first()
            while True:
                items = await queue.get()
                while not queue.empty():
                    items += queue.get_nowait()
                events = [i for i in items if isinstance(i, TokenEvent)]
                end = next((i for i in items if not isinstance(i, TokenEvent)), None)
                if events:
                    yield reply.piece(events, usage)
                if isinstance(end, Done):
                    yield reply.last(end, usage)
                    return
                if isinstance(end, Failed):
                    yield sse_error(end.error) + DONE
                    return
        finally:  # the client left (or the answer is complete): stop within one round
            ticket.cancel()

    async def whole(reply: Reply, queue: asyncio.Queue, ticket, request: Request) -> JSONResponse:
        events: list[TokenEvent] = []
        try:
            while True:
                try:
                    items = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        ticket.cancel()
                        raise APIError(499, "the client closed the request", "client_closed") from None
                    continue
                events += [i for i in items if isinstance(i, TokenEvent)]
                end = next((i for i in items if not isinstance(i, TokenEvent)), None)
                if isinstance(end, Done):
                    return JSONResponse(reply.whole(events, end))
                if isinstance(end, Failed):
                    raise end.error
        finally:
            ticket.cancel()

    app.include_router(api)
    return app
