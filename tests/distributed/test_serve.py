"""`specmlx serve --distributed`: rank 0's mirror of its slots and jobs, without ranks; then two
local ranks, tiny models: rank 0 listens, the other rank runs each job with it; answers equal one
process's, slots are mirrored, Ctrl+C ends both, and a lost rank stops the server with one line."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest

from specmlx.distributed.liveness import PeerGone
from specmlx.distributed.serve import RankMirror, job_config
from specmlx.engine import GenerationConfig

from . import ranks
from .conftest import single

PROMPT = "def add(a, b):"
TOKENS = 16
LOST_WITHIN = 100  # a bound on the wait for rank 0 to stop (about a second here); its line says what noticed it
LOST = "specmlx serve: error: rank 0 of 2: lost the other ranks ({}); stopping"
GONE, RING = "rank 1 stopped", "[ring] connection to a peer was lost"  # seen by the liveness connection, by MLX


class Lockstep:
    """Rank 0's lockstep, as the mirror uses it: what it publishes, and its group's loss handler."""

    def __init__(self) -> None:
        self.published: list = []
        self.group = self
        self.on_lost = None

    def publish(self, message) -> None:
        self.published.append(message)

    def name(self) -> str:
        return "rank 0 of 2"

    def when_lost(self, handler) -> None:
        self.on_lost = handler


def test_each_job_reaches_the_other_ranks_with_the_slots_emptied_since_the_last():
    lockstep = Lockstep()
    mirror = RankMirror(lockstep)
    assert mirror.peers is lockstep  # every slot's engine keeps step with the other ranks
    mirror.emptied(3)
    mirror.emptied(1)
    mirror.emptied(3)
    completion = GenerationConfig(max_tokens=7, stop=("\n",), stop_tokens={9, 4}, continues_text=True)
    mirror.begin(0, 5, (1, 2, 3, 4, 5, 6), completion)
    mirror.copied(0, 1, 4)  # slot 1 now holds slot 0's first 4 tokens: the other ranks copy them too
    mirror.begin(1, 4, [1, 2, 3, 4, 9], GenerationConfig(max_tokens=2))
    mirror.begin(1, 0, [9], GenerationConfig(max_tokens=2))
    mirror.copied(0, 2, 3)  # a job in slot 2 fails before it begins: the copy waits for slot 2's next job
    mirror.begin(1, 9, [9], GenerationConfig(max_tokens=1))
    mirror.copied(0, 3, 3)
    mirror.emptied(3)  # what was copied into slot 3 is gone with it
    mirror.begin(2, 3, [9], GenerationConfig(max_tokens=1))
    mirror.end()
    assert lockstep.published == [
        {"slot": 0, "keep": 5, "prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 7, "stop": ["\n"], "stop_tokens": [4, 9],
         "continues_text": True, "emptied": [1, 3], "copied": None},
        {"slot": 1, "keep": 4, "prompt": [1, 2, 3, 4, 9], "max_tokens": 2, "stop": [], "stop_tokens": [],
         "continues_text": False, "emptied": [], "copied": [0, 4]},
        {"slot": 1, "keep": 0, "prompt": [9], "max_tokens": 2, "stop": [], "stop_tokens": [], "continues_text": False,
         "emptied": [], "copied": None},
        {"slot": 1, "keep": 9, "prompt": [9], "max_tokens": 1, "stop": [], "stop_tokens": [], "continues_text": False,
         "emptied": [], "copied": None},
        {"slot": 2, "keep": 3, "prompt": [9], "max_tokens": 1, "stop": [], "stop_tokens": [], "continues_text": False,
         "emptied": [3], "copied": [0, 3]},
        None]  # the other ranks end with rank 0
    # The other ranks stop where rank 0 does: the same stop rules, over the same text.
    assert job_config(lockstep.published[0]) == completion
    assert job_config(lockstep.published[2]) == GenerationConfig(max_tokens=2)


def test_a_lost_rank_or_a_failure_inside_a_job_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    lockstep = Lockstep()
    mirror = RankMirror(lockstep)
    assert mirror.lost(RuntimeError(RING), begun=False) == f"rank 0 of 2: lost the other ranks ({RING})"
    assert mirror.lost(ValueError("a bug"), begun=False) is None  # before the others began it: this job's alone
    out_of_step = mirror.lost(ValueError("a bug"), begun=True)
    assert out_of_step.startswith("rank 0 of 2: a generation failed: an internal error (ValueError; ")
    assert out_of_step.endswith(", and the ranks are out of step") and "ValueError: a bug" in (
        tmp_path / "specmlx.log").read_text()
    lines: list[str] = []
    mirror.watch(lines.append)
    lockstep.on_lost(PeerGone(GONE))  # the liveness connection saw rank 1 go
    assert lines == [f"rank 0 of 2: lost the other ranks ({GONE})"]


def wait_healthy(url: str, procs, within: float = ranks.TIMEOUT) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), [p.err.read_text()[-800:] for p in procs]
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("the sharded server did not come up")


@pytest.fixture()
def served(request, model_dirs, tmp_path):
    port = ranks.free_ports(1)[0]
    extra = getattr(request, "param", [])
    procs = ranks.start(["serve", "--target", str(model_dirs["target"]), "--drafter", str(model_dirs["drafter"]),
                         "--port", str(port), "--max-tokens", str(TOKENS), "--distributed", *extra], tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, procs)
        yield url, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_answers_equal_one_process_and_ctrl_c_ends_every_rank(capsys, model_dirs, served):
    from openai import OpenAI

    url, procs = served
    alone = single(capsys, "--target", model_dirs["target"], "--drafter", "none", "--prompt", PROMPT, "--chat",
                   "--max-tokens", TOKENS)["text"]
    with OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        def chat(messages, drafter: str, **kw):
            return client.chat.completions.create(model="target", messages=messages, max_tokens=TOKENS,
                                                  temperature=0, extra_body={"speculative": {"drafter": drafter}}, **kw)

        first = [{"role": "user", "content": PROMPT}]
        for drafter in ("drafter", "ngram", "none"):
            answer = chat(first, drafter)
            assert answer.choices[0].message.content == alone, drafter
            assert answer.model_extra["speculative"]["drafter"] == drafter
        streamed = "".join(c.choices[0].delta.content or "" for c in chat(first, "drafter", stream=True) if c.choices)
        assert streamed == alone
        # The next turn continues a slot on every rank: rank 0's cache reuse is mirrored, and answers stay exact.
        turn = first + [{"role": "assistant", "content": alone}, {"role": "user", "content": "again"}]
        again = chat(turn, "drafter")
        assert again.usage.prompt_tokens_details.cached_tokens > 0
        assert again.choices[0].message.content == chat(turn, "none").choices[0].message.content
    procs[0].send_signal(signal.SIGINT)
    lead, other = ranks.finish(procs, timeout=30)
    assert lead.returncode == 0 and "specmlx serve: stopped" in lead.stderr
    assert other.returncode == 0, other.stderr[-800:]
    assert other.stdout == "" and "listening" not in other.stderr


@pytest.mark.parametrize("served", [["--cache-gb", "0.000001"]], indirect=True)
def test_slots_rank_0_empties_are_emptied_on_every_rank(model_dirs, served):
    """With caches capped at almost nothing, rank 0 empties every idle slot after each
    answer; the other rank drops the same slots, and two clients taking turns still get
    exactly what a fresh engine gives them."""
    from openai import OpenAI

    url, procs = served
    with OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60) as client:
        def chat(text: str, drafter: str) -> str:
            return client.chat.completions.create(
                model="target", messages=[{"role": "user", "content": text}], max_tokens=TOKENS, temperature=0,
                extra_body={"speculative": {"drafter": drafter}}).choices[0].message.content

        asks = ["def add(a, b):", "for i in range(10):", "def add(a, b):", "import numpy as np"]
        assert [chat(t, "drafter") for t in asks] == [chat(t, "none") for t in asks]
    assert all(p.poll() is None for p in procs)


def after_banner(err: str) -> list[str]:
    """Rank 0's stderr after its startup lines (the last one is the `try: curl ...` line)."""
    lines = err.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("try: ")]
    assert starts, err[-1500:]
    return lines[starts[0] + 1:]


