"""A request's prompt: text past the context window is refused from a bounded head of it."""

from __future__ import annotations

import pytest

from specmlx.serve.errors import APIError
from specmlx.serve.prompts import HEAD_CHARS_PER_TOKEN, refuse_past_window


class Counting:
    """A tokenizer stand-in: one token per character, recording what it was asked to encode."""

    def __init__(self) -> None:
        self.encoded: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        return [1] * len(text)


def test_text_past_the_window_is_refused_from_a_head_of_it():
    tokenizer = Counting()
    with pytest.raises(APIError) as refused:
        refuse_past_window(tokenizer, "x" * 10_000_000, 1000, "prompt")
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "prompt"
    assert tokenizer.encoded == [HEAD_CHARS_PER_TOKEN * 1000]  # not ten million characters


def test_long_text_that_may_fit_is_not_refused():
    tokenizer = Counting()
    refuse_past_window(tokenizer, "x" * 999, 1000, "prompt")  # short: not even looked at
    assert tokenizer.encoded == []
    # Long in characters, few tokens: a head of it is within the window (and the slack a cut adds).
    few = Counting()
    few.encode = lambda text: few.encoded.append(len(text)) or [1] * (len(text) // HEAD_CHARS_PER_TOKEN)
    refuse_past_window(few, "x" * 50_000, 1000, "prompt")
    assert few.encoded == [HEAD_CHARS_PER_TOKEN * 1000]
