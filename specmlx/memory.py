"""Will target and drafter fit in memory? Asked before loading, not after swapping,
and for a preset before its models download (from the sizes its catalog publishes).

Weights dominate: their size on disk is what MLX holds in memory. On top of them, for the
architectures `memory_state` reads: the attention layers' KV over `CONTEXT` positions and a
hybrid's recurrent state with what its rewind keeps (from `config.json`'s shapes); the
activations and the runtime add a margin.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import SpecmlxError
from .memory_state import state_bytes

GB = 1 << 30
MARGIN = 0.10  # activations and the runtime (and the KV of models `state_bytes` cannot read), a share of the weights
MIN_MARGIN = 512 << 20
FREE_SHARE = 0.9  # of the memory the OS has free, what a server's caches may take where no device says


def size_text(nbytes: float) -> str:
    """A size as a person reads it: "20 GB", "1.5 GB", "1 MB", "0 B" (binary units, as `GB`)."""
    for unit, size in (("GB", GB), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} B"


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


def memory_limit() -> int:
    """The most a server's MLX arrays may hold in all, weights included: the device's recommended
    working set where it reports one (Metal's), else what MLX holds now and `FREE_SHARE` of what the
    OS has free (the rest is left to the runtime and the other programs)."""
    import mlx.core as mx

    recommended = mx.device_info().get("max_recommended_working_set_size")
    if recommended:
        return int(recommended)
    return mx.get_active_memory() + int(available_bytes() * FREE_SHARE)


def _bytes_per_weight(path: Path) -> int | None:
    """Bytes per weight of an unquantized model, None if quantized."""
    config = _config(path)
    if "quantization" in config:
        return None
    return 2 if config.get("torch_dtype") in ("float16", "bfloat16") else 4


def needed_bytes(weights: int) -> int:
    return weights + max(int(weights * MARGIN), MIN_MARGIN)


def model_bytes(path: Path) -> int:
    """What a model directory holds in memory before the margin: its weights (a checkpoint's own
    MTP layers among them, in its files) and the state a conversation keeps (`state_bytes`)."""
    return weights_bytes(path) + state_bytes(_config(path))


def _config(path: Path) -> dict:
    try:
        return json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def check_fits(target: Path, drafter: Path | None, available: int | None = None) -> None:
    """Raise SpecmlxError saying what would fit when the pair does not."""
    available = available_bytes() if available is None else available
    target_w = model_bytes(target)
    drafter_w = model_bytes(drafter) if drafter is not None else 0
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
    else:  # 4-bit affine quantization stores about 4.5 bits per weight; the state stays as wide
        weights = weights_bytes(target)
        small = needed_bytes(target_w - weights + int(weights / _bytes_per_weight(target) * 4.5 / 8))
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
