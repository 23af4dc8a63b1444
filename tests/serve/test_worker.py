"""The queue under load, a full queue, a client that leaves, and a server that stops: over real HTTP."""

from __future__ import annotations

import json
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor, as_completed
from types import SimpleNamespace

import httpx
import pytest

from specmlx.events import RoundEvent

from .conftest import MODEL, await_records, start, watch_records

CHAT = "/v1/chat/completions"
WORDS = ["def", "for", "import", "The", "naïve", "print", "return", "class"]


def body(i: int, max_tokens: int = 12, **fields) -> dict:
    prompt = f"{WORDS[i % len(WORDS)]} {i} {WORDS[(3 * i) % len(WORDS)]}"
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0} | fields


def stream_text(url: str, payload: dict) -> tuple[int, str, dict]:
    """(status, the streamed text, the refusal's body or the last data event)."""
    with httpx.stream("POST", url + CHAT, json=payload | {"stream": True}, timeout=60) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, "", r.json() | {"retry_after": r.headers.get("retry-after")}
        text, last = "", {}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            last = json.loads(line[6:])
            for choice in last.get("choices", []):
                text += choice["delta"].get("content") or ""
        return 200, text, last


def test_sixteen_streaming_clients_get_their_own_answers(server):
    url, worker = server
    prompts = range(16 * 3)
    sequential = {i: httpx.post(url + CHAT, json=body(i), timeout=60).json()["choices"][0]["message"]["content"]
                  for i in prompts}

    def client(c: int) -> list[tuple[int, int, str]]:
        return [(i, *stream_text(url, body(i))[:2]) for i in range(c * 3, c * 3 + 3)]

    with ThreadPoolExecutor(16) as pool:
        results = [r for rs in pool.map(client, range(16)) for r in rs]
    assert len(results) == 48
    for i, status, text in results:
        assert status == 200, (i, status)  # 16 clients never fill a queue of 32
        assert text == sequential[i], i
    assert httpx.get(url + "/health").json() == {"status": "ok", "model": MODEL, "waiting": 0}


def test_a_full_queue_answers_429_with_retry_after(loaded):
    background, worker = start(loaded, max_queue=1)
    with background as url, ThreadPoolExecutor(6) as pool:
        busy = threading.Event()
        worker.mlx.submit(busy.wait, 30)  # the first request waits behind it, filling the queue
        try:
            replies = [pool.submit(stream_text, url, body(i, max_tokens=48)) for i in range(6)]
            refused = [f.result() for _, f in zip(range(5), as_completed(replies, timeout=30))]
        finally:
            busy.set()
        [served] = [f.result() for f in replies if f.result()[0] != 429]
        for status, _, error in refused:
            assert status == 429 and error["error"]["code"] == "queue_full", error
            assert error["error"]["type"] == "rate_limit_error" and int(error["retry_after"]) >= 1
        assert served[0] == 200 and served[2]["choices"][0]["finish_reason"] == "length"
        assert httpx.get(url + "/health").json()["status"] == "ok"


def test_retry_after_is_the_queues_wait_not_one_run():
    from specmlx.serve.ledger import Record
    from specmlx.serve.worker import Worker

    class Idle:  # the worker's MLX thread is never asked to run anything here
        def submit(self, *args):
            pass

    worker = Worker(slots=None, max_queue=3, mlx=Idle())
    assert worker.ledger.retry_after() == 1  # nothing measured yet
    worker.ledger.records.extend(Record("length", 10, 0.0, run) for run in (2.0, 4.0))
    assert worker.ledger.retry_after() == 3  # the running job
    for _ in range(3):
        worker.submit(None, lambda item: None)
    assert worker.ledger.retry_after() == 12  # and the three waiting, 3 s each


def test_watched_records_are_handed_back_with_what_was_added():
    from specmlx.serve.ledger import Record

    worker = SimpleNamespace(ledger=SimpleNamespace(records=deque(maxlen=4)))
    original = worker.ledger.records
    with pytest.MonkeyPatch.context() as monkeypatch:
        records = watch_records(worker, monkeypatch)
        assert worker.ledger.records is records
        records.append(Record("length", 1, 0.0, 0.5))
        assert await_records(records, 1, timeout=0) and list(records) == list(original)
    assert worker.ledger.records is original and list(original) == [Record("length", 1, 0.0, 0.5)]


