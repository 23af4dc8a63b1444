"""A token limit past the room the context window leaves, as OpenCode asks (`max_tokens: 32000`), through
OpenAI's own client on chat, completions and responses, whole and streamed: the answer is cut at that room
and ends `length` (responses: `incomplete`, `max_output_tokens`); a prompt that leaves no room is refused."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from specmlx.drafters import NGRAM, NONE

from .. import tiny
from .conftest import MODEL, on_thread, start

openai = pytest.importorskip("openai")

WINDOW = 96  # the tiny target's context window here: a 32k window would take minutes to fill
ASKED = 32000  # what OpenCode asks for when its model entry has no limit.output
USER = "word " * 10  # a prompt that leaves some room, filled before the tiny target writes its end token


@pytest.fixture(scope="module")
def window_server(tokenizer, target, target_args, tmp_path_factory):
    args = dataclasses.replace(target_args, max_position_embeddings=WINDOW)
    path = tiny.save_model(target, args, tokenizer, tmp_path_factory.mktemp("window") / MODEL)
    with on_thread(str(path), [NGRAM, NONE]) as held:
        background, _ = start(held)
        with background as url:
            yield url


@pytest.fixture()
def client(window_server):
    with openai.OpenAI(base_url=f"{window_server}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def room(prompt_tokens: int) -> int:
    return WINDOW - prompt_tokens + 1  # the last new token is never fed back (`Engine.room`)


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_chat_past_the_window_answers_until_the_window_is_full(client, limit):
    messages = [{"role": "user", "content": USER}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **{limit: ASKED})
    usage = reply.usage
    assert ASKED > room(usage.prompt_tokens) > 8  # the prompt leaves some room, not 32000
    assert usage.completion_tokens == room(usage.prompt_tokens) and reply.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}, **{limit: ASKED}))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == usage.completion_tokens


def test_a_completion_past_the_window_answers_until_the_window_is_full(client):
    reply = client.completions.create(model=MODEL, prompt=USER, max_tokens=ASKED, temperature=0)
    usage = reply.usage
    assert ASKED > room(usage.prompt_tokens) > 8
    assert usage.completion_tokens == room(usage.prompt_tokens) and reply.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model=MODEL, prompt=USER, max_tokens=ASKED, temperature=0, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text
    # A prompt that leaves room for one token gets it.
    one = client.completions.create(model=MODEL, prompt=[5] * WINDOW, max_tokens=ASKED, temperature=0)
    assert (one.usage.completion_tokens, one.choices[0].finish_reason) == (1, "length")


def test_a_response_past_the_window_is_incomplete_at_the_window(client):
    reply = client.responses.create(model=MODEL, input=USER, max_output_tokens=ASKED, temperature=0)
    usage = reply.usage
    assert ASKED > room(usage.input_tokens) > 8
    assert usage.output_tokens == room(usage.input_tokens)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.max_output_tokens == ASKED  # the request's settings, repeated as sent
    events = list(client.responses.create(model=MODEL, input=USER, max_output_tokens=ASKED, temperature=0,
                                          stream=True))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == reply.output_text


def test_a_prompt_that_leaves_no_room_is_refused(client, window_server):
    full = "word " * WINDOW
    with pytest.raises(openai.BadRequestError) as chat:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": full}], max_tokens=ASKED)
    with pytest.raises(openai.BadRequestError) as completion:
        client.completions.create(model=MODEL, prompt=[5] * (WINDOW + 1), max_tokens=1)
    with pytest.raises(openai.BadRequestError) as response:
        client.responses.create(model=MODEL, input=full, max_output_tokens=ASKED)
    refused = [(e.value.body["code"], e.value.body["param"]) for e in (chat, completion, response)]
    assert refused == [("context_length_exceeded", "messages"), ("context_length_exceeded", "prompt"),
                       ("context_length_exceeded", "input")]  # each route names its own field
    assert "no room" in completion.value.body["message"]
    assert httpx.get(f"{window_server}/health", timeout=10).json()["status"] == "ok"
