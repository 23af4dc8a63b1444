"""Real tokenizers (slow): the converted tokenizer.json against references built independently.

- Qwen (byte-level BPE): transformers' GGUF tokenizer builder
  (`transformers.integrations.gguf.gguf_tokenizer_mapping.convert_gguf_tokenizer`), fed the
  vocabulary as the `gguf` package reads it. That builder omits Qwen2's NFC normalizer, so
  the comparison runs on NFC text; NFC itself is checked against `unicodedata`.
- Gemma 3 (SentencePiece BPE): `spm_reference.py`, the SentencePiece algorithm written out
  over the GGUF's pieces, scores and types. transformers' builder is compared too, except on
  whitespace runs longer than Gemma's longest whitespace piece, which it splits differently
  from SentencePiece and llama.cpp (16+18 spaces instead of 31+3).
"""

from __future__ import annotations

import inspect
import re
import unicodedata

import gguf
import pytest
from tokenizers import Tokenizer

from .spm_reference import SentencePieceReference

pytestmark = pytest.mark.slow


def _stdlib_code() -> list[str]:
    import argparse, difflib, json.decoder, textwrap  # noqa: E401 - sources used as a code corpus

    return [inspect.getsource(m) for m in (argparse, difflib, json.decoder, textwrap)]


MIXED = [
    "Hello world",
    "def f(x):\n    return x  +  1\n\n\n",
    "    indented\n\t\ttabs\tand\r\nCRLF\n\n\n\nmany newlines",
    "a" + " " * 7 + "b" + " " * 33 + "c" + "\t" * 5 + "d",
    "héllo wörld, naïve café — 你好世界 🎉 👨‍👩‍👧 Ελληνικά Русский العربية हिन्दी 日本語",
    "ｆｕｌｌｗｉｄｔｈ \u00a0nbsp\u2003em\u200bzero-width",
    "x = [1,2,3]  # 1234567890 3.14159e-10 0xFF",
    "I'm sure they'll SAY: DON'T, won't we've",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|fim_prefix|>def a():<|fim_suffix|>\n<|fim_middle|><|endoftext|>",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "",
]


def gguf_tokenizer_dict(path) -> tuple[str, dict]:
    """What transformers' GGUF builder takes, read with gguf's own GGUFReader API."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING

    reader = gguf.GGUFReader(path)
    out = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        field = reader.get_field(f"tokenizer.{key}")
        if field is not None:
            out[name] = field.contents()
    return reader.get_field("general.architecture").contents(), out


def converted(real_model, key) -> tuple[Tokenizer, object]:
    from mlx_lm.utils import load_tokenizer

    mlx_dir = real_model(key).mlx_dir
    return Tokenizer.from_file(str(mlx_dir / "tokenizer.json")), load_tokenizer(mlx_dir)


def check_round_trip(tokenizer, wrapper, text, ids, expected_text):
    assert wrapper.encode(text, add_special_tokens=False) == ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == expected_text


@pytest.mark.parametrize("key", ["qwen-0.5b", "qwen-1.5b"])
def test_qwen_tokenizer(real_model, key):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    tokenizer, wrapper = converted(real_model, key)
    reference, _ = convert_gguf_tokenizer(*gguf_tokenizer_dict(real_model(key).gguf))
    texts = [unicodedata.normalize("NFC", t) for t in MIXED + _stdlib_code()]
    total = 0
    for text in texts:
        ids = tokenizer.encode(text).ids
        assert ids == reference.encode(text, add_special_tokens=False).ids, text[:80]
        check_round_trip(tokenizer, wrapper, text, ids, text)
        total += len(ids)
    print(f"\n{key}: {len(texts)} texts, {total} tokens, all identical to the reference")


def test_qwen_normalizes_to_nfc(real_model):
    tokenizer, _ = converted(real_model, "qwen-0.5b")
    decomposed = "cafe\u0301 \u212b"  # e + combining acute; the angstrom sign
    assert tokenizer.encode(decomposed).ids == tokenizer.encode(unicodedata.normalize("NFC", decomposed)).ids


def test_gemma_tokenizer(real_model):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    real = real_model("gemma3-270m")
    tokenizer, wrapper = converted(real_model, "gemma3-270m")
    arch, vocab = gguf_tokenizer_dict(real.gguf)
    spm = SentencePieceReference(vocab["tokens"], vocab["token_type"], vocab["scores"])
    hf_builder, _ = convert_gguf_tokenizer(arch, vocab)
    total = 0
    for text in MIXED + _stdlib_code():
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert ids == spm.encode(text), text[:80]
        if not re.search(" {32,}", text):
            assert ids == hf_builder.encode(text, add_special_tokens=False).ids, text[:80]
        check_round_trip(tokenizer, wrapper, text, ids, text)
        total += len(ids)
    assert tokenizer.encode("hi").ids[0] == tokenizer.token_to_id("<bos>")
    print(f"\ngemma3-270m: {total} tokens, all identical to the SentencePiece reference")
