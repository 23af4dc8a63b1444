"""Rebuild a Hugging Face `tokenizer.json` and `tokenizer_config.json` from GGUF tokenizer metadata.

A GGUF keeps the vocabulary, merges, scores and token types under `tokenizer.ggml.*`, not the
pipeline around them. The pipeline is restored here from what the HF tokenizers of these model
families use:

- `gpt2` (byte-level BPE, Qwen and Llama 3): NFC for Qwen, a split regex chosen by
  `tokenizer.ggml.pre`, byte-level mapping, merges as stored.
- `llama` (SentencePiece BPE, Gemma and Llama 2): spaces become "▁", byte fallback, and merges
  rebuilt from the vocabulary ranked by the scores SentencePiece merges by.

Control tokens become special added tokens; user-defined ones (Gemma's "\\n\\n", runs of spaces)
become plain added tokens, matched whole, as SentencePiece and llama.cpp match them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from specmlx.convert.gguf_file import GGUFFile
from specmlx.errors import SpecmlxError

# llama.cpp token types (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SPACE = "\u2581"  # SentencePiece's visible space, "▁"

_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# `tokenizer.ggml.pre` -> split regex; None means GPT-2's own regex inside the ByteLevel step.
_BPE_SPLITS: dict[str, str | None] = {
    "qwen2": _QWEN2_SPLIT,
    "deepseek-r1-qwen": _QWEN2_SPLIT,
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "smaug-bpe": _LLAMA3_SPLIT,
    "gpt-2": None,
    "default": None,
}
_NFC_PRES = {"qwen2", "deepseek-r1-qwen"}
_PAD_PLACEHOLDER = re.compile(r"^\[PAD\d+\]$")
# Tokens llama.cpp treats as end of generation when the file marks them as control tokens.
_END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|end|>")


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer metadata of a GGUF file, as read."""

    model: str  # tokenizer.ggml.model: "gpt2" or "llama"
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    merges: list[str] | None
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None

    def token(self, index: int | None) -> str | None:
        return None if index is None else self.tokens[index]

    def end_of_turn_ids(self) -> list[int]:
        """eos first, then the other control tokens llama.cpp also stops on."""
        ids = [] if self.eos_id is None else [self.eos_id]
        for index, (text, kind) in enumerate(zip(self.tokens, self.types)):
            if kind == CONTROL and text in _END_OF_TURN and index not in ids:
                ids.append(index)
        return ids


def read_vocab(gf: GGUFFile) -> GGUFVocab:
    """Read `tokenizer.*` metadata, failing clearly if the file has no usable tokenizer."""
    model = gf.get("tokenizer.ggml.model")
    tokens = gf.get_array("tokenizer.ggml.tokens")
    if model is None or not tokens:
        raise SpecmlxError(f"{gf.path.name}: GGUF has no tokenizer (tokenizer.ggml.model/tokens)")
    types = gf.get_array("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    add_bos = gf.get("tokenizer.ggml.add_bos_token")
    return GGUFVocab(
        model=model,
        pre=gf.get("tokenizer.ggml.pre", "default"),
        tokens=tokens,
        types=types,
        scores=gf.get_array("tokenizer.ggml.scores"),
        merges=gf.get_array("tokenizer.ggml.merges"),
        bos_id=gf.get("tokenizer.ggml.bos_token_id"),
        eos_id=gf.get("tokenizer.ggml.eos_token_id"),
        unk_id=gf.get("tokenizer.ggml.unknown_token_id"),
        pad_id=gf.get("tokenizer.ggml.padding_token_id"),
        # llama.cpp adds BOS for SentencePiece vocabularies unless the file says otherwise.
        add_bos=bool(add_bos) if add_bos is not None else model == "llama",
        add_eos=bool(gf.get("tokenizer.ggml.add_eos_token", False)),
        add_space_prefix=bool(gf.get("tokenizer.ggml.add_space_prefix", model == "llama")),
        chat_template=gf.get("tokenizer.chat_template"),
    )


def build_tokenizer(vocab: GGUFVocab) -> Tokenizer:
    """The `tokenizers.Tokenizer` the vocabulary describes."""
    if vocab.model == "gpt2":
        tokenizer = _byte_level_bpe(vocab)
    elif vocab.model == "llama":
        tokenizer = _sentencepiece_bpe(vocab)
    else:
        raise SpecmlxError(
            f"unsupported GGUF tokenizer model {vocab.model!r} (supported: gpt2, llama)"
        )
    _add_tokens(tokenizer, vocab)
    if vocab.add_bos and vocab.bos_id is not None:
        bos = vocab.tokens[vocab.bos_id]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, vocab.bos_id)]
        )
    return tokenizer


