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


def inner_model(model: nn.Module) -> nn.Module | None:
    """The decoder inside `model`: mlx-lm names it `model` (Nemotron-H: `backbone`)."""
    text = text_model(model)
    inner = getattr(text, "model", None)
    return inner if inner is not None else getattr(text, "backbone", None)


def embeddings(model: nn.Module) -> nn.Module:
    """The decoder's input embedding table (Nemotron-H names it `embeddings`)."""
    inner = inner_model(model)
    table = getattr(inner, "embed_tokens", None)
    return table if table is not None else getattr(inner, "embeddings")


def check_exposes_hidden(model: nn.Module, name: str = "target") -> None:
    """Refuse, by architecture name, a model this module cannot split."""
    inner = inner_model(model)
    if (inner is None or not (hasattr(inner, "embed_tokens") or hasattr(inner, "embeddings"))
            or not any(hasattr(inner, n) for n in ("norm", "norm_f", "embedding_norm"))):
        kind = getattr(model, "model_type", type(model).__name__)
        raise SpecmlxError(f"{name} ({kind}) does not expose its hidden states to MTP drafters")


def decoder(model: nn.Module, tokens: mx.array, cache: list[Any] | None, rows: mx.array | None = None) -> mx.array:
    """Final-normed hidden states, (B, L, H), filling `cache` as the full call would; `rows`: the input
    embeddings to feed in place of the tokens' own (an image prompt's, `vision.images`)."""
    if rows is None:
        return inner_model(model)(tokens, cache=cache)
    return inner_model(model)(tokens, cache=cache, input_embeddings=rows)


class _Tap:
    """A decoder layer that keeps the residual stream entering it, and is otherwise the layer."""

    def __init__(self, layer: nn.Module, sink: list[mx.array]) -> None:
        self._layer, self._sink = layer, sink

    def __call__(self, h: mx.array, *args: Any, **kwargs: Any) -> Any:
        self._sink.append(h)
        return self._layer(h, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # models read attributes off their layers (Gemma's types)
        return getattr(self._layer, name)


def decoder_taps(model: nn.Module, tokens: mx.array, cache: list[Any] | None,
                 layers: tuple[int, ...], rows: mx.array | None = None) -> tuple[mx.array, mx.array | None]:
    """`decoder`, and the residual stream entering each of `layers` (ascending), (B, L, len(layers), H):
    the low, middle and high features an EAGLE-3 head fuses (None without layers). The layers are
    wrapped for this one call rather than the model's loop copied, so every architecture's own masks
    and scales still apply."""
    if not layers:
        return decoder(model, tokens, cache, rows), None
    if list(layers) != sorted(set(layers)):
        raise SpecmlxError(f"tapped layers must ascend without repeats: {layers}")
    inner = inner_model(model)
    originals = list(inner.layers)
    sink: list[mx.array] = []
    try:
        for i in layers:
            inner.layers[i] = _Tap(originals[i], sink)
        hidden = decoder(model, tokens, cache, rows)
    finally:
        inner.layers[:] = originals
    return hidden, mx.stack(sink, axis=2)


def eagle3_layers(count: int) -> tuple[int, int, int]:
    """EAGLE-3's low, middle and high layers of a `count`-layer target (vLLM's choice: 2, n/2, n-3)."""
    return (2, count // 2, count - 3)


def head(model: nn.Module, hidden: mx.array) -> mx.array:
    """Logits from final hidden states, exactly as the model's own `__call__`."""
    logits = output_head(model, hidden)
    softcap = getattr(text_model(model), "final_logit_softcapping", None)
    if softcap is not None:
        logits = mx.tanh(logits / softcap) * softcap
    return logits


def output_head(model: nn.Module, hidden: mx.array) -> mx.array:
    """The model's output projection alone (its head or tied embeddings), before any softcap: what a
    block drafter applies to its own hidden states, with its own softcap."""
    model = text_model(model)
    tied = getattr(model, "tie_word_embeddings", None)  # Gemma models keep it on the module
    if tied is None:
        tied = not hasattr(model, "lm_head")
    return embeddings(model).as_linear(hidden) if tied else model.lm_head(hidden)


def embed(model: nn.Module, tokens: mx.array) -> mx.array:
    """The target's input embedding rows, unscaled (each drafter scales as it was trained)."""
    return embeddings(model)(tokens)
