"""Tiny GGUF files for fast tests, written with `gguf.GGUFWriter` like llama.cpp writes them.

Tensors are random and named and laid out as llama.cpp stores them, so the numpy reference
(`reference.py`) can run them directly. Tokenizers are real, just small: a byte-level BPE
trained here on a few lines, and a hand-made SentencePiece-style vocabulary with scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_TOKEN = "<tool_call>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "def hello(name):\n    return f'hello {name}'\n",
    "The quick brown fox jumps over the lazy dog. 12345",
    "héllo wörld, naïve café — 你好",
    "for i in range(10):\n\tprint(i)  # loop\n",
] * 20


@dataclass(frozen=True)
class TinyVocab:
    model: str
    pre: str
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] | None = None
    bos: int | None = None
    eos: int | None = None
    unk: int | None = None
    pad: int | None = None
    add_bos: bool = False


@cache
def trained_bpe() -> Tokenizer:
    """The original tokenizer the BPE vocabulary comes from: Qwen2's pipeline, trained on CORPUS."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=BPE_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BPE_SPECIALS])
    tok.add_tokens([AddedToken(USER_TOKEN, special=False, normalized=False)])
    return tok


def bpe_vocab(pre: str = "qwen2", pad_to: int = 32) -> TinyVocab:
    """The trained BPE as GGUF metadata, padded with [PADn] like llama.cpp pads Qwen's vocabulary."""
    tok = trained_bpe()
    by_id = {i: t for t, i in tok.get_vocab(with_added_tokens=True).items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [3 if t in BPE_SPECIALS else 4 if t == USER_TOKEN else 1 for t in tokens]
    while len(tokens) % pad_to:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(5)
    merges = [" ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    eos = tokens.index("<|im_end|>")
    return TinyVocab("gpt2", pre, tokens, types, merges=merges, bos=0, eos=eos, pad=0)


# A SentencePiece BPE vocabulary in Gemma's shape: controls, user-defined whitespace pieces
# stored with real spaces (as llama.cpp writes them), 256 byte pieces, then scored pieces.
SPM_CONTROLS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
SPM_USER = ["\n", "\n\n", "  ", "   "]
SPM_PIECES = (
    "▁ e l o h w r d t a n i s c f x ( ) : = + , . 1 2 é 你 "
    "he ll llo hello ▁w or ld orld ▁world ▁t th the ▁the in ▁in ▁a an ▁an de def ▁f ▁x "
    "▁hello ▁he at ▁at"
).split()


def spm_vocab() -> TinyVocab:
    tokens = SPM_CONTROLS + SPM_USER + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    types = [3] * len(SPM_CONTROLS) + [4] * len(SPM_USER) + [6] * 256 + [1] * len(SPM_PIECES)
    # Higher score merges first; single characters score lowest, as in SentencePiece.
    scores = [-1000.0] * (len(SPM_CONTROLS) + len(SPM_USER)) + [0.0] * 256
    scores += [-100.0 - i if len(p) == 1 else -float(i) for i, p in enumerate(SPM_PIECES)]
    return TinyVocab(
        "llama", "default", tokens, types, scores=scores, bos=2, eos=1, unk=3, pad=0, add_bos=True
    )


@dataclass(frozen=True)
class TinyModel:
    arch: str = "qwen2"
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    head_dim: int = 16
    tied: bool = False
    sliding_window: int = 4
    weight_type: Q = Q.Q8_0


def tensors(spec: TinyModel, vocab_size: int, seed: int = 0) -> dict[str, tuple[np.ndarray, Q]]:
    """Random tensors by GGUF name, in numpy order, with the type each is stored as."""
    rng = np.random.default_rng(seed)
    h, hd, f = spec.hidden, spec.head_dim, spec.ffn

    def mat(rows, cols, qtype=spec.weight_type, scale=0.15):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32), qtype

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32), Q.F32

    out = {"token_embd.weight": mat(vocab_size, h, Q.Q8_0, 0.5), "output_norm.weight": norm(h)}
    if not spec.tied:
        out["output.weight"] = mat(vocab_size, h, Q.F16, 0.3)
    for i in range(spec.layers):
        b = f"blk.{i}."
        out |= {
            b + "attn_norm.weight": norm(h),
            b + "attn_q.weight": mat(spec.heads * hd, h, Q.F16),
            b + "attn_k.weight": mat(spec.kv_heads * hd, h),
            b + "attn_v.weight": mat(spec.kv_heads * hd, h, Q.F32),
            b + "attn_output.weight": mat(h, spec.heads * hd),
            b + "ffn_norm.weight": norm(h),
            b + "ffn_gate.weight": mat(f, h),
            b + "ffn_up.weight": mat(f, h),
            b + "ffn_down.weight": mat(h, f),
        }
        if spec.arch == "qwen2":
            for name, n in (("attn_q", spec.heads * hd), ("attn_k", spec.kv_heads * hd), ("attn_v", spec.kv_heads * hd)):
                out[b + name + ".bias"] = ((rng.standard_normal(n) * 0.1).astype(np.float32), Q.F32)
        if spec.arch == "gemma3":
            out |= {
                b + "attn_q_norm.weight": norm(hd),
                b + "attn_k_norm.weight": norm(hd),
                b + "post_attention_norm.weight": norm(h),
                b + "post_ffw_norm.weight": norm(h),
            }
    return out


