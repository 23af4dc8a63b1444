"""Hugging Face safetensors checkpoint (local directory or hub repo id) -> MLX model directory.

mlx-lm already converts these; this module only downloads with clear errors, stages the
output atomically and turns mlx-lm's exceptions into one-line `SpecmlxError`s.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from huggingface_hub import snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from specmlx.convert.atomic import check_destination, staged_path
from specmlx.convert.options import OutputFormat
from specmlx.errors import SpecmlxError

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_repo_id(source: str) -> bool:
    """`org/name`, not a path to a GGUF file."""
    return bool(_REPO_ID.match(source)) and not source.endswith(".gguf")


def download(repo_id: str, revision: str | None = None) -> Path:
    """A local snapshot of the repo's config, tokenizer and safetensors files."""
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS  # mlx-lm imports transformers: only when needed

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    except (OfflineModeIsEnabled, LocalEntryNotFoundError) as exc:
        raise SpecmlxError(
            f"cannot download {repo_id!r}: the hub is unreachable or offline mode is on (HF_HUB_OFFLINE), "
            "and it is not in the local cache"
        ) from exc
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError, HFValidationError) as exc:
        raise SpecmlxError(f"cannot download {repo_id!r}: {_first_line(exc)}") from exc
    except OSError as exc:  # network failures surface as requests/httpx OSErrors
        raise SpecmlxError(f"cannot download {repo_id!r}: {_first_line(exc)}") from exc


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
            raise SpecmlxError(f"cannot convert {source}: {_first_line(exc)}") from exc
    return out


@contextlib.contextmanager
def _quiet(enabled: bool):
    # mlx-lm prints [INFO] lines on stdout; keep them for the CLI, drop them when asked.
    if not enabled:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
