"""Calls forced in Qwen3-Coder's XML syntax (Qwen3.5's and Qwen3.6's, and Qwen3-Coder's own template's): the
grammar takes the calls each template writes and mlx-lm's parser reads back, with arguments valid against the schema,
and nothing else; above temperature 0 the answer is the target's distribution restricted to such
calls (a planted bias fails); behind the server, `required` and Anthropic's `any` come back as calls."""

from __future__ import annotations

import json
from pathlib import Path

import llguidance
import pytest
from mlx_lm.tool_parsers import qwen3_coder
from mlx_lm.tokenizer_utils import TokenizerWrapper, _infer_tool_parser

from specmlx.drafters import ModelDrafter, NGRAM, NONE
from specmlx.prompting import encode_chat
from specmlx.serve.errors import APIError
from specmlx.serve.openai.protocol import ChatRequest, Tool
from specmlx.serve.syntaxes import XmlCalls
from specmlx.serve.tools import call_grammar, forced_calls, template_messages, template_tools

from .. import tiny
from ..test_engine_grammar import exact_constrained, plant_cut_drafts, pvalue, sampled
from ..test_grammar import ToyTokenizer
from .conftest import MODEL, on_thread, start
from .test_tools import accepts

TEMPLATES = Path(__file__).parents[1] / "templates"
TEMPLATE = (TEMPLATES / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
CODER = (TEMPLATES / "Qwen3-Coder.jinja").read_text(encoding="utf-8")  # writes a call's non-string values with `| string`
SPECIALS = tiny.SPECIALS + ["<think>", "</think>", "<tool_call>", "</tool_call>"]
EDIT = {"type": "object", "properties": {
    "path": {"type": "string", "maxLength": 12}, "line": {"type": "integer", "minimum": 1, "maximum": 99},
    "mode": {"enum": ["insert", "replace"]}, "dry": {"type": "boolean"},
    "lines": {"type": "array", "items": {"type": "string"}, "maxItems": 3}, "note": {"type": "string"}},
    "required": ["path", "line"], "additionalProperties": False}
# What a random model can finish within max_tokens: every string bounded.
SMALL = [{"type": "function", "function": {"name": "edit", "description": "Edit a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 8}, "line": EDIT["properties"]["line"]},
    "required": ["path", "line"], "additionalProperties": False}}}]
TOOLS = [{"type": "function", "function": {"name": "edit", "description": "Edit a file.", "parameters": EDIT}},
         {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]


def xml_tokenizer(template: str) -> TokenizerWrapper:
    """A tokenizer of Qwen3.5's special tokens and `template`, with the parser mlx-lm reads its syntax as."""
    trained = tiny.train_tokenizer(specials=SPECIALS, chat_template=template)
    assert _infer_tool_parser(trained) == "qwen3_coder"
    return TokenizerWrapper(trained, tool_parser=qwen3_coder.parse_tool_call, tool_call_start="<tool_call>",
                            tool_call_end="</tool_call>")


@pytest.fixture(scope="module")
def qwen35():
    return xml_tokenizer(TEMPLATE)


@pytest.fixture(scope="module", params=["Qwen3.5-4B", "Qwen3-Coder"])
def xml(request, qwen35):
    """Each template that writes Qwen3-Coder's XML calls."""
    return qwen35 if request.param == "Qwen3.5-4B" else xml_tokenizer(CODER)


def written(tokenizer, name: str, arguments: dict, tools: list = TOOLS) -> str:
    """A call as the template writes an assistant's call (what the model learnt to write), between the
    tokenizer's own call markers."""
    messages = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": name, "arguments": arguments}}]}]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    start, end = tokenizer.tool_call_start, tokenizer.tool_call_end
    return text[text.rindex(start):text.rindex(end) + len(end)]


def request(choice, **fields) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[{"role": "user", "content": "Go."}], tools=TOOLS, tool_choice=choice,
                       **fields)


