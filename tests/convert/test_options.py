"""Default output format per backend, and explicit flags overriding it."""

import pytest

from specmlx.convert import options
from specmlx.convert.options import OutputFormat, resolve_format
from specmlx.errors import SpecmlxError


@pytest.fixture
def metal(monkeypatch):
    monkeypatch.setattr(options, "metal_available", lambda: True)


@pytest.fixture
def cpu(monkeypatch):
    monkeypatch.setattr(options, "metal_available", lambda: False)


def test_cpu_default_is_float32(cpu):
    assert resolve_format() == OutputFormat("float32")


def test_metal_default_is_4bit(metal):
    assert resolve_format() == OutputFormat("float16", q_bits=4, q_group_size=64)


def test_dtype_alone_means_unquantized(metal):
    assert resolve_format(dtype="bfloat16") == OutputFormat("bfloat16")


def test_quantize_flags(cpu):
    assert resolve_format(quantize=True) == OutputFormat("float32", q_bits=4, q_group_size=64)
    assert resolve_format(q_bits=8) == OutputFormat("float32", q_bits=8, q_group_size=64)
    assert resolve_format(dtype="float16", q_group_size=32).q_bits == 4


def test_no_quantize_on_metal(metal):
    assert resolve_format(quantize=False) == OutputFormat("float16")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dtype": "float64"}, "unknown dtype"),
        ({"q_bits": 7}, "unsupported --q-bits 7"),
        ({"q_group_size": 48}, "unsupported --q-group-size 48"),
        ({"quantize": False, "q_bits": 4}, "need quantization"),
    ],
)
def test_bad_options(cpu, kwargs, message):
    with pytest.raises(SpecmlxError, match=message):
        resolve_format(**kwargs)


def test_config_entries():
    assert OutputFormat("float32").config_entries() == {"torch_dtype": "float32"}
    quant = OutputFormat("float16", q_bits=4, q_group_size=64).config_entries()
    assert quant["quantization"] == quant["quantization_config"] == {"group_size": 64, "bits": 4, "mode": "affine"}
