"""Tool calls on /v1/chat/completions: the answer's calls read back (whole and streamed, a slip as text),
the conversation rendered through the model's template (on the real Qwen2.5-Coder tokenizer, slow:
fetched at first use), `required` and a named function held to the model's own call syntax by a grammar, greedy
answers equal to the engine's on the same prompt, and bad input refused by its field."""

from __future__ import annotations

import json
from unittest.mock import ANY

import httpx
import pytest

from specmlx.drafters import NGRAM, NONE
from specmlx.engine import Engine, GenerationConfig
from specmlx.events import Source, TokenEvent
from specmlx.loading import load_tokenizer
from specmlx.prompting import encode_chat
from specmlx.serve.calls import Call, CallReader
from specmlx.serve.errors import APIError
from specmlx.serve.jobs import Done
from specmlx.serve.openai.protocol import ChatRequest
from specmlx.serve.tools import forced_calls, template_messages, template_tools
from specmlx.stats import GenerationStats

from .conftest import MODEL, on_thread, start

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer",
                                                                                        "minimum": 1, "maximum": 9}},
        "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "The forecast for a city.",
                                           "parameters": CITY}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
                                                                         "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "The weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "weather"}}
TOKENS = 128  # a named call takes about 100 of the tiny vocabulary's tokens


def json_parse(text, tools=None):  # mlx-lm's json_tools parser, as the tokenizer wrapper holds it
    return json.loads(text.strip())


def reader() -> CallReader:
    return CallReader("<tool_call>", "</tool_call>", json_parse)


CALL = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'


def answer_around_calls() -> tuple[list[TokenEvent], Done]:
    """An answer of text, two calls and text again, 7 characters a token, ended by its end token."""
    text = "Let me look.\n" + CALL + "\n" + CALL.replace("Paris", "Oslo") + " Done."
    tokens = [TokenEvent(i, text[i:i + 7], Source.TARGET) for i in range(0, len(text), 7)]
    stats = GenerationStats(drafter="none", num_draft=0, prompt_tokens=9, generation_tokens=len(tokens), rounds=1,
                            drafted=0, accepted=0, accepted_histogram=(1,), target_forwards=1, host_syncs=1,
                            prefill_s=0.1, decode_s=0.2, draft_s=0.0, verify_s=0.0, profiled=False,
                            finish_reason="eos")
    return tokens, Done(stats, "", 0, 0.0)


# ---- reading calls out of an answer's text ---------------------------------------------------------


def read(text: str, step: int | None = None) -> list:
    """The pieces of `text` fed whole, or `step` characters at a time, with the reader's end."""
    r = reader()
    steps = [text] if step is None else [text[i:i + step] for i in range(0, len(text), step)]
    return [p for s in steps for p in r.feed(s)] + r.finish()


def texts_and_calls(pieces) -> tuple[str, list[tuple[int, str, dict]]]:
    return ("".join(p for p in pieces if isinstance(p, str)),
            [(p.index, p.name, json.loads(p.arguments)) for p in pieces if isinstance(p, Call)])


def test_a_call_is_read_out_of_the_text_around_it():
    pieces = read("Let me look.\n" + CALL + "\n" + CALL.replace("Paris", "Oslo") + " Done.")
    assert texts_and_calls(pieces) == ("Let me look. Done.", [(0, "weather", {"city": "Paris", "days": 2}),
                                                              (1, "weather", {"city": "Oslo", "days": 2})])
    assert read(CALL + "\n" + CALL + "\n") == [Call(0, ANY, "weather", ANY), Call(1, ANY, "weather", ANY)]
    assert texts_and_calls(read("a \n"))[0] == "a \n" and texts_and_calls(read(CALL + "\nb\n"))[0] == "\nb\n"
    call = next(p for p in pieces if isinstance(p, Call))
    assert call.id.startswith("call_") and len(call.id) > 10
    assert call.whole() == {"id": call.id, "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Paris", "days": 2}'}}


@pytest.mark.parametrize("step", [1, 2, 5, 13])
def test_streamed_text_is_read_as_the_whole_is_and_no_part_of_a_call_is_shown(step):
    text = "Sure <tool_cal>? or </tool_call> alone.\n" + CALL + "\nafter <tool_c"
    whole = texts_and_calls(read(text))
    assert texts_and_calls(read(text, step)) == whole
    assert whole == ("Sure <tool_cal>? or </tool_call> alone.\nafter <tool_c",  # a marker counts whole
                     [(0, "weather", {"city": "Paris", "days": 2})])
    r, shown = reader(), ""
    for i in range(0, len(text), step):
        shown += "".join(p for p in r.feed(text[i:i + step]) if isinstance(p, str))
    assert '"name"' not in shown and "<tool_call>" not in shown and not shown.endswith("<tool_c")


