"""The MTP layers a checkpoint ships (`mtp.*`), kept through a conversion mlx-lm does without them.

mlx-lm's sanitize drops every `mtp.` tensor. After it has written the target, this module reads
them from the source (Hugging Face's layout, or an MLX conversion that kept them), builds
them (`models.native_mtp`) on the converted target's own args, casts and quantizes them as
the target was, and writes them to `mtp.safetensors` under their `mtp.` names, in the converted
directory's convention (mlx-lm's norms), where `--drafter mtp` finds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map

from specmlx.convert.options import OutputFormat
from specmlx.models.native_mtp import (PREFIX, architectures, build_native_mtp, has_native_mtp, mtp_layer_count,
                                       mtp_weights, nextn_prefixes)
from specmlx.models.weights import load_into

FILE = "mtp.safetensors"
_UNQUANTIZED = ("mlp.gate", "shared_expert_gate")  # routers, kept wide as mlx-lm keeps them (8-bit there)


def ships_other_mtp(source: Path) -> str | None:
    """The model type of a checkpoint whose MTP tensors `models.native_mtp` does not build (dropped, and
    said so): under `mtp.`, or, where its config declares them, DeepSeek's `model.layers.{N}.`."""
    try:
        config = json.loads((source / "config.json").read_text())
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type")
    prefixes = nextn_prefixes(config) if mtp_layer_count(config) else (PREFIX,)
    return model_type if model_type not in architectures() and mtp_weights(source, prefixes) else None


def keep_native_mtp(source: Path, work: Path, fmt: OutputFormat) -> int:
    """Write the source's MTP layers beside the converted target in `work`; how many tensors were
    written (0: the source ships none this module builds)."""
    if not has_native_mtp(source):
        return 0
    from mlx_lm.utils import dequantize_model, load_model

    target, _ = load_model(work, lazy=True)
    model, weights, config = build_native_mtp(source, target)
    model = dequantize_model(load_into(model, weights, config.get("quantization"), source, "its MTP layers"))
    dtype = getattr(mx, fmt.dtype)
    model.update(tree_map(lambda w: w.astype(dtype) if mx.issubdtype(w.dtype, mx.floating) else w,
                          model.parameters()))
    if fmt.quantized:
        nn.quantize(model, group_size=fmt.q_group_size, bits=fmt.q_bits, class_predicate=_quantizable(fmt))
    out = {PREFIX + k: v for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(work / FILE), out, metadata={"format": "mlx"})
    return len(out)


def _quantizable(fmt: OutputFormat):
    def predicate(path: str, module: nn.Module) -> bool:
        return (hasattr(module, "to_quantized") and not path.endswith(_UNQUANTIZED)
                and module.weight.shape[-1] % fmt.q_group_size == 0)

    return predicate
