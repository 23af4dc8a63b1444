"""Constrained decoding under speculation: the target's distribution restricted to a grammar, exactly.

A request's `response_format` (a JSON schema, or any JSON object) becomes a
grammar, compiled by llguidance (PyPI): on Qwen's 151,936-token vocabulary it
compiles a schema in under a millisecond and computes a token mask in 30-40
µs (outlines-core took 0.6 s to index each schema, a cost every request's
first token would pay), and its matcher rolls back.

At every position a round scores ([last, d1..dk]) the target's logits are
masked by the grammar's state after the drafts before it (`Constraint.masks`),
so p there is the target's distribution restricted to the grammar: what plain
constrained decoding samples from. Verification is unchanged. A drafted token
the grammar forbids has p = 0 and is rejected. It must be verified, not cut:
cutting a sampled draft at a forbidden token makes the draft's length depend
on a draw nobody verifies, which biases the output. A copied draft (lookup, a
prediction) depends on the committed tokens alone and is cut at its first
forbidden token (`Constraint.allowed`). The committed tokens then advance the
matcher (`Constraint.advance`).
"""

from __future__ import annotations

import copy
import json
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import mlx.core as mx
import numpy as np

from .errors import SpecmlxError
from .schema_bounds import bounded


# Between JSON's tokens: nothing, a space, or a new line and up to 20 of indentation, as llama.cpp's
# JSON grammars allow (`json_schema_to_grammar`'s SPACE_RULE). Unbounded whitespace lets a model
# that is unsure write blank lines until max_tokens, a known failure of JSON modes.
WHITESPACE = r" ?|\n[ \t]{0,20}"
# llguidance's JSON options for that layout (a schema's `x-guidance`, or the compiler's overrides).
LAID_OUT = {"whitespace_flexible": True, "whitespace_pattern": WHITESPACE}


@dataclass(frozen=True)
class Grammar:
    """A grammar in llguidance's form, and a line saying what it came from (for errors and logs)."""

    text: str
    origin: str

    @staticmethod
    def json_schema(schema: dict[str, Any], laid_out: bool = True) -> "Grammar":
        """Answers that are JSON valid against `schema`, laid out as the model likes within bounds
        (`laid_out`) or on one line, numbers bounded (`schema_bounds`); refused in one line if llguidance
        cannot compile it."""
        from llguidance import LLMatcher

        layout = LAID_OUT if laid_out else {"whitespace_flexible": False}
        try:  # llguidance reads the schema with serde's recursion limit: a deep one raises here, not in `checked`
            text = LLMatcher.grammar_from_json_schema(json.dumps(bounded(schema)), overrides=layout)
        except ValueError as err:
            raise SpecmlxError(f"the JSON schema cannot be used: {said(str(err))}") from None
        return Grammar(checked(text, "the JSON schema"), "a JSON schema")

    @staticmethod
    def json_object() -> "Grammar":
        """Any JSON object (OpenAI's `json_object` response format)."""
        return Grammar.json_schema({"type": "object"})

    @staticmethod
    def lark(text: str) -> "Grammar":
        """A grammar in Lark's syntax, as llguidance reads it."""
        from llguidance import LLMatcher

        try:
            grammar = LLMatcher.grammar_from_lark(text)
        except ValueError as err:
            raise SpecmlxError(f"the grammar cannot be used: {said(str(err))}") from None
        return Grammar(checked(grammar, "the grammar"), "a Lark grammar")


def checked(grammar: str, what: str) -> str:
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(grammar)
    if error and not error.startswith("WARNING"):
        raise SpecmlxError(f"{what} cannot be used: {said(error.splitlines()[0])}")
    return grammar


def said(error: str) -> str:
    """llguidance's complaint, with what its recursion limit means for a schema (about 60 nested objects)."""
    if "recursion limit exceeded" in error:
        return f"it is nested too deeply for the grammar engine ({error})"
    return error


# llguidance's view of a tokenizer takes a second or two to build (it reads the whole vocabulary):
# one per tokenizer, kept as long as the tokenizer lives.
_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_BUILDING = threading.Lock()