def test_a_call_that_does_not_parse_is_text_with_a_line_in_the_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_DATA_DIR", str(tmp_path))
    bodies = ('{"name": "weather", "arguments": {"city": ', '["weather"]', '{"name": "f", "arguments": 3}')
    for bad in (f"<tool_call>\n{body}\n</tool_call>" for body in bodies):
        pieces = read("Hm. " + bad + " " + CALL)
        text, calls = texts_and_calls(pieces)
        assert text == "Hm. " + bad and [c[:2] for c in calls] == [(0, "weather")]
    log = (tmp_path / "specmlx.log").read_text().splitlines()
    assert len(log) == 3 and all("a tool call did not parse" in line for line in log)


def test_a_call_the_end_cuts_short_is_text_and_one_max_tokens_cuts_is_dropped():
    assert "".join(read("ok " + CALL[:30])) == "ok " + CALL[:30]
    assert "".join(read("ok <tool_")) == "ok <tool_"  # a held-back start of a marker, at the end
    r = reader()
    assert r.feed("ok \n" + CALL + "\n" + CALL[:30]) == ["ok", Call(0, ANY, "weather", ANY)]
    assert r.finish(length=True) == []  # neither a call nor text: no part of its syntax is shown


# ---- the conversation as the template reads it ---------------------------------------------------


def chat(messages=ASK, **fields) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=messages, **fields)


def conversation(arguments: str = '{"city": "Paris", "days": 2}', call_id: str = "call_1") -> list[dict]:
    return [*ASK, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 C"}]


@pytest.mark.slow
def test_the_conversation_is_qwens_own_rendering_of_it(qwen):
    request = chat(conversation(), tools=TOOLS)
    ids = encode_chat(qwen, template_messages(request, qwen), tools=template_tools(request, qwen))
    text = qwen.decode(ids)
    assert '"name": "weather", "description": "The forecast for a city."' in text
    assert text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris", '
                         '"days": 2}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 21 C\n'
                         '</tool_response><|im_end|>\n<|im_start|>assistant\n')
    assert ids.count(qwen.convert_tokens_to_ids("<tool_call>")) == text.count("<tool_call>") == 3  # each one token


def matcher(grammar, tokenizer):
    from llguidance import LLMatcher

    from specmlx.grammar import grammar_tokenizer

    return LLMatcher(grammar_tokenizer(tokenizer, len(tokenizer.vocab), tokenizer.eos_token_ids), grammar.text)


def accepts(grammar, tokenizer, text: str) -> bool:
    """Whether the grammar takes `text` as the model writes it, to an end."""
    m, ids = matcher(grammar, tokenizer), tokenizer.encode(text, add_special_tokens=False)
    return m.validate_tokens(ids) == len(ids) and m.consume_tokens(ids) and m.is_accepting()


@pytest.mark.slow
def test_required_and_named_choices_force_qwens_own_call_syntax(qwen):
    required = forced_calls(chat(tools=TOOLS, tool_choice="required"), qwen)
    named = forced_calls(chat(tools=TOOLS, tool_choice=NAMED), qwen)
    now = '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    assert accepts(required, qwen, CALL) and accepts(required, qwen, CALL + "\n" + now)
    assert accepts(named, qwen, CALL) and not accepts(named, qwen, CALL + "\n" + CALL)
    assert not accepts(named, qwen, now)
    one = forced_calls(chat(tools=TOOLS, tool_choice="required", parallel_tool_calls=False), qwen)
    assert accepts(one, qwen, now) and not accepts(one, qwen, now + "\n" + now)
    for wrong in ("Sure. " + CALL, CALL.replace('"Paris"', '"Rome"'), CALL.replace(', "days": 2', ""),
                  CALL.replace("<tool_call>\n", "<tool_call>")):
        assert not accepts(required, qwen, wrong), wrong
    # The call starts with Qwen's one <tool_call> token, never with its text spelt out.
    m = matcher(required, qwen)
    assert m.validate_tokens(qwen.encode("<", add_special_tokens=False)) == 0
    assert m.validate_tokens([qwen.convert_tokens_to_ids("<tool_call>")]) == 1


# ---- refusals, without a server ------------------------------------------------------------------