def test_a_client_that_leaves_mid_stream_frees_the_worker_within_a_round(server, monkeypatch):
    """The stream's end cancels the ticket; the worker checks it after each round
    it hands on. Measured in tokens: from the count the ticket had been handed when
    the disconnect was seen to the count the generation ended with."""
    url, worker = server
    records = watch_records(worker, monkeypatch)
    before = len(records)
    num_draft = 3  # a round commits at most num_draft + 1 tokens
    handed_at_cancel: list[int] = []
    submit = worker.submit

    def spying(job, sink):
        handed = [0]

        def counting(item):
            handed[0] += len(item.tokens) if isinstance(item, RoundEvent) else 0
            sink(item)

        ticket = submit(job, counting)
        cancel = ticket.cancel

        def cancelled(why=None):
            handed_at_cancel.append(handed[0])
            cancel(why)

        ticket.cancel = cancelled
        return ticket

    monkeypatch.setattr(worker, "submit", spying)
    payload = body(1, max_tokens=4000, stream=True, speculative={"num_draft": num_draft})
    with httpx.stream("POST", url + CHAT, json=payload, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
    # The connection is closed: the generation stops after the round running.
    assert await_records(records, before + 1)
    monkeypatch.undo()
    dropped = records[before]
    assert dropped.finish_reason == "cancelled"
    assert dropped.generation_tokens < 4000
    # Within a round of the disconnect being seen (the first cancel: the stream's end).
    seen = handed_at_cancel[0]
    assert 0 < seen < 4000
    assert seen <= dropped.generation_tokens <= seen + num_draft + 1
    assert worker.waiting == 0  # nothing was still running or queued in front of the next request
    reply = httpx.post(url + CHAT, json=body(2), timeout=60).json()
    assert reply["usage"]["completion_tokens"] == 12


def test_stopping_the_server_ends_open_streams_with_an_error_event(loaded):
    background, worker = start(loaded)
    got: dict = {}
    with background as url:
        started = threading.Event()

        def listen() -> None:
            events = []
            with httpx.stream("POST", url + CHAT, json=body(3, max_tokens=20000, stream=True), timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
                        started.set()
            got["events"] = events

        listener = threading.Thread(target=listen)
        listener.start()
        assert started.wait(30)
    listener.join(30)
    assert not listener.is_alive()
    events = got["events"]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "server_shutdown"


def test_a_whole_answers_client_that_leaves_while_tokens_flow_stops_its_generation(server, monkeypatch):
    """Tokens arrive faster than the disconnect check's period, so a check that waits for a gap
    between them never runs: the client must be noticed on a timer."""
    url, worker = server
    records = watch_records(worker, monkeypatch)
    before = len(records)
    with httpx.Client(timeout=httpx.Timeout(60, read=1.0)) as c:
        try:
            c.post(url + CHAT, json=body(4, max_tokens=8000))
        except httpx.ReadTimeout:
            pass  # the client gives up and closes its connection
    assert await_records(records, before + 1, timeout=120)
    dropped = records[before]
    assert dropped.finish_reason == "cancelled", dropped
    assert dropped.generation_tokens < 8000


class Wire(httpx.HTTPTransport):
    """A client's transport that keeps the raw bytes of its responses, and shows them to `seen` as they come."""

    def __init__(self, seen) -> None:
        super().__init__()
        self.raw, self.seen = bytearray(), seen

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        return httpx.Response(response.status_code, headers=response.headers, stream=Tap(response.stream, self),
                              extensions=response.extensions)


class Tap(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, wire: Wire) -> None:
        self.stream, self.wire = stream, wire

    def __iter__(self):
        for chunk in self.stream:
            self.wire.raw += chunk
            self.wire.seen(self.wire.raw)
            yield chunk

    def close(self) -> None:
        self.stream.close()


def test_a_queued_stream_gets_keep_alives_until_its_turn(loaded, monkeypatch):
    """A stream that waits its turn gets SSE comments after its role chunk, and OpenAI's client,
    which skips them, still reads the whole answer. The MLX thread is held busy meanwhile."""
    from openai import OpenAI

    from specmlx.serve import routes

    monkeypatch.setattr(routes, "KEEPALIVE_S", 0.05)
    background, worker = start(loaded)
    with background as url:
        reference = httpx.post(url + CHAT, json=body(6), timeout=60).json()["choices"][0]["message"]["content"]
        busy = threading.Event()
        worker.mlx.submit(busy.wait, 30)  # what runs ahead of the stream
        lines = []
        with httpx.stream("POST", url + CHAT, json=body(6, stream=True), timeout=60) as r:
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith(":") and len(lines) > 4:
                    busy.set()  # its turn comes
        busy.set()
        data = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert lines.count(": keep-alive") >= 2 and lines[0].startswith("data: ")  # the role chunk came first
        assert "".join(d["choices"][0]["delta"].get("content") or "" for d in data if d["choices"]) == reference
        busy = threading.Event()
        wire = Wire(lambda raw: raw.count(b": keep-alive") >= 2 and busy.set())  # then its turn comes
        with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60,
                    http_client=httpx.Client(transport=wire)) as client:
            worker.mlx.submit(busy.wait, 30)
            chunks = list(client.chat.completions.create(**body(6), stream=True))
        busy.set()
        assert wire.raw.count(b": keep-alive") >= 2  # the client was sent them, and skipped them
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reference


def test_a_bug_in_a_generation_is_a_500_and_its_traceback_goes_to_the_log_file(loaded, monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    background, worker = start(loaded)

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(worker.slots, "take", broken)
    with background as url:
        for stream in (False, True):
            r = httpx.post(url + CHAT, json=body(7, stream=stream), timeout=60)
            assert ("internal_error" in r.text) and "Traceback" not in r.text
    assert "Traceback" not in capfd.readouterr().err
    assert "RuntimeError: a bug" in (tmp_path / "specmlx.log").read_text()


class Recording:
    """A mirror (`specmlx.serve.mirror`) that notes what the worker tells it, and can fail a job."""

    one_at_a_time = True

    def __init__(self, fail_begin: bool = False) -> None:
        from specmlx.peers import ALONE

        self.peers, self.fail_begin = ALONE, fail_begin
        self.calls: list[tuple] = []

    def emptied(self, slot: int) -> None:
        self.calls.append(("emptied", slot))

    def begin(self, slot, keep, prompt, config) -> None:
        self.calls.append(("begin", slot, keep, len(prompt), config.max_tokens))
        if self.fail_begin:
            raise RuntimeError("a peer is gone")

    def lost(self, err, begun) -> str | None:
        self.calls.append(("lost", str(err), begun))
        return f"out of step after {err}"

    def watch(self, lose) -> None:
        self.calls.append(("watch",))

    def end(self) -> None:
        self.calls.append(("end",))


def test_the_worker_tells_its_mirror_where_each_job_runs(loaded):
    mirror = Recording()
    background, worker = start(loaded, mirror=mirror, cache_bytes=1)  # one byte: idle slots are emptied
    with background as url:
        first = httpx.post(url + CHAT, json=body(1, max_tokens=5), timeout=60).json()
        prompt = first["usage"]["prompt_tokens"]
        turn = body(1, max_tokens=5)
        turn["messages"] += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "and"}]
        again = httpx.post(url + CHAT, json=turn, timeout=60).json()
        httpx.post(url + CHAT, json=body(2, max_tokens=5), timeout=60)
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and mirror.calls[:2] == [("begin", 0, 0, prompt, 5),
                                               ("begin", 0, cached, again["usage"]["prompt_tokens"], 5)]
    # The third conversation takes slot 1, and with the caches capped, slot 0 is emptied after it.
    assert mirror.calls[2:] == [("begin", 1, 0, mirror.calls[2][3], 5), ("emptied", 0)]


