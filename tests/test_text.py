"""Streaming text and stop strings; a completion's text keeps its leading space, on the real
Qwen2.5-Coder and Gemma 3 tokenizers (slow: fetched at first use) and the tiny one, with each of
mlx-lm's streaming detokenizers."""

import functools

import pytest
from mlx_lm.tokenizer_utils import (BPEStreamingDetokenizer, NaiveStreamingDetokenizer, SPMStreamingDetokenizer,
                                    TokenizerWrapper)

from specmlx.errors import SpecmlxError
from specmlx.loading import load_tokenizer
from specmlx.text import PRIMER, TextStream

from . import tiny
from .fetched import fetched


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


def test_the_stop_string_met_first_is_named(wrapped):
    text = "The quick brown fox jumps over the lazy dog."
    ts = TextStream(wrapped, ("lazy", "over", "cat"))
    out = "".join(ts.add(t) for t in wrapped.encode(text) if not ts.stopped)
    assert ts.stopped and out == "The quick brown fox jumps " and ts.matched == "over"
    quiet = TextStream(wrapped, ("cat",))
    assert [quiet.add(t) for t in wrapped.encode(text)] and quiet.matched == ""


def test_a_near_miss_is_released_at_the_end(wrapped):
    out, stopped, _ = stream(wrapped, "print(i)\n", stop=("i)X",))
    assert not stopped and out == "print(i)\n"


def test_without_a_tokenizer_there_is_no_text():
    ts = TextStream(None, ("x",))
    assert ts.add(5) == "" and ts.finish() == "" and not ts.stopped


# ---- an answer that continues the prompt's text keeps its leading space ----------------------------


def preset_tokenizer(name: str):
    """A preset's target tokenizer, as the server loads it: fetched at first use (`fetched`)."""
    return load_tokenizer(name, fetched(name))


@functools.cache
def hf_tokenizer(kind: str):
    if kind == "tiny":
        return tiny.train_tokenizer()
    return preset_tokenizer({"qwen": "qwen2.5-coder-1.5b", "gemma": "gemma-3-270m"}[kind])._tokenizer


@functools.cache
def streams(name: str):
    """A tokenizer with one of mlx-lm's streaming detokenizers: the one it loads with, or another."""
    kind, detokenizer = name.split("-", 1)
    return TokenizerWrapper(hf_tokenizer(kind), DETOKENIZERS[detokenizer])


DETOKENIZERS = {
    "bpe": BPEStreamingDetokenizer,  # Qwen's, and the saved tiny tokenizer's
    "spm": functools.partial(SPMStreamingDetokenizer, trim_space=False),  # Gemma 3's (no Strip in its decoder)
    "spm_trim": SPMStreamingDetokenizer,  # SentencePiece tokenizers with a Strip decoder: Llama, Mistral
    "naive": NaiveStreamingDetokenizer,  # any other
}
# A real tokenizer's cases are slow: the first fetches its preset (`fetched`).
STREAMS = [*(pytest.param(name, marks=pytest.mark.slow)
             for name in ("qwen-bpe", "qwen-naive", "gemma-spm", "gemma-spm_trim", "gemma-naive")),
           "tiny-naive", "tiny-bpe"]
CONTINUATIONS = [
    ("x =", " 1 + x"),  # a leading space
    ("a", "  b"),  # two
    ("x=", " "),  # a single space and nothing else
    ("s =", " 🙂 ok"),  # a space, then a character of several bytes
    ("s = '", "🙂'"),
    ("s = '", "東京'"),
    ("def f():\n", "    return 1\n"),
    ("x", "\n\n y"),
]


def continue_text(tok, prompt: str, answer: str, stop=()):
    """Stream `answer`'s tokens after `prompt`'s, as a completion; the text, whether it stopped, and
    the text `decode` gives the answer after the prompt."""
    before, after = tok.encode(prompt, add_special_tokens=False), tok.encode(answer, add_special_tokens=False)
    ts = TextStream(tok, stop, continues_text=True)
    pieces = []
    for token in after:
        pieces.append(ts.add(token))
        if ts.stopped:
            break
    return "".join(pieces) + ts.finish(), ts.stopped, tok.decode(before + after)[len(tok.decode(before)):]


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("prompt,answer", CONTINUATIONS)
def test_a_continuation_streams_what_decode_gives_after_the_prompt(name, prompt, answer):
    out, stopped, expected = continue_text(streams(name), prompt, answer)
    assert out == expected == answer and not stopped


@pytest.mark.parametrize("name", STREAMS)
def test_a_chats_answer_streams_as_mlx_lm_has_it(name):
    """Without `continues_text`, the detokenizer's own text, leading space trimmed where it trims it."""
    tok = streams(name)
    for _, answer in CONTINUATIONS:
        ids = tok.encode(answer, add_special_tokens=False)
        detok = tok.detokenizer
        for token in ids:
            detok.add_token(token)
        detok.finalize()
        ts = TextStream(tok)
        assert "".join(ts.add(t) for t in ids) + ts.finish() == detok.text


@pytest.mark.slow
def test_qwens_chat_answer_drops_its_leading_space_and_its_completion_keeps_it():
    tok = streams("qwen-bpe")
    ids = tok.encode(" 1 + x", add_special_tokens=False)
    chat, completion = TextStream(tok), TextStream(tok, continues_text=True)
    assert "".join(chat.add(t) for t in ids) + chat.finish() == "1 + x"
    assert "".join(completion.add(t) for t in ids) + completion.finish() == " 1 + x"


@pytest.mark.parametrize("name", STREAMS)
def test_a_continuations_stop_strings_see_its_text_alone(name):
    tok = streams(name)
    # A stop string at the very start, its leading space included.
    assert continue_text(tok, "x =", " 1 + x", stop=(" 1",))[:2] == ("", True)
    assert continue_text(tok, "x =", " 1 + x", stop=(" + x",))[:2] == (" 1", True)
    # The primer's text is never matched, alone or with the answer's start.
    for stop in (PRIMER, PRIMER + " 1", PRIMER + " "):
        assert continue_text(tok, "x =", " 1 + x", stop=(stop,))[:2] == (" 1 + x", False)


def test_a_detokenizer_that_holds_the_primer_back_is_refused():
    class Holding:
        """A detokenizer that releases nothing: the answer's text would be its first."""
        text = ""

        def add_token(self, token):
            pass

    class Tokenizer:
        detokenizer = Holding()

        def encode(self, text, add_special_tokens=True):
            return [7]

        def decode(self, ids):
            return PRIMER

    with pytest.raises(SpecmlxError, match="cannot stream a completion's text"):
        TextStream(Tokenizer(), continues_text=True)
    assert TextStream(Tokenizer()).add(7) == ""  # a chat's answer does not need the primer
