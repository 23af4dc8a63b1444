"""The output format of a conversion, and its default on the running backend."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from specmlx.errors import SpecmlxError

DTYPES = ("float32", "float16", "bfloat16")
DTYPE_KEYS = ("torch_dtype", "dtype")  # the names configs state the weights' dtype under
Q_BITS = (2, 3, 4, 5, 6, 8)
DEFAULT_Q_BITS = 4
DEFAULT_Q_GROUP_SIZE = 64


@dataclass(frozen=True)
class OutputFormat:
    """Weights in `dtype`; Linear/Embedding weights affine-quantized when `q_bits` is set."""

    dtype: str
    q_bits: int | None = None
    q_group_size: int = DEFAULT_Q_GROUP_SIZE

    @property
    def quantized(self) -> bool:
        return self.q_bits is not None

    def config_entries(self) -> dict:
        """The keys `config.json` needs to describe these weights to mlx-lm."""
        entries: dict = {"torch_dtype": self.dtype}
        if self.q_bits is not None:
            quant = {"group_size": self.q_group_size, "bits": self.q_bits, "mode": "affine"}
            entries["quantization"] = quant
            entries["quantization_config"] = dict(quant)
        return entries


def metal_available() -> bool:
    try:
        return bool(mx.metal.is_available())
    except (AttributeError, RuntimeError):  # CPU-only builds may lack the metal module
        return False


def resolve_format(
    dtype: str | None = None,
    quantize: bool | None = None,
    q_bits: int | None = None,
    q_group_size: int | None = None,
) -> OutputFormat:
    """Fill in what was not asked for from the backend.

    On the CPU backend the default is float32: MLX's CPU quantized matmul is scalar and
    float16/bfloat16 are slower than float32 there. On Metal it is 4-bit weights with float16
    elsewhere, the fast path on Apple silicon. Asking for a dtype alone means unquantized;
    `--q-bits`/`--q-group-size` imply quantization.
    """
    if dtype is not None and dtype not in DTYPES:
        raise SpecmlxError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPES)})")
    if quantize is None:
        quantize = q_bits is not None or q_group_size is not None or (dtype is None and metal_available())
    if dtype is None:
        dtype = "float16" if metal_available() else "float32"
    if not quantize:
        if q_bits is not None or q_group_size is not None:
            raise SpecmlxError("--q-bits/--q-group-size need quantization, which was turned off")
        return OutputFormat(dtype=dtype)
    bits = DEFAULT_Q_BITS if q_bits is None else q_bits
    group = DEFAULT_Q_GROUP_SIZE if q_group_size is None else q_group_size
    if bits not in Q_BITS:
        raise SpecmlxError(f"unsupported --q-bits {bits} (choose from {', '.join(map(str, Q_BITS))})")
    if group not in (32, 64, 128):
        raise SpecmlxError(f"unsupported --q-group-size {group} (choose from 32, 64, 128)")
    return OutputFormat(dtype=dtype, q_bits=bits, q_group_size=group)


def retyped(raw: dict, dtype: str) -> dict:
    """The source's config with the dtype it states set to `dtype`: at the top
    (as `torch_dtype`) and, as published checkpoints repeat it, in `text_config`."""
    config = {k: v for k, v in raw.items() if k not in DTYPE_KEYS}
    config["torch_dtype"] = dtype
    if isinstance(config.get("text_config"), dict):
        config["text_config"] = {k: dtype if k in DTYPE_KEYS else v for k, v in config["text_config"].items()}
    return config
