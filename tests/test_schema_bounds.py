"""Numbers under a JSON schema's grammar are bounded as llama.cpp's grammars bound them: after 16 digits
before the point, or 10 after it, no digit is allowed (a model cannot write `8888...` to max_tokens)."""

from __future__ import annotations

import numpy as np
import pytest
from llguidance import LLTokenizer, TokenizerWrapper

from specmlx.grammar import Constraint, Grammar
from specmlx.schema_bounds import bounded

EOS = 256
DIGITS = [ord(d) for d in "0123456789"]


class ByteTokenizer:
    """One token a byte, and an end token: each digit is a token of its own."""

    eos_token_id, bos_token_id, special_token_ids = EOS, None, [EOS]
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text if isinstance(text, bytes) else text.encode())


@pytest.fixture(scope="module")
def byte_tokenizer():
    return LLTokenizer(TokenizerWrapper(ByteTokenizer()), n_vocab=EOS + 1)


def digits_after(schema: dict | None, text: str, tokenizer) -> bool:
    """Whether the grammar of `schema` (None: any JSON object) allows a digit after `text`."""
    grammar = Grammar.json_object() if schema is None else Grammar.json_schema(schema, laid_out=False)
    constraint = Constraint(grammar, tokenizer)
    constraint.advance(list(text.encode()))
    row = np.array(constraint.after([]))
    return bool(row[DIGITS].any())


INTEGER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
NUMBER = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}


@pytest.mark.parametrize("schema, prefix, kind", [
    (INTEGER, '{"n":', "an integer"), (NUMBER, '{"n":', "a number"), (None, '{"n":', "any object's value"),
    ({"type": "array"}, "[", "an untyped item")])
def test_no_digit_is_allowed_past_sixteen_before_the_point(byte_tokenizer, schema, prefix, kind):
    assert digits_after(schema, prefix + "1" * 15, byte_tokenizer), kind
    assert not digits_after(schema, prefix + "1" * 16, byte_tokenizer), kind
    assert not digits_after(schema, prefix + "-" + "1" * 16, byte_tokenizer), kind


@pytest.mark.parametrize("schema", [NUMBER, None])
def test_no_digit_is_allowed_past_ten_after_the_point(byte_tokenizer, schema):
    assert digits_after(schema, '{"n":0.' + "5" * 9, byte_tokenizer)
    assert not digits_after(schema, '{"n":0.' + "5" * 10, byte_tokenizer)


def test_the_schemas_own_bounds_are_kept_and_the_schema_is_not_changed(byte_tokenizer):
    wide = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10 ** 17}}, "required": ["n"]}
    assert digits_after(wide, '{"n":' + "1" * 18, byte_tokenizer)  # its own minimum reaches past the bound
    step = {"type": "number", "multipleOf": 0.5, "maximum": 3}
    assert bounded(step)["minimum"] == -(10 ** 16 - 1) and bounded(step)["multipleOf"] == 0.5
    assert step == {"type": "number", "multipleOf": 0.5, "maximum": 3}
    const = {"type": "number", "const": 1e30}
    assert bounded(const) | {"$defs": None} == const | {"$defs": None}


@pytest.mark.parametrize("schema, value", [
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},  # pydantic's subclasses
                {"type": "object", "properties": {"b": {"type": "object"}}}]}, '{"a":1,"b":{"c":2}}'),
    ({"$defs": {"A": {"type": "object", "properties": {"a": {"type": "object"}}}},
      "allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A"}]}, '{"a":{"x":[1]}}'),
    ({"$defs": {"T": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/T"}}}}},
      "$ref": "#/$defs/T"}, '{"kids":[{"kids":[]}]}'),
    ({"type": "number", "exclusiveMinimum": 0, "maximum": 1e-11}, "0.000000000005"),  # finer than the step
])
def test_a_schema_bounded_still_takes_what_it_took(byte_tokenizer, schema, value):
    constraint = Constraint(Grammar.json_schema(schema, laid_out=False), byte_tokenizer)
    constraint.advance(list(value.encode()))
    assert np.array(constraint.after([]))[EOS], value


def test_bounds_that_would_widen_a_schema_or_are_not_numbers_are_left_alone():
    assert bounded({"not": {"type": "number"}})["not"] == {"type": "number"}  # a bound there lets more through
    draft4 = bounded({"type": "integer", "exclusiveMinimum": False})  # draft 4's flag is no bound
    assert draft4["minimum"] == -(10 ** 16 - 1) and draft4["maximum"] == 10 ** 16 - 1
