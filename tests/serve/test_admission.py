"""Memory that never runs out (`specmlx/serve/admission.py`): with a small cap, a prompt that cannot
fit is refused in one line with its numbers, an answer that cannot fit whole is cut to what fits,
a request that fits only alone waits for the others, an idle slot is emptied to make room, and the
server keeps serving. Through the official clients, on 127.0.0.1, each wait bounded."""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import anthropic
import httpx
import mlx.core as mx
import pytest
from openai import BadRequestError, OpenAI

from specmlx.serve.admission import LOOKAHEAD, Ask, Footprint, admit
from specmlx.serve.errors import APIError

from .conftest import MODEL, start

ROOM = 256  # positions a request may reach alone under the small cap (and NOISE more): steps of mlx-lm's caches
# What MLX holds beside the caches varies between requests by about 240 KB here (measured): 240 positions of
# the tiny target and its drafter, as many as the cap holds. A real model's per position is thousands of times more.
NOISE = 256
SHORT = "word " * 10  # a prompt the tiny target answers past ROOM tokens without its end token


def test_admit_runs_whole_waits_cuts_or_refuses_with_the_numbers():
    footprint = Footprint(per_token=1000, fixed=500)
    alone = footprint.rows([512])
    assert alone == 512 * 1000 + 500
    # A batch's rows are rectangular: each as long as the longest, padded, a step at a time.
    assert footprint.rows([10, 300]) == 2 * (768 * 1000 + 500)
    ask = Ask(prompt=100, max_tokens=200)
    assert ask.reach == 300 + LOOKAHEAD
    assert admit(ask, [], footprint, alone, 0, alone) == 200  # fits whole
    assert admit(ask, [40], footprint, alone, 0, alone) is None  # fits alone only: waits for the running row
    small = footprint.rows([256])
    cut = admit(ask, [], footprint, small, 0, small)  # cut to the most that fits, a step of positions at a time
    assert cut == 256 - 100 - LOOKAHEAD
    assert footprint.rows([Ask(100, cut).reach]) <= small < footprint.rows([Ask(100, cut + 1).reach])
    with pytest.raises(APIError) as refused:
        admit(Ask(prompt=300, max_tokens=10), [], footprint, small, 7 << 30, (7 << 30) + small)
    err = refused.value
    assert (err.status, err.code) == (400, "context_length_exceeded")
    assert "prompt is too long" in err.message and "300 tokens" in err.message and "7 GB" in err.message


@contextlib.contextmanager
def capped(loaded, positions: int, **kw) -> Iterator[tuple[str, object]]:
    """(url, worker) of a server whose memory cap leaves `positions` of the default drafter's context, and
    `NOISE` more, beside what MLX holds once a first request has run (what the runtime keeps from then on)."""
    mlx, _, drafters = loaded
    gc.collect()  # earlier servers' caches, in this process: a server's own memory is its alone
    background, worker = start(loaded, **kw)
    footprint = mlx.call(worker.slots.footprint, next(iter(drafters)))
    with background as url:
        httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "warm"}], "max_tokens": 24, "temperature": 0})
        gc.collect()
        idle = mlx.call(lambda: sum(s.held_bytes() for s in worker.slots._slots))
        worker.slots.memory_limit = mlx.call(mx.get_active_memory) - idle + footprint.rows([positions + NOISE])
        yield url, worker


def chat(client, content: str, max_tokens: int):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                          max_tokens=max_tokens, temperature=0)


@pytest.mark.parametrize("max_batch", [8, 1], ids=["batched", "one-at-a-time"])
def test_a_prompt_past_the_cap_is_refused_an_answer_past_it_cut_and_the_server_keeps_serving(loaded, max_batch):
    with capped(loaded, ROOM, max_batch=max_batch) as (url, worker), OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        with pytest.raises(BadRequestError) as refused:
            chat(client, "word " * 300, 8)
        assert refused.value.code == "context_length_exceeded"
        assert "prompt is too long for this machine's memory" in refused.value.message
        with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60) as claude:
            with pytest.raises(anthropic.BadRequestError) as told:
                claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "word " * 300}])
            assert told.value.body["error"]["type"] == "invalid_request_error"
            assert told.value.body["error"]["message"].startswith("prompt is too long")
            cut = claude.messages.create(model=MODEL, max_tokens=32000, extra_body={"temperature": 0},
                                         messages=[{"role": "user", "content": SHORT}])
            assert cut.stop_reason == "model_context_window_exceeded"
        reply = chat(client, SHORT, 32000)
        used = reply.usage
        assert reply.choices[0].finish_reason == "length"
        assert ROOM // 4 < used.prompt_tokens + used.completion_tokens + LOOKAHEAD <= ROOM + NOISE  # cut to fit
        assert ROOM // 4 < cut.usage.input_tokens + cut.usage.output_tokens + LOOKAHEAD <= ROOM + NOISE
        assert chat(client, SHORT, 8).usage.completion_tokens == 8  # still serving, as before
    assert worker.waiting == 0