def refused(call, *args) -> tuple[int, str]:
    with pytest.raises(APIError) as err:
        call(*args)
    return err.value.status, err.value.param


@pytest.fixture(scope="module")
def tiny_tools(tool_dirs):
    """The tiny tool-calling target's tokenizer, as the server loads it (mlx-lm's wrapper: json_tools)."""
    return load_tokenizer("target", tool_dirs["target"])


def test_what_cannot_be_rendered_or_enforced_is_refused_by_its_field(tiny_tools):
    qwen = tiny_tools  # the same template and syntax, in miniature
    not_object = [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]
    assert refused(template_tools, chat(tools=not_object), qwen) == (400, "tools.0.function.parameters")
    assert refused(template_messages, chat(conversation(call_id="call_9"), tools=TOOLS), qwen) == (
        400, "messages.2.tool_call_id")
    assert refused(template_messages, chat(conversation("{city"), tools=TOOLS), qwen) == (
        400, "messages.1.tool_calls.0.function.arguments")
    assert refused(forced_calls, chat(tool_choice="required"), qwen) == (400, "tool_choice")
    assert refused(forced_calls, chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "x"}}),
                   qwen) == (400, "tool_choice")
    assert refused(forced_calls, chat(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}),
                   qwen) == (400, "response_format")
    bad_schema = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "no such type"}}}}}]
    assert refused(forced_calls, chat(tools=bad_schema, tool_choice="required"), qwen) == (
        400, "tools.0.function.parameters")
    assert forced_calls(chat(tools=TOOLS, tool_choice="auto"), qwen) is None
    assert forced_calls(chat(tools=TOOLS, tool_choice="none"), qwen) is None


def test_a_syntax_without_a_grammar_here_refuses_required_but_not_auto(tiny_tools, monkeypatch):
    from mlx_lm.tool_parsers import glm47

    assert forced_calls(chat(tools=TOOLS, tool_choice="required"), tiny_tools) is not None
    monkeypatch.setattr(tiny_tools, "_tool_parser", glm47.parse_tool_call)
    assert refused(forced_calls, chat(tools=TOOLS, tool_choice="required"), tiny_tools) == (400, "tool_choice")
    assert forced_calls(chat(tools=TOOLS, tool_choice="auto"), tiny_tools) is None


def test_arguments_are_an_object_where_the_schema_leaves_the_type_out(tiny_tools):
    untyped = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": "integer"}}}}}]
    grammar = forced_calls(chat(tools=untyped, tool_choice="required"), tiny_tools)
    call = '<tool_call>\n{"name": "f", "arguments": %s}\n</tool_call>'
    assert accepts(grammar, tiny_tools, call % '{"a": 1}') and accepts(grammar, tiny_tools, call % "{}")
    assert not accepts(grammar, tiny_tools, call % "3") and not accepts(grammar, tiny_tools, call % '{"a": "x"}')


def test_a_bench_prompt_with_tools_encodes_as_the_chat_route_renders_its_request(tiny_tools):
    """`specmlx bench` measures the ids a chat request with those tools gets: its tools.jsonl's rows, and ours."""
    from specmlx.prompting import PromptRow, encode_prompts, packaged_prompts_path, read_prompts
    from specmlx.serve.prompts import chat_prompt

    rows = read_prompts(packaged_prompts_path().with_name("tools.jsonl"))
    rows += [PromptRow("ours", "tool-call", ASK[0]["content"], tools=tuple(TOOLS)), PromptRow("bare", "", "Hi.")]
    assert sum(bool(r.tools) for r in rows) == 5
    for row, encoded in zip(rows, encode_prompts(rows, tiny_tools, chat=True)):
        asked = chat([{"role": "user", "content": row.prompt}], **({"tools": list(row.tools)} if row.tools else {}))
        assert list(encoded.tokens) == chat_prompt(tiny_tools, asked), row.id
        plain = tiny_tools.apply_chat_template([{"role": "user", "content": row.prompt}], add_generation_prompt=True)
        assert (list(encoded.tokens) == plain) is not bool(row.tools), row.id  # no tools: the ids as before
    assert "weather" in tiny_tools.decode(list(encode_prompts(rows[-2:-1], tiny_tools, chat=True)[0].tokens))


def test_tools_and_their_calls_on_a_model_without_tool_calling_are_refused(tokenizer):
    assert refused(template_tools, chat(tools=TOOLS), tokenizer) == (400, "tools")
    assert refused(template_messages, chat(conversation()), tokenizer) == (400, "messages.1.role")


