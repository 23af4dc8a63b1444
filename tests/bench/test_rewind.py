"""The rewind bench measures what it says: the record's bytes a position are what a Gated DeltaNet
layer's sub-modules return a position (docs/hybrid.md's count), and the times are a round's."""

from __future__ import annotations

import mlx.core as mx

from specmlx.bench import rewind


def test_the_record_a_position_is_what_each_gated_deltanet_layers_sub_modules_return(monkeypatch):
    monkeypatch.setattr(rewind, "VOCAB", 64)
    mx.random.seed(0)
    model = rewind.qwen3_5_9b(hidden=64, layers=4)  # 3 Gated DeltaNet layers of the real heads, 1 attention
    costs = rewind.measure(model, k=2, rounds=2, prompt=16)
    keys, values, value_heads, hidden = 16 * 128, 32 * 128, 32, 64
    # q, k, v, z from in_proj_qkvz, b and a from in_proj_ba, the convolution's output, the norm's, out_proj's
    per_layer = 2 * (2 * keys + values) + 2 * values + 2 * value_heads + 2 * hidden
    assert abs(costs.record_per_position - 3 * per_layer * 4) <= 0.05 * 3 * per_layer * 4
    assert costs.kept_state == 3 * 4 * (value_heads * 128 * 128 + 3 * (2 * keys + values))
    assert abs(costs.kept_else) <= 0.01 * costs.kept_state  # a Gated DeltaNet forward keeps nothing else


def test_a_mamba2_forward_keeps_only_its_record_and_one_state(monkeypatch):
    """Mamba-2's convolution window is a view of its forward's input: after a prefill it is copied,
    so that a mark (or a kept conversation's checkpoint) does not hold the prefill's whole input."""
    monkeypatch.setattr(rewind, "VOCAB", 64)
    mx.random.seed(0)
    costs = rewind.measure(rewind.nemotron_h_8b(hidden=64), k=2, rounds=1, prompt=48)
    assert abs(costs.kept_else) <= 0.02 * costs.kept_state