def tokenizer_config(vocab: GGUFVocab, context_length: int | None) -> dict:
    """`tokenizer_config.json`: special tokens, BOS/EOS flags, chat template, added tokens."""
    config: dict = {
        # No family class: tokenizer.json carries the whole pipeline (transformers may still
        # choose one by config.json's model_type; the tests check both encode alike).
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": vocab.token(vocab.bos_id),
        "eos_token": vocab.token(vocab.eos_id),
        "unk_token": vocab.token(vocab.unk_id),
        "pad_token": vocab.token(vocab.pad_id),
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(index): {
                "content": _added_content(vocab, index),
                "lstrip": False,
                "normalized": _normalized(vocab, index),
                "rstrip": False,
                "single_word": False,
                "special": kind == CONTROL,
            }
            for index, kind in enumerate(vocab.types)
            if _is_added(vocab, index)
        },
    }
    if context_length:
        config["model_max_length"] = int(context_length)
    if vocab.chat_template:
        config["chat_template"] = vocab.chat_template
    return config


def _byte_level_bpe(vocab: GGUFVocab) -> Tokenizer:
    if vocab.pre not in _BPE_SPLITS:
        raise SpecmlxError(
            f"unsupported GGUF pre-tokenizer {vocab.pre!r} (supported: {', '.join(sorted(_BPE_SPLITS))})"
        )
    if vocab.merges is None:
        raise SpecmlxError("GGUF byte-level BPE tokenizer has no tokenizer.ggml.merges")
    model = BPE(
        vocab=_vocab_dict(vocab),
        merges=[tuple(m.split(" ", 1)) for m in vocab.merges],
        # Llama 3's tokenizer takes a whole pre-token that is in the vocabulary before merging.
        ignore_merges=vocab.pre in ("llama-bpe", "llama3"),
        fuse_unk=False,
        byte_fallback=False,
    )
    tokenizer = Tokenizer(model)
    if vocab.pre in _NFC_PRES:
        tokenizer.normalizer = normalizers.NFC()
    split = _BPE_SPLITS[vocab.pre]
    if split is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _sentencepiece_bpe(vocab: GGUFVocab) -> Tokenizer:
    if vocab.scores is None:
        raise SpecmlxError("GGUF SentencePiece tokenizer has no tokenizer.ggml.scores")
    pieces = _vocab_dict(vocab)
    unk = vocab.token(vocab.unk_id)
    model = BPE(
        vocab=pieces,
        merges=_sentencepiece_merges(vocab, pieces),
        unk_token=unk if unk in pieces else None,
        fuse_unk=True,
        byte_fallback=True,
    )
    tokenizer = Tokenizer(model)
    replace = normalizers.Replace(" ", SPACE)
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend(SPACE), replace])
        steps.append(decoders.Strip(" ", 1, 0))
    else:
        tokenizer.normalizer = replace
    tokenizer.decoder = decoders.Sequence(steps)
    return tokenizer


def _sentencepiece_merges(vocab: GGUFVocab, pieces: dict[str, int]) -> list[tuple[str, str]]:
    """Every split of a normal piece into two pieces, best score first.

    SentencePiece BPE merges, at each step, the adjacent pair whose union scores highest; a
    merge list ranked by that score makes `tokenizers`' rank-ordered BPE do the same.
    """
    ranked: list[tuple[float, int, str, str]] = []
    for index, (piece, kind) in enumerate(zip(vocab.tokens, vocab.types)):
        if kind != NORMAL or len(piece) < 2:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in pieces and right in pieces:
                ranked.append((-vocab.scores[index], index, left, right))
    ranked.sort(key=lambda m: (m[0], m[1]))
    return [(left, right) for _, _, left, right in ranked]


def _vocab_dict(vocab: GGUFVocab) -> dict[str, int]:
    # llama.cpp pads a vocabulary up to the embedding size with "[PADn]" placeholders of type
    # UNUSED; the original tokenizer has no such ids, so they are left out.
    out: dict[str, int] = {}
    for index, kind in enumerate(vocab.types):
        if kind == UNUSED and _PAD_PLACEHOLDER.match(vocab.tokens[index]):
            continue
        out.setdefault(_added_content(vocab, index), index)
    return out


def _is_added(vocab: GGUFVocab, index: int) -> bool:
    return vocab.types[index] in (CONTROL, USER_DEFINED)


def _normalized(vocab: GGUFVocab, index: int) -> bool:
    # Only SentencePiece user-defined pieces are spelled in normalized ("▁") form.
    return vocab.model == "llama" and vocab.types[index] == USER_DEFINED


def _added_content(vocab: GGUFVocab, index: int) -> str:
    # llama.cpp's converter writes SentencePiece user-defined pieces with real spaces; spelled
    # back with "▁" they match the normalized text, as the original piece did.
    text = vocab.tokens[index]
    if vocab.model == "llama" and vocab.types[index] == USER_DEFINED:
        return text.replace(" ", SPACE)
    return text


def _add_tokens(tokenizer: Tokenizer, vocab: GGUFVocab) -> None:
    special, plain = [], []
    for index, kind in enumerate(vocab.types):
        if not _is_added(vocab, index):
            continue
        content = _added_content(vocab, index)
        if kind == CONTROL:
            special.append(AddedToken(content, special=True, normalized=False))
        else:
            plain.append(AddedToken(content, special=False, normalized=_normalized(vocab, index)))
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(plain)