def test_the_calls_the_template_writes_are_taken_and_read_back_as_written(xml):
    required = forced_calls(request("required"), xml)
    arguments = {"path": "a.html", "line": 3, "mode": "insert", "dry": True,
                 "note": "any </parameter text\nat all"}  # a string may hold a tag
    call = written(xml, "edit", arguments)
    assert call.startswith("<tool_call>\n<function=edit>\n<parameter=path>\na.html\n</parameter>\n")
    assert accepts(required, xml, call)
    assert qwen3_coder.parse_tool_call(call[len("<tool_call>"):-len("</tool_call>")], TOOLS) == {
        "name": "edit", "arguments": arguments}
    multiline = written(xml, "edit", {"path": "two\nlines", "line": 1})
    assert accepts(required, xml, multiline) and accepts(required, xml, call + "\n" + multiline)
    assert accepts(required, xml, written(xml, "now", {}))


def test_a_list_is_taken_as_json(qwen35):
    """Qwen3.5's template writes a list as JSON, and the grammar takes it. Qwen3-Coder's writes Python's
    form (`['a']`), which mlx-lm's parser reads too: a forced call holds it to JSON, valid against the schema."""
    arguments = {"path": "a", "line": 3, "lines": ["<p>", "x </b> y"]}
    required = forced_calls(request("required"), qwen35)
    assert accepts(required, qwen35, written(qwen35, "edit", arguments))
    coder = xml_tokenizer(CODER)
    python = written(coder, "edit", arguments)
    assert "['<p>', 'x </b> y']" in python and not accepts(forced_calls(request("required"), coder), coder, python)
    as_json = written(coder, "edit", arguments | {"lines": '["<p>", "x </b> y"]'})
    assert accepts(forced_calls(request("required"), coder), coder, as_json)
    assert qwen3_coder.parse_tool_call(as_json[len("<tool_call>"):-len("</tool_call>")], TOOLS)["arguments"] == arguments


