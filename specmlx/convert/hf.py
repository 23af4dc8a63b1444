"""Hugging Face safetensors checkpoint (local directory or hub repo id) -> MLX model directory.

mlx-lm already converts these; this module only downloads (`specmlx.hub`), stages the
output atomically and turns mlx-lm's exceptions into one-line `SpecmlxError`s.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from specmlx.convert.atomic import check_destination, staged_path
from specmlx.convert.native_mtp import FILE, keep_native_mtp, ships_other_mtp
from specmlx.convert.options import OutputFormat
from specmlx.convert.vision import keep_vision
from specmlx.errors import SpecmlxError, first_line
from specmlx.hub import download
from specmlx.models.native_mtp import RUN

def convert_hf(source: str | Path, out: Path, fmt: OutputFormat, force: bool = False, progress: bool = True) -> Path:
    """Convert a local HF directory, or a hub repo id, with mlx-lm into `out`; returns `out`."""
    out = Path(out)
    check_destination(out, force)
    local = Path(source)
    if not local.is_dir():
        local = download(str(source))
    if not (local / "config.json").is_file():
        raise SpecmlxError(f"{source}: not a Hugging Face model directory (no config.json)")
    from mlx_lm.convert import convert as mlx_lm_convert

    with staged_path(out, force) as work:
        try:
            with _quiet(not progress):
                mlx_lm_convert(
                    str(local),
                    mlx_path=str(work),
                    quantize=fmt.quantized,
                    q_group_size=fmt.q_group_size if fmt.quantized else None,
                    q_bits=fmt.q_bits,
                    dtype=fmt.dtype,
                )
        except (ValueError, FileNotFoundError, KeyError) as exc:
            # mlx-lm's ways of saying "unknown model_type", "no safetensors", "weights do not fit".
            raise SpecmlxError(f"cannot convert {source}: {first_line(exc)}") from exc
        _keep_mtp(local, work, fmt)
        _keep_vision(local, work, fmt)
    return out


def _keep_mtp(local: Path, work: Path, fmt: OutputFormat) -> None:
    """The checkpoint's own MTP layers, which mlx-lm drops, kept (or their loss said)."""
    try:
        kept = keep_native_mtp(local, work, fmt)
    except ValueError as exc:  # tensors that do not fit the config's MTP layers
        raise SpecmlxError(f"cannot keep the MTP layers of {local}: {first_line(exc)}") from exc
    if kept:
        print(f"kept the checkpoint's MTP layers ({kept} mtp.* tensors, {FILE}): --drafter mtp drafts with them",
              file=sys.stderr)
    elif other := ships_other_mtp(local):
        print(f"dropped the checkpoint's MTP layers ({other}): specmlx runs those of {RUN} only", file=sys.stderr)


def _keep_vision(local: Path, work: Path, fmt: OutputFormat) -> None:
    """The checkpoint's vision tower, which mlx-lm drops, kept (or why not said)."""
    try:
        kept = keep_vision(local, work, fmt)
    except (SpecmlxError, ImportError) as exc:  # mlx-vlm missing, or no weights for the tower its config declares
        print(f"dropped the checkpoint's vision tower: {first_line(exc)}", file=sys.stderr)
        return
    if kept:
        print(f"kept the checkpoint's vision tower ({kept} tensors): specmlx serve reads images with it",
              file=sys.stderr)


@contextlib.contextmanager
def _quiet(enabled: bool):
    # mlx-lm prints [INFO] lines on stdout; keep them for the CLI, drop them when asked.
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield
