"""The multimodal rotation at positions equal in all three sections is the text model's own rotation at that
position: what lets every token after an image prompt be rotated by mlx-lm's attention, unchanged."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.rope_utils import initialize_rope

from specmlx.vision.rope import Positioned, multimodal_rotary

from .. import tiny_vision


@pytest.fixture(scope="module")
def text_config():
    return tiny_vision.config(tiny_vision.tokenizer())["text_config"]


def test_equal_sections_rotate_as_the_text_model_does(text_config):
    rope = text_config["rope_parameters"]
    width = int(text_config["head_dim"] * rope["partial_rotary_factor"])
    theirs = initialize_rope(width, rope["rope_theta"], False)
    x = mx.random.normal((1, 2, 5, text_config["head_dim"]), key=mx.random.key(0))
    at = mx.broadcast_to(mx.arange(40, 45)[None, None], (3, 1, 5))
    ours = Positioned(multimodal_rotary(text_config), at)(x)
    assert mx.allclose(ours, theirs(x, offset=40), atol=1e-5)
    # and sections that differ rotate otherwise (the rotation is not ignoring them)
    apart = mx.concatenate([at[:1], at[1:] + 3])
    assert not mx.allclose(Positioned(multimodal_rotary(text_config), apart)(x), theirs(x, offset=40), atol=1e-3)