def test_an_agents_turns_render_through_the_coder_template(xml):
    """A call of an earlier turn (its arguments JSON text, as OpenAI sends them) and its result render as
    the template writes them, so the next prompt is the one the model learnt."""
    messages = [{"role": "user", "content": "Edit a.py."},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "edit", "arguments": '{"path": "a.py", "line": 2}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    chat = ChatRequest(model=MODEL, messages=messages, tools=TOOLS)
    text = xml.decode(encode_chat(xml, template_messages(chat, xml), tools=template_tools(chat, xml)))
    assert "<tool_call>\n<function=edit>\n<parameter=path>\na.py\n</parameter>\n<parameter=line>\n2\n</parameter>" in text
    assert "<tool_response>\ndone\n</tool_response>" in text
    assert text.rstrip().endswith(("<|im_start|>assistant", "<think>"))  # Qwen3.5's opens its think block


@pytest.mark.parametrize("arguments", [
    {"path": "a", "line": 0},  # below the minimum
    {"path": "a", "line": "x"},  # not an integer
    {"line": 3},  # a required parameter missing
    {"path": "a", "line": 3, "mode": "delete"},  # not among its values
    {"path": "a", "line": 3, "other": 1},  # a parameter the schema does not have
    {"path": "a", "line": 3, "dry": "yes"},  # not a boolean
    {"path": "a" * 13, "line": 3},  # past its maxLength
    {"path": "a", "line": 3, "note": "x\n</parameter>\nzz"},  # the parser would end it at its first close,
    {"path": "a", "line": 3, "note": "x</parameter>y"},  # wherever that stands,
    {"path": "a", "line": 3, "note": "x</tool_call>y"},  # and the call reader the call at its end marker
])
def test_arguments_off_the_schema_are_not(xml, arguments):
    assert not accepts(forced_calls(request("required"), xml), xml, written(xml, "edit", arguments))


def test_a_named_call_or_one_call_is_all_that_is_taken(xml):
    edit, now = written(xml, "edit", {"path": "a", "line": 3}), written(xml, "now", {})
    named = forced_calls(request({"type": "function", "function": {"name": "edit"}}), xml)
    assert accepts(named, xml, edit) and not accepts(named, xml, now)
    assert not accepts(named, xml, edit + "\n" + edit) and not accepts(named, xml, "Sure. " + edit)
    one = forced_calls(request("required", parallel_tool_calls=False), xml)
    assert accepts(one, xml, now) and not accepts(one, xml, now + "\n" + now)


def test_a_model_left_thinking_by_its_prompt_closes_its_reasoning_before_its_calls(qwen35):
    """Qwen3.5's template opens `<think>` in the prompt: the grammar lets the reasoning run to its end
    marker, then holds the answer to calls; a call inside the reasoning, or no end to it, is not taken."""
    call = written(qwen35, "edit", {"path": "a", "line": 3})
    thinking = forced_calls(request("required"), qwen35, thinking=True)
    assert accepts(thinking, qwen35, "Which file? a, line 3.</think>\n\n" + call)
    assert accepts(thinking, qwen35, "</think>\n\n" + call)
    assert not accepts(thinking, qwen35, call) and not accepts(thinking, qwen35, "Which file?" + call)
    assert not accepts(forced_calls(request("required"), qwen35), qwen35, "Hm.</think>\n\n" + call)


def test_anthropic_refuses_thinking_beside_a_forced_call_as_anthropic_does():
    from specmlx.serve.anthropic.protocol import MessagesRequest
    from specmlx.serve.anthropic.translate import to_chat
    from specmlx.serve.errors import APIError

    asked = MessagesRequest.model_validate({
        "model": MODEL, "max_tokens": 2048, "messages": [{"role": "user", "content": "Go."}],
        "tools": [{"name": "edit", "input_schema": EDIT}], "tool_choice": {"type": "any"},
        "thinking": {"type": "enabled", "budget_tokens": 1024}})
    with pytest.raises(APIError) as refused:
        to_chat(asked)
    assert refused.value.status == 400 and refused.value.param == "tool_choice"
    assert to_chat(asked.model_copy(update={"thinking": None})).tool_choice == "required"


# ---- above temperature 0 ---------------------------------------------------------------------------


XML_TOKENS = [b"<tool_call>\n<function=f>\n<parameter=a>\n", b"x", b"y", b"\n", b"</p",
              b"\n</parameter>\n</function>\n</tool_call>", b"z", b"<eos>"]
XML_EOS = 7  # the last: the toy's end token


class Markers:
    """What `call_grammar` reads of a tokenizer: its markers, which the toy writes as text."""

    tool_call_start, tool_call_end = "<tool_call>", "</tool_call>"

    @staticmethod
    def encode(text: str, add_special_tokens: bool = False) -> list[int]:
        return [0, 0]  # more than one token: the grammar writes the marker as text


@pytest.fixture(scope="module")
def xml_toy():
    args = tiny.qwen2_args(len(XML_TOKENS), layers=1)
    target = tiny.build(args, seed=7, sharpness=2.0)
    lltok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(ToyTokenizer(XML_TOKENS)), n_vocab=len(XML_TOKENS))
    tool = Tool.model_validate({"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}})
    lark = call_grammar(XmlCalls(), Markers(), [(0, tool)], one=True).text
    return target, tiny.perturbed(target, args, noise=0.6, seed=8), lltok, lark


@pytest.mark.parametrize("planted", [False, True], ids=["exact", "planted-bias"])
def test_sampled_calls_follow_the_targets_distribution_restricted_to_the_syntax(monkeypatch, xml_toy, planted):
    """The call's opening forced, then its string value drawn token by token up to its close; with the
    planted bias (a draft drawn unmasked and cut at its first forbidden token), the check fails."""
    target, drafter, lltok, lark = xml_toy
    if planted:
        plant_cut_drafts(monkeypatch)
    samples = sampled(monkeypatch, target, ModelDrafter(drafter, len(XML_TOKENS)), lltok, lark=lark, eos=XML_EOS)
    assert all(s[0] == 0 for s in samples) and len(set(samples)) > 20
    p = pvalue(samples, exact_constrained(target, lltok, lark, XML_EOS))
    assert (p < 1e-3) if planted else (p > 1e-3)


# ---- behind the server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, qwen35):
    vocab = len(qwen35._tokenizer)
    args = tiny.qwen2_args(vocab)
    path = tiny.save_model(tiny.build(args, seed=0), args, qwen35._tokenizer, tmp_path_factory.mktemp("xml") / MODEL)
    with on_thread(str(path), [NGRAM, NONE]) as held:
        background, _ = start(held, max_tokens=256)
        with background as url:
            yield url, held[1]


def named_call(url: str, extra: dict | None = None) -> dict:
    """Ask the server for a call of `edit` (SMALL's), whole and streamed, and check that each comes back as
    one call, its arguments valid, and no text; the request asked."""
    from openai import OpenAI

    asked = {"model": MODEL, "messages": [{"role": "user", "content": "Edit a.py."}], "tools": SMALL,
             "tool_choice": {"type": "function", "function": {"name": "edit"}}, "max_tokens": 256, "temperature": 0,
             "extra_body": {"speculative": {"drafter": NGRAM, "num_draft": 4}, **(extra or {})}}
    with OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        whole = client.chat.completions.create(**asked).choices[0]
        chunks = list(client.chat.completions.create(**asked, stream=True))
    (call,) = whole.message.tool_calls
    assert whole.finish_reason == "tool_calls" and call.function.name == "edit" and not whole.message.content
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"path", "line"} and 1 <= arguments["line"] <= 99 and len(arguments["path"]) <= 8
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return asked


def test_a_required_call_comes_back_as_a_call_streamed_or_whole(served):
    url, target = served
    assert target.tokenizer.tool_call_start == "<tool_call>"  # mlx-lm read the syntax from the template
    asked = named_call(url, {"chat_template_kwargs": {"enable_thinking": False}})  # a random model would think on
    prompt = encode_chat(target.tokenizer, asked["messages"], tools=template_tools(
        ChatRequest(model=MODEL, messages=asked["messages"], tools=SMALL), target.tokenizer))
    assert "<tool_call>\n<function=example_function_name>" in target.tokenizer.decode(prompt)  # Qwen3.5's own prompt


def test_anthropics_any_comes_back_as_a_tool_use(served):
    anthropic = pytest.importorskip("anthropic")

    url, _ = served
    tools = [{"name": "edit", "description": "Edit a file.", "input_schema": SMALL[0]["function"]["parameters"]}]
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120) as claude:
        reply = claude.messages.create(model=MODEL, max_tokens=256, tools=tools, tool_choice={"type": "any"},
                                       messages=[{"role": "user", "content": "Edit a.py."}],
                                       extra_body={"temperature": 0, "speculative": {"drafter": NGRAM}})
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and [u.name for u in uses] == ["edit"] * len(uses) and uses
    assert all(1 <= u.input["line"] <= 99 and len(u.input["path"]) <= 8 for u in uses)


