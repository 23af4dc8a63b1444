"""The target split at its final hidden states gives back its own logits."""

import mlx.core as mx
import pytest

from specmlx.errors import SpecmlxError
from specmlx.hidden import check_exposes_hidden, decoder, embed, head

from . import tiny


def models(vocab):
    yield "qwen2 untied", tiny.build(tiny.qwen2_args(vocab), seed=1)
    yield "qwen2 tied", tiny.build(tiny.qwen2_args(vocab, tie_word_embeddings=True), seed=2)
    yield "llama", tiny.build(_llama(vocab), seed=3)
    yield "gemma3", tiny.build(tiny.gemma3_args(vocab), seed=4)
    yield "gemma4 (softcap)", tiny.gemma4_target(tiny.gemma4_args(vocab), seed=5)


def _llama(vocab):
    from mlx_lm.models import llama

    return llama.ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                           vocab_size=vocab, rope_theta=10000.0, tie_word_embeddings=False)


@pytest.mark.parametrize("index", range(5))
def test_head_of_decoder_is_the_models_own_call(vocab, index):
    name, model = list(models(vocab))[index]
    tokens = mx.array([[5, 9, 2, 7, 7, 1, 30, 4, 11, 3]])
    assert mx.allclose(head(model, decoder(model, tokens, None)), model(tokens), atol=1e-4), name
    assert embed(model, tokens).shape == (1, 10, model.model.embed_tokens.weight.shape[-1])


def test_a_model_without_the_usual_shape_is_refused():
    class Opaque:
        model_type = "mystery"

    with pytest.raises(SpecmlxError, match=r"target \(mystery\) does not expose its hidden states"):
        check_exposes_hidden(Opaque())


@pytest.mark.parametrize("index", range(5))
def test_taps_are_the_residual_stream_entering_each_layer(vocab, index):
    from specmlx.hidden import decoder_taps, text_model

    name, model = list(models(vocab))[index]
    tokens = mx.array([[5, 9, 2, 7, 7, 1, 30, 4, 11, 3]])
    inner = text_model(model).model
    count = len(inner.layers)
    wanted = tuple(range(1, count))
    hidden, taps = decoder_taps(model, tokens, None, wanted)
    assert mx.allclose(hidden, decoder(model, tokens, None), atol=1e-5), name  # the call itself is unchanged
    assert taps.shape == (1, 10, len(wanted), hidden.shape[-1])
    layers = list(inner.layers)
    for j, i in enumerate(wanted):
        # The same model cut after its first i layers ends in norm(what enters layer i).
        inner.layers[:] = layers[:i]
        try:
            cut = decoder(model, tokens, [None] * count)  # a full-length cache list: Gemma indexes it
        finally:
            inner.layers[:] = layers
        assert mx.allclose(inner.norm(taps[:, :, j]), cut, atol=1e-4), (name, i)
    assert list(inner.layers) == layers  # the wrappers are gone


def test_taps_must_ascend(vocab):
    from specmlx.hidden import decoder_taps

    with pytest.raises(SpecmlxError, match="ascend"):
        decoder_taps(tiny.build(tiny.qwen2_args(vocab), seed=1), mx.array([[1, 2]]), None, (1, 0))