def test_requests_that_fit_only_alone_wait_for_each_other_and_answer_as_alone(loaded):
    """Two rows of a batch hold twice the longest and its padding: under the cap each runs alone. Without
    the cap the same requests share rounds (the control)."""
    def together(worker, url) -> list[str]:
        start_line = threading.Barrier(6, timeout=30)
        with OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
            def one(i: int) -> str:
                start_line.wait()
                return chat(client, f"{SHORT} {i}", 24).choices[0].message.content
            with ThreadPoolExecutor(6) as pool:
                return list(pool.map(one, range(6)))

    background, worker = start(loaded, slots=6, max_batch=6)
    with background as url:
        free = together(worker, url)
    assert worker.runner.batch.widest > 1
    with capped(loaded, ROOM, slots=6, max_batch=6) as (url, worker):
        assert together(worker, url) == free
    assert worker.runner.batch.widest == 1 and worker.waiting == 0


def test_an_idle_slots_cache_is_emptied_to_make_room(loaded):
    with capped(loaded, 4 * ROOM) as (url, worker), OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                                                          timeout=60) as client:
        first = chat(client, "one " * 140, 4).usage.prompt_tokens
        assert sorted(worker.slots.contexts())[-1] > first  # kept after its answer
        second = chat(client, "two " * 260, 4).usage.prompt_tokens
    # Each fits alone. The second's cache is 4 steps of positions, as its reach rounds up: beside the
    # first's (its length), past the cap even with the noise, so the first's was emptied for it.
    assert 3 * ROOM < second + 4 + LOOKAHEAD <= 4 * ROOM and first > 2 * NOISE
    assert sorted(worker.slots.contexts())[0] == 0


def test_a_streamed_prompt_past_the_cap_gets_the_400_before_its_stream(loaded):
    with capped(loaded, ROOM) as (url, worker), OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0,
                                                        timeout=60) as client:
        with pytest.raises(BadRequestError) as refused:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 300}],
                                           max_tokens=8, stream=True)
        assert refused.value.code == "context_length_exceeded"
        with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60) as claude:
            with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
                with claude.messages.stream(model=MODEL, max_tokens=8,
                                            messages=[{"role": "user", "content": "word " * 300}]) as events:
                    list(events)
    assert worker.ledger.records == type(worker.ledger.records)(list(worker.ledger.records)[:1],
                                                                maxlen=worker.ledger.records.maxlen)  # never queued


def test_a_failure_of_admission_itself_fails_that_request_and_the_server_goes_on(loaded, monkeypatch):
    with capped(loaded, ROOM, max_batch=4) as (url, worker), OpenAI(base_url=f"{url}/v1", api_key="unused",
                                                                     max_retries=0, timeout=60) as client:
        admit_once = worker.slots.admit

        def broken(*args, **kwargs):
            monkeypatch.setattr(worker.slots, "admit", admit_once)
            raise RuntimeError("a bug in admission")
        monkeypatch.setattr(worker.slots, "admit", broken)
        with pytest.raises(Exception, match="internal error|generation failed"):
            chat(client, SHORT, 8)
        assert chat(client, SHORT, 8).usage.completion_tokens == 8


def test_a_waiting_request_whose_client_leaves_is_dropped(loaded, monkeypatch):
    """Under the cap the second request waits for the first: the first's rounds run one at a time as the
    test lets them, so the batch is seen to pass the second by (its memory held) before its client leaves;
    it is then dropped, never run, and the first still answers."""
    with capped(loaded, ROOM, slots=4, max_batch=4) as (url, worker):
        step, entered, permits = worker.runner.batch.step, queue.Queue(), threading.Semaphore(0)

        def held_step():
            entered.put(True)
            assert permits.acquire(timeout=60)
            return step()
        monkeypatch.setattr(worker.runner.batch, "step", held_step)
        answered = []
        first = threading.Thread(target=lambda: answered.append(httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": MODEL, "messages": [{"role": "user", "content": SHORT}], "max_tokens": 120, "temperature": 0})))
        first.start()
        entered.get(timeout=60)  # the first is admitted and at its first round
        with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=60, json={
                "model": MODEL, "messages": [{"role": "user", "content": SHORT + " again"}], "max_tokens": 120,
                "stream": True}) as waiting:
            lines = waiting.iter_lines()  # kept: a line iterator let go of closes the stream
            next(lines)  # its stream opened: it is queued
            permits.release()
            entered.get(timeout=60)  # a tick admitted what fits, and the second did not: it still waits
            queued = len(worker.runner.pending)
        for _ in range(10_000):  # the first's rounds, all let through
            permits.release()
        first.join(120)
    assert queued == 1 and not first.is_alive() and answered[0].status_code == 200
    assert not worker.runner.pending and worker.waiting == 0 and worker.runner.batch.widest == 1
