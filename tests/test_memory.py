"""The memory check before loading."""

import json

import pytest

from specmlx.errors import SpecmlxError
from specmlx.memory import GB, check_fits


def fake_model(path, gigabytes: float, quantized: bool = False):
    path.mkdir()
    config = {"torch_dtype": "float32"} | ({"quantization": {"bits": 4}} if quantized else {})
    (path / "config.json").write_text(json.dumps(config))
    with open(path / "model.safetensors", "wb") as fh:
        fh.truncate(int(gigabytes * GB))  # sparse: costs no disk
    return path


def test_a_pair_that_fits_passes(tmp_path):
    check_fits(fake_model(tmp_path / "t", 6), fake_model(tmp_path / "d", 2), available=12 * GB)


def test_says_when_the_target_alone_would_fit(tmp_path):
    with pytest.raises(SpecmlxError, match=r"need about 8\.\d GB, but only 7\.0 GB.*target alone fits: use --drafter ngram"):
        check_fits(fake_model(tmp_path / "t", 6), fake_model(tmp_path / "d", 2), available=7 * GB)


def test_suggests_a_4bit_conversion_for_a_float32_target(tmp_path):
    with pytest.raises(SpecmlxError, match=r"4-bit conversion would need about 1\.\d GB.*-q"):
        check_fits(fake_model(tmp_path / "t", 6), None, available=3 * GB)


def test_a_quantized_target_that_does_not_fit(tmp_path):
    with pytest.raises(SpecmlxError, match="already quantized"):
        check_fits(fake_model(tmp_path / "t", 4, quantized=True), None, available=2 * GB)
