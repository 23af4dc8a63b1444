"""The tower's reading of an image: its grid and rows from the checkpoint's processor settings, a digest of
its owner's and its own bytes, and one line for what cannot be read."""

from __future__ import annotations

import io

import numpy as np
import pytest

from specmlx.errors import SpecmlxError
from specmlx.vision.checkpoint import has_vision, load_vision
from specmlx.vision.tower import MAX_SIDE

from .. import tiny_vision


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    return load_vision(tiny_vision.save(tiny_vision.tokenizer(), tmp_path_factory.mktemp("vlm") / "target"))


def test_an_image_takes_a_row_for_each_merged_patch(tower):
    picture = tower.read(tiny_vision.png(0, 96, 64))  # a 6 x 4 grid of patches of 16, merged 2 x 2
    assert picture.grid == (1, 4, 6) and picture.rows == 6
    assert tower.features(picture).shape == (6, 64)  # the text model's width


def test_a_digest_is_of_the_owner_and_the_bytes(tower):
    image = tiny_vision.png(0)
    assert tower.read(image, b"a").digest == tower.read(image, b"a").digest
    assert tower.read(image, b"a").digest != tower.read(image, b"b").digest  # one client's rows never serve another
    assert tower.read(image, b"a").digest != tower.read(tiny_vision.png(1), b"a").digest


def test_what_cannot_be_read_is_one_line(tower):
    from PIL import Image

    with pytest.raises(SpecmlxError, match="cannot be read"):
        tower.read(b"not an image")
    wide = io.BytesIO()
    Image.fromarray(np.zeros((1, MAX_SIDE + 1, 3), dtype=np.uint8)).save(wide, format="PNG")
    with pytest.raises(SpecmlxError, match=f"at most {MAX_SIDE} a side"):
        tower.read(wide.getvalue())


def test_a_text_checkpoint_has_no_tower(model_dirs):
    assert not has_vision(model_dirs["target"])


def test_a_tower_stored_quantized_is_read_quantized(tmp_path):
    """mlx-vlm's conversions may quantize a tower's linear layers (weights with `.scales`, at the checkpoint's
    `quantization`): such a tower is read as stored, its rows those of the same quantized layers."""
    import json

    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from .. import tiny_gemma_vision

    path = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "target")
    tower = load_vision(path)
    nn.quantize(tower.model, group_size=32, bits=4,
                class_predicate=lambda _, m: isinstance(m, nn.Linear) and m.weight.shape[-1] % 32 == 0)
    stored = dict(tree_flatten(tower.model.parameters()))
    assert any(key.endswith(".scales") for key in stored)
    text = {k: v for k, v in mx.load(str(path / "model.safetensors")).items() if k.startswith("model.language_model.")}
    mx.save_safetensors(str(path / "model.safetensors"), text | stored)  # mlx-vlm's names, as mlx-community's
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"quantization": {"group_size": 32, "bits": 4}}))
    picture = tower.read(tiny_gemma_vision.png(0))
    tower._kept.clear()
    assert mx.array_equal(load_vision(path).features(picture), tower.features(picture))
