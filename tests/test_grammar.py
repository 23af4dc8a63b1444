"""A generation's grammar: masks along a draft, rolled back; copies cut; committed tokens advance it."""

from __future__ import annotations

import numpy as np
import pytest
from llguidance import LLTokenizer, TokenizerWrapper

from specmlx.errors import SpecmlxError
from specmlx.grammar import Constraint, Grammar

# An 8-token vocabulary and a grammar over it: a brace, items a, b or ab separated by commas, a brace.
TOKENS = [b"{", b"}", b"a", b"b", b",", b"ab", b" ", b"<eos>"]
OPEN, CLOSE, A, B, COMMA, AB, SPACE, EOS = range(8)
LARK = 'start: "{" item ("," item)* "}"\nitem: "a" | "b" | "ab"'


class ToyTokenizer:
    """What llguidance needs of a tokenizer: its tokens' bytes, its end token (the last), and a tokenization."""

    bos_token_id = None

    def __init__(self, tokens: list[bytes] = TOKENS) -> None:
        self.tokens, self.eos_token_id = tokens, len(tokens) - 1
        self.special_token_ids = [self.eos_token_id]

    def __call__(self, text: bytes | str) -> list[int]:
        text = text if isinstance(text, bytes) else text.encode()
        out, at = [], 0
        while at < len(text):
            token = max((t for t in range(self.eos_token_id) if text.startswith(self.tokens[t], at)),
                        key=lambda t: len(self.tokens[t]), default=None)
            if token is None:
                raise ValueError(f"no token for {text[at:]!r}")
            out.append(token)
            at += len(self.tokens[token])
        return out


@pytest.fixture(scope="module")
def toy():
    return LLTokenizer(TokenizerWrapper(ToyTokenizer()), n_vocab=len(TOKENS))


def allowed(row) -> set[int]:
    return {int(t) for t in np.flatnonzero(np.array(row))}


def test_masks_follow_the_draft_and_leave_the_state_as_it_was(toy):
    c = Constraint(Grammar.lark(LARK), toy)
    masks = c.masks([OPEN, AB, COMMA, B, CLOSE])
    assert [allowed(r) for r in masks] == [{OPEN}, {A, B, AB}, {CLOSE, COMMA}, {A, B, AB}, {CLOSE, COMMA}, {EOS}]
    assert [allowed(r) for r in c.masks([])] == [{OPEN}]  # rolled back: nothing was committed


def test_past_a_forbidden_token_the_rows_repeat_the_one_that_rejects_it(toy):
    c = Constraint(Grammar.lark(LARK), toy)
    masks = [allowed(r) for r in c.masks([OPEN, CLOSE, A, CLOSE])]
    assert masks == [{OPEN}, {A, B, AB}, {A, B, AB}, {A, B, AB}, {A, B, AB}]


def test_committed_tokens_advance_it_and_copies_are_cut_where_it_forbids(toy):
    c = Constraint(Grammar.lark(LARK), toy)
    c.advance([OPEN, A])
    assert c.allowed([COMMA, AB, CLOSE, CLOSE]) == 3
    assert [allowed(r) for r in c.masks([CLOSE])] == [{B, COMMA, CLOSE}, {EOS}]
    with pytest.raises(SpecmlxError, match="the grammar refused a committed token"):
        c.advance([OPEN])


def test_a_schema_it_cannot_compile_is_one_line():
    with pytest.raises(SpecmlxError, match="the JSON schema cannot be used") as refused:
        Grammar.json_schema({"type": "object", "properties": {"x": {"type": "no such type"}}})
    assert "\n" not in str(refused.value)


def test_a_drafted_end_token_ends_the_rows_and_leaves_the_state_as_it_was(toy):
    c = Constraint(Grammar.lark(LARK), toy)
    c.advance([OPEN, A, CLOSE])
    assert [allowed(r) for r in c.masks([EOS, OPEN])] == [{EOS}, {EOS}, {EOS}]
    assert c.matcher.is_accepting() and c.matcher.rollback(1)  # the state is "{a}" still: one step back is "{a"
    assert [c.matcher.validate_tokens([t]) for t in (B, COMMA, CLOSE, EOS, OPEN)] == [1, 1, 1, 0, 0]


def test_an_accepted_end_token_where_more_could_follow_ends_the_rows_and_the_answer(toy):
    """A grammar that could go on (`("a"|"b")+`): past a drafted end token only end tokens are allowed,
    and a round that commits one then more advances no further than it."""
    c = Constraint(Grammar.lark('start: ("a" | "b")+'), toy)
    masks = [allowed(r) for r in c.masks([A, EOS, B])]
    assert masks == [{A, B, AB}, {A, B, AB, EOS}, {EOS}, {EOS}]
    c.advance([A, EOS, B])  # the answer ended at EOS: what follows is not the grammar's
    assert [allowed(r) for r in c.masks([])] == [{A, B, AB, EOS}]


def nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("depth", [63, 64, 100, 300, 3000])  # 300 and more: past Python's stack for a walk
def test_a_schema_nested_past_the_engines_limit_is_refused_in_one_line(depth):
    with pytest.raises(SpecmlxError, match="nested too deeply for the grammar engine"):
        Grammar.json_schema(nested(depth))
    Grammar.json_schema(nested(40))