def grammar_tokenizer(tokenizer: Any, width: int, eos: Iterable[int]) -> Any:
    """llguidance's tokenizer for a Hugging Face fast tokenizer (or mlx-lm's wrapper of one), over
    `width` token ids (the target's logits; ids past the tokenizer's are never allowed) with `eos`
    as the tokens that end an answer the grammar accepts."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper

    key = tokenizer._tokenizer if isinstance(tokenizer, TokenizerWrapper) else tokenizer  # the HF one
    with _BUILDING:  # the server makes one at start-up: a first request waits for it, not for a second one
        return _TOKENIZERS.setdefault(key, {}).get((width, frozenset(eos))) or _build(key, width, eos)


def _build(key: Any, width: int, eos: Iterable[int]) -> Any:
    from llguidance import LLTokenizer

    backend = getattr(key, "backend_tokenizer", None)
    if backend is None:
        raise SpecmlxError("constrained output needs a fast (Rust) tokenizer, and this model has none")
    # What llguidance.hf.from_tokenizer does, whose check names transformers 4's fast class only.
    backend = copy.copy(backend)
    backend.no_padding()
    backend.no_truncation()
    made = _TOKENIZERS[key][(width, frozenset(eos))] = LLTokenizer(backend.to_str(), n_vocab=width,
                                                                    eos_token=sorted(eos))
    return made


class Constraint:
    """One generation's place in its grammar: llguidance's matcher over the target's token ids."""

    def __init__(self, grammar: Grammar, tokenizer: Any) -> None:
        from llguidance import LLMatcher

        self.width = tokenizer.vocab_size
        self.ends = frozenset(tokenizer.eos_tokens)
        self._ends = np.isin(np.arange(self.width), list(self.ends))  # a row allowing end tokens only
        self.matcher = LLMatcher(tokenizer, grammar.text)
        self._rows: dict[tuple[int, ...], np.ndarray] = {}  # this round's masks, by the drafted tokens before them
        if self.matcher.is_error():
            raise SpecmlxError(f"{grammar.origin} cannot be used: {self.matcher.get_error()}")

    def allowed(self, tokens: Sequence[int]) -> int:
        """How many of `tokens`, from the current state, the grammar allows in a row."""
        return self.matcher.validate_tokens(list(tokens))

    def masks(self, draft: Sequence[int]) -> mx.array:
        """(len(draft) + 1, width) booleans: the tokens allowed after the committed tokens and each
        prefix of `draft`. Past a drafted token the grammar forbids, the rows repeat the row before it:
        that token is rejected there, so the rows after it are never read. Past a drafted end token,
        the rows allow end tokens only: the answer ends there if it is accepted, and an end token is not
        consumed along a draft (once the matcher has stopped, it does not count one it consumes, and
        rolling back would undo the token before it)."""
        rows: list[np.ndarray] = []
        for i, token in enumerate(draft):
            rows.append(self._row(draft[:i]))
            if token in self.ends and rows[-1][token]:
                rows += [self._ends] * (len(draft) + 1 - len(rows))
                break
            if not rows[-1][token]:
                break
        else:
            rows.append(self._row(draft))
        rows += [rows[-1]] * (len(draft) + 1 - len(rows))
        return mx.array(np.stack(rows))

    def after(self, drafted: Sequence[int]) -> mx.array:
        """(width,) booleans: the tokens allowed after the committed tokens and `drafted` (each allowed
        where it was drafted, none an end token)."""
        return mx.array(self._row(drafted))

    def advance(self, tokens: Sequence[int]) -> None:
        """The round committed `tokens` (each one allowed where it was committed), up to an end token:
        the answer is over there, whatever the round holds after it."""
        self._rows.clear()
        for token in tokens:
            if token in self.ends:
                return
            if not self.matcher.consume_token(token):
                raise SpecmlxError(f"the grammar refused a committed token ({token}): {self.matcher.get_error()}")

    def _row(self, drafted: Sequence[int]) -> np.ndarray:
        """The tokens allowed after `drafted`, computed once a round: the drafter asks for them as it
        drafts, verification for the whole draft (a mask costs 30-40 µs on a 152k vocabulary)."""
        key = tuple(drafted)
        if any(token in self.ends for token in key):  # past an end token: the answer is over (see `masks`)
            return self._ends
        row = self._rows.get(key)
        if row is None:
            consumed = self.matcher.try_consume_tokens(list(key)) if key else 0
            if consumed != len(key) or self.matcher.is_error():
                raise SpecmlxError(f"the grammar could not follow a draft: {self.matcher.get_error()}")
            row = self._rows[key] = self._mask()
            if not self.matcher.rollback(consumed) or self.matcher.is_error():
                raise SpecmlxError(f"the grammar could not roll back a draft: {self.matcher.get_error()}")
        return row

    def _mask(self) -> np.ndarray:
        words = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint32)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)
        return bits[: self.width]
