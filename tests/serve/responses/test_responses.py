"""OpenAI's Responses API through OpenAI's own client: text whole and streamed (its typed events in
order, numbered), a function_call round trip, a named and a required tool choice, `text.format`,
greedy answers equal to the engine's on the same rendered prompt, every event and response valid
against the client's own types, and errors in OpenAI's shape with their status, the server serving
on after each."""

from __future__ import annotations

import json
from typing import get_args

import httpx
import pytest

from specmlx.serve.errors import APIError
from specmlx.serve.reply import Feed
from specmlx.serve.responses.protocol import ResponsesRequest
from specmlx.serve.responses.translate import echoed, to_chat
from specmlx.serve.responses.render import ResponseReply

from ..conftest import KEY, MODEL, healthy, sse_events, start
from ..test_tools import CITY, TOKENS, answer_around_calls, engine_tokens, nested, reader, tool_loaded, tool_server  # noqa: F401

openai = pytest.importorskip("openai")
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402

TOOLS = [{"type": "function", "name": "weather", "description": "The forecast for a city.", "parameters": CITY},
         {"type": "function", "name": "now", "parameters": {"type": "object", "properties": {},
                                                            "additionalProperties": False}}]
ASK = "The weather in Paris?"
NAMED = {"type": "function", "name": "weather"}
# The client's type of each event, by its `type` (its union is discriminated by the client, not pydantic).
EVENTS = {get_args(kind.model_fields["type"].annotation)[0]: kind
          for kind in get_args(get_args(ResponseStreamEvent)[0])}
ECHO = echoed(ResponsesRequest(model=MODEL, input=ASK, tools=TOOLS))


def greedy(drafter: str = "drafter") -> dict:
    return {"speculative": {"drafter": drafter, "sources": True}}


@pytest.fixture()
def client(tool_server):
    with openai.OpenAI(base_url=f"{tool_server}/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def ask(client, input=ASK, drafter="drafter", max_output_tokens=TOKENS, **fields):
    return client.responses.create(model=MODEL, input=input, max_output_tokens=max_output_tokens, temperature=0,
                                   extra_body=greedy(drafter), **fields)


def events_of(client, input=ASK, max_output_tokens=TOKENS, **fields) -> list:
    return list(client.responses.create(model=MODEL, input=input, max_output_tokens=max_output_tokens, stream=True,
                                        temperature=0, extra_body=greedy(), **fields))


def typed(event: dict) -> None:
    """The event valid as the client's own type of it, strictly."""
    EVENTS[event["type"]].model_validate(event)


def valid(response) -> None:
    """The response as the client's own types hold it, strictly (the client itself reads it leniently)."""
    Response.model_validate(response.model_dump(exclude_unset=True))


# ---- text ------------------------------------------------------------------------------------------


def test_a_text_answer_is_a_response_with_usage_and_speculative(client, tool_server):
    reply = ask(client, max_output_tokens=16, store=False, metadata={"who": "someone"}, user="u",
                prompt_cache_key="k", truncation="disabled", include=["reasoning.encrypted_content"])
    valid(reply)
    assert reply.object == "response" and reply.id.startswith("resp_") and reply.model == MODEL
    [message] = reply.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert [p.type for p in message.content] == ["output_text"] and reply.output_text == message.content[0].text
    assert reply.output_text
    if reply.status == "incomplete":
        assert reply.incomplete_details.reason == "max_output_tokens" and message.status == "incomplete"
    else:
        assert reply.status == "completed" and reply.incomplete_details is None
    usage = reply.usage
    assert usage.input_tokens > 5 and usage.output_tokens == len(reply.speculative["tokens"]) <= 16
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0 and usage.input_tokens_details.cached_tokens >= 0
    assert reply.speculative["drafter"] == "drafter" and reply.timings["prompt_ms"] >= 0
    assert reply.max_output_tokens == 16 and reply.tools == [] and reply.tool_choice == "auto"
    assert healthy(tool_server)


def test_a_cut_answer_is_incomplete(client):
    reply = ask(client, max_output_tokens=1)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 1


TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added"]
TEXT_END = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]


def test_a_streamed_answer_comes_in_typed_events_that_reassemble_the_whole(client, tool_server):
    whole = ask(client)
    events = events_of(client)
    kinds = [e.type for e in events]
    deltas = len(kinds) - len(TEXT_EVENTS) - len(TEXT_END) - 1
    assert deltas >= 1 and kinds == TEXT_EVENTS + ["response.output_text.delta"] * deltas + TEXT_END + [
        f"response.{whole.status}"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for e in events:
        typed(e.model_dump(exclude_unset=True))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-4].text == events[-3].part.text == events[-2].item.content[0].text
    item_id = events[2].item.id
    assert all(e.item_id == item_id and e.output_index == 0 for e in events[3:-2])
    final = events[-1].response
    assert final.output_text == text and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens and final.id == events[0].response.id
    assert final.speculative["drafter"] == "drafter"
    # Each piece's tokens ride on its last event: together they are the whole answer's.
    assert [t for e in events if getattr(e, "speculative", None) for t in e.speculative["tokens"]] == \
        whole.speculative["tokens"]
    assert healthy(tool_server)


