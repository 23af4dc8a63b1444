"""A vision checkpoint converted: mlx-lm writes the text model and drops the tower; `specmlx convert` keeps the
tower beside it (`vision.safetensors`, not quantized) and the image processor's settings, so the converted
directory reads an image as the source does."""

from __future__ import annotations

import mlx.core as mx

from specmlx.convert import convert
from specmlx.vision.checkpoint import load_vision
from specmlx.vision.tower import KEPT

from .. import tiny_gemma_vision, tiny_vision


def test_the_tower_is_kept_through_a_quantized_conversion(tmp_path):
    source = tiny_vision.save(tiny_vision.tokenizer(), tmp_path / "source")
    out = convert(source, tmp_path / "converted", q_bits=4, q_group_size=32, progress=False)
    assert (out / KEPT).is_file() and (out / "preprocessor_config.json").is_file()
    theirs, ours = load_vision(source), load_vision(out)
    picture = ours.read(tiny_vision.png(0))
    assert picture == theirs.read(tiny_vision.png(0))  # the same processor settings: the same grid
    assert mx.allclose(ours.features(picture), theirs.features(picture), atol=1e-2)
    assert ours.model.patch_embed.proj.weight.dtype == theirs.model.patch_embed.proj.weight.dtype


def test_a_text_checkpoint_keeps_no_tower(converted_tiny, tmp_path):
    _, hf_dir = converted_tiny("qwen2")
    assert not (convert(hf_dir, tmp_path / "text", dtype="float16", progress=False) / KEPT).exists()


def test_gemma4s_tower_and_its_image_tokens_are_kept_through_a_quantized_conversion(tmp_path):
    source = tiny_gemma_vision.save(tiny_gemma_vision.tokenizer(), tmp_path / "source")
    out = convert(source, tmp_path / "converted", q_bits=4, q_group_size=32, progress=False)
    assert (out / KEPT).is_file() and (out / "processor_config.json").is_file()
    theirs, ours = load_vision(source), load_vision(out)
    assert (ours.image_token, ours.before, ours.after) == (theirs.image_token, theirs.before, theirs.after)
    picture = ours.read(tiny_gemma_vision.png(0))
    assert picture == theirs.read(tiny_gemma_vision.png(0))
    assert mx.allclose(ours.features(picture), theirs.features(picture), atol=1e-2)
