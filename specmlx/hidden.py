"""The target's final hidden states, and logits from them, in one forward.

mlx-lm's text models share one shape: `model.model(...)` runs the decoder and
returns the final-normed hidden states; `Model.__call__` then applies a tied
or separate head (and Gemma 4's logit softcap). Splitting the call there
gives MTP drafters the hidden states with no second pass, and lets prefill
skip the vocabulary projection for positions nobody reads.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from .errors import SpecmlxError


def text_model(model: nn.Module) -> nn.Module:
    """The text model inside a multimodal wrapper (mlx-lm's Gemma 4 `-it` checkpoints)."""
    return getattr(model, "language_model", model)


def check_exposes_hidden(model: nn.Module, name: str = "target") -> None:
    """Refuse, by architecture name, a model this module cannot split."""
    inner = getattr(text_model(model), "model", None)
    if inner is None or not hasattr(inner, "embed_tokens") or not hasattr(inner, "norm"):
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{name} ({kind}) does not expose its hidden states to MTP drafters")


def decoder(model: nn.Module, tokens: mx.array, cache: list[Any] | None) -> mx.array:
    """Final-normed hidden states, (B, L, H), filling `cache` as the full call would."""
    return text_model(model).model(tokens, cache=cache)


def head(model: nn.Module, hidden: mx.array) -> mx.array:
    """Logits from final hidden states, exactly as the model's own `__call__`."""
    model = text_model(model)
    tied = getattr(model, "tie_word_embeddings", None)  # Gemma models keep it on the module
    if tied is None:
        tied = not hasattr(model, "lm_head")
    if tied:
        logits = model.model.embed_tokens.as_linear(hidden)
    else:
        logits = model.lm_head(hidden)
    softcap = getattr(model, "final_logit_softcapping", None)
    if softcap is not None:
        logits = mx.tanh(logits / softcap) * softcap
    return logits


def embed(model: nn.Module, tokens: mx.array) -> mx.array:
    """The target's input embedding rows, unscaled (each drafter scales as it was trained)."""
    return text_model(model).model.embed_tokens(tokens)
