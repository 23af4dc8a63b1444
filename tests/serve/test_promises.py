"""What a streamed answer promises on Anthropic's Messages and OpenAI's Responses alike: its events are
Server-Sent Events each named by its type, a full queue answers 429 in the route's error shape with
`Retry-After`, a client that leaves a stream stops its generation, and stopping the server ends an
open stream with the route's error events."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import httpx
import pytest

from .conftest import MODEL, await_records, healthy, sse_events, start, watch_records
from .test_tools import ASK, tool_loaded, tool_server  # noqa: F401


@dataclass(frozen=True)
class Route:
    """A route's streamed request (`limit`: its field of the answer's length), the events its stream begins
    with (`first`) and ends with when it finishes (one of `finished`) or fails (`failing`), and the lines
    of a stream's start."""

    path: str
    body: dict
    limit: str
    first: str
    finished: frozenset[str]
    failing: tuple[str, ...]
    opening: int


ROUTES = [
    Route("/v1/messages", {"messages": ASK}, "max_tokens", "message_start", frozenset({"message_stop"}), ("error",),
          12),  # message_start, a ping, the text block's start, a few deltas (an event and its data: two lines)
    Route("/v1/responses", {"input": ASK[0]["content"]}, "max_output_tokens", "response.created",
          frozenset({"response.completed", "response.incomplete"}), ("error", "response.failed"),
          18),  # created, in_progress, the message's item and part added, a few deltas
]
IDS = [route.path for route in ROUTES]


def body(route: Route, tokens: int) -> dict:
    return {"model": MODEL, "stream": True, "temperature": 0, route.limit: tokens} | route.body


def stream_events(url: str, route: Route) -> tuple[int, list[dict], httpx.Headers]:
    """(status, the stream's events' data or the refusal's body, the headers) of a streamed request."""
    with httpx.stream("POST", f"{url}{route.path}", json=body(route, 48), timeout=60) as reply:
        if reply.status_code != 200:
            reply.read()
            return reply.status_code, [reply.json()], reply.headers
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
        return 200, events, reply.headers


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
def test_the_stream_is_server_sent_events_named_by_their_type(tool_server, route):
    with httpx.stream("POST", f"{tool_server}{route.path}", json=body(route, 4), timeout=60) as reply:
        events = [event["type"] for event in sse_events(reply.read().decode())]
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert events[0] == route.first and events[-1] in route.finished


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
def test_a_full_queue_is_a_429_in_the_routes_shape(tool_loaded, route):
    background, worker = start(tool_loaded, max_queue=1)
    with background as url, ThreadPoolExecutor(6) as pool:
        busy = threading.Event()
        worker.mlx.submit(busy.wait, 30)  # the first request waits behind it, filling the queue
        try:
            replies = [pool.submit(stream_events, url, route) for _ in range(6)]
            refused = [f.result() for _, f in zip(range(5), as_completed(replies, timeout=30))]
        finally:
            busy.set()
        [served] = [f.result() for f in replies if f.result()[0] != 429]
        assert healthy(url)
    for status, [error], headers in refused:  # Anthropic's shape has a `type` of its own beside the error
        assert status == 429 and error["error"]["type"] == "rate_limit_error", error
        assert error.get("type", "error") == "error" and int(headers["retry-after"]) >= 1
    assert served[0] == 200 and served[1][-1]["type"] in route.finished


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
def test_a_client_that_leaves_a_stream_stops_its_generation(tool_loaded, route, monkeypatch):
    background, worker = start(tool_loaded)
    records = watch_records(worker, monkeypatch)
    with background as url:
        with httpx.stream("POST", f"{url}{route.path}", json=body(route, 4000), timeout=60) as reply:
            lines = reply.iter_lines()
            for _ in range(route.opening):
                next(lines)
        assert await_records(records, 1)
        assert healthy(url)
    [dropped] = worker.ledger.records
    assert dropped.finish_reason == "cancelled" and dropped.generation_tokens < 4000


@pytest.mark.parametrize("route", ROUTES, ids=IDS)
def test_stopping_the_server_ends_an_open_stream_with_the_routes_error_events(tool_loaded, route):
    background, _ = start(tool_loaded)
    started = threading.Event()

    def listen(url: str) -> list[str]:
        """The stream's non-empty lines, until the server ends it."""
        with httpx.stream("POST", f"{url}{route.path}", json=body(route, 4000), timeout=60) as reply:
            # `started` is set at the first line (`set()` is None: every line is kept).
            return [line for line in reply.iter_lines() if line and not started.set()]

    with ThreadPoolExecutor(1) as pool:
        with background as url:
            lines = pool.submit(listen, url)
            assert started.wait(30)
        tail = lines.result(30)[-2 * len(route.failing):]
    names, data = tail[::2], [json.loads(line.removeprefix("data: ")) for line in tail[1::2]]
    assert names == [f"event: {name}" for name in route.failing] and [d["type"] for d in data] == list(route.failing)
    # Anthropic's error event holds an error of its type; OpenAI's is the error, with its code.
    error = data[0]["error"]["type"] if "error" in data[0] else data[0]["code"]
    assert error == {"/v1/messages": "overloaded_error", "/v1/responses": "server_shutdown"}[route.path]
