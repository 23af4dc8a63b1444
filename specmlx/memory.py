"""Will target and drafter fit in memory? Asked before loading, not after swapping,
and for a preset before its models download (from the sizes its catalog publishes).

Weights dominate: their size on disk is what MLX holds in memory. The KV
caches and activations of a local chat add a margin on top.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import SpecmlxError

GB = 1 << 30
MARGIN = 0.10  # KV caches, activations and the runtime, as a share of the weights
MIN_MARGIN = 512 << 20


def weights_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))


def available_bytes() -> int:
    """Memory a model may use: Metal's recommended working set, or what the OS has free."""
    import mlx.core as mx

    try:
        if mx.metal.is_available():
            return int(mx.metal.device_info()["max_recommended_working_set_size"])
    except (AttributeError, RuntimeError, KeyError):
        pass
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _bytes_per_weight(path: Path) -> int | None:
    """Bytes per weight of an unquantized model, None if quantized."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return 4
    if "quantization" in config:
        return None
    return 2 if config.get("torch_dtype") in ("float16", "bfloat16") else 4


def needed_bytes(weights: int) -> int:
    return weights + max(int(weights * MARGIN), MIN_MARGIN)


def check_fits(target: Path, drafter: Path | None, available: int | None = None) -> None:
    """Raise SpecmlxError saying what would fit when the pair does not."""
    available = available_bytes() if available is None else available
    target_w = weights_bytes(target)
    drafter_w = weights_bytes(drafter) if drafter is not None else 0
    need = needed_bytes(target_w + drafter_w)
    if need <= available:
        return
    what = f"target {target} ({target_w / GB:.1f} GB)"
    if drafter is not None:
        what += f" and drafter {drafter} ({drafter_w / GB:.1f} GB)"
    if drafter is not None and needed_bytes(target_w) <= available:
        advice = "the target alone fits: use --drafter ngram"
    elif _bytes_per_weight(target) is None:
        advice = "it is already quantized: pick a smaller model"
    else:  # 4-bit affine quantization stores about 4.5 bits per weight
        small = needed_bytes(int(target_w / _bytes_per_weight(target) * 4.5 / 8))
        advice = (f"a 4-bit conversion would need about {small / GB:.1f} GB: "
                  "specmlx convert SOURCE --out DIR -q")
    raise too_big(f"{what} need", need, available, advice)


def check_preset_fits(name: str, need: int, available: int | None = None) -> None:
    """Refuse a preset whose models (`need`: `Preset.memory_bytes`) cannot fit, before they download."""
    available = available_bytes() if available is None else available
    if need > available:
        raise too_big(f"preset {name} needs", need, available,
                      "pick a smaller preset (specmlx models list shows what each needs)")


def too_big(what_needs: str, need: int, available: int, advice: str) -> SpecmlxError:
    """The one refusal both checks give: what is needed, what the machine has, what to do."""
    return SpecmlxError(f"{what_needs} about {need / GB:.1f} GB, but only {available / GB:.1f} GB "
                        f"is available on this machine; {advice}")