def test_a_request_shaped_as_codex_sends_one_streams_to_its_end(tool_server):
    """Codex's fields as it sends them with `store = false`: the history in input (a developer message, a
    user's input_text), function tools with `strict`, fields that change nothing here, and a stream."""
    shell = {"type": "function", "name": "shell", "description": "Runs a command.", "strict": False,
             "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                            "required": ["command"], "additionalProperties": False}}
    body = {"model": MODEL, "instructions": "You are a coding agent.", "tools": [shell], "tool_choice": "auto",
            "parallel_tool_calls": False, "reasoning": None, "store": False, "stream": True, "include": [],
            "prompt_cache_key": "a-session", "text": {"verbosity": "low"}, "max_output_tokens": 8, "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Sandboxed."}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}]}
    with httpx.stream("POST", f"{tool_server}/v1/responses", json=body, timeout=60) as reply:
        events = typed_events(reply.read().decode())
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["item"] for e in events if e["type"] == "response.output_item.done"] == events[-1]["response"]["output"]
    assert events[-1]["response"]["parallel_tool_calls"] is False and events[-1]["response"]["tools"] == [shell]


# ---- tools -----------------------------------------------------------------------------------------


def check_call(item) -> dict:
    arguments = json.loads(item.arguments)
    assert item.type == "function_call" and item.name == "weather" and item.status == "completed"
    assert item.call_id.startswith("call_") and item.id.startswith("fc_")
    assert arguments["city"] in ("Paris", "Oslo") and 1 <= arguments["days"] <= 9
    return arguments


def round_trip(first) -> list[dict]:
    """The conversation after `first`'s call, as a client sends it back: the call item, then its output."""
    [call] = [o for o in first.output if o.type == "function_call"]
    return [{"role": "user", "content": ASK}, *[o.model_dump(exclude_none=True) for o in first.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}]


def test_a_function_call_round_trip_ends_in_a_text_answer(client, tool_server):
    first = ask(client, tools=TOOLS, tool_choice=NAMED)
    valid(first)
    assert first.status == "completed" and [o.type for o in first.output] == ["function_call"]
    check_call(first.output[0])
    assert first.tool_choice.name == "weather" and [t.name for t in first.tools] == ["weather", "now"]
    second = ask(client, round_trip(first), tools=TOOLS)
    valid(second)
    assert [o.type for o in second.output] == ["message"] and second.output_text
    assert second.usage.input_tokens > first.usage.input_tokens + 20  # the call and its output are in it
    assert healthy(tool_server)


def test_a_streamed_call_puts_together_the_whole_answers_call(client):
    whole = ask(client, tools=TOOLS, tool_choice=NAMED)
    events = events_of(client, tools=TOOLS, tool_choice=NAMED)
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                        "response.function_call_arguments.delta",
                                        "response.function_call_arguments.done", "response.output_item.done",
                                        "response.completed"]
    for e in events:
        typed(e.model_dump(exclude_unset=True))
    added, delta, done, item_done = events[2:6]
    assert added.item.type == "function_call" and added.item.arguments == "" and added.item.status == "in_progress"
    assert delta.item_id == done.item_id == added.item.id == item_done.item.id
    assert json.loads(delta.delta) == json.loads(done.arguments) == json.loads(whole.output[0].arguments)
    check_call(item_done.item)
    assert events[-1].response.output[0].call_id == item_done.item.call_id