# ---- Gemma 4's call form -----------------------------------------------------------------------------

GEMMA4 = (TEMPLATES / "gemma4.jinja").read_text(encoding="utf-8")
GEMMA4_SPECIALS = tiny.SPECIALS + ["<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                                   "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>"]


# Gemma 4's template reads every parameter's type: the same tools, each typed.
GEMMA_EDIT = EDIT | {"properties": EDIT["properties"] | {"mode": {"type": "string", "enum": ["insert", "replace"]}}}
GEMMA_TOOLS = [{"type": "function", "function": {"name": "edit", "description": "Edit a file.", "parameters": GEMMA_EDIT}},
               TOOLS[1]]


def gemma_request(choice) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=[{"role": "user", "content": "Go."}], tools=GEMMA_TOOLS, tool_choice=choice)


@pytest.fixture(scope="module")
def gemma4():
    """A tokenizer of Gemma 4's special tokens and its own chat template: mlx-lm reads its syntax as gemma4."""
    from mlx_lm.tool_parsers import gemma4 as parser

    trained = tiny.train_tokenizer(specials=GEMMA4_SPECIALS, chat_template=GEMMA4)
    trained.bos_token = "<bos>"
    assert _infer_tool_parser(trained) == "gemma4"
    return TokenizerWrapper(trained, tool_parser=parser.parse_tool_call, tool_call_start=parser.tool_call_start,
                            tool_call_end=parser.tool_call_end)


def gemma_written(tokenizer, name: str, arguments: dict) -> str:
    return written(tokenizer, name, arguments, GEMMA_TOOLS)


def gemma_read(call: str) -> dict:
    from mlx_lm.tool_parsers import gemma4 as parser

    return parser.parse_tool_call(call[len("<|tool_call>"):-len("<tool_call|>")])


