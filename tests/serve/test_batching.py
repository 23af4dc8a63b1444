"""Many requests at once: the server's continuous batch, over real HTTP on 127.0.0.1.

Every answer must equal the same request served alone, whatever else shares
its rounds; a request that continues a kept conversation starts from its
slot's cached prefix inside the batch; a request whose own work fails fails
alone. Each test bounds its requests in count and its waits in time.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
from openai import OpenAI

from specmlx.drafters import SUFFIX, SuffixDrafter

from .conftest import MODEL, start
from .test_worker import CHAT, body

DRAFTERS = ["drafter", "mtp", "ngram", "none"]


def request(i: int, **fields) -> dict:
    """Request i: its own prompt, drafter and draft length (auto for some), greedy."""
    speculative = {"drafter": DRAFTERS[i % 4]} | ({"auto": True} if i % 3 == 0 else {"num_draft": 1 + i % 4})
    return body(i, max_tokens=10 + i % 7, speculative=speculative) | fields


def test_sixteen_openai_streams_at_once_each_equal_their_answer_alone(loaded):
    background, worker = start(loaded, slots=16, max_batch=16)
    with background as url, OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        def answer(i: int, stream: bool) -> str:
            extra = {"speculative": request(i)["speculative"]}
            fields = {k: v for k, v in request(i).items() if k != "speculative"}
            if not stream:
                return client.chat.completions.create(**fields, extra_body=extra).choices[0].message.content
            chunks = client.chat.completions.create(**fields, extra_body=extra, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

        alone = [answer(i, stream=False) for i in range(16)]  # one after another: a batch of one each
        assert worker.runner.batch.widest == 1
        start_line = threading.Barrier(16, timeout=30)

        def together(i: int) -> str:
            start_line.wait()
            return answer(i, stream=True)

        with ThreadPoolExecutor(16) as pool:
            batched = list(pool.map(together, range(16)))
    assert batched == alone
    assert worker.runner.batch.widest > 4  # they did share rounds
    assert worker.waiting == 0 and not worker.runner.running


def test_a_conversation_continued_inside_a_batch_starts_from_its_cached_prefix(loaded):
    background, worker = start(loaded, slots=4, max_batch=4)
    with background as url:
        first = httpx.post(url + CHAT, json=body(1, max_tokens=8), timeout=60).json()
        turn = body(1, max_tokens=8)
        turn["messages"] += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "and"}]
        alone = httpx.post(url + CHAT, json=turn, timeout=60).json()["choices"][0]["message"]["content"]
        with ThreadPoolExecutor(4) as pool:  # the second turn again, beside three others
            replies = list(pool.map(lambda p: httpx.post(url + CHAT, json=p, timeout=60).json(),
                                    [turn, body(2, max_tokens=30), body(3, max_tokens=30), body(4, max_tokens=30)]))
    assert replies[0]["choices"][0]["message"]["content"] == alone
    assert replies[0]["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"]
    assert worker.runner.batch.widest >= 2


def test_suffix_remembers_a_keys_answer_that_another_drafter_wrote_in_the_batch(loaded):
    """A key's request drafted by none teaches that key's suffix memory once it leaves the batch: the
    key's suffix request on the same prompt copies its answer; another key's learned nothing of it."""
    mlx, target, drafters = loaded
    background, _ = start((mlx, target, {**drafters, SUFFIX: SuffixDrafter()}), slots=4, max_batch=4,
                          api_key=("key-a", "key-b"))
    with background as url:
        def ask(key: str, drafter: str) -> tuple[str, dict]:
            payload = body(1, max_tokens=16, speculative={"drafter": drafter, "num_draft": 8})
            reply = httpx.post(url + CHAT, json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=60).json()
            return reply["choices"][0]["message"]["content"], reply["speculative"]

        said, _ = ask("key-a", "none")
        again, copied = ask("key-a", SUFFIX)
        alone, fresh = ask("key-b", SUFFIX)
    assert again == alone == said
    assert copied["accepted"] == copied["drafted"] > fresh["accepted"]


def test_a_request_whose_drafter_fails_fails_alone(loaded, monkeypatch):
    background, worker = start(loaded, slots=4, max_batch=4)
    with background as url:
        alone = [httpx.post(url + CHAT, json=body(i, max_tokens=24), timeout=60).json() for i in (5, 6)]
        for slot in worker.slots._slots:  # every slot's MTP head raises when asked to draft
            monkeypatch.setattr(slot.drafters["mtp"], "draft", lambda *a, **k: (_ for _ in ()).throw(
                RuntimeError("a broken drafter")))
        payloads = [body(5, max_tokens=24), body(7, max_tokens=24, speculative={"drafter": "mtp"}),
                    body(6, max_tokens=24)]
        with ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(lambda p: httpx.post(url + CHAT, json=p, timeout=60), payloads))
    assert replies[1].status_code == 500 and replies[1].json()["error"]["code"] == "internal_error"
    assert [replies[0].json()["choices"], replies[2].json()["choices"]] == [a["choices"] for a in alone]
    assert worker.waiting == 0 and not worker.runner.running


def test_a_client_killed_mid_stream_leaves_the_batch_within_one_round(loaded, monkeypatch):
    """The others stream on, each still equal to its answer alone; the killed one's row is gone
    by the end of the round that was running (or the next, if it was seen between rounds)."""
    background, worker = start(loaded, slots=4, max_batch=4)
    with background as url:
        others, alone = [], []
        for i in range(2, 16):  # two requests whose answers run to their limit: long enough to outlast the kill
            payload = body(i, max_tokens=1000, speculative={"num_draft": 2})
            reply = httpx.post(url + CHAT, json=payload, timeout=60).json()["choices"][0]
            if reply["finish_reason"] == "length":
                others.append(payload)
                alone.append(reply["message"]["content"])
            if len(others) == 2:
                break
        assert len(others) == 2
        batch, rounds = worker.runner.batch, [0]
        step, submit, end = batch.step, worker.submit, worker.ledger.end
        seen: dict[str, int] = {}
        both_in = threading.Event()  # the killed one starts only once both others decode: it then leaves two

        def counting():
            if len(batch.members) >= 2:
                both_in.set()
            events = step()
            rounds[0] += 1
            return events

        def spying(job, sink):
            ticket = submit(job, sink)
            if job.config.max_tokens == 4000:  # the client to be killed
                cancel = ticket.cancel

                def cancelled(why=None):
                    seen.setdefault("cancel", rounds[0])
                    cancel(why)

                ticket.cancel = cancelled
                seen["ticket"] = id(ticket)
            return ticket

        def recording(ticket, started, done=None):
            if id(ticket) == seen.get("ticket"):
                finish = "cancelled" if done is None else done.stats.finish_reason
                seen["left"], seen["finish"], seen["width"] = rounds[0], finish, len(batch.members)
            end(ticket, started, done)

        monkeypatch.setattr(batch, "step", counting)
        monkeypatch.setattr(worker, "submit", spying)
        monkeypatch.setattr(worker.ledger, "end", recording)

        def streamed(payload: dict) -> str:
            with httpx.stream("POST", url + CHAT, json=payload | {"stream": True}, timeout=60) as r:
                chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
            return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])

        with ThreadPoolExecutor(2) as pool:
            answers = pool.map(streamed, others)
            assert both_in.wait(60)
            with httpx.stream("POST", url + CHAT, json=body(1, max_tokens=4000, stream=True), timeout=60) as r:
                lines = r.iter_lines()
                for _ in range(6):
                    next(lines)
            answers = list(answers)
    assert answers == alone
    assert seen["finish"] == "cancelled"
    assert seen["left"] - seen["cancel"] <= 1
    assert seen["width"] == 2  # it left while both others still ran
    assert batch.widest >= 2 and worker.waiting == 0 and not worker.runner.running


def test_stopping_with_requests_queued_answers_each_in_its_routes_shape_and_exits(served_dirs):
    """`specmlx serve --max-batch 2` with two rows decoding and four requests queued, then SIGTERM:
    the queued streams end with their route's error event, the queued whole requests get 503 in their
    route's shape, and the process exits well within uvicorn's 10 s grace."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "specmlx", "serve", "--target", str(served_dirs["target"]), "--drafter", "none",
         "--port", "0", "--max-batch", "2"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    chat = {"model": "target", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20000}

    def send(path: str, stream: bool, started: threading.Event | None = None) -> tuple[int, str]:
        with httpx.stream("POST", url + path, json=chat | {"stream": stream}, timeout=60) as reply:
            text = ""
            for piece in reply.iter_text():  # `started` is set once the answer's first bytes came
                text += piece
                if started is not None and "data: " in text:
                    started.set()
            return reply.status_code, text

    try:
        lines = []
        while not any(line.startswith("try: curl") for line in lines):
            lines.append(proc.stderr.readline())
            assert lines[-1], "".join(lines)
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)/v1", "".join(lines)).group(1)
        with ThreadPoolExecutor(6) as pool:
            decoding = [threading.Event() for _ in range(2)]
            running = [pool.submit(send, "/v1/chat/completions", True, started) for started in decoding]
            assert all(started.wait(60) for started in decoding)  # both rows decoding
            queued = {(path, stream): pool.submit(send, path, stream)
                      for path in ("/v1/chat/completions", "/v1/messages") for stream in (True, False)}
            for _ in range(600):
                if httpx.get(url + "/health", timeout=30).json()["waiting"] == 4:
                    break
                time.sleep(0.05)
            assert httpx.get(url + "/health", timeout=30).json()["waiting"] == 4
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            answers = {key: future.result(30) for key, future in queued.items()}
            ran = [future.result(30) for future in running]
    finally:
        proc.kill()
        proc.stderr.close()
    for status, text in ran:  # the rows running end as before: the error event, then [DONE]
        assert status == 200 and '"code":"server_shutdown"' in text.replace(" ", "") and text.rstrip().endswith("[DONE]")
    status, text = answers["/v1/chat/completions", True]
    assert status == 200 and text.rstrip().endswith("data: [DONE]")
    assert json.loads(text.strip().split("\n\n")[-2].removeprefix("data: "))["error"]["code"] == "server_shutdown"
    status, text = answers["/v1/messages", True]
    assert status == 200 and "event: error" in text
    assert json.loads(text.strip().split("\n\n")[-1].split("\n")[1].removeprefix("data: "))["error"]["type"] == \
        "overloaded_error"
    status, text = answers["/v1/chat/completions", False]
    assert status == 503 and json.loads(text)["error"]["code"] == "server_shutdown"
    status, text = answers["/v1/messages", False]
    assert status == 503 and json.loads(text) == {"type": "error", "error": {
        "type": "overloaded_error", "message": "the server is shutting down; the answer was not finished"}}