def write_gguf(
    path: Path, spec: TinyModel, vocab: TinyVocab, arch_name: str | None = None, seed: int = 0, space_prefix: bool = False
) -> Path:
    """Write a tiny GGUF; `arch_name` overrides the architecture written (to test refusals)."""
    arch = arch_name or spec.arch
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.block_count", spec.layers)
    w.add_uint32(f"{arch}.context_length", 256)
    w.add_uint32(f"{arch}.embedding_length", spec.hidden)
    w.add_uint32(f"{arch}.feed_forward_length", spec.ffn)
    w.add_uint32(f"{arch}.attention.head_count", spec.heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", spec.kv_heads)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    if spec.hidden != spec.heads * spec.head_dim or spec.arch == "gemma3":
        w.add_uint32(f"{arch}.attention.key_length", spec.head_dim)
        w.add_uint32(f"{arch}.attention.value_length", spec.head_dim)
    if spec.arch == "gemma3":
        w.add_uint32(f"{arch}.attention.sliding_window", spec.sliding_window)
    _write_vocab(w, vocab, space_prefix)
    for name, (data, qtype) in tensors(spec, len(vocab.tokens), seed).items():
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, data.astype(np.float16 if qtype == Q.F16 else np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_vocab(w: gguf.GGUFWriter, vocab: TinyVocab, space_prefix: bool) -> None:
    w.add_tokenizer_model(vocab.model)
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.scores is not None:
        w.add_token_scores(vocab.scores)
    if vocab.merges is not None:
        w.add_token_merges(vocab.merges)
    for value, add in ((vocab.bos, w.add_bos_token_id), (vocab.eos, w.add_eos_token_id),
                       (vocab.unk, w.add_unk_token_id), (vocab.pad, w.add_pad_token_id)):
        if value is not None:
            add(value)
    w.add_add_bos_token(vocab.add_bos)
    if vocab.model == "llama":
        w.add_add_space_prefix(space_prefix)
    w.add_chat_template(CHAT_TEMPLATE)


def vocab_for(arch: str) -> TinyVocab:
    """Gemma gets the SentencePiece vocabulary, the others byte-level BPE (Llama 3 style for llama)."""
    if arch == "gemma3":
        return spm_vocab()
    return bpe_vocab("llama-bpe" if arch == "llama" else "qwen2")


def model_for(arch: str, **overrides) -> TinyModel:
    if arch == "gemma3":
        # Six layers, so one of them is global (pattern 6) and the rest slide over 4 tokens.
        return TinyModel(arch="gemma3", layers=6, heads=2, kv_heads=1, head_dim=32, tied=True, **overrides)
    return TinyModel(arch=arch, **overrides)
