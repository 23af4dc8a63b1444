"""Small facts about mlx-lm models that the engine needs."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .errors import SpecmlxError


def vocab_size(model: nn.Module) -> int:
    """Width of the model's logits, read from its mlx-lm `ModelArgs`."""
    size = getattr(getattr(model, "args", None), "vocab_size", None)
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
    args = getattr(model, "args", None)
    size = getattr(args, "max_position_embeddings", None)
    text = getattr(args, "text_config", None)  # multimodal wrappers keep the text model's config apart
    if size is None and isinstance(text, dict):
        size = text.get("max_position_embeddings")
    return size if isinstance(size, int) and size > 0 else None