def stopped(procs) -> str:
    """Rank 0's stderr once it has stopped, as it must, within LOST_WITHIN of losing rank 1."""
    err = ranks.ended(procs[0], LOST_WITHIN, "rank 1 died")
    assert procs[0].returncode == 2, err[-1500:]
    return err


def test_a_rank_lost_between_requests_stops_the_server_at_once_in_one_line(served):
    url, procs = served
    procs[1].kill()
    procs[1].wait()
    err = stopped(procs)
    assert after_banner(err) == [LOST.format(GONE)], err  # no collective was pending: the liveness connection


def test_a_rank_lost_under_a_request_fails_it_and_stops_the_server_in_one_line(served):
    """Rank 1 dies while an answer streams and another request waits: the stream ends with the
    error event, the waiting request gets 503, and rank 0's stderr shows one line, no traceback
    and none of the backend's own lines."""
    url, procs = served
    body = {"model": "target", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4000}
    waiting: dict = {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as stream:
        events = stream.iter_lines()
        next(line for line in events if '"content"' in line)  # the answer is streaming
        queued = threading.Thread(target=lambda: waiting.update(
            reply=httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)))
        queued.start()
        for _ in range(600):  # bounded in count, not by the clock (a busy machine is slow, not wrong)
            if httpx.get(f"{url}/health", timeout=30).json()["waiting"] >= 1:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the second request never reached the queue")
        procs[1].kill()
        rest = [line for line in events if line.startswith("data: {")]
    queued.join(60)
    assert json.loads(rest[-1].removeprefix("data: "))["error"]["code"] == "server_shutdown", rest[-2:]
    reply = waiting["reply"]
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "server_shutdown", reply.text
    err = stopped(procs)
    # The pending collective failed first, or the liveness connection showed rank 1 gone first.
    assert after_banner(err) in ([LOST.format(GONE)], [LOST.format(RING)]), err
