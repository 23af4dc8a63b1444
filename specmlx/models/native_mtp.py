"""The MTP layers checkpoints ship under `mtp.*`, which mlx-lm's loaders drop: finding, reading and
building them for the architectures specmlx runs them for (one network file each:
`qwen3_5_mtp.py` for Qwen3.5 and Qwen3-Next, `nemotron_h_mtp.py` for Nemotron-H).

The tensors live in the target's directory, in its safetensors files (Hugging Face's checkpoints)
or in `mtp.safetensors` beside them (`specmlx convert`; mlx-lm reads only `model*.safetensors`),
in the same convention as the directory's other weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from ..errors import SpecmlxError
from .weights import load_into
from ..hidden import text_model
from . import nemotron_h_mtp, qwen3_5_mtp
from .native_mtp_config import PREFIX


@dataclass(frozen=True)
class Architecture:
    """How one architecture's MTP layers are built from the target's args and its `config.json`,
    and how their stored tensors are renamed (`shift_norms`: stored zero-centred)."""

    build: Callable[[Any, dict], nn.Module]
    sanitize: Callable[[dict[str, mx.array], bool], dict[str, mx.array]]


def architectures() -> dict[str, Architecture]:
    qwen = Architecture(lambda args, config: qwen3_5_mtp.Qwen3_5MTP(args, mtp_layer_count(config)),
                        qwen3_5_mtp.sanitize)
    nemotron = Architecture(lambda args, config: nemotron_h_mtp.NemotronHMTP(args, nemotron_h_mtp.pattern(config)),
                            nemotron_h_mtp.sanitize)
    return {"qwen3_5": qwen, "qwen3_5_moe": qwen, "qwen3_next": qwen, "nemotron_h": nemotron}


def mtp_layer_count(config: dict) -> int:
    """How many MTP layers a `config.json` declares (Qwen3.5 under `text_config`); 0 for none."""
    text = config.get("text_config", config)
    return int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0)


def mtp_weights(folder: Path) -> dict[str, mx.array]:
    """Every `mtp.*` tensor in the directory's safetensors files, names as stored; only the files
    whose headers name one are opened (a checkpoint's shards run to tens of gigabytes)."""
    found: dict[str, mx.array] = {}
    for file in sorted(folder.glob("*.safetensors")):
        if any(k.startswith(PREFIX) for k in _shapes(file)):
            found.update({k: v for k, v in mx.load(str(file)).items() if k.startswith(PREFIX)})
    return found


def has_native_mtp(folder: Path) -> bool:
    """Whether a model directory holds MTP layers of an architecture specmlx builds."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if config.get("model_type") not in architectures() or mtp_layer_count(config) == 0:
        return False
    return any(k.startswith(PREFIX) for file in folder.glob("*.safetensors") for k in _shapes(file))


def _shapes(file: Path) -> dict[str, list[int]]:
    """A safetensors file's tensor shapes by name, from its header alone (no tensor is read)."""
    with open(file, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def hf_layout(folder: Path) -> bool:
    """mlx-lm's own test: a short convolution still in Hugging Face's layout (kernel last, wider than 1)."""
    for file in sorted(folder.glob("*.safetensors")):
        for k, shape in _shapes(file).items():
            if "conv1d.weight" in k:
                return shape[-1] != 1
    return False


def build_native_mtp(folder: Path, target: nn.Module) -> tuple[nn.Module, dict[str, mx.array], dict]:
    """The MTP layers of a target's directory, built (empty) to the loaded `target`'s own args, with
    their tensors renamed to the module's names, and the directory's `config.json`."""
    try:
        config = json.loads((folder / "config.json").read_text())
        arch = architectures()[config["model_type"]]
        weights = arch.sanitize(mtp_weights(folder), hf_layout(folder))
    except (OSError, ValueError, KeyError) as err:
        raise SpecmlxError(f"{folder}: cannot read its MTP layers ({err})") from None
    return arch.build(text_model(target).args, config), weights, config


def load_native_mtp(folder: Path, target: nn.Module) -> nn.Module:
    """The MTP layers in a target's directory, built to the loaded `target`'s own args (and
    quantized as its layers are)."""
    model, weights, config = build_native_mtp(folder, target)
    return load_into(model, weights, config.get("quantization"), folder, "its MTP layers")
