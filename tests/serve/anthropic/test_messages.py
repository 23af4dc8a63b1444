"""Anthropic's Messages API through Anthropic's own client: text whole and streamed (its events in
Anthropic's order), a tool_use round trip, count_tokens, stop sequences, greedy answers equal to the
engine's on the same rendered prompt, and errors in Anthropic's shape with their status, the server
serving on after each."""

from __future__ import annotations

import json
from dataclasses import replace

from typing import Literal

import httpx
import pydantic
import pytest

from specmlx.prompting import encode_chat
from specmlx.serve.anthropic.protocol import MessagesRequest
from specmlx.serve.anthropic.translate import to_chat
from specmlx.serve.anthropic.render import MessageReply
from specmlx.serve.calls import CallReader
from specmlx.serve.errors import APIError
from specmlx.serve.reply import Feed
from specmlx.serve.serving import within_window

from ..conftest import KEY, MODEL, healthy, sse_events, start
from ..test_tools import (CITY, TOKENS, answer_around_calls, engine_tokens, json_parse, nested, tool_loaded,  # noqa: F401
                         tool_server)

anthropic = pytest.importorskip("anthropic")

TOOLS = [{"name": "weather", "description": "The forecast for a city.", "input_schema": CITY},
         {"name": "now", "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}}]
ASK = [{"role": "user", "content": "The weather in Paris?"}]
NAMED = {"type": "tool", "name": "weather"}


def greedy(drafter: str = "drafter", **fields) -> dict:
    """extra_body for a greedy answer (the client has no temperature argument) with each token's source."""
    return {"temperature": 0, "speculative": {"drafter": drafter, "sources": True}} | fields


@pytest.fixture()
def claude(tool_server):
    with anthropic.Anthropic(base_url=tool_server, api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def ask(claude, messages=ASK, drafter="drafter", max_tokens=TOKENS, **fields):
    return claude.messages.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                  extra_body=greedy(drafter), **fields)


# ---- text ------------------------------------------------------------------------------------------


def test_a_text_answer_is_a_message(claude, tool_server):
    reply = ask(claude, max_tokens=16, metadata={"user_id": "someone"})  # accepted, and changes nothing
    assert reply.type == "message" and reply.role == "assistant" and reply.model == MODEL
    assert reply.id.startswith("msg_") and [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text and reply.stop_reason in ("end_turn", "max_tokens") and reply.stop_sequence is None
    assert reply.usage.input_tokens > 5 and reply.usage.output_tokens == len(reply.speculative["tokens"]) <= 16
    assert reply.speculative["drafter"] == "drafter" and reply.timings["prompt_ms"] >= 0
    assert healthy(tool_server)


def events_of(claude, max_tokens=TOKENS, **fields) -> list:
    with claude.messages.create(model=MODEL, messages=ASK, max_tokens=max_tokens, stream=True, extra_body=greedy(),
                                **fields) as events:
        return list(events)


def test_a_streamed_answer_comes_in_anthropics_events_and_reassembles_the_whole(claude, tool_server):
    whole = ask(claude)
    events = [e for e in events_of(claude) if e.type != "ping"]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:-2] == ["content_block_start"] + ["content_block_delta"] * (len(kinds) - 5) + ["content_block_stop"]
    start_ = events[0].message
    assert start_.content == [] and start_.stop_reason is None
    assert prompt_tokens(start_.usage) == prompt_tokens(whole.usage)  # split as the answer's: what a slot held
    assert events[1].content_block.type == "text" and all(e.index == 0 for e in events[1:-2])
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == whole.content[0].text
    delta = events[-2]
    assert delta.delta.stop_reason == whole.stop_reason and delta.usage.output_tokens == whole.usage.output_tokens
    assert delta.speculative["drafter"] == "drafter"
    assert healthy(tool_server)


@pytest.mark.parametrize("max_batch", [8, 1], ids=["batched", "one at a time"])
def test_a_stop_sequence_ends_the_answer_before_it_and_is_named(tool_loaded, max_batch):
    background, _ = start(tool_loaded, max_batch=max_batch)  # the batch's members, or one generation
    with background as url, anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60) as claude:
        check_stop_sequence(claude)


def check_stop_sequence(claude) -> None:
    full = ask(claude, max_tokens=32).content[0].text
    cut = full[len(full) // 2: len(full) // 2 + 3]
    assert cut.strip() and cut in full
    stopped = ask(claude, max_tokens=32, stop_sequences=["never seen \x01", cut])
    assert stopped.content[0].text == full[:full.index(cut)]
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == cut
    delta = [e for e in events_of(claude, stop_sequences=[cut], max_tokens=32) if e.type == "message_delta"]
    assert [(d.delta.stop_reason, d.delta.stop_sequence) for d in delta] == [("stop_sequence", cut)]


# ---- tools -----------------------------------------------------------------------------------------


def check_tool_use(block) -> dict:
    assert block.type == "tool_use" and block.name == "weather" and block.id.startswith("toolu_")
    assert block.input["city"] in ("Paris", "Oslo") and 1 <= block.input["days"] <= 9
    return block.input


def round_trip(first) -> list[dict]:
    """The conversation after `first`'s call: the call, then its result."""
    [use] = [b for b in first.content if b.type == "tool_use"]
    return [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]}]


