"""`convert()`: one entry point for every kind of source."""

from __future__ import annotations

from pathlib import Path

from specmlx.convert.atomic import check_destination
from specmlx.convert.gguf_convert import convert_gguf
from specmlx.convert.gguf_file import GGUF_MAGIC
from specmlx.convert.hf import convert_hf
from specmlx.hub import download, is_repo_id
from specmlx.convert.dflash import convert_block_drafter
from specmlx.convert.gemma4_assistant import convert_gemma4_assistant
from specmlx.convert.mtp import convert_mtp
from specmlx.models.dflash import is_block_dir
from specmlx.models.gemma4_assistant import is_gemma4_assistant_dir
from specmlx.convert.options import resolve_format
from specmlx.models.mtp import is_mtp_dir
from specmlx.errors import SpecmlxError


def convert(
    source: str | Path,
    out: str | Path,
    dtype: str | None = None,
    quantize: bool | None = None,
    force: bool = False,
    sha256: str | None = None,
    q_bits: int | None = None,
    q_group_size: int | None = None,
    progress: bool = True,
) -> Path:
    """Convert `source` into an MLX model directory at `out` that `mlx_lm.load(out)` loads.

    `source` is a GGUF file, a local Hugging Face directory with safetensors, a hub repo id,
    or a drafter head directory (a specmlx MTP head, a Gemma 4 assistant, a block drafter).
    `dtype`/`quantize` default to the backend (float32 on CPU, 4-bit on Metal, see
    `options.resolve_format`). `out` appears only when complete; an existing `out` is replaced
    only with `force`. `sha256` is checked for GGUF files (known checkpoints are always checked).
    Every failure the user can cause raises `SpecmlxError`.
    """
    fmt = resolve_format(dtype, quantize, q_bits, q_group_size)
    path = Path(source).expanduser()
    if not path.exists() and is_repo_id(str(source)):
        # what would refuse it is said before gigabytes download; then its snapshot is converted as its
        # directory would be (a drafter's repo as a drafter)
        check_destination(Path(out), force)
        if sha256 is not None:
            raise SpecmlxError("--sha256 applies to a GGUF file source only")
        path = download(str(source))
    if path.is_file():
        if not _has_gguf_magic(path):
            raise SpecmlxError(f"{path}: not a GGUF file, and not a Hugging Face model directory")
        return convert_gguf(path, Path(out), fmt, force=force, sha256=sha256, progress=progress)
    if sha256 is not None:
        raise SpecmlxError("--sha256 applies to a GGUF file source only")
    if path.is_dir() and is_mtp_dir(path):
        return convert_mtp(path, Path(out), fmt, force=force)
    if path.is_dir() and is_gemma4_assistant_dir(path):
        if quantize or q_bits is not None or q_group_size is not None:
            raise SpecmlxError("Gemma 4 assistant drafters are converted unquantized: drop -q/--q-bits")
        return convert_gemma4_assistant(path, Path(out), dtype=fmt.dtype,
                               force=force, progress=progress)
    if path.is_dir() and is_block_dir(path):
        return convert_block_drafter(path, Path(out), fmt, force=force)
    if path.is_dir():
        return convert_hf(path, Path(out), fmt, force=force, progress=progress)
    raise SpecmlxError(f"no such file or directory: {source}")


def _has_gguf_magic(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC
