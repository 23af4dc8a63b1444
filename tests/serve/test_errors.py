"""Bad input over raw HTTP: each gets its status and OpenAI's error shape, and the server lives on."""

from __future__ import annotations

import json

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
    ("n > 1", CHAT, chat(n=2), 400, "unsupported_parameter", "n"),
    ("logprobs", CHAT, chat(logprobs=True), 400, "unsupported_parameter", "logprobs"),
    ("tools on a model without tool calling", CHAT, chat(tools=[{"type": "function", "function": {"name": "f"}}]),
     400, "unsupported_parameter", "tools"),
    ("legacy functions", CHAT, chat(functions=[{"name": "f"}]), 400, "unsupported_parameter", "functions"),
    ("a penalty", CHAT, chat(presence_penalty=0.5), 400, "unsupported_parameter", "presence_penalty"),
    ("65 stop strings", CHAT, chat(stop=[f"<{i}>" for i in range(65)]), 400, "unsupported_parameter", "stop"),
    ("a seed past 2^64 - 1", CHAT, chat(seed=2 ** 64), 400, "invalid_value", "seed"),
    ("a seed below -1", CHAT, chat(seed=-2), 400, "invalid_value", "seed"),
    ("a temperature as a string", CHAT, chat(temperature="0.5"), 400, "invalid_value", "temperature"),
    ("a temperature as a boolean", CHAT, chat(temperature=True), 400, "invalid_value", "temperature"),
    ("a top_p as a string", CHAT, chat(top_p="1"), 400, "invalid_value", "top_p"),
    ("a body that is not UTF-8", CHAT, b'{"model": "\xff\xfe"}', 400, "invalid_json", None),
    ("an image to a model without a vision tower", CHAT, chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]),
     400, "invalid_value", "messages.0.content.0.type"),
    ("a tool message on a model without tool calling", CHAT, chat(messages=[{"role": "tool", "content": "x"}]), 400,
     "invalid_value", "messages.0.role"),
    ("an unknown drafter", CHAT, chat(speculative={"drafter": "eagle"}), 400, "invalid_value",
     "speculative.drafter"),
    ("a misspelt speculative field", CHAT, chat(speculative={"num_drafts": 4}), 400, "unknown_parameter",
     "speculative.num_drafts"),
    ("auto and a draft length", CHAT, chat(speculative={"auto": True, "num_draft": 3}), 400, "invalid_value",
     "speculative.num_draft"),
    ("a prompt that fills the context window", "/v1/completions", {"model": MODEL, "prompt": [1] * 40_000}, 400,
     "context_length_exceeded", "prompt"),
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


def test_a_json_body_without_its_content_type_is_told_what_to_send(server):
    """curl -d sends a form's Content-Type: the answer says which one to send."""
    url, _ = server
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {}):
        r = httpx.post(url + CHAT, content=json.dumps(chat()).encode(), headers=headers, timeout=30)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_content_type"
        assert "send Content-Type: application/json" in error["message"]


def test_a_body_nested_too_deeply_is_told_so(server):
    """Python's JSON parser stops near a thousand levels: the answer says so, not that the body is not UTF-8."""
    url, _ = server
    deep = b'{"model": "target", "max_tokens": 4, "messages": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    for path in (CHAT, "/v1/messages", "/v1/responses"):
        r = httpx.post(url + path, content=deep, headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 400, r.text
        body = r.json()
        assert (body.get("type") == "error") == (path == "/v1/messages")  # each route's own shape
        message = body["error"]["message"]
        assert "nested too deeply" in message and "UTF-8" not in message, message
    assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"


def test_many_stop_strings_are_accepted_as_editors_send_them(server):
    """Continue's Qwen-coder FIM template sends 9 stop strings to any host but OpenAI's."""
    url, _ = server
    stops = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
             "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"] + [f"<stop{i}>" for i in range(23)]
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "def", "max_tokens": 4, "stop": stops},
                   timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("seed", [-1, 0, 2 ** 64 - 1])
def test_seeds_from_minus_one_to_2_to_the_64_are_accepted(server, seed):
    url, _ = server
    for stream in (False, True):
        r = httpx.post(url + CHAT, json=chat(seed=seed, temperature=0.8, stream=stream), timeout=30)
        assert r.status_code == 200, r.text
        assert "error" not in r.text


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