def test_gemma4s_calls_as_its_template_writes_them_are_taken_and_read_back(gemma4):
    required = forced_calls(gemma_request("required"), gemma4)
    arguments = {"path": "a.html", "line": 3, "mode": "insert", "dry": True, "lines": ["<p>", "x, }y"],
                 "note": "any } text,\nat: all"}
    call = gemma_written(gemma4, "edit", arguments)
    assert call.startswith('<|tool_call>call:edit{dry:true,line:3,lines:[<|"|><p><|"|>,')  # its keys in order
    assert accepts(required, gemma4, call) and gemma_read(call) == {"name": "edit", "arguments": arguments}
    least = gemma_written(gemma4, "edit", {"path": "", "line": 99})
    assert accepts(required, gemma4, least) and accepts(required, gemma4, call + least)  # calls back to back
    assert accepts(required, gemma4, gemma_written(gemma4, "now", {}))
    named = forced_calls(gemma_request({"type": "function", "function": {"name": "now"}}), gemma4)
    assert accepts(named, gemma4, gemma_written(gemma4, "now", {})) and not accepts(named, gemma4, call)


@pytest.mark.parametrize("arguments", [
    {"path": "a", "line": 0}, {"path": "a", "line": "x"}, {"line": 3}, {"path": "a", "line": 3, "mode": "delete"},
    {"path": "a", "line": 3, "other": 1}, {"path": "a", "line": 3, "dry": "yes"}, {"path": "a" * 13, "line": 3},
    {"path": "a", "line": 3, "lines": ["a", "b", 3]},
    {"path": "a"}, {"dry": False, "path": "a"},  # a required key left out, first or after another
])
def test_gemma4s_arguments_off_the_schema_are_not(gemma4, arguments):
    assert not accepts(forced_calls(gemma_request("required"), gemma4), gemma4, gemma_written(gemma4, "edit", arguments))


def test_gemma4s_form_is_refused_for_keys_it_cannot_read_back(gemma4):
    odd = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"file-name": {"type": "string"}}}}}
    with pytest.raises(APIError, match="Gemma 4's calls carry keys of letters, digits and _ alone"):
        forced_calls(ChatRequest(model=MODEL, messages=[{"role": "user", "content": "Go."}], tools=[odd],
                                 tool_choice="required"), gemma4)


def test_gemma4s_nested_values_follow_their_schema(gemma4):
    """An object of no listed properties takes any keys but is an object; a reference to the schema's own
    definitions is followed; a value that cannot be written (null) is refused, not let through."""
    point = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    schema = {"type": "object", "properties": {"meta": {"type": "object"}, "at": {"$ref": "#/$defs/point"}},
              "required": ["meta", "at"], "$defs": {"point": point}}
    tools = [{"type": "function", "function": {"name": "put", "description": "Put.", "parameters": schema}}]
    asked = ChatRequest(model=MODEL, messages=[{"role": "user", "content": "Go."}], tools=tools, tool_choice="required")
    held = forced_calls(asked, gemma4)
    write = lambda arguments: '<|tool_call>call:put{' + arguments + '}<tool_call|>'  # noqa: E731
    assert accepts(held, gemma4, write('at:{x:3},meta:{a:<|"|>b<|"|>,n:[1,2]}'))
    assert gemma_read(write('at:{x:3},meta:{a:<|"|>b<|"|>,n:[1,2]}'))["arguments"] == {
        "at": {"x": 3}, "meta": {"a": "b", "n": [1, 2]}}
    assert not accepts(held, gemma4, write("at:{x:3},meta:3")) and not accepts(held, gemma4, write('at:{x:<|"|>3<|"|>},meta:{}'))
    nullable = {"type": "object", "properties": {"gone": {"type": "null"}}}
    with pytest.raises(APIError, match="cannot be held to Gemma 4's call form"):
        forced_calls(ChatRequest(model=MODEL, messages=[{"role": "user", "content": "Go."}], tool_choice="required",
                                 tools=[{"type": "function", "function": {"name": "f", "parameters": nullable}}]), gemma4)


def test_gemma4s_required_call_comes_back_as_a_call(tmp_path_factory, gemma4):
    args = tiny.qwen2_args(len(gemma4._tokenizer))
    path = tiny.save_model(tiny.build(args, seed=0), args, gemma4._tokenizer, tmp_path_factory.mktemp("g4") / MODEL)
    with on_thread(str(path), [NGRAM, NONE]) as held:
        assert held[1].tokenizer.tool_call_start == "<|tool_call>"  # mlx-lm read the syntax from the template
        background, _ = start(held, max_tokens=256)
        with background as url:
            named_call(url)