def test_a_tool_use_round_trip(claude, tool_server):
    first = ask(claude, tools=TOOLS, tool_choice=NAMED)
    assert first.stop_reason == "tool_use" and [b.type for b in first.content] == ["tool_use"]
    check_tool_use(first.content[0])
    second = ask(claude, round_trip(first), tools=TOOLS)
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert prompt_tokens(second.usage) > prompt_tokens(first.usage) + 20  # the call and its result are in it
    assert healthy(tool_server)


def test_a_streamed_tool_use_puts_together_the_whole_answers_input(claude):
    whole = ask(claude, tools=TOOLS, tool_choice=NAMED)
    events = [e for e in events_of(claude, tools=TOOLS, tool_choice=NAMED) if e.type != "ping"]
    assert [e.type for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                        "content_block_stop", "message_delta", "message_stop"]
    block, delta = events[1].content_block, events[2].delta
    assert block.type == "tool_use" and block.name == "weather" and block.id.startswith("toolu_") and block.input == {}
    assert delta.type == "input_json_delta" and json.loads(delta.partial_json) == whole.content[0].input
    assert events[4].delta.stop_reason == "tool_use"


def test_any_makes_calls_of_the_tools(claude):
    reply = ask(claude, tools=TOOLS, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name in ("weather", "now")
    if reply.stop_reason == "tool_use":  # else max_tokens cut it
        assert [b.type for b in reply.content] == ["tool_use"]


def prompt_tokens(usage) -> int:
    """The whole prompt, as Anthropic's usage splits it: what was read from a cache is not in `input_tokens`."""
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


def test_count_tokens_is_the_prompt_the_answer_reports(claude, tool_loaded):
    system = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}]
    reply = ask(claude, tools=TOOLS, tool_choice=NAMED, system=system)
    counted = claude.messages.count_tokens(model=MODEL, messages=ASK, tools=TOOLS, tool_choice=NAMED, system=system)
    assert counted.input_tokens == prompt_tokens(reply.usage)
    later = round_trip(reply)
    assert claude.messages.count_tokens(model=MODEL, messages=later, tools=TOOLS).input_tokens == \
        prompt_tokens(ask(claude, later, tools=TOOLS, max_tokens=1).usage)
    # The rendering is the chat route's of the same conversation, written by hand.
    tokenizer = tool_loaded[1].tokenizer
    chat = [{"role": "system", "content": "Be brief.\n\nUse tools."}, *ASK]
    tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}
              | ({"description": t["description"]} if "description" in t else {})} for t in TOOLS]
    assert counted.input_tokens == len(encode_chat(tokenizer, chat, tools=tools))


