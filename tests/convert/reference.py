"""A numpy forward pass over GGUF tensors, written the way llama.cpp computes them.

It is the reference the converted mlx-lm models are compared against, and shares no code
with the converter: it reads llama.cpp tensor names and layouts as they are in the file
(attn_q/attn_k rows permuted for llama, so it applies llama.cpp's interleaved rope there;
Gemma norm weights stored as 1 + w, so it multiplies by them as they are).

Weights are dequantized one layer at a time, so a 1.5B model needs well under 1 GB here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class RefModel:
    arch: str
    n_layer: int
    n_head: int
    n_kv: int
    head_dim: int
    eps: float
    rope_base: float
    sliding_window: int | None


class GGUFWeights:
    """Dequantized float32 tensors by GGUF name, read on demand."""

    def __init__(self, path: Path):
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def __call__(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def meta(self, key: str, default=None):
        field = self.reader.get_field(key)
        return default if field is None else field.contents()

    def model(self) -> RefModel:
        arch = self.meta("general.architecture")
        hidden = self.meta(f"{arch}.embedding_length")
        n_head = self.meta(f"{arch}.attention.head_count")
        return RefModel(
            arch=arch,
            n_layer=self.meta(f"{arch}.block_count"),
            n_head=n_head,
            n_kv=self.meta(f"{arch}.attention.head_count_kv", n_head),
            head_dim=self.meta(f"{arch}.attention.key_length", hidden // n_head),
            eps=self.meta(f"{arch}.attention.layer_norm_rms_epsilon"),
            rope_base=self.meta(f"{arch}.rope.freq_base", 10000.0),
            sliding_window=self.meta(f"{arch}.attention.sliding_window"),
        )


def forward(weights: GGUFWeights, prompts: list[list[int]], embed_scale: float | None = None) -> list[np.ndarray]:
    """Logits (len(prompt), vocab) for each prompt, computed layer by layer over all prompts.

    Gemma scales embeddings by sqrt(hidden); `embed_scale` replaces that factor (HF and mlx-lm
    round it to bfloat16, llama.cpp does not).
    """
    m = weights.model()
    embd = weights("token_embd.weight")
    hs = [embd[np.array(p)] for p in prompts]
    if m.arch == "gemma3":
        scale = math.sqrt(embd.shape[-1]) if embed_scale is None else embed_scale
        hs = [h * scale for h in hs]
    for il in range(m.n_layer):
        layer = {n.split(".", 2)[2]: weights(n) for n in weights.tensors if n.startswith(f"blk.{il}.")}
        hs = [_block(m, il, layer, h) for h in hs]
    norm = weights("output_norm.weight")
    head = weights("output.weight") if weights.has("output.weight") else embd
    return [_rms(h, norm, m.eps) @ head.T for h in hs]


def _block(m: RefModel, il: int, w: dict, h: np.ndarray) -> np.ndarray:
    attn = _attention(m, il, w, _rms(h, w["attn_norm.weight"], m.eps))
    if m.arch == "gemma3":
        h = h + _rms(attn, w["post_attention_norm.weight"], m.eps)
        ffn = _ffn(w, _rms(h, w["ffn_norm.weight"], m.eps), _gelu_tanh)
        return h + _rms(ffn, w["post_ffw_norm.weight"], m.eps)
    h = h + attn
    return h + _ffn(w, _rms(h, w["ffn_norm.weight"], m.eps), _silu)


def _attention(m: RefModel, il: int, w: dict, x: np.ndarray) -> np.ndarray:
    n = x.shape[0]
    q = _linear(w, "attn_q", x).reshape(n, m.n_head, m.head_dim)
    k = _linear(w, "attn_k", x).reshape(n, m.n_kv, m.head_dim)
    v = _linear(w, "attn_v", x).reshape(n, m.n_kv, m.head_dim)
    base, window = m.rope_base, None
    if m.arch == "gemma3":
        q = _rms(q, w["attn_q_norm.weight"], m.eps)
        k = _rms(k, w["attn_k_norm.weight"], m.eps)
        if (il + 1) % 6 != 0:  # llama.cpp: Gemma 3 swa pattern 6, local rope base 10000
            base, window = 10000.0, m.sliding_window
    rope = _rope_interleaved if m.arch == "llama" else _rope_neox
    q, k = rope(q, base), rope(k, base)
    group = m.n_head // m.n_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(m.head_dim)  # python floats keep float32
    pos = np.arange(n)
    allowed = pos[None, :] <= pos[:, None]
    if window is not None:
        allowed &= pos[:, None] - pos[None, :] < window
    scores = np.where(allowed[None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", probs, v).reshape(n, -1)
    return out @ w["attn_output.weight"].T


def _linear(w: dict, name: str, x: np.ndarray) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    return y + w[f"{name}.bias"] if f"{name}.bias" in w else y


def _ffn(w: dict, x: np.ndarray, act) -> np.ndarray:
    return (act(x @ w["ffn_gate.weight"].T) * (x @ w["ffn_up.weight"].T)) @ w["ffn_down.weight"].T


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _angles(n: int, dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.arange(n)[:, None] * inv[None, :]  # (n, dim/2)
    return np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)


def _rope_neox(x: np.ndarray, base: float) -> np.ndarray:
    # rotate the first half of each head against the second half
    half = x.shape[-1] // 2
    cos, sin = _angles(x.shape[0], x.shape[-1], base)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _rope_interleaved(x: np.ndarray, base: float) -> np.ndarray:
    # llama.cpp's "normal" rope: rotate adjacent pairs (x0, x1), (x2, x3), ...
    cos, sin = _angles(x.shape[0], x.shape[-1], base)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