def test_a_failure_the_mirror_cannot_survive_fails_every_job_and_stops_the_server(loaded, monkeypatch):
    for fail_begin, begun in ((True, False), (False, True)):
        mirror = Recording(fail_begin)
        background, worker = start(loaded, mirror=mirror)
        stopped = threading.Event()
        worker.on_lost = stopped.set
        if not fail_begin:  # it fails after the others began the job
            monkeypatch.setattr(worker.slots, "trim", lambda keep: (_ for _ in ()).throw(RuntimeError("a bug")))
        with background as url:
            r = httpx.post(url + CHAT, json=body(3, max_tokens=5), timeout=60)
            assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutdown", r.text
        error = "a peer is gone" if fail_begin else "a bug"
        assert ("lost", error, begun) in mirror.calls
        assert worker.lost == f"out of step after {error}" and stopped.is_set()


def test_closing_ends_the_mirror_unless_it_was_lost():
    from specmlx.serve.worker import Worker

    class Now:  # the MLX thread, run here
        closed = False

        def call(self, fn, *args):
            return fn(*args)

        def close(self):
            self.closed = True

    class Pool:
        disk = None  # no prompt cache on disk to close

        def __init__(self, mirror) -> None:
            self.mirror = mirror

    for lost in (None, "lost the other ranks"):
        mirror, mlx = Recording(), Now()
        worker = Worker(Pool(mirror), mlx=mlx)
        worker.lost = lost
        worker.close()
        assert mirror.calls == ([("end",)] if lost is None else []) and mlx.closed


def test_a_mirror_that_follows_one_generation_at_a_time_gets_no_batch(loaded):
    from specmlx.serve.batching import Batched
    from specmlx.serve.mirror import NO_MIRROR
    from specmlx.serve.runner import OneAtATime

    for mirror, runner, at_once in ((NO_MIRROR, Batched, 2), (Recording(), OneAtATime, 1)):
        _, worker = start(loaded, mirror=mirror, max_batch=8)  # two slots: two at once at most
        assert type(worker.runner) is runner and worker.runner.at_once == worker.ledger.at_once == at_once