def test_usage_counts_the_prefix_a_kept_cache_held_as_cache_reads(claude):
    """Claude Code shows `cache_read_input_tokens`: the prompt tokens a slot already held, whole and streamed
    (`message_start` splits the prompt as Anthropic's does, and `message_delta`'s usage, cumulative, again:
    the SDK keeps only the known fields of the latter, so a split there alone loses ours)."""
    kept = [{"role": "user", "content": "Kept: the weather in Oslo, in words."}]
    counted = claude.messages.count_tokens(model=MODEL, messages=kept).input_tokens
    ask(claude, kept, max_tokens=2)
    again = ask(claude, kept, max_tokens=2).usage
    assert 0 < again.cache_read_input_tokens < counted and again.cache_creation_input_tokens == 0
    assert again.input_tokens + again.cache_read_input_tokens == counted
    with claude.messages.create(model=MODEL, messages=kept, max_tokens=2, stream=True, extra_body=greedy()) as s:
        events = list(s)
    start_ = next(e for e in events if e.type == "message_start").message.usage
    delta = next(e for e in events if e.type == "message_delta").usage
    assert (start_.input_tokens, start_.cache_read_input_tokens) == (again.input_tokens, again.cache_read_input_tokens)
    assert start_.model_extra["disk_read_input_tokens"] == 0  # ours: no disk cache here
    assert (delta.input_tokens, delta.cache_read_input_tokens) == (again.input_tokens, again.cache_read_input_tokens)
    with claude.messages.stream(model=MODEL, messages=kept, max_tokens=2, extra_body=greedy()) as s:
        assert s.get_final_message().usage.cache_read_input_tokens == again.cache_read_input_tokens


@pytest.mark.parametrize("drafter", ["drafter", "ngram"])
def test_greedy_answers_equal_the_engines_on_the_same_prompt(claude, tool_loaded, drafter):
    first = ask(claude, drafter=drafter, tools=TOOLS, tool_choice=NAMED)
    request = MessagesRequest(model=MODEL, messages=ASK, max_tokens=TOKENS, tools=TOOLS, tool_choice=NAMED)
    assert first.speculative["tokens"] == engine_tokens(tool_loaded, drafter, to_chat(request))
    later = round_trip(first)
    second = ask(claude, later, drafter=drafter, tools=TOOLS)
    request = MessagesRequest(model=MODEL, messages=later, max_tokens=TOKENS, tools=TOOLS)
    assert second.speculative["tokens"] == engine_tokens(tool_loaded, drafter, to_chat(request))


# ---- the translation -------------------------------------------------------------------------------


