"""response_format through OpenAI's own client: every answer parses and matches its schema, exactly as
plain constrained decoding would write it; what cannot be honoured is a 400 naming its field."""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import MODEL
from .test_routes import spec

SCHEMA = {"type": "object", "properties": {"kind": {"enum": ["add", "sub"]}, "n": {"type": "integer", "minimum": 0,
                                                                                   "maximum": 99}},
          "required": ["kind", "n"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "op", "schema": SCHEMA, "strict": True}}


@pytest.mark.parametrize("drafter", ["none", "ngram", "drafter"])
def test_a_schema_answer_parses_and_is_the_same_whatever_drafts(client, drafter):
    replies = [client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "An operation as JSON."}], max_tokens=64, temperature=0,
        response_format=FORMAT, extra_body=spec(drafter=d, sources=True)) for d in ("none", drafter)]
    alone, drafted = replies
    assert drafted.speculative["tokens"] == alone.speculative["tokens"]
    answer = json.loads(drafted.choices[0].message.content)
    assert answer["kind"] in ("add", "sub") and 0 <= answer["n"] <= 99
    assert drafted.choices[0].finish_reason == "stop"


def test_a_streamed_json_object_answer_parses(client):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "JSON please."}], max_tokens=256, temperature=0.7, seed=3,
        response_format={"type": "json_object"}, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text.startswith("{")
    if finish == ["stop"]:  # the answer ended: it is a JSON object (else max_tokens cut it)
        assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("fmt, param", [
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no such type"}}},
     "response_format.json_schema.schema"),
    ({"type": "yaml"}, "response_format.type"),
])
def test_a_format_it_cannot_honour_is_a_400_naming_its_field(server, fmt, param):
    url, _ = server
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "response_format": fmt})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200


def test_a_completion_takes_a_schema_too(client):
    reply = client.completions.create(model=MODEL, prompt="An operation as JSON: ", max_tokens=64, temperature=0,
                                      extra_body={"response_format": FORMAT, **spec(drafter="drafter")})
    answer = json.loads(reply.choices[0].text)
    assert answer["kind"] in ("add", "sub") and 0 <= answer["n"] <= 99


def test_the_grammar_engines_vocabulary_is_made_at_start_up(loaded, monkeypatch):
    """It takes seconds on a real vocabulary: a server makes it while it starts, not on the first request."""
    import threading
    import weakref

    from specmlx import grammar

    from .conftest import start

    monkeypatch.setattr(grammar, "_TOKENIZERS", weakref.WeakKeyDictionary())
    _, target, _ = loaded
    background, _ = start(loaded)
    with background:  # no request is sent: the server's own thread makes it
        for thread in [t for t in threading.enumerate() if t.name == "grammar-vocabulary"]:
            thread.join()
        made = dict(grammar._TOKENIZERS)
    assert list(made) == [target.tokenizer._tokenizer]