# ---- a tiny model that calls tools, behind the server ------------------------------------------------


@pytest.fixture(scope="module")
def tool_loaded(tool_dirs):
    with on_thread(str(tool_dirs["target"]), [str(tool_dirs["drafter"]), NGRAM, NONE]) as held:
        yield held


@pytest.fixture(scope="module")
def tool_server(tool_loaded):
    background, _ = start(tool_loaded)
    with background as url:
        yield url


@pytest.fixture()
def tool_client(tool_server):
    from openai import OpenAI

    with OpenAI(base_url=f"{tool_server}/v1", api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def ask(client, messages=ASK, drafter="drafter", max_tokens=TOKENS, **fields):
    return client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=max_tokens,
                                          temperature=0, extra_body={"speculative": {"drafter": drafter,
                                                                                     "sources": True}}, **fields)


def engine_tokens(tool_loaded, drafter: str, request: ChatRequest) -> list[int]:
    """What the engine alone answers, greedy, to the request's prompt as the template renders it, under the
    grammar its tool_choice demands."""
    mlx, target, drafters = tool_loaded
    tokenizer = target.tokenizer
    prompt = encode_chat(tokenizer, template_messages(request, tokenizer), tools=template_tools(request, tokenizer))
    grammar = forced_calls(request, tokenizer)

    def run():
        engine = Engine(target.model, drafters[drafter].fresh(), tokenizer)
        return [e.token for e in engine.generate(prompt, GenerationConfig(max_tokens=TOKENS,
                                                                          grammar=grammar)).token_events()]

    return mlx.call(run)


def streamed(client, messages=ASK, **fields) -> tuple[str, dict[int, dict], list[str]]:
    """A streamed answer's text, its calls put together from their fragments, and its finish reasons."""
    text, calls, finish = "", {}, []
    for chunk in ask(client, messages, stream=True, **fields):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for part in choice.delta.tool_calls or []:
                call = calls.setdefault(part.index, {"id": None, "name": None, "arguments": ""})
                call["id"] = part.id or call["id"]
                call["name"] = (part.function.name if part.function else None) or call["name"]
                call["arguments"] += (part.function.arguments or "") if part.function else ""
            finish += [choice.finish_reason] if choice.finish_reason else []
    return text, calls, finish


def check_call(call) -> dict:
    arguments = json.loads(call.function.arguments)
    assert call.type == "function" and call.function.name == "weather" and call.id.startswith("call_")
    assert arguments["city"] in ("Paris", "Oslo") and 1 <= arguments["days"] <= 9
    return arguments


