"""The rebuilt tokenizer encodes and decodes exactly like the original it was taken from."""

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from specmlx.convert.gguf_file import open_gguf
from specmlx.convert.gguf_tokenizer import build_tokenizer, read_vocab, tokenizer_config

from .spm_reference import SentencePieceReference
from .tiny import CHAT_TEMPLATE, SPM_CONTROLS, model_for, spm_vocab, trained_bpe, write_gguf

TEXTS = [
    "Hello world",
    "def hello(name):\n    return f'hello {name}'\n\n\n",
    "héllo wörld, naïve café — 你好 🎉",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "   leading, trailing and   inner   runs   ",
    "\t\ttabs\tand\n\n\nnewlines\r\n",
    "x = [1,2,3]  # 12345 67.89",
    "I'm sure they'll SAY: DON'T",
    "<tool_call>{\"name\": 1}</tool_call>",
    "",
]


def rebuilt(path: Path) -> tuple[Tokenizer, dict]:
    vocab = read_vocab(open_gguf(path))
    return build_tokenizer(vocab), tokenizer_config(vocab, 256)


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_bpe_matches_original(tiny_gguf, text):
    tokenizer, _ = rebuilt(tiny_gguf("qwen2"))
    original = trained_bpe()
    ids = tokenizer.encode(text).ids
    assert ids == original.encode(text).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_pad_placeholders_are_not_tokens(tiny_gguf):
    tokenizer, _ = rebuilt(tiny_gguf("qwen2"))
    vocab = tokenizer.get_vocab()
    assert not any(t.startswith("[PAD") for t in vocab)
    assert tokenizer.encode("[PAD330]").ids == trained_bpe().encode("[PAD330]").ids


def test_special_and_user_tokens(tiny_gguf):
    tokenizer, config = rebuilt(tiny_gguf("qwen2"))
    added = config["added_tokens_decoder"]
    by_content = {v["content"]: v for v in added.values()}
    assert by_content["<|im_end|>"]["special"] is True
    assert by_content["<tool_call>"]["special"] is False
    im_end = tokenizer.token_to_id("<|im_end|>")
    assert tokenizer.decode([im_end, 5], skip_special_tokens=True) == tokenizer.decode([5])
    assert config["chat_template"] == CHAT_TEMPLATE
    assert (config["eos_token"], config["bos_token"], config["pad_token"]) == ("<|im_end|>", "<|endoftext|>", "<|endoftext|>")
    assert config["add_bos_token"] is False and config["model_max_length"] == 256


# ---- SentencePiece (Gemma-style) ----


SPM_TEXTS = [
    "hello world",
    "the world at the inn",
    "def f(x):\n  return x+1\n\n",
    "a   b  c",
    "  hello",
    "naïve é 你好 🎉",
    "<start_of_turn>user\nhello<end_of_turn>\n",
    "",
]


@pytest.mark.parametrize("text", SPM_TEXTS)
def test_sentencepiece_matches_reference_algorithm(tiny_gguf, text):
    path = tiny_gguf("gemma3")
    vocab = read_vocab(open_gguf(path))
    tokenizer = build_tokenizer(vocab)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == SentencePieceReference(vocab.tokens, vocab.types, vocab.scores).encode(text)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_sentencepiece_adds_bos_and_skips_it_on_decode(tiny_gguf):
    tokenizer, config = rebuilt(tiny_gguf("gemma3"))
    ids = tokenizer.encode("hello").ids
    assert ids[0] == SPM_CONTROLS.index("<bos>")
    assert tokenizer.decode(ids) == "hello"
    assert config["add_bos_token"] is True and config["unk_token"] == "<unk>"


def test_mlx_lm_loads_the_same_tokenizer(converted_tiny):
    from mlx_lm.utils import load_tokenizer

    for arch in ("qwen2", "gemma3"):
        _, out = converted_tiny(arch)
        raw = Tokenizer.from_file(str(out / "tokenizer.json"))
        wrapper = load_tokenizer(out)
        for text in TEXTS:
            assert wrapper.encode(text) == raw.encode(text).ids, (arch, text)
        saved = json.loads((out / "tokenizer_config.json").read_text())
        assert saved["chat_template"] == CHAT_TEMPLATE


def test_chat_template_applies(converted_tiny):
    from mlx_lm.utils import load_tokenizer

    _, out = converted_tiny("qwen2")
    wrapper = load_tokenizer(out)
    prompt = wrapper.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_sentencepiece_with_space_prefix(tmp_path):
    # Llama-2-style vocabularies add "▁" in front of the text and strip it again on decode.
    path = write_gguf(tmp_path / "llama-spm.gguf", model_for("llama"), spm_vocab(), space_prefix=True)
    vocab = read_vocab(open_gguf(path))
    assert vocab.add_space_prefix is True
    tokenizer = build_tokenizer(vocab)
    reference = SentencePieceReference(vocab.tokens, vocab.types, vocab.scores)
    for text in ("hello world", "the inn at the world", "héllo"):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert ids == reference.encode(" " + text)
        assert tokenizer.decode(ids) == text
