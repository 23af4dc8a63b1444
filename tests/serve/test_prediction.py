"""Predicted outputs through OpenAI's own client: the same answer, and the usage OpenAI reports.

The tiny target writes random bytes, whose text does not tokenize back into the
tokens it wrote, so here a prediction of its answer is mostly rejected: these tests
check the answer and the counts. `test_real_pair.py` checks that a real model's
edit copies its prediction.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from specmlx.generate import main as generate_main

from .conftest import MODEL, start
from .test_routes import PROMPT, spec

MESSAGES = [{"role": "user", "content": PROMPT}]


def ask(client, prediction: str | None, drafter: str = "none", **extra):
    return client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, extra_body=spec(drafter=drafter, sources=True),
        **({"prediction": {"type": "content", "content": prediction}} if prediction is not None else {}), **extra)


@pytest.mark.parametrize("drafter", ["none", "ngram", "drafter"])
def test_a_prediction_changes_the_rounds_not_the_answer(client, drafter):
    plain = ask(client, None, drafter)
    answer = plain.choices[0].message.content
    details = plain.usage.completion_tokens_details
    assert (details.accepted_prediction_tokens, details.rejected_prediction_tokens) == (0, 0)
    right = ask(client, answer, drafter)
    wrong = ask(client, answer[::-1], drafter)
    halfway = ask(client, answer[: len(answer) // 2] + "# an edit\n" + answer[len(answer) // 2 :], drafter)
    for reply in (right, wrong, halfway):
        assert reply.speculative["tokens"] == plain.speculative["tokens"]
        assert reply.choices[0].message.content == answer
    for reply in (right, wrong, halfway):  # the first round copies the prediction's first 16 tokens
        used = reply.usage.completion_tokens_details
        assert used.accepted_prediction_tokens + used.rejected_prediction_tokens >= 16
        assert used.accepted_prediction_tokens <= reply.speculative["accepted"]


def test_a_stream_reports_the_prediction_in_its_usage(client):
    answer = ask(client, None).choices[0].message.content
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0, stream=True,
        stream_options={"include_usage": True}, prediction={"type": "content", "content": answer}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert chunks[-1].usage.completion_tokens_details.rejected_prediction_tokens >= 16 - 1


def test_completions_take_a_prediction_too(client):
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0)
    predicted = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
        extra_body={"prediction": {"type": "content", "content": [{"type": "text", "text": plain.choices[0].text}]}})
    assert predicted.choices[0].text == plain.choices[0].text
    used = predicted.usage.completion_tokens_details
    assert used.accepted_prediction_tokens + used.rejected_prediction_tokens >= 16


def test_specmlx_generate_reads_a_prediction_file(client, capsys, served_dirs, tmp_path):
    reply = ask(client, None, "drafter")
    (tmp_path / "predicted.txt").write_text(reply.choices[0].message.content)
    code = generate_main(["--target", str(served_dirs["target"]), "--drafter", str(served_dirs["drafter"]), "--chat",
                          "--prompt", PROMPT, "--max-tokens", "40", "--json",
                          "--prediction-file", str(tmp_path / "predicted.txt")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == reply.speculative["tokens"]
    assert out["stats"]["prediction_drafted"] >= 16


def test_a_missing_prediction_file_is_one_line(capsys, served_dirs, tmp_path):
    code = generate_main(["--target", str(served_dirs["target"]), "--prompt", PROMPT,
                          "--prediction-file", str(tmp_path / "nowhere.txt")])
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nowhere.txt: no such prediction file" in err


@pytest.mark.parametrize("prediction", [{"type": "text", "content": "x"}, {"type": "content"}, "def add", {"content": 3}])
def test_a_malformed_prediction_is_a_400_naming_it(server, prediction):
    url, _ = server
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": MESSAGES, "prediction": prediction})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"].startswith("prediction")
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200


def test_the_usage_counts_the_predictions_own_tokens_as_openai_does(client, tokenizer):
    """accepted + rejected: the prediction's tokens, encoded as text the model writes (a special
    token written in it stays text), whatever the answer kept of them."""
    from specmlx.prompting import plain_encoder

    text = "x = 1<|im_end|>\ny = 2\n"
    reply = ask(client, text)
    used = reply.usage.completion_tokens_details
    tokens = plain_encoder(tokenizer)(text)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") not in tokens
    assert used.accepted_prediction_tokens + used.rejected_prediction_tokens == len(tokens)


def test_a_prediction_longer_than_the_context_window_is_a_400(server):
    url, worker = server
    window = worker.slots.context_window
    long = "the quick brown fox jumps over the lazy dog " * (window // 6)  # within the head that is checked first
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                       json={"model": MODEL, "messages": MESSAGES, "prediction": {"type": "content", "content": long}})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "prediction" and f"context window of {window}" in error["message"]


def test_a_prediction_of_megabytes_is_refused_from_its_head_while_health_answers(loaded):
    """Encoding a few MB takes seconds: it is refused from a head of it (the message says so: a whole
    encode would count its tokens), off the event loop, and /health answers all the while."""
    from openai import BadRequestError, OpenAI

    background, worker = start(loaded, max_body_bytes=8 << 20)
    text = "def add(a, b):\n    return a + b\n" * 100_000  # 3.2 MB
    with background as url, ThreadPoolExecutor(1) as pool, \
            OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120) as client:
        sent = pool.submit(client.chat.completions.create, model=MODEL, messages=MESSAGES, max_tokens=4,
                           prediction={"type": "content", "content": text})
        for _ in range(1000):  # bounded in count; /health answers all the while (how fast is not a test's to say)
            if sent.done():
                break
            assert httpx.get(f"{url}/health", timeout=60).status_code == 200
            time.sleep(0.02)
        with pytest.raises(BadRequestError) as refused:
            sent.result(timeout=120)
    error = refused.value.body
    assert error["param"] == "prediction" and error["code"] == "context_length_exceeded"
    assert f"context window is {worker.slots.context_window} tokens, but the prediction is longer" in error["message"]
