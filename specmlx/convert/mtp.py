"""Converting specmlx MTP drafter heads: a dtype change or (de)quantization.

Heads are shipped small (8-bit); on the CPU backend they are expanded to
float32, where MLX's dense matmul is the fast one.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_map

from specmlx.convert.atomic import staged_path
from specmlx.convert.options import OutputFormat
from specmlx.models.mtp import load_mtp, save_mtp


def convert_mtp(source: Path, out: Path, fmt: OutputFormat, force: bool = False) -> Path:
    head = load_mtp(source, dequantize=True)
    dtype = getattr(mx, fmt.dtype)
    head.update(tree_map(lambda w: w.astype(dtype) if mx.issubdtype(w.dtype, mx.floating) else w, head.parameters()))
    quantization = {"bits": fmt.q_bits, "group_size": fmt.q_group_size} if fmt.quantized else None
    with staged_path(out, force=force) as work:
        save_mtp(head, work, quantization)
    return out
