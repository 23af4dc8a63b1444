"""Reading the JSONL prompts file, and wrapping prompts in the chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmlx.bench.prompts import PromptRow, default_prompts_path, encode_prompts, read_prompts
from specmlx.errors import SpecmlxError


def write(path, *rows) -> object:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_rows_in_order_blank_lines_skipped_and_limited(tmp_path):
    path = write(tmp_path / "p.jsonl", {"id": "a", "kind": "code", "prompt": "one"}, "",
                 {"id": "b", "kind": "edit", "prompt": "two"}, {"id": "c", "prompt": "three"})
    assert read_prompts(path) == [PromptRow("a", "code", "one"), PromptRow("b", "edit", "two"),
                                  PromptRow("c", "", "three")]
    assert [r.id for r in read_prompts(path, limit=2)] == ["a", "b"]


@pytest.mark.parametrize("line, message", [
    ('{"id": "a", "prompt": ', r"p\.jsonl:2: not valid JSON"),
    ('["a list"]', r"p\.jsonl:2: expected a JSON object"),
    ('{"id": "b"}', r'p\.jsonl:2: missing or empty "prompt"'),
    ('{"id": "a", "prompt": "again"}', r"prompt id 'a' appears more than once"),
])
def test_bad_rows_are_named_by_line(tmp_path, line, message):
    path = write(tmp_path / "p.jsonl", {"id": "a", "prompt": "fine"}, line)
    with pytest.raises(SpecmlxError, match=message):
        read_prompts(path)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(SpecmlxError, match="no such prompts file"):
        read_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(SpecmlxError, match="no prompts in this file"):
        read_prompts(write(tmp_path / "empty.jsonl", ""))


def test_the_default_set_ships_with_the_package_and_covers_each_kind():
    import specmlx.bench

    assert default_prompts_path().parent == Path(specmlx.bench.__file__).parent
    rows = read_prompts(default_prompts_path())
    assert len(rows) >= 16
    kinds = {kind: sum(r.kind == kind for r in rows) for kind in ("code", "edit", "prose")}
    assert set(r.kind for r in rows) == set(kinds) and min(kinds.values()) >= 5
    # An edit prompt carries the code it asks to change: the answer copies it.
    assert all("```" in r.prompt for r in rows if r.kind == "edit")


def test_prompts_become_chat_turns_with_the_generation_prompt(tokenizer):
    rows = [PromptRow("a", "code", "def add(a, b):"), PromptRow("b", "", "hello")]
    encoded = encode_prompts(rows, tokenizer, chat=True)
    expected = tokenizer.apply_chat_template([{"role": "user", "content": "def add(a, b):"}],
                                             add_generation_prompt=True, return_dict=False)
    assert encoded[0].tokens == tuple(expected)
    text = tokenizer.decode(list(encoded[1].tokens))
    assert text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    plain = encode_prompts(rows, tokenizer, chat=False)
    assert plain[1].tokens == tuple(tokenizer.encode("hello"))
    assert (plain[0].id, plain[0].kind) == ("a", "code")
