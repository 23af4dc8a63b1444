"""One answer feed that the three dialects render: an answer is read once, streamed or whole, and
OpenAI's chat, Anthropic's message and OpenAI's response carry the same text and calls."""

from __future__ import annotations

import json
from dataclasses import replace

from specmlx.serve.anthropic.render import MessageReply
from specmlx.serve.calls import Call, merged
from specmlx.serve.openai.render import CompletionReply
from specmlx.serve.reply import Feed
from specmlx.serve.responses.render import ResponseReply

from .conftest import MODEL
from .test_tools import answer_around_calls, reader

CALLED = [("weather", {"city": "Paris", "days": 2}), ("weather", {"city": "Oslo", "days": 2})]


def shown(pieces) -> list:
    return [(p.name, json.loads(p.arguments)) if isinstance(p, Call) else p for p in pieces]


def test_an_answer_fed_a_token_at_a_time_says_what_it_says_whole():
    tokens, done = answer_around_calls()
    streamed = Feed(reader())
    said = [streamed.piece([t]) for t in tokens] + [streamed.last(done)]
    whole = Feed(reader()).whole(tokens, done)
    assert shown(merged([p for s in said for p in s.pieces])) == shown(whole.pieces) == [
        "Let me look.", *CALLED, " Done."]
    assert [t for s in said for t in s.tokens] == list(whole.tokens) == tokens
    assert said[-1].made == whole.made == 2 and whole.parsed
    # An answer whose end token comes inside a call: the call is the text it was, streamed or whole.
    short = tokens[:-3]
    streamed = Feed(reader())
    said = [streamed.piece([t]) for t in short] + [streamed.last(done)]
    whole = Feed(reader()).whole(short, done)
    assert shown(merged([p for s in said for p in s.pieces])) == shown(whole.pieces)
    assert shown(whole.pieces)[:2] == ["Let me look.", CALLED[0]] and "<tool_call>" in whole.pieces[-1]
    plain = Feed().whole(tokens, done)  # no reader: the calls' syntax is the answer's text
    assert not plain.parsed and plain.made == 0 and plain.pieces == (plain.text,) and "<tool_call>" in plain.text


def test_the_three_dialects_render_the_same_calls_and_finish_on_them():
    tokens, done = answer_around_calls()
    chat = CompletionReply(True, MODEL, 9, False).whole(Feed(reader()).whole(tokens, done), done)
    message = MessageReply(MODEL, 9, False).whole(Feed(reader()).whole(tokens, done), done)
    response = ResponseReply(MODEL, 9, False, {}).whole(Feed(reader()).whole(tokens, done), done)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in chat["choices"][0]["message"]["tool_calls"]] == CALLED
    assert [(b["name"], b["input"]) for b in message["content"] if b["type"] == "tool_use"] == CALLED
    assert [(o["name"], json.loads(o["arguments"])) for o in response["output"] if o["type"] == "function_call"] \
        == CALLED
    assert (chat["choices"][0]["finish_reason"], message["stop_reason"]) == ("tool_calls", "tool_use")
    # An answer max_tokens cut is a length stop in each, with the call it cut short dropped.
    cut = replace(done, stats=replace(done.stats, finish_reason="length"))
    last = tokens[:-3]  # inside the second call
    chat = CompletionReply(True, MODEL, 9, False).whole(Feed(reader()).whole(last, cut), cut)
    message = MessageReply(MODEL, 9, False).whole(Feed(reader()).whole(last, cut), cut)
    response = ResponseReply(MODEL, 9, False, {}).whole(Feed(reader()).whole(last, cut), cut)
    assert (chat["choices"][0]["finish_reason"], message["stop_reason"], response["status"]) == (
        "length", "max_tokens", "incomplete")
    assert len(chat["choices"][0]["message"]["tool_calls"]) == 1