def test_consecutive_turns_of_a_role_are_one_and_results_answer_their_calls():
    use = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo", "days": 1}}
    request = MessagesRequest(model=MODEL, max_tokens=8, system="S", tools=TOOLS, messages=[
        {"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, use]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "down"}],
             "is_error": True}, {"type": "text", "text": "and?"}]}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, stop_sequences=["x"], top_k=3)
    chat = to_chat(request)
    assert [m.model_dump(exclude_none=True) for m in chat.messages] == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [{"id": "toolu_1", "type": "function", "function": {
            "name": "weather", "arguments": '{"city": "Oslo", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: down"}, {"role": "user", "content": "and?"}]
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert chat.stops() == ("x",) and chat.top_k == 3 and chat.max_tokens == 8 and chat.temperature is None


def reader() -> CallReader:
    """Qwen's call syntax read as the server reads it, with Anthropic's ids."""
    return CallReader("<tool_call>", "</tool_call>", json_parse, id_prefix="toolu_")


def test_text_around_calls_streams_as_blocks_in_order_and_whole_as_the_same_blocks():
    tokens, done = answer_around_calls()
    whole = MessageReply(MODEL, 9, False).whole(Feed(reader()).whole(tokens, done), done)
    assert [(b["type"], b.get("text"), b.get("input")) for b in whole["content"]] == [
        ("text", "Let me look.", None), ("tool_use", None, {"city": "Paris", "days": 2}),
        ("tool_use", None, {"city": "Oslo", "days": 2}), ("text", " Done.", None)]
    assert whole["stop_reason"] == "tool_use" and whole["usage"] == {
        "input_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "disk_read_input_tokens": 0, "output_tokens": len(tokens)}
    reply, feed = MessageReply(MODEL, 9, False), Feed(reader())
    events = sse_events(reply.first() + "".join(reply.piece(feed.piece([t])) for t in tokens)
                        + reply.last(feed.last(done), done))
    events = [e for e in events if e["type"] != "ping"]
    blocks: dict[int, dict] = {}
    for e in events[1:-2]:  # each block from its start to its stop, before the next one starts
        if e["type"] == "content_block_start":
            assert e["index"] == len(blocks) and all(b.get("stopped") for b in blocks.values())
            blocks[e["index"]] = dict(e["content_block"])
        elif e["type"] == "content_block_delta":
            block, delta = blocks[e["index"]], e["delta"]
            block["text" if delta["type"] == "text_delta" else "json"] = (
                block.get("text", "") + delta["text"] if delta["type"] == "text_delta" else delta["partial_json"])
        else:
            blocks[e["index"]]["stopped"] = True
    assert [(b["type"], b.get("text"), json.loads(b["json"]) if "json" in b else None) for b in blocks.values()] == [
        (b["type"], b.get("text"), b.get("input")) for b in whole["content"]]
    assert [b["id"][:6] for b in blocks.values() if b["type"] == "tool_use"] == ["toolu_", "toolu_"]
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    # Each piece's sources ride on its last event, or on a ping while a call is still being written.
    sourced, feed = MessageReply(MODEL, 9, True), Feed(reader())
    pieces = [sse_events(sourced.piece(feed.piece(tokens[k:k + 1]))) for k in range(3)]
    assert [p[-1]["type"] for p in pieces] == ["content_block_delta", "content_block_delta", "ping"]
    assert [p[-1]["speculative"] for p in pieces] == [{"tokens": [k], "sources": ["target"]} for k in (0, 7, 14)]


def test_max_tokens_past_the_window_answers_until_the_window_is_full(claude, tool_server):
    # Claude Code asks for tens of thousands of tokens whatever the model: not a 400, as on chat.
    window = httpx.get(f"{tool_server}/v1/models", timeout=30).json()["data"][0]["context_window"]
    with claude.messages.create(model=MODEL, messages=ASK, max_tokens=window * 4, stream=True,
                                extra_body=greedy()) as events:
        assert next(iter(events)).type == "message_start"  # accepted; leaving stops it (filling the window is slow)
    request = MessagesRequest(model=MODEL, messages=ASK, max_tokens=window * 4)
    assert within_window(to_chat(request), window - 10) == window - 10
    assert within_window(to_chat(request), None) == window * 4
    tokens, done = answer_around_calls()
    cut = replace(done, stats=replace(done.stats, finish_reason="length"))
    reasons = [MessageReply(MODEL, 9, False, window_bound=bound).whole(Feed().whole(tokens, cut), cut)["stop_reason"]
               for bound in (True, False)]
    assert reasons == ["model_context_window_exceeded", "max_tokens"]


def test_errors_on_the_messages_routes_take_anthropics_shape_and_type():
    err = APIError(429, "busy", "rate_limited")
    assert err.body("/v1/messages") == {"type": "error", "error": {"type": "rate_limit_error", "message": "busy"}}
    assert err.body("/v1/chat/completions")["error"]["type"] == "rate_limit_error"
    assert err.body("/v1/messagesx") == err.body()  # another path keeps OpenAI's shape
    types = {status: APIError(status, "x").body("/v1/messages/count_tokens")["error"]["type"]
             for status in (400, 401, 404, 413, 429, 500, 503)}
    assert types == {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                     413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error"}
    # A stream that cannot finish ends with Anthropic's error event.
    name, data = MessageReply.failed(APIError(503, "lost")).strip().split("\n")
    assert name == "event: error" and json.loads(data.removeprefix("data: ")) == {
        "type": "error", "error": {"type": "overloaded_error", "message": "lost"}}


# ---- errors ----------------------------------------------------------------------------------------


def anthropic_error(reply: httpx.Response, status: int, kind: str) -> str:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and set(body["error"]) == {"type", "message"}
    return body["error"]["message"]


NOT_OBJECT = [{"name": "f", "input_schema": {"type": "array"}}]
USE = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo", "days": 1}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
BAD = [
    # (name, body fields, words of the message)
    ("no max_tokens", {"max_tokens": None}, "max_tokens"),
    ("no messages", {"messages": []}, "messages"),
    ("a message with no blocks", {"messages": [{"role": "user", "content": []}]}, "at least one content block"),
    ("a schema that is not an object's", {"tools": NOT_OBJECT}, "tools.0.input_schema"),
    ("a result for an unknown call", {"messages": [*ASK, {"role": "assistant", "content": [USE]},
                                                   {"role": "user", "content": [RESULT | {"tool_use_id": "toolu_9"}]}],
                                      "tools": TOOLS}, "tool_use_id 'toolu_9'"),
    ("a result in an assistant's message", {"messages": [*ASK, {"role": "assistant", "content": [USE, RESULT]}],
                                            "tools": TOOLS}, "messages.1.content.1"),
    ("a call in a user's message", {"messages": [{"role": "user", "content": [USE]}], "tools": TOOLS},
     "messages.0.content.0"),
    ("a block of an unknown type", {"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages.0"),
    ("a tool choice of a tool not among the tools", {"tools": TOOLS, "tool_choice": {"type": "tool", "name": "f"}},
     "'f'"),
    ("a temperature past Anthropic's range", {"temperature": 1.5}, "temperature"),
    ("two tools of one name", {"tools": [*TOOLS, TOOLS[0]]}, "tools.2.name: tools.0 is named 'weather' too"),
    ("a document", {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages.0.content.0: 'document' is not served here"),
]


@pytest.mark.parametrize("name,fields,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_400_in_anthropics_shape_and_the_server_serves_on(tool_server, name, fields, words):
    body = {k: v for k, v in ({"model": MODEL, "messages": ASK, "max_tokens": 4} | fields).items() if v is not None}
    reply = httpx.post(f"{tool_server}/v1/messages", json=body, timeout=30)
    assert words in anthropic_error(reply, 400, "invalid_request_error")
    assert healthy(tool_server)


def test_an_oversize_body_is_a_413_in_each_routes_shape(tool_server):
    big = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        anthropic_error(httpx.post(f"{tool_server}{path}", json=big, timeout=30), 413, "request_too_large")
    openai = httpx.post(f"{tool_server}/v1/chat/completions", json=big, timeout=30)
    assert openai.status_code == 413 and openai.json()["error"]["type"] == "invalid_request_error"
    assert healthy(tool_server)


def keyed(url: str, key: str, header: str):
    """A client sending `key` as a Bearer token (as the 2.x client sends its api_key) or in `x-api-key`
    (as Claude Code and older clients send it)."""
    if header == "bearer":
        return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60)
    return anthropic.Anthropic(base_url=url, api_key=None, default_headers={"x-api-key": key}, max_retries=0,
                               timeout=60)


def test_the_api_key_is_taken_from_x_api_key_and_refused_in_anthropics_shape(tool_loaded, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    background, _ = start(tool_loaded, api_key=KEY)
    with background as url:
        for header in ("bearer", "x-api-key"):
            with keyed(url, "wrong", header) as claude:
                with pytest.raises(anthropic.AuthenticationError) as err:
                    claude.messages.create(model=MODEL, messages=ASK, max_tokens=2)
            assert err.value.status_code == 401 and err.value.body["error"]["type"] == "authentication_error"
            with keyed(url, KEY, header) as claude:
                assert claude.messages.create(model=MODEL, messages=ASK, max_tokens=2).usage.output_tokens >= 1
                assert claude.messages.count_tokens(model=MODEL, messages=ASK).input_tokens > 5
        for path in ("/v1/messages", "/v1/messages/count_tokens"):  # no key at all
            reply = httpx.post(f"{url}{path}", json={"model": MODEL, "messages": ASK, "max_tokens": 2}, timeout=30)
            assert "x-api-key" in anthropic_error(reply, 401, "authentication_error")
        openai = httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL, "messages": ASK},
                            headers={"x-api-key": "wrong"}, timeout=30)
        assert openai.status_code == 401 and openai.json()["error"]["code"] == "invalid_api_key"
        assert healthy(url)


# ---- blocks and tools not served, thinking, a schema too deep, a call max_tokens cuts ------------------


PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def test_an_image_is_refused_naming_the_block_and_its_place(claude, tool_server):
    looked = [*ASK, {"role": "assistant", "content": [USE]},
              {"role": "user", "content": [RESULT | {"content": [{"type": "text", "text": "a.png:"}, PNG]}]}]
    for messages, where, served in (
            ([{"role": "user", "content": [{"type": "text", "text": "What is this?"}, PNG]}], "messages.0.content.1",
             "text, tool_use, tool_result and thinking blocks"),
            (looked, "messages.2.content.0.content.1", "text blocks")):  # as Claude Code sends a PNG it read
        with pytest.raises(anthropic.BadRequestError) as err:
            ask(claude, messages, tools=TOOLS, max_tokens=4)
        assert err.value.body["error"] == {"type": "invalid_request_error",
                                           "message": f"{where}: 'image' is not served here: only {served}"}
    assert healthy(tool_server)


def test_thinking_in_the_history_is_dropped_and_the_turn_answered(claude):
    thought = {"type": "thinking", "thinking": "They want the weather.", "signature": "c2ln"}
    history = [*ASK, {"role": "assistant", "content": [thought, {"type": "text", "text": "Paris, you said?"}]},
               {"role": "user", "content": "Yes."}]
    without = [*history[:1], {"role": "assistant", "content": "Paris, you said?"}, history[2]]
    reply = ask(claude, history, max_tokens=8)
    plain = ask(claude, without, max_tokens=8)
    # the second prompt is read from the first's cache: the prompt is its input and cache reads together
    prompt = [r.usage.input_tokens + r.usage.cache_read_input_tokens for r in (reply, plain)]
    assert reply.content[0].text and prompt[0] == prompt[1] and plain.usage.cache_read_input_tokens > 0
    assert reply.speculative["tokens"] == plain.speculative["tokens"]


def test_server_tools_and_a_thinking_budget_anthropic_refuses_are_a_400_naming_the_field(claude, tool_server):
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    with pytest.raises(anthropic.BadRequestError) as err:
        ask(claude, tools=[*TOOLS, search], max_tokens=4)
    assert err.value.body["error"]["message"].startswith(
        "tools.2: 'web_search_20250305' is not served here: only custom tools")
    for budget, max_tokens in ((512, 4096), (2048, 2048), (None, 4096)):
        thinking = {"type": "enabled"} | ({"budget_tokens": budget} if budget else {})
        with pytest.raises(anthropic.BadRequestError) as err:
            claude.messages.create(model=MODEL, messages=ASK, max_tokens=max_tokens, thinking=thinking)
        assert "thinking.budget_tokens" in err.value.body["error"]["message"]
    # Claude Code asks for interleaved thinking: its budget is the whole turn's, and may pass max_tokens
    beta = {"anthropic-beta": "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"}
    assert claude.messages.create(model=MODEL, messages=ASK, max_tokens=4, thinking={
        "type": "enabled", "budget_tokens": 31999}, extra_headers=beta).stop_reason == "max_tokens"
    with pytest.raises(anthropic.BadRequestError):  # but not under Anthropic's least budget
        claude.messages.create(model=MODEL, messages=ASK, max_tokens=4, extra_headers=beta,
                               thinking={"type": "enabled", "budget_tokens": 512})
    enabled = MessagesRequest(model=MODEL, messages=ASK, max_tokens=2048,
                              thinking={"type": "enabled", "budget_tokens": 1024})
    assert to_chat(enabled).max_tokens == 2048  # a budget Anthropic takes is taken, and changes nothing
    assert healthy(tool_server)


def test_a_schema_nested_too_deeply_is_a_400_under_any(claude, tool_server):
    deep = nested(64)
    with pytest.raises(anthropic.BadRequestError) as err:
        ask(claude, tools=[{"name": "deep", "input_schema": deep}], tool_choice={"type": "any"}, max_tokens=4)
    assert "nested too deeply" in err.value.body["error"]["message"]
    assert healthy(tool_server)


def test_a_forced_call_max_tokens_cuts_stops_at_max_tokens_with_no_block(claude):
    for choice in (NAMED, {"type": "any"}):
        reply = ask(claude, tools=TOOLS, tool_choice=choice, max_tokens=12)
        assert (reply.content, reply.stop_reason, reply.usage.output_tokens) == ([], "max_tokens", 12)
        events = [e for e in events_of(claude, max_tokens=12, tools=TOOLS, tool_choice=choice) if e.type != "ping"]
        assert [e.type for e in events] == ["message_start", "message_delta", "message_stop"]
        assert events[1].delta.stop_reason == "max_tokens"


# ---- structured outputs ----------------------------------------------------------------------------


class Operation(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")  # the schema closes the object: a random model ends it
    kind: Literal["add", "sub"]
    n: Literal[1, 2, 3]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_structured_outputs_parse_through_the_sdk_and_drafting_changes_no_token(claude, stream):
    """`beta.messages.parse(output_format=...)` (the SDK sends `output_config.format`) and the older
    `output_format`: the answer is the schema's JSON, token for token what plain constrained decoding writes."""
    asked = [{"role": "user", "content": "An operation as JSON."}]
    if stream:
        with claude.beta.messages.stream(model=MODEL, max_tokens=64, messages=asked, output_format=Operation,
                                         extra_body=greedy("ngram")) as events:
            parsed = events.get_final_message().parsed_output
    else:
        parsed = claude.beta.messages.parse(model=MODEL, max_tokens=64, messages=asked, output_format=Operation,
                                            extra_body=greedy("ngram")).parsed_output
    assert isinstance(parsed, Operation)
    fmt = {"type": "json_schema", "schema": Operation.model_json_schema()}
    replies = [claude.messages.create(model=MODEL, max_tokens=64, messages=asked, extra_body=greedy(d, output_format=fmt))
               for d in ("none", "drafter")]
    assert replies[0].speculative["tokens"] == replies[1].speculative["tokens"]
    assert Operation.model_validate_json(replies[1].content[0].text) == parsed


def test_a_structured_output_it_cannot_honour_is_a_400_in_anthropics_shape(tool_server):
    reply = httpx.post(f"{tool_server}/v1/messages", timeout=30, json={
        "model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}],
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "no such type"}}}})
    assert reply.status_code == 400, reply.text
    assert reply.json()["type"] == "error" and reply.json()["error"]["type"] == "invalid_request_error"
    assert healthy(tool_server)
