"""The MTP layers checkpoints ship, which mlx-lm's loaders drop: finding, reading and building them
for the architectures specmlx runs them for (one network file each: `qwen3_5_mtp.py` for Qwen3.5
and Qwen3-Next, `nemotron_h_mtp.py` for Nemotron-H, `deepseek_v3_mtp.py` for DeepSeek-V3, GLM-4.5
and GLM-4.7-Flash, `mimo_mtp.py` for MiMo).

The tensors live in the target's directory, in its safetensors files (Hugging Face's checkpoints:
under `mtp.`, or DeepSeek-V3's `model.layers.{N}.`) or in `mtp.safetensors` beside them (`specmlx
convert`, under `mtp.`; mlx-lm reads only `model*.safetensors`), in the same convention as the
directory's other weights.
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
from . import deepseek_v3_mtp, mimo_mtp, nemotron_h_mtp, qwen3_5_mtp
from .native_mtp_config import PREFIX


# Whose MTP layers `architectures` builds, as the refusals and notes name them.
RUN = "Qwen3.5, Qwen3-Next, Nemotron-H, DeepSeek-V3, GLM-4.5, GLM-4.7-Flash and MiMo"


@dataclass(frozen=True)
class Stored:
    """What renaming a directory's MTP tensors needs: its `config.json`, the loaded target's mlx-lm
    args, and whether the directory is in Hugging Face's layout (norms stored zero-centred)."""

    config: dict
    args: Any
    hf_layout: bool


@dataclass(frozen=True)
class Architecture:
    """How one architecture's MTP layers are built from the target's args and its `config.json`,
    where their tensors are stored, and how they are renamed to the module's names."""

    build: Callable[[Any, dict], nn.Module]
    sanitize: Callable[[dict[str, mx.array], Stored], dict[str, mx.array]]
    prefixes: Callable[[dict], tuple[str, ...]] = lambda config: (PREFIX,)


def architectures() -> dict[str, Architecture]:
    """By `model_type`."""
    qwen = Architecture(lambda args, config: qwen3_5_mtp.Qwen3_5MTP(args, mtp_layer_count(config)),
                        lambda weights, stored: qwen3_5_mtp.sanitize(weights, stored.hf_layout))
    nemotron = Architecture(lambda args, config: nemotron_h_mtp.NemotronHMTP(args, nemotron_h_mtp.pattern(config)),
                            lambda weights, stored: nemotron_h_mtp.sanitize(weights))
    deepseek = Architecture(lambda args, config: deepseek_v3_mtp.DeepseekV3MTP(args),
                            lambda weights, stored: deepseek_v3_mtp.sanitize(weights, stored.args, stored.config),
                            lambda config: (PREFIX, deepseek_v3_mtp.stored_prefix(config)))
    mimo = Architecture(lambda args, config: mimo_mtp.MiMoMTP(args), lambda weights, stored: mimo_mtp.sanitize(weights),
                        lambda config: (PREFIX, mimo_mtp.STORED))
    return {"qwen3_5": qwen, "qwen3_5_moe": qwen, "qwen3_next": qwen, "nemotron_h": nemotron, "deepseek_v3": deepseek,
            "glm4_moe": deepseek, "glm4_moe_lite": deepseek, "mimo": mimo}


def mtp_layer_count(config: dict) -> int:
    """How many MTP layers a `config.json` declares (Qwen3.5 under `text_config`); 0 for none."""
    text = config.get("text_config", config)
    return int(text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0)) or 0)


def mtp_weights(folder: Path, prefixes: tuple[str, ...] = (PREFIX,)) -> dict[str, mx.array]:
    """Every tensor under `prefixes` in the directory's safetensors files, names as stored; only the
    files whose headers name one are opened (a checkpoint's shards run to tens of gigabytes)."""
    found: dict[str, mx.array] = {}
    for file in sorted(folder.glob("*.safetensors")):
        if any(k.startswith(prefixes) for k in _shapes(file)):
            found.update({k: v for k, v in mx.load(str(file)).items() if k.startswith(prefixes)})
    return found


def nextn_prefixes(config: dict) -> tuple[str, ...]:
    """Where a checkpoint of any architecture may keep its MTP layers: under `mtp.`, or one layer past
    the target's last (DeepSeek's `model.layers.{N}.`)."""
    text = config.get("text_config", config)
    return (PREFIX, f"model.layers.{text.get('num_hidden_layers')}.")


def has_native_mtp(folder: Path) -> bool:
    """Whether a model directory holds MTP layers of an architecture specmlx builds."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    arch = architectures().get(config.get("model_type"))
    if arch is None or mtp_layer_count(config) == 0:
        return False
    prefixes = arch.prefixes(config)
    return any(k.startswith(prefixes) for file in folder.glob("*.safetensors") for k in _shapes(file))


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
    args = text_model(target).args
    try:
        config = json.loads((folder / "config.json").read_text())
        arch = architectures()[config["model_type"]]
        weights = arch.sanitize(mtp_weights(folder, arch.prefixes(config)), Stored(config, args, hf_layout(folder)))
    except (OSError, ValueError, KeyError) as err:
        raise SpecmlxError(f"{folder}: cannot read its MTP layers ({err})") from None
    return arch.build(args, config), weights, config


def load_native_mtp(folder: Path, target: nn.Module) -> nn.Module:
    """The MTP layers in a target's directory, built to the loaded `target`'s own args (and
    quantized as its layers are)."""
    model, weights, config = build_native_mtp(folder, target)
    return load_into(model, weights, config.get("quantization"), folder, "its MTP layers")
