"""Prompt files, and prompts as token ids: one reader, one encoding for every front end."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import NewlineTokenizer, TokenizerWrapper

from specmlx.errors import SpecmlxError
from specmlx.prompting import (EncodedPrompt, PromptRow, encode_chat, encode_prompts, encode_text, has_chat_template,
                               packaged_prompts_path, read_prompts, write_prompts)

from . import tiny


def write(path: Path, *rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -- files --------------------------------------------------------------------


def test_rows_in_order_blank_lines_skipped_and_limited(tmp_path):
    path = write(tmp_path / "p.jsonl", {"id": "a", "kind": "code", "prompt": "one"}, "",
                 {"id": "b", "kind": "edit", "prompt": "two"}, {"prompt": "three"})
    assert read_prompts(path) == [PromptRow("a", "code", "one"), PromptRow("b", "edit", "two"),
                                  PromptRow("p4", "", "three")]  # an id by default: its line
    assert [r.id for r in read_prompts(path, limit=2)] == ["a", "b"]


@pytest.mark.parametrize("line, message", [
    ('{"id": "a", "prompt": ', r"p\.jsonl:2: not valid JSON"),
    ('["a list"]', r"p\.jsonl:2: expected a JSON object"),
    ('{"text": "no prompt"}', r'p\.jsonl:2: missing or empty "prompt"'),
    ('{"prompt": "  "}', r'p\.jsonl:2: missing or empty "prompt"'),
    ('{"prompt": 3}', r'p\.jsonl:2: missing or empty "prompt"'),
    ('{"id": "a", "prompt": "again"}', r"p\.jsonl:2: prompt id 'a' is already used on line 1"),
])
def test_bad_rows_are_one_line_naming_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "p.jsonl", {"id": "a", "prompt": "fine"}, line)
    with pytest.raises(SpecmlxError, match=message) as raised:
        read_prompts(path)
    assert "\n" not in str(raised.value)


def test_missing_unreadable_and_empty_files(tmp_path):
    with pytest.raises(SpecmlxError, match="nope.jsonl: no such prompts file"):
        read_prompts(tmp_path / "nope.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(SpecmlxError, match="latin.jsonl: cannot read prompts"):
        read_prompts(tmp_path / "latin.jsonl")
    with pytest.raises(SpecmlxError, match="empty.jsonl: no prompts in this file"):
        read_prompts(write(tmp_path / "empty.jsonl", ""))


def test_a_row_may_carry_a_prediction(tmp_path, wrapped):
    path = write(tmp_path / "p.jsonl", {"id": "e", "kind": "edit", "prompt": "Rename x.", "prediction": "x = 1\n"},
                 {"id": "f", "prompt": "No prediction."})
    rows = read_prompts(path)
    assert [r.prediction for r in rows] == ["x = 1\n", ""]
    edit, plain = encode_prompts(rows, wrapped, chat=True)
    # As the model would write it: no BOS or other added token.
    assert edit.prediction == tuple(wrapped.encode("x = 1\n", add_special_tokens=False)) and plain.prediction == ()
    with pytest.raises(SpecmlxError, match=r'p\.jsonl:1: "prediction" must be a string'):
        read_prompts(write(tmp_path / "p.jsonl", {"prompt": "a", "prediction": ["x"]}))


def test_written_rows_read_back_the_same(tmp_path):
    rows = [PromptRow("gen-00000", "code", "Write x.\nWith a newline and \"quotes\"."), PromptRow("b", "", "y"),
            PromptRow("e", "edit", "Rename x.", prediction="x = 1\n"),
            PromptRow("j", "json", "As JSON.", schema='{"type": "object"}'),
            PromptRow("t", "tool-call", "Weather?", tools=(WEATHER,))]
    path = tmp_path / "deep" / "requests.jsonl"
    write_prompts(rows, path)
    assert read_prompts(path) == rows
    assert not path.with_suffix(".partial").exists()


WEATHER = {"type": "function", "function": {"name": "weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_a_row_may_carry_function_tools(tmp_path):
    path = write(tmp_path / "p.jsonl", {"id": "t", "kind": "tool-call", "prompt": "Weather?", "tools": [WEATHER]},
                 {"id": "p", "prompt": "No tools."})
    assert [r.tools for r in read_prompts(path)] == [(WEATHER,), ()]


@pytest.mark.parametrize("tools", [
    WEATHER, [], ["weather"], [{"type": "function"}], [{"type": "code", "function": WEATHER["function"]}],
    [{"type": "function", "function": {"name": ""}}], [{"type": "function", "function": {"name": "f", "parameters": 3}}],
])
def test_bad_tools_are_one_line_naming_the_prompt(tmp_path, tools):
    path = write(tmp_path / "p.jsonl", {"id": "fine", "prompt": "x"}, {"id": "calls", "prompt": "y", "tools": tools})
    with pytest.raises(SpecmlxError, match=r'p\.jsonl:2: prompt calls: "tools" must be a non-empty list of '
                                           r'function tools') as raised:
        read_prompts(path)
    assert "\n" not in str(raised.value)


def test_the_tools_set_asks_for_calls_with_tools_and_for_prose_without():
    from specmlx.serve.openai.protocol import Tool
    from specmlx.serve.tools import check_parameters

    rows = read_prompts(packaged_prompts_path().with_name("tools.jsonl"))
    assert [r.kind for r in rows] == ["tool-call"] * 4 + ["prose"] * 4
    assert all(not r.tools for r in rows if r.kind == "prose")
    for row in (r for r in rows if r.kind == "tool-call"):
        assert row.tools
        for tool in map(Tool.model_validate, row.tools):  # as the server reads a request's tools
            check_parameters(tool.function.parameters, tool.function.name, "tools")
        assert [Tool.model_validate(t).model_dump(exclude_none=True) for t in row.tools] == list(row.tools)


def test_the_edit_set_predicts_each_answer_by_the_file_it_edits():
    rows = read_prompts(packaged_prompts_path().with_name("edits.jsonl"))
    assert len(rows) == 6 and {r.kind for r in rows} == {"edit"}
    for row in rows:
        assert 60 <= len(row.prediction.splitlines()) <= 200
        assert f"```python\n{row.prediction}```" in row.prompt  # the file it asks to change, as sent


def test_the_json_set_gives_each_prompt_a_schema_the_grammar_engine_compiles():
    from specmlx.grammar import Grammar

    rows = read_prompts(packaged_prompts_path().with_name("json.jsonl"))
    assert len(rows) == 4 and {r.kind for r in rows} == {"json"}
    for row in rows:
        schema = json.loads(row.schema)
        assert schema["type"] == "object" and Grammar.json_schema(schema).text


def test_a_schema_that_is_not_an_object_is_one_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "x", "schema": "object"}) + "\n")
    with pytest.raises(SpecmlxError, match="\"schema\" must be a JSON object"):
        read_prompts(path)


def test_the_packaged_set_ships_with_the_package_and_covers_each_kind():
    import specmlx.bench

    assert packaged_prompts_path().parent == Path(specmlx.bench.__file__).parent  # pyproject's package data
    rows = read_prompts(packaged_prompts_path())
    assert len(rows) >= 16
    kinds = {kind: sum(r.kind == kind for r in rows) for kind in ("code", "edit", "prose")}
    assert set(r.kind for r in rows) == set(kinds) and min(kinds.values()) >= 5
    # An edit prompt carries the code it asks to change: the answer copies it.
    assert all("```" in r.prompt for r in rows if r.kind == "edit")


# -- token ids ----------------------------------------------------------------


@pytest.fixture(scope="module")
def wrapped(tokenizer) -> TokenizerWrapper:
    return TokenizerWrapper(tokenizer)


def test_prompts_become_user_turns_with_the_generation_prompt(wrapped):
    rows = [PromptRow("a", "code", "def add(a, b):"), PromptRow("b", "", "hello")]
    encoded = encode_prompts(rows, wrapped, chat=True)
    assert encoded[0] == EncodedPrompt("a", "code", tuple(wrapped.apply_chat_template(
        [{"role": "user", "content": "def add(a, b):"}], add_generation_prompt=True)))
    assert wrapped.decode(list(encoded[1].tokens)) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    plain = encode_prompts(rows, wrapped, chat=False)
    assert plain[1] == EncodedPrompt("b", "", tuple(wrapped.encode("hello")))


def test_a_bare_tokenizer_encodes_as_its_wrapper(tokenizer, wrapped):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert has_chat_template(tokenizer) and has_chat_template(wrapped)
    assert encode_chat(tokenizer, messages) == encode_chat(wrapped, messages)  # not a BatchEncoding's keys
    assert encode_text(tokenizer, "hi") == encode_text(wrapped, "hi") == list(tokenizer.encode("hi"))
    ended = encode_chat(wrapped, messages + [{"role": "assistant", "content": "hello"}], add_generation_prompt=False)
    assert wrapped.decode(ended).endswith("<|im_start|>assistant\nhello<|im_end|>\n")


@pytest.fixture(scope="module")
def templateless(tokenizer) -> TokenizerWrapper:
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    return TokenizerWrapper(bare)


def test_without_a_template_there_is_no_chat(templateless):
    assert not has_chat_template(templateless) and not has_chat_template(templateless._tokenizer)


def test_tools_without_a_template_are_one_line(templateless):
    with pytest.raises(SpecmlxError, match="^prompt t: has tools, but the tokenizer has no chat template to render "
                                           "them$"):
        encode_prompts([PromptRow("p", "", "plain"), PromptRow("t", "", "Weather?", tools=(WEATHER,))],
                       templateless, chat=False)


def test_a_prompt_that_encodes_to_nothing_is_refused(wrapped):
    class Empty:
        def encode(self, text):
            return []

    with pytest.raises(SpecmlxError, match="prompt x: encodes to no tokens"):
        encode_prompts([PromptRow("x", "", "anything")], Empty(), chat=False)


# -- every front end, the same ids ---------------------------------------------


@pytest.fixture(scope="module")
def rewriting(tokenizer) -> TokenizerWrapper:
    """mlx-lm's NewlineTokenizer over the test vocabulary: its `encode` turns "\\n" into "<n>",
    so the template's text encoded again is not what the template call gives. The bench
    (and train, through it) used to encode that way; generate, serve and the app did not."""
    return TokenizerWrapper(NewlineTokenizer(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>",
                                             chat_template=tiny.CHAT_TEMPLATE))


def test_every_front_end_gives_the_same_ids_for_the_same_messages(rewriting):
    from app.session import ChatMessage, Session
    from specmlx.generate import encode
    from specmlx.serve.prompts import chat_prompt
    from specmlx.serve.openai.protocol import ChatRequest
    from specmlx.train.answers import prompt_tokens

    from .app.fakes import FakeEngine

    text = "Fix this:\n\ndef f(x):\n    return x +"
    messages = [{"role": "user", "content": text}]
    expected = encode_chat(rewriting, messages)
    rendered = rewriting.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert expected != list(rewriting.encode(rendered, add_special_tokens=False))  # the old bench's ids

    session = Session(FakeEngine(rewriting))
    session.history = [ChatMessage("user", text)]
    by_front_end = {
        "generate": encode(rewriting, text, chat=True, system=None),
        "serve": chat_prompt(rewriting, ChatRequest(model="m", messages=messages)),
        "bench": list(encode_prompts([PromptRow("a", "", text)], rewriting, chat=True)[0].tokens),
        "train": prompt_tokens(rewriting, PromptRow("a", "", text)),
        "app": session.prompt_ids(),
    }
    assert by_front_end == {name: expected for name in by_front_end}

    system = [{"role": "system", "content": "Be brief.\nVery."}] + messages
    with_system = encode_chat(rewriting, system)
    assert encode(rewriting, text, chat=True, system="Be brief.\nVery.") == with_system
    assert chat_prompt(rewriting, ChatRequest(model="m", messages=system)) == with_system
    assert session.prompt_ids(system="Be brief.\nVery.") == with_system


def test_every_front_end_encodes_plain_text_alike(templateless, vocab):
    from app.session import ChatMessage, Session, plain_transcript
    from specmlx.generate import encode
    from specmlx.serve.prompts import completion_prompt
    from specmlx.serve.openai.protocol import CompletionRequest

    from .app.fakes import FakeEngine

    text = "def add(a, b):\n    return"
    expected = list(templateless.encode(text))
    assert encode(templateless, text, chat=False, system=None) == expected
    assert completion_prompt(templateless, CompletionRequest(model="m", prompt=text), vocab) == expected
    assert list(encode_prompts([PromptRow("a", "", text)], templateless, chat=False)[0].tokens) == expected
    session = Session(FakeEngine(templateless))  # no template: the app's own transcript, as plain text
    session.history = [ChatMessage("user", text)]
    assert session.prompt_ids() == list(templateless.encode(plain_transcript(session.history, "")))
