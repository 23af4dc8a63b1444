"""Who may call, from where, and what one caller can learn of another: over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from specmlx.serve.limits import local_host
from specmlx.serve.routes import owner_of

from .conftest import MODEL, start

CHAT = "/v1/chat/completions"
SECRET = "The launch code is 7-4-1-9. Never tell anyone: "


def ask(url: str, key: str, content: str) -> dict:
    r = httpx.post(url + CHAT, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                   json={"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 3})
    assert r.status_code == 200, r.text
    return r.json()


def test_cached_tokens_never_count_another_keys_prompt(loaded):
    """A client that guesses the next token of another's cached prompt must see no difference:
    with keys, each key reuses only its own conversations' caches."""
    background, worker = start(loaded, api_key=("key-a", "key-b"))
    with background as url:
        ask(url, "key-a", SECRET + "x")
        guess = ask(url, "key-b", SECRET + "y")
        assert guess["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        again = ask(url, "key-a", SECRET + "y")
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 10  # its own prompt, reused
    assert sorted(worker.slots.owners(), key=str) == sorted([owner_of("key-a"), owner_of("key-b")])


@pytest.mark.parametrize("host,ok", [("127.0.0.1:8000", True), ("localhost:8000", True), ("[::1]:8000", True),
                                     ("localhost", True), ("app.localhost:3000", True),
                                     ("host.docker.internal:8000", True), ("my-mac.local:8000", True),
                                     ("evil.example:8000", False), ("127.0.0.1.evil.example", False),
                                     ("192.168.1.5:8000", False)])
def test_a_loopback_server_takes_only_requests_sent_to_this_machine(host, ok):
    assert local_host(host) is ok


def test_a_request_naming_another_host_is_refused_on_every_route(server):
    """A web page that rebinds its DNS name to 127.0.0.1 reaches the server, but names its own host."""
    url, _ = server
    for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("POST", CHAT)):
        r = httpx.request(method, url + path, headers={"Host": "rebound.example:8000"}, timeout=30,
                          json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"]["code"] == "invalid_host"
    assert httpx.get(url + "/health", headers={"Host": "localhost"}, timeout=30).status_code == 200


def test_cors_is_off_unless_an_origin_is_given(loaded, server):
    origin = {"Origin": "http://localhost:3000"}
    url, _ = server
    assert "access-control-allow-origin" not in httpx.get(url + "/v1/models", headers=origin).headers
    background, _ = start(loaded, api_key="k", cors_origins=("http://localhost:3000",))
    with background as url:
        # OpenAI's JavaScript client adds headers of its own to every request.
        preflight = httpx.options(url + CHAT, headers=origin | {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os"})
        assert preflight.status_code == 200  # a preflight carries no key
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = httpx.get(url + "/v1/models", headers=origin | {"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.get(url + "/v1/models", headers={"Origin": "http://evil.example", "Authorization": "Bearer k"})
        assert "access-control-allow-origin" not in other.headers


def test_health_answers_head_as_monitors_send_it_without_a_key(loaded):
    background, _ = start(loaded, api_key="k")
    with background as url:
        head = httpx.head(url + "/health", timeout=30)
        assert head.status_code == 200 and head.content == b""
        assert httpx.head(url + "/v1/models", timeout=30).status_code in (401, 405)
