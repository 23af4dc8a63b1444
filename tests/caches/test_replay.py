"""Recording a recurrent mixer's forward, and replaying a prefix of it from its kept state."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from specmlx.errors import SpecmlxError
from specmlx.caches.recurrent import RecurrentCache
from specmlx.caches.replay import recording
from specmlx.caches.stream import Stream


class Mixer(nn.Module):
    """A toy recurrence: the state is a running sum of projected rows."""

    def __init__(self, advances: bool = True) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.advances = advances

    def __call__(self, x: mx.array, mask, cache) -> mx.array:
        y = self.proj(x)
        start = cache[0] if cache[0] is not None else mx.zeros((x.shape[0], 1, 4))
        cache[0] = start + y.sum(axis=1, keepdims=True)
        if self.advances:
            cache.advance(x.shape[1])
        return y


class Layer(nn.Module):
    def __init__(self, mixer: Mixer, hands: bool = True) -> None:
        super().__init__()
        self.mixer, self.hands = mixer, hands

    def __call__(self, x, mask=None, cache=None):
        if self.hands:
            return x + self.mixer(x, mask, cache)
        cache[0] = x[:, -1:]  # the layer keeps the state itself
        cache.advance(x.shape[1])
        return x


class Model(nn.Module):
    def __init__(self, layer: Layer) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.layers = [layer]

    def __call__(self, x, cache, mask=None):
        for layer, c in zip(self.model.layers, cache):
            x = layer(x, mask=mask, cache=c)
        return x


def forward(model, cache, rows: int, mask=None):
    with recording(model, cache):
        model(mx.arange(rows * 4, dtype=mx.float32).reshape(1, rows, 4) / 10, cache, mask)


def test_a_replay_answers_with_the_recorded_rows_and_reads_no_weight():
    model, cache = Model(Layer(Mixer())), Stream([RecurrentCache(1)])
    forward(model, cache, 5)
    rows = model.model.layers[0].mixer.proj(mx.arange(20, dtype=mx.float32).reshape(1, 5, 4) / 10)
    model.model.layers[0].mixer.proj.weight *= 0  # a replay that computed the projection again would see this
    cache.rewind(3)
    assert cache[0].offset == 3
    assert mx.allclose(cache[0][0], rows[:, :3].sum(axis=1, keepdims=True)).item()
    assert isinstance(model.model.layers[0], Layer) and isinstance(model.model.layers[0].mixer.proj, nn.Linear)


def test_a_mixer_that_does_not_advance_its_cache_is_refused():
    with pytest.raises(SpecmlxError, match="cannot rewind Mixer: it does not advance its cache"):
        forward(Model(Layer(Mixer(advances=False))), Stream([RecurrentCache(1)]), 3)


def test_a_layer_that_keeps_its_state_itself_is_refused_by_name():
    with pytest.raises(SpecmlxError, match="cannot rewind the recurrent layer Layer: it hands its cache to none"):
        forward(Model(Layer(Mixer(), hands=False)), Stream([RecurrentCache(1)]), 3)


def test_a_masked_forward_is_refused():
    with pytest.raises(SpecmlxError, match="cannot record Mixer under a mask"):
        forward(Model(Layer(Mixer())), Stream([RecurrentCache(1)]), 3, mask=mx.ones((1, 3), dtype=mx.bool_))


def test_the_model_is_left_as_it_was_after_a_failed_record():
    model = Model(Layer(Mixer(advances=False)))
    layer, proj = model.model.layers[0], model.model.layers[0].mixer.proj
    with pytest.raises(SpecmlxError):
        forward(model, Stream([RecurrentCache(1)]), 3)
    assert model.model.layers[0] is layer and layer.mixer.proj is proj


def test_a_row_by_row_replay_of_a_mixer_that_takes_no_mask_is_refused_not_run_unmasked():
    from specmlx.caches.replay import _replay

    class NoMask(nn.Module):
        def __call__(self, x, cache=None):
            raise AssertionError("replayed without its rows' mask")

    with pytest.raises(SpecmlxError, match="cannot replay NoMask row by row: it takes no `mask`"):
        _replay(NoMask(), {}, (mx.zeros((2, 3, 4)),), {"cache": None}, 2, mask=mx.ones((2, 2), dtype=mx.bool_))
