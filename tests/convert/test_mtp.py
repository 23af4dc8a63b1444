"""Converting MTP drafter heads: quantized for shipping, float for the CPU."""

import mlx.core as mx
import pytest

from specmlx.convert.api import convert
from specmlx.models.mtp import load_mtp, save_mtp
from specmlx.errors import SpecmlxError

from .. import tiny


@pytest.fixture
def head(target_args):
    return tiny.mtp(target_args, seed=6, draft_vocab=100)


def outputs(model, width: int) -> mx.array:
    mx.random.seed(1)
    return model(mx.random.normal((1, 4, width)), mx.random.normal((1, 4, width)))


def test_quantize_then_expand_keeps_the_head(head, target_args, tmp_path):
    width = target_args.hidden_size
    convert(_saved(head, tmp_path / "src"), tmp_path / "q8", q_bits=8, progress=False)
    small = load_mtp(tmp_path / "q8")
    assert "scales" in dict(small.fc.items())
    assert mx.allclose(outputs(small, width), outputs(head, width), atol=0.05)
    convert(tmp_path / "q8", tmp_path / "f32", dtype="float32", progress=False)
    full = load_mtp(tmp_path / "f32")
    assert full.fc.weight.dtype == mx.float32
    assert mx.array_equal(full.draft_ids, head.draft_ids)
    assert mx.allclose(outputs(full, width), outputs(small, width), atol=1e-4)


def test_an_existing_output_needs_force(head, tmp_path):
    src = _saved(head, tmp_path / "src")
    convert(src, tmp_path / "out", dtype="float32", progress=False)
    with pytest.raises(SpecmlxError, match="already exists"):
        convert(src, tmp_path / "out", dtype="float32", progress=False)


def _saved(head, path):
    save_mtp(head, path)
    return path
