"""A block drafter's checkpoint (DFlash, as published) -> an MLX drafter directory: a dtype, and
quantization when asked (mlx-lm's layout: a layer is quantized where its scales are stored).

mlx-lm does not know block drafters, so this writes the directory itself: the source's
`config.json` with the new dtype (and `quantization`), and one `model.safetensors` in this module's
names (no `model.` prefix). The weights are loaded into the network first, so a checkpoint that does
not fit its config fails before anything is written. The context projection (`fc`) and norms stay
unquantized with the rest of what is not a decoder layer's linear map: they are small.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map

from specmlx.convert.atomic import staged_path
from specmlx.convert.options import OutputFormat, retyped
from specmlx.errors import SpecmlxError
from specmlx.models.dflash import load_block_drafter
from specmlx.models.weights import read_config


def convert_block_drafter(source: Path, out: Path, fmt: OutputFormat, force: bool = False) -> Path:
    raw = read_config(source)
    if raw.get("quantization") or raw.get("quantization_config"):
        raise SpecmlxError(f"{source}: already quantized; convert from the original checkpoint")
    model = load_block_drafter(source)  # validates config and tensors
    dtype = getattr(mx, fmt.dtype)
    model.update(tree_map(lambda w: w.astype(dtype) if mx.issubdtype(w.dtype, mx.floating) else w, model.parameters()))
    config = retyped(raw, fmt.dtype)
    if fmt.quantized:
        nn.quantize(model, group_size=fmt.q_group_size, bits=fmt.q_bits,
                    class_predicate=lambda path, layer: path.startswith("layers.") and isinstance(layer, nn.Linear)
                    and layer.weight.shape[-1] % fmt.q_group_size == 0)
        config.update({k: v for k, v in fmt.config_entries().items() if k != "torch_dtype"})
    tensors = dict(tree_flatten(model.parameters()))
    mx.eval(tensors)
    with staged_path(out, force=force) as work:
        work.mkdir()
        mx.save_safetensors(str(work / "model.safetensors"), tensors, metadata={"format": "mlx"})
        (work / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