def test_required_makes_calls_of_the_tools(client):
    reply = ask(client, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    calls = [o for o in reply.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name in ("weather", "now") and reply.parallel_tool_calls is False
    json.loads(calls[0].arguments)


def test_a_json_schema_format_gives_json_its_schema_validates(client):
    fmt = {"type": "json_schema", "name": "forecast", "schema": CITY, "strict": True}
    reply = ask(client, "A city as JSON.", text={"format": fmt})
    assert reply.status == "completed" and reply.text.format.type == "json_schema"
    answer = json.loads(reply.output_text)
    assert answer["city"] in ("Paris", "Oslo") and 1 <= answer["days"] <= 9
    whole = ask(client, "JSON please.", text={"format": {"type": "json_object"}})
    if whole.status == "completed":  # else max_output_tokens cut it
        assert isinstance(json.loads(whole.output_text), dict)


@pytest.mark.parametrize("drafter", ["drafter", "ngram"])
def test_greedy_answers_equal_the_engines_on_the_same_prompt(client, tool_loaded, drafter):
    """Both steps of a call's round trip, each equal to the engine's answer to the chat request it becomes."""
    fields = {"tools": TOOLS, "tool_choice": NAMED, "instructions": "Use tools."}
    first = ask(client, drafter=drafter, **fields)
    later = {"input": round_trip(first), "tools": TOOLS}
    second = ask(client, drafter=drafter, **later)
    for reply, sent in ((first, {"input": ASK} | fields), (second, later)):
        request = ResponsesRequest(model=MODEL, max_output_tokens=TOKENS, **sent)
        assert reply.speculative["tokens"] == engine_tokens(tool_loaded, drafter, to_chat(request))


# ---- the translation -------------------------------------------------------------------------------


def test_items_become_the_chat_conversation_they_hold():
    request = ResponsesRequest.model_validate({
        "model": MODEL, "instructions": "S", "tools": TOOLS, "max_output_tokens": 8, "parallel_tool_calls": False,
        "tool_choice": "required", "reasoning": {"effort": "low"}, "input": [
            {"role": "user", "content": "a"}, {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "b"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking.",
                                                                  "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call", "call_id": "call_2", "name": "now", "arguments": ""},
            {"type": "function_call_output", "call_id": "call_1", "output": "down"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "9"}]},
            {"role": "user", "content": "and?"}]})
    chat = to_chat(request)
    call = {"type": "function"}
    assert [m.model_dump(exclude_none=True) for m in chat.messages] == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "developer", "content": "b"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            call | {"id": "call_1", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
            call | {"id": "call_2", "function": {"name": "now", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "down"},
        {"role": "tool", "tool_call_id": "call_2", "content": "9"}, {"role": "user", "content": "and?"}]
    assert [t.model_dump(exclude_none=True) for t in chat.tools] == [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
    assert chat.tool_choice == "required" and chat.parallel_tool_calls is False and chat.max_tokens == 8
    assert chat.temperature is None and chat.response_format is None
    named = to_chat(ResponsesRequest(model=MODEL, input="x", tools=TOOLS, tool_choice=NAMED,
                                     text={"format": {"type": "json_schema", "name": "f", "schema": CITY}}))
    assert named.tool_choice.model_dump() == {"type": "function", "function": {"name": "weather"}}
    assert named.response_format.json_schema.schema_ == CITY and named.response_format.json_schema.name == "f"
    assert [m.role for m in named.messages] == ["user"]


def typed_events(text: str) -> list[dict]:
    """A stream's events' data, each named by its type and valid as the client's type of it."""
    out = sse_events(text)
    for event in out:
        typed(event)
    return out


def test_text_around_calls_streams_as_items_in_order_and_whole_as_the_same_items():
    tokens, done = answer_around_calls()
    whole = ResponseReply(MODEL, 9, False, ECHO).whole(Feed(reader()).whole(tokens, done), done)
    Response.model_validate(whole)
    shown = [(o["type"], o["content"][0]["text"] if o["type"] == "message" else json.loads(o["arguments"]))
             for o in whole["output"]]
    assert shown == [("message", "Let me look."), ("function_call", {"city": "Paris", "days": 2}),
                     ("function_call", {"city": "Oslo", "days": 2}), ("message", " Done.")]
    reply, feed = ResponseReply(MODEL, 9, True, ECHO), Feed(reader())
    events = typed_events(reply.first() + "".join(reply.piece(feed.piece([t])) for t in tokens)
                          + reply.last(feed.last(done), done))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e for e in events if e["type"] == "response.output_item.added"]
    finished = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == [e["output_index"] for e in finished] == [0, 1, 2, 3]
    for start_, end in zip(added, finished):  # each item ends before the next begins
        assert events.index(start_) < events.index(end) < (events.index(added[end["output_index"] + 1])
                                                           if end["output_index"] < 3 else len(events))
    final = events[-1]["response"]
    assert final["status"] == "completed" and [e["item"] for e in finished] == final["output"]
    assert [(o["type"], o.get("call_id", "")[:5]) for o in final["output"]] == [
        ("message", ""), ("function_call", "call_"), ("function_call", "call_"), ("message", "")]
    # Tokens inside a call, which no event carries as they come, ride on the next event.
    assert [t for e in events if "speculative" in e for t in e["speculative"]["tokens"]] == [t.token for t in tokens]


def test_a_stream_that_cannot_finish_ends_with_an_error_event_and_response_failed():
    reply = ResponseReply(MODEL, 9, False, ECHO)
    events = typed_events(reply.first() + reply.failed(APIError(503, "lost", "server_stopping")))
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error", "response.failed"]
    assert events[2] == {"type": "error", "code": "server_stopping", "message": "lost", "param": None,
                         "sequence_number": 2}
    assert events[3]["response"]["status"] == "failed" and events[3]["response"]["error"]["message"] == "lost"


# ---- errors ----------------------------------------------------------------------------------------


def openai_error(reply: httpx.Response, status: int, kind: str) -> dict:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == kind
    return error


BAD = [
    # (name, body fields, the param named, words of the message)
    ("an empty input", {"input": ""}, "input", "input is empty"),
    ("no items", {"input": []}, "input", "input is empty"),
    ("a tool whose parameters are not an object's", {"tools": [{"type": "function", "name": "f", "parameters": {
        "type": "array"}}]}, "tools.0.parameters", "JSON schema of an object"),
    ("an output for an unknown call", {"input": [{"role": "user", "content": ASK}, {
        "type": "function_call_output", "call_id": "call_9", "output": "ok"}]}, "input.1.call_id", "'call_9'"),
    ("a previous response", {"previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
    ("a stored conversation", {"conversation": "conv_1"}, "conversation", "keeps no responses"),
    ("a tool that is not a function", {"tools": [*TOOLS, {"type": "web_search"}]}, "tools.2.type",
     "'web_search' is not served here: only function tools"),
    ("an image", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.content.0.type", "'input_image'"),
    ("an item kept on a server", {"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type",
     "'item_reference'"),
    ("arguments that are not JSON", {"input": [{"type": "function_call", "call_id": "c", "name": "weather",
                                                "arguments": "{"}], "tools": TOOLS}, "input.0.arguments", "not JSON"),
    ("a choice of an unknown function", {"tools": TOOLS, "tool_choice": {"type": "function", "name": "f"}},
     "tool_choice", "'f'"),
    ("a json_schema format without its schema", {"text": {"format": {"type": "json_schema", "name": "x"}}},
     "text.format.schema", "schema"),
    ("a schema the grammar engine cannot compile", {"text": {"format": {"type": "json_schema", "name": "x", "schema": {
        "type": "no such type"}}}}, "text.format.schema", "no such type"),
    ("a temperature past 2", {"temperature": 2.5}, "temperature", "temperature"),
    ("two tools of one name", {"tools": [*TOOLS, TOOLS[0]]}, "tools.2.name", "tools.0 is named 'weather' too"),
]


@pytest.mark.parametrize("name,fields,param,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_400_in_openais_shape_and_the_server_serves_on(tool_server, name, fields, param, words):
    body = {"model": MODEL, "input": ASK, "max_output_tokens": 4} | fields
    error = openai_error(httpx.post(f"{tool_server}/v1/responses", json=body, timeout=30), 400,
                         "invalid_request_error")
    assert error["param"] == param and words in error["message"]
    assert healthy(tool_server)


def test_an_oversize_body_is_a_413_in_openais_shape(tool_server):
    big = {"model": MODEL, "max_output_tokens": 4, "input": "x" * (2 << 20)}
    openai_error(httpx.post(f"{tool_server}/v1/responses", json=big, timeout=30), 413, "invalid_request_error")
    assert healthy(tool_server)


def test_a_missing_or_wrong_api_key_is_a_401_in_openais_shape(tool_loaded):
    background, _ = start(tool_loaded, api_key=KEY)
    with background as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0, timeout=60) as wrong:
            with pytest.raises(openai.AuthenticationError) as err:
                wrong.responses.create(model=MODEL, input=ASK, max_output_tokens=2)
        assert err.value.status_code == 401 and err.value.body["code"] == "invalid_api_key"
        missing = httpx.post(f"{url}/v1/responses", json={"model": MODEL, "input": ASK}, timeout=30)
        assert openai_error(missing, 401, "authentication_error")["code"] == "invalid_api_key"
        with openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60) as right:
            assert right.responses.create(model=MODEL, input=ASK, max_output_tokens=2).usage.output_tokens >= 1
        assert healthy(url)


def test_a_text_format_schema_nested_too_deeply_is_a_400(client, tool_server):
    deep = nested(64)
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, max_output_tokens=4, text={"format": {"type": "json_schema", "name": "deep", "schema": deep}})
    assert "nested too deeply" in err.value.body["message"]
    assert healthy(tool_server)


def test_a_forced_call_max_output_tokens_cuts_is_incomplete_with_no_item(client):
    for choice in (NAMED, "required"):
        reply = ask(client, tools=TOOLS, tool_choice=choice, max_output_tokens=12)
        assert (reply.status, reply.output, reply.usage.output_tokens) == ("incomplete", [], 12)
        events = events_of(client, tools=TOOLS, tool_choice=choice, max_output_tokens=12)
        assert [e.type for e in events] == ["response.created", "response.in_progress", "response.incomplete"]
        assert events[-1].response.output == []
