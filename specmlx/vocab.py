"""Small facts about mlx-lm models that the engine needs."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .errors import SpecmlxError


def vocab_size(model: nn.Module) -> int:
    """Width of the model's logits, read from its mlx-lm `ModelArgs` (or their text config's)."""
    size = _setting(model, "vocab_size")
    if not isinstance(size, int) or size <= 0:
        raise SpecmlxError(f"cannot tell the vocabulary size of {type(model).__module__}")
    return size


def fit_vocab(logits: mx.array, size: int) -> mx.array:
    """Cut or pad the last axis to `size` entries; padding gets -inf.

    A drafter whose embedding table is padded larger must never propose a
    padding id the target cannot score, nor miss ids the target has.
    """
    width = logits.shape[-1]
    if width > size:
        return logits[..., :size]
    if width < size:
        pad = mx.full((*logits.shape[:-1], size - width), -mx.inf, dtype=logits.dtype)
        return mx.concatenate([logits, pad], axis=-1)
    return logits


def context_window(model: nn.Module) -> int | None:
    """How many positions the model was built for (`max_position_embeddings`
    in its config, or its text config's), or None when the config does not say."""
    size = _setting(model, "max_position_embeddings")
    return size if isinstance(size, int) and size > 0 else None


def _setting(model: nn.Module, name: str) -> object:
    """A setting of the model's `ModelArgs`, or of its text config's (multimodal wrappers, Qwen3.5)."""
    args = getattr(model, "args", None)
    value = getattr(args, name, None)
    text = getattr(args, "text_config", None)  # multimodal wrappers keep the text model's config apart
    if value is None and isinstance(text, dict):
        value = text.get(name)
    return value
