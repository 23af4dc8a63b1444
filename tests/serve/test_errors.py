"""Bad input over raw HTTP: each gets its status and OpenAI's error shape, and the server lives on."""

from __future__ import annotations

import httpx
import pytest

from .conftest import KEY, MODEL, start

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]


def chat(**fields) -> dict:
    return {"model": MODEL, "messages": USER, "max_tokens": 4} | fields


CASES = [
    # (name, path, body (dict: JSON; bytes: sent raw), status, code, param)
    ("malformed JSON", CHAT, b'{"model": "target", "messages": [', 400, "invalid_json", None),
    ("a wrong type", CHAT, chat(max_tokens="four"), 400, "invalid_value", "max_tokens"),
    ("a number out of range", CHAT, chat(temperature=3.5), 400, "invalid_value", "temperature"),
    ("no messages", CHAT, {"model": MODEL}, 400, "missing_required_parameter", "messages"),
    ("no model", CHAT, {"messages": USER}, 400, "missing_required_parameter", "model"),
    ("an unknown model", CHAT, chat(model="gpt-4o"), 404, "model_not_found", "model"),
    ("n > 1", CHAT, chat(n=2), 400, "unsupported_parameter", "n"),
    ("logprobs", CHAT, chat(logprobs=True), 400, "unsupported_parameter", "logprobs"),
    ("tools", CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}]), 400, "unsupported_parameter",
     "tools"),
    ("a penalty", CHAT, chat(presence_penalty=0.5), 400, "unsupported_parameter", "presence_penalty"),
    ("five stop strings", CHAT, chat(stop=list("abcde")), 400, "unsupported_parameter", "stop"),
    ("an image", CHAT, chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     400, "invalid_value", "messages.0.content"),
    ("a tool message", CHAT, chat(messages=[{"role": "tool", "content": "x"}]), 400, "invalid_value",
     "messages.0.role"),
    ("an unknown drafter", CHAT, chat(speculative={"drafter": "eagle"}), 400, "invalid_value",
     "speculative.drafter"),
    ("a misspelt speculative field", CHAT, chat(speculative={"num_drafts": 4}), 400, "unknown_parameter",
     "speculative.num_drafts"),
    ("auto and a draft length", CHAT, chat(speculative={"auto": True, "num_draft": 3}), 400, "invalid_value",
     "speculative.num_draft"),
    ("past the context window", CHAT, chat(max_tokens=10 ** 7), 400, "context_length_exceeded", "messages"),
    ("a token id outside the vocabulary", "/v1/completions", {"model": MODEL, "prompt": [1, 2, 10 ** 6]}, 400,
     "invalid_value", "prompt"),
    ("echo", "/v1/completions", {"model": MODEL, "prompt": "x", "echo": True}, 400, "unsupported_parameter", "echo"),
    ("a body over the cap", CHAT, chat(messages=[{"role": "user", "content": "x" * (2 << 20)}]), 413,
     "request_too_large", None),
    ("an unknown route", "/v1/embeddings", {"model": MODEL, "input": "x"}, 404, None, None),
]


@pytest.mark.parametrize("name,path,body,status,code,param", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_its_status_and_openais_error_shape(server, name, path, body, status, code, param):
    url, _ = server
    sent = {"content": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(url + path, timeout=30, **sent)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["param"] == param
    assert error["message"] and "Traceback" not in error["message"]
    assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"


def test_a_body_streamed_without_its_length_is_capped_too(server):
    url, _ = server

    def chunks():
        for _ in range(40):
            yield b"x" * (64 << 10)

    r = httpx.post(url + CHAT, content=chunks(), headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_an_api_key_guards_every_route_but_health(loaded):
    background, _ = start(loaded, api_key=KEY)
    with background as url:
        assert httpx.get(url + "/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            for method, path, body in (("GET", "/v1/models", None), ("POST", CHAT, chat())):
                r = httpx.request(method, url + path, json=body, headers=headers, timeout=30)
                assert r.status_code == 401, (headers, path)
                assert r.json()["error"]["code"] == "invalid_api_key"
        good = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(url + "/v1/models", headers=good).json()["data"][0]["id"] == MODEL
        assert httpx.post(url + CHAT, json=chat(), headers=good, timeout=30).status_code == 200