@pytest.mark.parametrize("drafter", ["drafter", "ngram"])
def test_a_two_step_conversation_with_a_named_call_equals_the_engine(tool_client, tool_loaded, drafter):
    first = ask(tool_client, drafter=drafter, tool_choice=NAMED)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    check_call(call)
    assert first.speculative["tokens"] == engine_tokens(tool_loaded, drafter, chat(tools=TOOLS, tool_choice=NAMED))
    history = [*ASK, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    second = ask(tool_client, history, drafter=drafter)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert second.speculative["tokens"] == engine_tokens(tool_loaded, drafter, chat(history, tools=TOOLS))
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 20  # the call and its result are in it


def test_a_streamed_call_puts_together_the_whole_answers_call(tool_client):
    whole = ask(tool_client, tool_choice=NAMED).choices[0]
    text, calls, finish = streamed(tool_client, tool_choice=NAMED)
    assert text == "" and finish == ["tool_calls"] and list(calls) == [0]
    assert calls[0]["name"] == "weather" and calls[0]["id"].startswith("call_")
    assert calls[0]["arguments"] == whole.message.tool_calls[0].function.arguments
    history = [*ASK, whole.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": whole.message.tool_calls[0].id, "content": "sunny"}]
    final = ask(tool_client, history).choices[0]
    text, calls, finish = streamed(tool_client, history)
    assert text == (final.message.content or "") and finish == [final.finish_reason]
    assert len(calls) == len(final.message.tool_calls or [])


def test_required_makes_one_call_or_more_each_of_a_tool(tool_client):
    choice = ask(tool_client, tool_choice="required").choices[0]
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.function.name in ("weather", "now")
        json.loads(call.function.arguments)
    if choice.finish_reason == "tool_calls":  # else max_tokens cut a later call: its text is the content
        assert choice.message.content is None


def test_none_renders_the_tools_and_reads_no_calls(tool_client, tool_loaded):
    reply = ask(tool_client, tool_choice="none")
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason in ("stop", "length")
    assert reply.speculative["tokens"] == engine_tokens(tool_loaded, "drafter", chat(tools=TOOLS, tool_choice="none"))
    without = tool_client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
    assert reply.usage.prompt_tokens > without.usage.prompt_tokens + 20  # the tools are in its prompt


def test_the_model_list_says_which_model_calls_tools(tool_client, client):
    assert tool_client.models.list().data[0].capabilities == {"tools": True, "images": False}
    assert client.models.list().data[0].capabilities == {"tools": False, "images": False}
    assert client.models.list().data[0].context_window > 0


NOT_OBJECT = [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]
BAD = [
    # (name, body fields, param)
    ("a schema that is not an object's", {"tools": NOT_OBJECT}, "tools.0.function.parameters"),
    ("a result for an unknown call", {"messages": conversation(call_id="call_9"), "tools": TOOLS},
     "messages.2.tool_call_id"),
    ("a choice of a function not among the tools", {"tools": TOOLS, "tool_choice": {
        "type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ("a function name with a space", {"tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools.0.function.name"),
    ("two tools of one name", {"tools": [*TOOLS, TOOLS[1]]}, "tools.2.function.name"),
    ("an image part", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages.0.content.0.type"),
]


@pytest.mark.parametrize("name,fields,param", BAD, ids=[b[0] for b in BAD])
def test_bad_tools_are_a_400_naming_the_field_and_the_server_serves_on(tool_server, name, fields, param):
    reply = httpx.post(f"{tool_server}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": ASK, "max_tokens": 4} | fields)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]
    assert httpx.get(f"{tool_server}/health", timeout=30).json()["status"] == "ok"


def test_tools_on_a_model_without_tool_calling_are_a_400(server):
    url, _ = server
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                       json={"model": MODEL, "messages": ASK, "tools": TOOLS})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tools"
    assert "no tool calling" in reply.json()["error"]["message"]
    assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"


# ---- what is not served, what is too deep, and a call max_tokens cuts ---------------------------------


def test_images_and_audio_are_refused_naming_the_part_and_its_place(tool_client, tool_server):
    from openai import BadRequestError

    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
             {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]
    for part in parts:
        with pytest.raises(BadRequestError) as err:
            tool_client.chat.completions.create(model=MODEL, max_tokens=4, messages=[
                *ASK, {"role": "assistant", "content": "Which?"},
                {"role": "user", "content": [{"type": "text", "text": "This one:"}, part]}])
        said = f"messages.2.content.1: {part['type']!r} is not served here: only text parts"
        assert err.value.body["message"] == said
        assert err.value.body["param"] == "messages.2.content.1.type"
    assert httpx.get(f"{tool_server}/health", timeout=30).json()["status"] == "ok"


def nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("depth", [63, 64])
def test_a_schema_nested_too_deeply_is_a_400_on_every_grammar_path(tool_client, tool_server, depth):
    from openai import BadRequestError

    deep = [{"type": "function", "function": {"name": "deep", "parameters": nested(depth)}}]
    paths = {"response_format.json_schema.schema": {"response_format": {
                 "type": "json_schema", "json_schema": {"name": "deep", "schema": nested(depth)}}},
             "tools.0.function.parameters": {"tools": deep, "tool_choice": {"type": "function",
                                                                           "function": {"name": "deep"}}},
             "tools.0.function.parameters ": {"tools": deep, "tool_choice": "required"}}
    for param, fields in paths.items():
        with pytest.raises(BadRequestError) as err:
            tool_client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **fields)
        assert err.value.body["param"] == param.strip() and "nested too deeply" in err.value.body["message"]
    assert httpx.get(f"{tool_server}/health", timeout=30).json()["status"] == "ok"


CUT = 12  # tokens: a named call takes about 100, so max_tokens cuts it


def test_a_forced_call_max_tokens_cuts_is_a_length_stop_with_no_call_and_no_syntax(tool_client):
    for choice in (NAMED, "required"):
        whole = ask(tool_client, tool_choice=choice, max_tokens=CUT)
        answer = whole.choices[0]
        assert len(whole.speculative["tokens"]) == CUT and answer.finish_reason == "length"
        assert answer.message.content is None and answer.message.tool_calls is None
        text, calls, finish = streamed(tool_client, tool_choice=choice, max_tokens=CUT)
        assert (text, calls, finish) == ("", {}, ["length"])
