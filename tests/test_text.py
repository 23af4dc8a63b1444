"""Streaming text and stop strings."""

import pytest
from mlx_lm.tokenizer_utils import TokenizerWrapper

from specmlx.text import TextStream


@pytest.fixture(scope="module")
def wrapped(tokenizer):
    return TokenizerWrapper(tokenizer)


def stream(wrapped, text: str, stop=()):
    ids = wrapped.encode(text)
    ts = TextStream(wrapped, stop)
    pieces = []
    for token in ids:
        pieces.append(ts.add(token))
        if ts.stopped:
            break
    return "".join(pieces) + ts.finish(), ts.stopped, pieces


@pytest.mark.parametrize("text", ["def add(a, b):\n    return a + b\n", "naïve café — 東京 🙂", "  spaces   and\ttabs  "])
def test_streamed_text_equals_decode(wrapped, text):
    out, stopped, _ = stream(wrapped, text)
    assert out == wrapped.decode(wrapped.encode(text))
    assert not stopped


def test_stop_string_inside_a_token_cuts_before_it(wrapped):
    out, stopped, _ = stream(wrapped, "for i in range(10):\n    print(i)", stop=("range",))
    assert stopped and out == "for i in "


def test_stop_string_spread_over_tokens_is_never_released(wrapped):
    text = "The quick brown fox jumps over the lazy dog."
    out, stopped, pieces = stream(wrapped, text, stop=("fox jumps",))
    assert stopped and out == "The quick brown "
    assert "fox" not in "".join(pieces)


def test_a_near_miss_is_released_at_the_end(wrapped):
    out, stopped, _ = stream(wrapped, "print(i)\n", stop=("i)X",))
    assert not stopped and out == "print(i)\n"


def test_without_a_tokenizer_there_is_no_text():
    ts = TextStream(None, ("x",))
    assert ts.add(5) == "" and ts.finish() == "" and not ts.stopped
